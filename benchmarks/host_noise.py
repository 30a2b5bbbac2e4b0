"""How much of a host-bound call's measured time is the host machine's (no GPU needed).

    python benchmarks/host_noise.py [--out FILE]

The users' sweep was measured on an H100 and on an H200, each with Nsight Compute's kernel
durations (`app/data/validation-users-*.json.gz`). For every configuration measured on both
whose call is host-bound on either (`known_misses.host_bound`: its kernels ran for under 60%
of the call), it sets the two machines' call times side by side, and their kernel durations:
where the kernels take the same time on both GPUs and the calls do not, the difference is the
host's. Then, per dataset and half, the time MAPE with and without the host-bound rows.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from flashscope.simulator.calibrate.known_misses import host_bound
from flashscope.simulator.calibrate.validation import error_stats

DATA = ROOT / "app" / "data"
DATASETS = {"h100": "validation-users-h100-2026-11-26.json.gz",
            "h200": "validation-users-h200-2026-11-27.json.gz"}  # fmt: skip


def kernel_us(row: dict) -> float | None:
    ns = (row["measured"].get("ncu") or {}).get("duration_ns")
    return ns / 1e3 if ns else None


def spread(xs: list[float]) -> dict:
    s = sorted(xs)
    return {"n": len(s), "median": statistics.median(s), "min": s[0], "max": s[-1],
            "within_20pct": sum(0.8 <= x <= 1.25 for x in s) / len(s)}  # fmt: skip


def mape(rows: list[dict]) -> dict:
    """The time's error figures of `rows` (the validation summary's)."""
    return error_stats([r["id"] for r in rows], [r["measured_us"] for r in rows],
                       [r["simulated_us"] for r in rows])  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "host-noise.json")
    args = ap.parse_args()
    docs = {g: json.loads(gzip.decompress((DATA / f).read_bytes())) for g, f in DATASETS.items()}
    rows = {g: {r["id"]: r for r in d["rows"]} for g, d in docs.items()}
    pairs = []
    for rid, a in rows["h100"].items():
        b = rows["h200"].get(rid)
        if b is None or not (host_bound(a) or host_bound(b)):
            continue
        ka, kb = kernel_us(a), kernel_us(b)
        pairs.append({"id": rid, "algo": a["config"]["algo"],
                      "call_us": [a["measured_us"], b["measured_us"]],
                      "kernels_us": [ka, kb]})  # fmt: skip
    by_algo = {}
    for algo in ("fa2", "fa2-bwd"):
        ps = [p for p in pairs if p["algo"] == algo]
        by_algo[algo] = {
            "call_h200_over_h100": spread([p["call_us"][1] / p["call_us"][0] for p in ps]),
            "kernels_h200_over_h100": spread([p["kernels_us"][1] / p["kernels_us"][0]
                                              for p in ps if all(p["kernels_us"])]),
        }  # fmt: skip
    halves = {}
    for g, d in docs.items():
        for half in ("holdout", "fit"):
            hs = [r for r in d["rows"] if r["subset"] == half and r.get("measured_us")]
            bound = [r for r in hs if host_bound(r)]
            free = [r for r in hs if not host_bound(r)]
            halves[f"{g}/{half}"] = {"all": mape(hs), "not_host_bound": mape(free),
                                     "host_bound": mape(bound)}  # fmt: skip
    out = {"kind": "host noise", "datasets": DATASETS, "host_bound_pairs": by_algo,
           "halves": halves, "pairs": pairs}  # fmt: skip
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    for algo, s in by_algo.items():
        c, k = s["call_h200_over_h100"], s["kernels_h200_over_h100"]
        print(f"{algo}: {c['n']} configurations host-bound on either GPU; call time H200/H100 "
              f"median {c['median']:.2f} ({c['min']:.2f}-{c['max']:.2f}, {c['within_20pct']:.0%} "
              f"within 20%); kernels median {k['median']:.2f} ({k['min']:.2f}-{k['max']:.2f}, "
              f"{k['within_20pct']:.0%} within 20%)")  # fmt: skip
    for key, h in halves.items():
        print(f"{key}: {h['all']['mape_pct']:.1f}% ({h['all']['n']}), not host-bound "
              f"{h['not_host_bound']['mape_pct']:.1f}% ({h['not_host_bound']['n']}), host-bound "
              f"{h['host_bound']['mape_pct']:.1f}% ({h['host_bound']['n']})")  # fmt: skip
    print("wrote", args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
