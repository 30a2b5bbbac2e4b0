"""The Hopper forward's variants timed, and its warpgroups' measured timelines (GPU only).

Usage (on an H100 or H200):
    python benchmarks/warpgroups.py --out FILE [--quick] [--merged] [--timelines-only]
        [--two-loops] [--one-launch]

Two parts, in one process:

1. Variants: each configuration of VARIANTS (ping-pong or not, pipelined or not, 2 or 3
   consumer warpgroups, persistent or not, 64- or 128-key blocks) on the papers' protocol
   (batch × N = 16384, heads × d = 2048, fp16) at N = 1024, 4096 and 16384, causal and not:
   the median of `do_bench` per row (kernels/timing.py rotates input sets where one fits in L2).
   These are the rows the FA-3 model of the timing engine is held to.
2. Timelines: the RECORDED configurations (at N = 4096; RECORDED_SHORT at 1024) run with the
   recording on (kernels/warpgroups.py; programs 0 and 1 stamp every phase, the others their
   start and end): their output compared bit for bit with the plain kernel's, their time with
   the recording on (its overhead, as shipped; with --masked-too also with every stamp a
   masked store in every program, for comparison), the launch's span by the global timer
   against the plain time, and the intervals of programs 0 and 1 over their first tiles, as the
   /hopper view draws them. Causal launches are recorded with their steps in one loop
   (`WsConfig.merged`), the form every causal entry of kernels/tuned.json routes; with
   --two-loops in the unmerged form, as recorded before. A recording is launches side by
   side, programs 0 and 1 in stamping ones of their own; with --one-launch one kernel holding
   each loop twice (RECORD mode 2), as recorded before.

With --merged only part 1 runs, causal rows only, each variant with its causal steps in one
loop (`WsConfig.merged`, the form most causal entries of kernels/tuned.json route).

Writes one JSON with the device, date, versions and every raw figure.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from functools import partial
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.attention import flops
from benchmarks.hostinfo import gpu_header
from flashscope.kernels.hopper_forward import WsConfig, launch_forward_ws, supports
from flashscope.kernels.timing import input_sets, median_ms, tensor_bytes
from flashscope.kernels.warpgroups import record_and_time, recorded_programs

W = WsConfig
VARIANTS = {
    128: {
        "pingpong": W(2, 128, 2, True, pingpong=True),
        "pipelined": W(2, 128, 2, True),
        "plain": W(2, 128, 2, False),
        "persistent-pingpong": W(2, 128, 2, True, pingpong=True, persistent=True),
        "persistent-pipelined": W(2, 128, 2, True, persistent=True),
        "block64-stages3": W(2, 64, 3, True),
    },
    64: {
        "pingpong": W(3, 128, 2, True, pingpong=True),
        "pipelined": W(3, 128, 2, True),
        "plain": W(3, 128, 2, False),
        "persistent-pingpong": W(3, 128, 2, True, pingpong=True, persistent=True),
        "two-consumers-pingpong": W(2, 128, 2, True, pingpong=True),
        "two-consumers-block256": W(2, 256, 2, False),
    },
}
RECORDED = [  # (head_dim, variant, causal) run with the recording on, at N = 4096
    (128, "pingpong", False), (128, "pipelined", False), (128, "plain", False),
    (128, "persistent-pingpong", False), (128, "pingpong", True), (128, "plain", True),
    (64, "pingpong", False), (64, "plain", False), (64, "two-consumers-pingpong", False),
    (64, "pingpong", True), (64, "plain", True),
]  # fmt: skip
# The three-warpgroup d = 64 launches also at N = 1024, causal and not: one 192-row tile per
# CTA there, where the variants' measured order is the FA-3 model's most frequent miss.
RECORDED_SHORT = [(64, "plain", False), (64, "plain", True), (64, "pingpong", False),
                  (64, "pingpong", True)]  # fmt: skip
LENGTHS = (1024, 4096, 16384)


def protocol(n: int, d: int) -> tuple[int, int]:
    return 16384 // n, 2048 // d


def inputs(b: int, h: int, n: int, d: int, sets: int) -> list[tuple[torch.Tensor, ...]]:
    return [
        tuple(torch.randn(b, h, n, d, device="cuda", dtype=torch.float16) for _ in range(3))
        for _ in range(sets)
    ]


def time_variants(lengths: tuple[int, ...], merged: bool = False) -> list[dict]:
    rows = []
    masks = (True,) if merged else (False, True)
    for d, variants in VARIANTS.items():
        for n in lengths:
            b, h = protocol(n, d)
            probe = inputs(b, h, n, d, 1)[0]
            sets = inputs(b, h, n, d, input_sets(tensor_bytes(*probe)))
            for causal in masks:
                for name, cfg in variants.items():
                    cfg = replace(cfg, merged=merged)
                    why = supports(*sets[0], cfg)
                    row = {"variant": name, "config": cfg.as_list(), "head_dim": d, "seq": n,
                           "batch": b, "heads": h, "causal": causal, "dtype": "fp16"}  # fmt: skip
                    if why is not None:
                        rows.append({**row, "skipped": why})
                        continue
                    calls = [
                        partial(launch_forward_ws, *s, causal, d**-0.5, cfg, checked=True)
                        for s in sets
                    ]
                    ms = median_ms(calls)
                    tflops = flops(b, h, n, d, causal, "fwd") / (ms * 1e-3) / 1e12
                    rows.append({**row, "ms": ms, "tflops": tflops})
                    print(f"{name:24} d={d} N={n:5} causal={causal!s:5} {ms:.4f} ms "
                          f"{tflops:.0f} TFLOP/s", flush=True)  # fmt: skip
    return rows


def record(
    n: int,
    which: list[tuple[int, str, bool]],
    masked: bool = False,
    out: list[dict] | None = None,
    save=None,
    two_loops: bool = False,
    mode: int | None = None,
) -> list[dict]:
    """Each launch of `which` at length n recorded and timed (`record_and_time`; `masked`: also
    with every stamp a masked store), appended to `out`, `save()` called after each. Causal
    launches run their steps in one loop unless `two_loops`; `mode`: the recording's RECORD mode
    (`Recording.mode`, its default where None)."""
    out = [] if out is None else out
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for d, name, causal in which:
        cfg = replace(VARIANTS[d][name], merged=causal and not two_loops)
        b, h = protocol(n, d)
        q, k, v = inputs(b, h, n, d, 1)[0]
        try:
            stamps, figures = record_and_time(
                q, k, v, causal, cfg, detail=2, steps=96, tiles=4, masked=masked, mode=mode
            )
        except Exception as exc:  # recorded; the other recordings go on
            print(f"recording {name} d={d} causal={causal} N={n}: {exc!r}", flush=True)
            out.append({"variant": name, "head_dim": d, "seq": n, "causal": causal,
                        "failed": repr(exc)})  # fmt: skip
            if save:
                save()
            continue
        programs = recorded_programs(stamps, b * h, n, n, causal, sms, (0, 1))
        row = {"variant": name, "config": cfg.as_list(), "head_dim": d, "seq": n, "batch": b,
               "heads": h, "causal": causal, "dtype": "fp16", **figures,
               "programs": programs}  # fmt: skip
        print(
            f"recorded {name} d={d} causal={causal} same={figures['same_output']} plain "
            f"{figures['plain_ms']:.4f} rec {figures['recorded_branch_ms']:.4f} span "
            f"{figures['span_ms']:.4f} ms ({figures['span_vs_plain']:+.1%})",
            flush=True,
        )
        out.append(row)
        if save:
            save()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true", help="N = 4096 only")
    ap.add_argument("--timelines-only", action="store_true", help="part 2 alone")
    ap.add_argument("--merged", action="store_true", help="part 1 alone, causal, merged steps")
    ap.add_argument("--masked-too", action="store_true", help="part 2: time masked stamps too")
    ap.add_argument("--two-loops", action="store_true", help="part 2: causal steps unmerged")
    ap.add_argument("--one-launch", action="store_true", help="part 2: RECORD mode 2")
    args = ap.parse_args()
    torch.manual_seed(0)
    lengths = (4096,) if args.quick else LENGTHS
    result = {**gpu_header(), "benchmark": "warpgroups", "lengths": list(lengths)}

    def save() -> None:
        Path(args.out).write_text(json.dumps(result))

    if args.merged:
        result["merged"] = True
        result["variants"] = time_variants(lengths, merged=True)
        save()
        return 0
    result["timelines"] = []
    for n, which in ((4096, RECORDED), (1024, RECORDED_SHORT)):
        record(n, which, args.masked_too, result["timelines"], save, args.two_loops,
               2 if args.one_launch else None)  # fmt: skip
    if not args.timelines_only:
        result["variants"] = time_variants(lengths)
        save()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
