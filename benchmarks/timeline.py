"""Measured schedules of the forward kernel: when and on which SM each program ran.

Usage (on a GPU machine):
    python benchmarks/timeline.py --dataset app/data/validation-h200-2026-11-21.json \
        [--seq 1024 4096] [--out DIR]

For every forward row of a validation dataset at the chosen sequence lengths (its problem and
tile configuration exactly), the TIMELINE variant of the forward kernel (kernels/timeline.py)
runs warm and records each program's start, end and SM; causal rows are also recorded with the
heaviest blocks of a band of heads first (`band`, benchmarks/launch_order.py's L2-sized band).
Each record keeps, per program in launch order, start and end in µs from the first start, the
SM, and the (batch·head, query block), beside the do_bench median of the same call (the
timeline's own span includes the global timer's reads and stores). The simulator's schedule of
the same configuration is compared with it in tests/simulator/timing/test_shipped_timeline.py.
Writes DIR/timeline-<gpu>-<date>-n<seq>….json.gz (gzip: the per-program arrays are large).
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.hostinfo import gpu_header, result_path
from benchmarks.launch_order import l2_band
from flashscope.kernels.forward import launch_forward
from flashscope.kernels.measure import kernel_configs
from flashscope.kernels.timeline import forward_timeline
from flashscope.kernels.timing import median_ms
from flashscope.simulator.calibrate.validation import problem_of


def record(row: dict, band: int) -> dict:
    c = row["config"]
    main, _ = kernel_configs(c)
    p = problem_of(c)
    gen = torch.Generator(device="cuda").manual_seed(1)
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[p.dtype]
    q, k, v = (
        torch.randn(
            (p.batch, h, n, p.head_dim), generator=gen, device="cuda", dtype=torch.float32
        ).to(dtype)
        for h, n in ((p.heads, p.seq_q), (p.kv_heads, p.seq_k), (p.kv_heads, p.seq_k))
    )
    tl = forward_timeline(q, k, v, p.causal, p.scale, config=main, band=band)
    ms = median_ms([lambda: launch_forward(q, k, v, p.causal, p.scale, main, band=band)])
    return {
        "id": row["id"],
        "config": c,
        "band": band,
        "median_us": ms * 1e3,
        "span_us": tl.span * 1e6,
        "start_us": np.round(tl.start * 1e6, 3).tolist(),
        "end_us": np.round(tl.end * 1e6, 3).tolist(),
        "sm": tl.sm.tolist(),
        "row": tl.row.tolist(),
        "block": tl.block.tolist(),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", type=Path, required=True)
    ap.add_argument("--seq", type=int, nargs="+", default=[1024, 4096])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = ap.parse_args()
    t0 = time.time()
    rows = [
        r
        for r in json.loads(args.dataset.read_text())["rows"]
        if r["config"]["algo"] == "fa2" and r["config"]["seq"] in args.seq
    ]
    records = []
    for r in rows:
        c = r["config"]
        bands = [1]
        if c["causal"]:
            bands.append(l2_band(c["seq"], c["head_dim"], 2))
        for band in bands:
            rec = record(r, band)
            records.append(rec)
            print(
                f"{r['id']} band {band}: do_bench {rec['median_us']:.1f} µs, timeline span "
                f"{rec['span_us']:.1f} µs, dataset {r['measured_us']:.1f} µs",
                flush=True,
            )
    result = {
        **gpu_header(),
        "dataset": args.dataset.name,
        "records": records,
    }
    seqs = "-".join(f"n{n}" for n in args.seq)
    path = result_path(args.out, "timeline", result, f"-{seqs}.json.gz")
    path.write_bytes(gzip.compress((json.dumps(result) + "\n").encode(), mtime=0))
    print(f"wrote {path} after {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
