"""The FA-3 model on Gluon forward rows it never saw: the H100 candidate sweeps (CPU only).

Usage:  python benchmarks/fa3_unseen.py [--out FILE]

The model (simulator/timing/fa3.py) was fitted and judged on the rows of
benchmarks/results/hopper-forward-*.json and warpgroups-*.json (`fa3_rows`). The sweeps the
H100's routes come from, benchmarks/results/forward-sweep-*.json (every candidate configuration
of `benchmarks/hopper_forward.py time`, beside cuDNN, in one process), are in neither: here the
shipped model simulates each of their Gluon rows (the rows of the benchmark's switches,
"/whole" and "/turns", left out) and the result gives the time error and how often the model
orders two candidates of one problem (file, head_dim, N, mask, dtype) as measured, where their
times differ by more than 5%.

`merged_ab`: the same for benchmarks/results/merged-mask-*-passes.json, every causal candidate
timed with its causal steps in one loop (`merged`) and in two, two passes: the model has no
instruction fetch and times both forms alike, so each form is judged on its own (time error,
and pairs of one pass, problem and form).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from flashscope.simulator.calibrate import fa3_rows

RESULTS = ROOT / "benchmarks" / "results"
MARGIN = 0.05


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=RESULTS / "fa3-model-unseen-2026-11-28.json")
    args = ap.parse_args()
    files = sorted(RESULTS.glob("forward-sweep-*.json"))
    rows = [
        r for r in fa3_rows.measured_rows(files) if not r["impl"].endswith(("/whole", "/turns"))
    ]
    result = fa3_rows.compare(rows)
    problems: dict[tuple, list[dict]] = {}
    for r in result["rows"]:
        key = (r["file"], r["head_dim"], r["seq_len"], r["causal"], r["dtype"])
        problems.setdefault(key, []).append(r)
    pairs = right = 0
    by_class: dict[str, list[int]] = {}
    for group in problems.values():
        for a, b, ok in fa3_rows.judged_pairs(group, MARGIN):
            pairs += 1
            right += ok
            three = "3 warpgroups" if "[3," in a["impl"] + b["impl"] else "2 or fewer"
            cls = f"d{a['head_dim']} {'causal' if a['causal'] else 'full'}, {three} in the pair"
            by_class.setdefault(cls, [0, 0])[0] += 1
            by_class[cls][1] += ok
    keys = ("file", "impl", "head_dim", "seq_len", "causal", "dtype", "ms", "model_ms", "error")
    shown = [{k: r[k] for k in keys} for r in result["rows"]]
    doc = {
        "benchmark": "fa3_unseen",
        "date": time.strftime("%Y-%m-%d"),
        "sources": [p.name for p in files],
        "rows": len(result["rows"]),
        "mape": result["mape"],
        "pairs": {"margin": MARGIN, "count": pairs, "right": right},
        "pairs_by_class": {k: {"count": v[0], "right": v[1]} for k, v in sorted(by_class.items())},
        "worst": sorted(shown, key=lambda r: -abs(r["error"]))[:20],
        "all": shown,
    }
    doc["merged_ab"] = merged_ab(sorted(RESULTS.glob("merged-mask-*-passes.json")))
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{doc['rows']} rows, time MAPE {doc['mape']['all']:.1%}; pairs ordered right "
          f"{right} of {pairs}")  # fmt: skip
    for cls, v in doc["pairs_by_class"].items():
        print(f"  {cls}: {v['right']} of {v['count']}")
    for form, v in doc["merged_ab"]["forms"].items():
        print(
            f"{form}: {v['rows']} rows, time MAPE {v['mape']:.1%} (by head_dim "
            f"{', '.join(f'{d} {e:.1%}' for d, e in v['mape_by_head_dim'].items())}); "
            f"pairs ordered right {v['pairs']['right']} of {v['pairs']['count']}"
        )
    return 0


def merged_ab(files: list[Path]) -> dict:
    """The model against both forms of each causal candidate (the module's docstring)."""
    rows = [
        r
        for r in fa3_rows.measured_rows(files, merged_as_plain=True)
        if not r["impl"].endswith(("/whole", "/turns"))
    ]
    result = fa3_rows.compare(rows)
    forms: dict[str, dict[tuple, list[dict]]] = {}
    for r in result["rows"]:
        form = "merged" if fa3_rows.full_entry(r["impl"])[8] else "two loops"
        key = (r["file"], r.get("pass"), r["head_dim"], r["seq_len"], r["causal"], r["dtype"])
        forms.setdefault(form, {}).setdefault(key, []).append(r)
    out = {}
    for form, problems in sorted(forms.items()):
        flat = [r for group in problems.values() for r in group]
        judged = [ok for group in problems.values() for *_, ok in fa3_rows.judged_pairs(group)]
        mape = fa3_rows.mape(flat)
        out[form] = {
            "rows": len(flat),
            "mape": mape["all"],
            "mean_error": sum(r["error"] for r in flat) / len(flat),
            "mape_by_head_dim": {k: v for k, v in mape.items() if k.startswith("d")},
            "pairs": {"margin": MARGIN, "count": len(judged), "right": sum(judged)},
        }
    return {"sources": [p.name for p in files], "forms": out}


if __name__ == "__main__":
    raise SystemExit(main())
