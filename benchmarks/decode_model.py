"""The timing engine's decode against the measured Flash-Decoding kernel (no GPU needed).

    python benchmarks/decode_model.py [--out benchmarks/results/decode-model-<date>.json]

Reads the steady decode measurements (benchmarks/results/decode-steady-*-merge-in-split.json:
32 query heads over 8 K/V heads, d = 128, one new token, a 65,536-key cache, batch 1 and 8, two
tile configurations, the kernel whose last split merges, "fused", and the earlier split kernel
plus reduce kernel, "two-kernel"), simulates each problem with its tiles and split count on the
matching GPU preset, and writes the engine's time beside the medians of the measured runs: by
do_bench with the L2 flushed (the engine's call, cold) and back to back from CUDA graphs.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from flashscope.simulator.core import hardware
from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.timing.engine import simulate

SHAPE = {"heads": 32, "kv_heads": 8, "head_dim": 128, "seq_k": 65536, "seq_q": 1}


def rows_of(path: Path) -> list[dict]:
    doc = json.loads(path.read_text())
    gpu = hardware.from_name(doc["device"])
    out = []
    for version, cases in doc["versions"].items():
        for case in cases:
            bm, bn, warps, stages = case["config"][:4]
            p = AttentionProblem(batch=case["batch"], **SHAPE)
            res = simulate("decode", p, TileConfig(bm, bn, stages, warps), gpu, case["splits"])
            flushed = statistics.median(r["flushed_ms"] for r in case["runs"])
            graphs = statistics.median(r["ms"] for r in case["runs"])
            sim = res.time_s * 1e3
            out.append({"gpu": gpu.key, "version": version, "batch": case["batch"],
                        "config": case["config"], "splits": case["splits"],
                        "measured_flushed_ms": flushed, "measured_graphs_ms": graphs,
                        "engine_ms": sim, "launches": len(res.kernels),
                        "error_vs_flushed": sim / flushed - 1,
                        "error_vs_graphs": sim / graphs - 1})  # fmt: skip
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    paths = sorted((ROOT / "benchmarks" / "results").glob("decode-steady-*-merge-in-split.json"))
    rows = [r for path in paths for r in rows_of(path)]
    fused = [r for r in rows if r["version"].startswith("fused")]
    summary = {
        key: float(np.mean([abs(r[key]) for r in fused]))
        for key in ("error_vs_flushed", "error_vs_graphs")
    }
    date = dt.date.today().isoformat()
    out = args.out or ROOT / "benchmarks" / "results" / f"decode-model-{date}.json"
    record = {"benchmark": "decode model", "date": date,
              "versions": {"python": platform.python_version(), "numpy": np.__version__},
              "sources": [str(p.relative_to(ROOT)) for p in paths],
              "fused_mean_abs_error": summary, "rows": rows}  # fmt: skip
    out.write_text(json.dumps(record, indent=1) + "\n")
    for r in fused:
        print(f"{r['gpu']:9} {r['version']:8} b{r['batch']} {r['config'][:4]} engine "
              f"{r['engine_ms']:.4f} ms, measured {r['measured_flushed_ms']:.4f} flushed "
              f"({r['error_vs_flushed']:+.1%}), {r['measured_graphs_ms']:.4f} back to back "
              f"({r['error_vs_graphs']:+.1%})")  # fmt: skip
    print(
        f"fused, mean |error|: {summary['error_vs_flushed']:.1%} against the flushed runs, "
        f"{summary['error_vs_graphs']:.1%} against back to back → {out}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
