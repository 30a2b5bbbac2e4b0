"""How fast the simulator's numerics and closed forms run on this machine.

    .venv/bin/python benchmarks/simulator_speed.py [--repeats 7] [--out benchmarks/results]

(a) Numerics of one (batch, head) at N = 4096, d = 128, 64 × 64 tiles, fp16 rounding emulated:
    the FA-2 forward (with and without the per-block recording a trace keeps, causal too) and
    the FA-2 backward (recompute from LSE; with and without keeping P and dS).
(b) Closed-form counts (simulator/teach/traffic.py) at N = 131072, d = 128, 64 × 64 tiles, for every
    algorithm, causal and not (decode: one query against 131072 keys).
(c) The FA-3 model (simulator/timing/fa3.py) on the Hopper forward's benchmark shapes (batch × N =
    16384, heads = 2048 / d) at N = 16384: tuned configurations at d = 64 and 128, causal and not,
    persistent ping-pong with three consumers; its target is a median under 100 ms each.

Each case runs once to warm up, then `repeats` times; the JSON keeps every raw time and the
median, with the device (CPU model, cores), date, load average and versions. The issue's target
is a median under 1 s for the FA-2 forward numerics and for each closed form.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from hostinfo import cpu_model  # the module beside this script

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.teach import traffic
from flashscope.simulator.teach.algorithms import ALGORITHMS
from flashscope.simulator.teach.numerics import fa2_backward, fa2_forward
from flashscope.simulator.teach.tracing import random_inputs
from flashscope.simulator.timing.fa3 import Fa3Config, simulate_fa3

LIMIT_S = 1.0
FA3_LIMIT_S = 0.1


def blas_name() -> str:
    try:
        info = np.show_config(mode="dicts")
        return str(info["Build Dependencies"]["blas"]["name"])
    except Exception:  # older numpy: no dict mode
        return "unknown"


def timed(fn: Callable[[], object], repeats: int) -> list[float]:
    fn()  # warm-up: page faults, BLAS threads
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def numerics_cases() -> dict[str, Callable[[], object]]:
    p = AttentionProblem(seq_q=4096, head_dim=128, dtype="fp16")
    pc = AttentionProblem(seq_q=4096, head_dim=128, dtype="fp16", causal=True)
    t = TileConfig(64, 64)
    q, k, v, do = random_inputs(p, 0, grad=True)
    return {
        "fa2_forward_recorded": lambda: fa2_forward(q, k, v, p, t),
        "fa2_forward_unrecorded": lambda: fa2_forward(q, k, v, p, t, record=False),
        "fa2_forward_causal_recorded": lambda: fa2_forward(q, k, v, pc, t),
        "fa2_backward_recorded": lambda: fa2_backward(q, k, v, do, p, t),
        "fa2_backward_unrecorded": lambda: fa2_backward(q, k, v, do, p, t, record=False),
    }


def count_cases() -> dict[str, Callable[[], object]]:
    t = TileConfig(64, 64)
    cases: dict[str, Callable[[], object]] = {}
    for causal in (False, True):
        p = AttentionProblem(seq_q=131072, head_dim=128, batch=1, heads=32, causal=causal)
        for algo in ("naive", "fa1", "fa2", "fa2-bwd"):
            name = f"{algo}{'_causal' if causal else ''}"
            cases[f"traffic_{name}"] = lambda a=algo, p=p: traffic.for_algo(a, p, t)
            cases[f"n_events_{name}"] = lambda a=algo, p=p: ALGORITHMS[a].n_events(p, t)
    pd = AttentionProblem(seq_q=1, seq_k=131072, head_dim=128, batch=8, heads=32, kv_heads=8)
    cases["traffic_decode"] = lambda: traffic.for_algo("decode", pd, t)
    cases["n_events_decode"] = lambda: ALGORITHMS["decode"].n_events(pd, t)
    return cases


FA3_CONFIGS = {  # (head_dim, configuration) timed at N = 16384, heads × d = 2048
    "d64_2x128_pipelined": (64, Fa3Config(2, 128, 2, True)),
    "d128_2x128_pipelined": (128, Fa3Config(2, 128, 2, True)),
    "d64_3x128_pingpong_persistent": (
        64,
        Fa3Config(3, 128, 2, True, pingpong=True, persistent=True),
    ),
}


def fa3_problems() -> list[tuple[str, AttentionProblem, Fa3Config]]:
    """(name, problem, configuration) of each FA-3 case, full and causal."""
    return [
        (f"{name}{'_causal' if causal else ''}",
         AttentionProblem(seq_q=16384, head_dim=d, heads=2048 // d, causal=causal), cfg)
        for name, (d, cfg) in FA3_CONFIGS.items() for causal in (False, True)
    ]  # fmt: skip


def fa3_cases() -> dict[str, Callable[[], object]]:
    return {
        name: lambda p=p, c=cfg: simulate_fa3(p, c, "h100-sxm") for name, p, cfg in fa3_problems()
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7, help="timed runs per case")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("argument --repeats: must be ≥ 1")

    load_before = os.getloadavg()
    results = {}
    for group, cases, repeats, limit in (
        ("numerics_n4096_d128_64x64_fp16", numerics_cases(), args.repeats, LIMIT_S),
        ("closed_forms_n131072_d128_64x64", count_cases(), args.repeats * 5, LIMIT_S),
        ("fa3_model_n16384_h100", fa3_cases(), args.repeats, FA3_LIMIT_S),
    ):
        for name, fn in cases.items():
            raw = timed(fn, repeats)
            med = statistics.median(raw)
            key = "under_1s" if limit == LIMIT_S else "under_100ms"
            results[f"{group}/{name}"] = {"seconds": raw, "median_s": med, key: med < limit}
            print(f"{group:34s} {name:32s} median {med * 1e3:10.3f} ms  ({repeats} runs)")

    now = dt.datetime.now(dt.UTC)
    record = {
        "benchmark": "simulator_speed",
        "date": now.isoformat(timespec="seconds"),
        "device": {
            "cpu": cpu_model(platform.processor() or "unknown"),
            "logical_cores": os.cpu_count(),
            "usable_cores": len(os.sched_getaffinity(0))
            if hasattr(os, "sched_getaffinity")
            else None,
            "machine": platform.machine(),
        },
        "versions": {
            "python": platform.python_version(),
            "numpy": np.__version__,
            "blas": blas_name(),
        },
        "load_average_1_5_15": {"before": list(load_before), "after": list(os.getloadavg())},
        "limit_s": LIMIT_S,
        "results": results,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"simulator-speed-{now.date().isoformat()}.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
