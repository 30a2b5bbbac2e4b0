"""How far an instruction-fetch term could take the FA-3 model's variants' ranking (CPU only).

Usage:  python benchmarks/fa3_fetch_bound.py [--out FILE]

The variants (benchmarks/results/warpgroups-*.json) were timed with their causal steps in two
loops, whose code stalls the SMs' instruction fetch (benchmarks/band_latency.py); the model
(simulator/timing/fa3.py) has no instruction fetch and comes within a few per cent of the same
kernels with the steps merged into one loop. Here each causal variant's model time is multiplied
by the ratio measured on the H100 between its two-loop and merged forms at the same length
(benchmarks/results/merged-mask-*-passes.json, both passes summed; at least 1): the ranking an
exact instruction-fetch term would give, an upper bound for one fitted. Each GPU takes its own
ratios (the H100's and the H200's A/B files); a GPU with none takes the H100's. Variants
without an A/B row of their own take their nearest one (`NEAREST`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from flashscope.simulator.calibrate import fa3_rows
from flashscope.simulator.core import hardware

RESULTS = ROOT / "benchmarks" / "results"
# variants with no A/B row of their own → the configuration whose ratio stands for them:
# pipelined without ping-pong → with it; not persistent → persistent; unpipelined → pipelined
NEAREST = {
    (3, 128, 2, 1, 1, 0, 0, 1): (3, 128, 2, 1, 1, 1, 0, 1),
    (2, 128, 2, 1, 1, 1, 0, 1): (2, 128, 2, 1, 1, 1, 1, 1),
    (2, 128, 2, 0, 1, 0, 0, 1): (2, 128, 2, 1, 1, 0, 0, 1),
}


def two_loop_ratios(files: list[Path]) -> dict[tuple, float]:
    """(GPU preset, head_dim, N, configuration without `merged`) → two-loop time over merged
    time."""
    times: dict[tuple, float] = {}
    for path in files:
        data = json.loads(path.read_text())
        gpu = hardware.resolve(data["device"])
        for r in data["rows"]:
            entry = fa3_rows.full_entry(r["impl"])
            if entry is not None:
                key = (gpu, r["head_dim"], r["seq_len"], entry)
                times[key] = times.get(key, 0.0) + r["ms"]
    return {
        (gpu, d, n, cfg[:8]): ms / times[(gpu, d, n, (*cfg[:8], 1))]
        for (gpu, d, n, cfg), ms in times.items()
        if cfg[8] == 0 and (gpu, d, n, (*cfg[:8], 1)) in times
    }


def with_fetch(rows: list[dict], ratios: dict[tuple, float]) -> list[dict]:
    """The compared rows, each causal variant's model time times its two-loop ratio (its GPU's,
    else the H100's)."""
    measured = {key[0] for key in ratios}
    out = []
    for r in rows:
        if "variant" in r and r["causal"]:
            cfg = fa3_rows.full_entry(r["impl"])[:8]
            gpu = r["gpu"] if r["gpu"] in measured else "h100-sxm"
            key = (gpu, r["head_dim"], r["seq_len"], NEAREST.get(cfg, cfg))
            r = {**r, "model_ms": r["model_ms"] * max(1.0, ratios[key])}
        out.append(r)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=RESULTS / "fa3-fetch-bound-2026-11-28.json")
    args = ap.parse_args()
    files = sorted(RESULTS.glob("merged-mask-*-passes.json"))
    ratios = two_loop_ratios(files)
    rows, pinned = fa3_rows.all_rows(RESULTS)
    compared = fa3_rows.compare(rows, pinned=pinned)["rows"]
    before, after = fa3_rows.ranking(compared), fa3_rows.ranking(with_fetch(compared, ratios))
    still = Counter(
        f"{w['problem'][0]} d{w['problem'][1]} {'causal' if w['problem'][5] else 'full'}"
        for w in after["wrong"]
    )
    doc = {
        "benchmark": "fa3_fetch_bound",
        "date": time.strftime("%Y-%m-%d"),
        "sources": [p.name for p in files],
        "ranking": {k: {"pairs": v["pairs"], "right": v["right"]}
                    for k, v in (("model", before), ("model_with_measured_fetch", after))},
        # the pairs every run of the GPU orders the same way (fa3_rows.reproduced)
        "reproduced": {k: {f: v["reproduced"][f] for f in ("pairs", "right", "noisy", "one_run")}
                       for k, v in (("model", before), ("model_with_measured_fetch", after))},
        "still_wrong_by_class": dict(sorted(still.items())),
        "still_wrong": after["wrong"],
    }  # fmt: skip
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    for k, v in doc["ranking"].items():
        print(f"{k}: {v['right']} of {v['pairs']} ({v['right'] / v['pairs']:.1%})")
    for k, v in doc["reproduced"].items():
        print(f"{k}, pairs every run repeats: {v['right']} of {v['pairs']}")
    print("still wrong:", doc["still_wrong_by_class"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
