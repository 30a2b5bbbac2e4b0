"""Host time per call at a length that fills no tile, routed against launched directly (GPU only).

    python benchmarks/host_path.py [--out DIR]

The causal N = 1000 forwards at d = 128 and 256 take about 0.165 ms of GPU time, and through
`flash_attention` some runs of odd_lengths.py timed them at 0.27-0.35 ms. Per case (the papers'
protocol: batch × N ≈ 16384, heads = 2048 / d; the input sets odd_lengths.py rotates), for
`flash_attention` as routed and for `launch_forward_ws` with the same tuned configuration:
`enqueue_us`, the host's time per call over 200 calls issued back to back (5 passes, no
synchronize until the end), `wall_us` the same until the GPU is done, and six do_bench medians in
a row. Where the host takes longer per call than the kernel, do_bench times the host.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from functools import partial
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.attention import protocol_inputs
from benchmarks.hostinfo import gpu_header, result_path
from flashscope.kernels import flash_attention
from flashscope.kernels.hopper_forward import launch_forward_ws, tuned
from flashscope.kernels.timing import median_ms

CASES = [(256, 1000, torch.bfloat16), (256, 1000, torch.float16), (128, 1000, torch.bfloat16)]
CALLS, PASSES, BENCHES = 200, 5, 6


def host_rate(calls: list) -> tuple[list[float], list[float]]:
    for c in calls[:2]:
        c()
    torch.cuda.synchronize()
    enqueue, wall = [], []
    for _ in range(PASSES):
        t0 = time.perf_counter()
        for i in range(CALLS):
            calls[i % len(calls)]()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        enqueue.append((t1 - t0) / CALLS * 1e6)
        wall.append((t2 - t0) / CALLS * 1e6)
    return enqueue, wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = ap.parse_args()
    header = gpu_header()
    cases = []
    for d, n, dtype in CASES:
        sets = protocol_inputs(d, n, dtype)
        cfg = tuned(*sets[0], True)
        case = {"head_dim": d, "seq": n, "dtype": str(dtype).removeprefix("torch."),
                "causal": True, "config": cfg.as_list() if cfg else None,
                "input_sets": len(sets)}  # fmt: skip
        paths = {"routed": [partial(flash_attention, *s, True) for s in sets]}
        if cfg is not None:
            paths["direct"] = [partial(launch_forward_ws, *s, True, d**-0.5, cfg) for s in sets]
        for name, calls in paths.items():
            enqueue, wall = host_rate(calls)
            bench = [median_ms(calls) for _ in range(BENCHES)]
            case[name] = {"enqueue_us": enqueue, "wall_us": wall, "do_bench_ms": bench}
            print(f"d={d} N={n} {case['dtype']} {name}: enqueue "
                  f"{', '.join(f'{x:.0f}' for x in enqueue)} µs/call; do_bench "
                  f"{', '.join(f'{x:.3f}' for x in bench)} ms", flush=True)  # fmt: skip
        cases.append(case)
    path = result_path(args.out, "host-path", header)
    path.write_text(json.dumps({**header, "kind": "host time per call", "cases": cases}) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
