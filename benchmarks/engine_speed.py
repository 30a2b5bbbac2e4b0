"""How fast the timing engine runs: in process, and as a whole `flashscope simulate` process.

The issue's case: FlashAttention-2 forward, batch 4, 32 heads, N = 16384, d = 128, 128 × 128
blocks (16,384 CTAs) on an H100. Targets: under 0.5 s in process (median of repeats) and under
2 s for the whole command (median of a few runs). A few other algorithms are timed alongside
for reference. Writes benchmarks/results/engine-speed-<date>.json with every raw figure.

    .venv/bin/python benchmarks/engine_speed.py [--repeats 15] [--process-runs 5]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from hostinfo import cpu_model  # the module beside this script

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from flashscope.simulator.core.hardware import from_name
from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.timing.engine import simulate

CASE = {"batch": 4, "heads": 32, "seq": 16384, "head_dim": 128, "block_m": 128, "block_n": 128}
TARGET_IN_PROCESS_S = 0.5
TARGET_PROCESS_S = 2.0


def time_in_process(algo: str, p: AttentionProblem, t: TileConfig, repeats: int) -> dict:
    gpu = from_name("h100")
    simulate(algo, p, t, gpu)  # warm-up: first-call costs (imports, caches) are not the engine's
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        r = simulate(algo, p, t, gpu)
        times.append(time.perf_counter() - t0)
    return {
        "algo": algo,
        "problem": {
            "batch": p.batch,
            "heads": p.heads,
            "seq": p.seq_q,
            "head_dim": p.head_dim,
            "causal": p.causal,
        },
        "tiles": {"block_m": t.block_m, "block_n": t.block_n, "stages": t.stages, "warps": t.warps},
        "ctas": sum(k.n_ctas for k in r.kernels),
        "simulated_time_us": r.time_s * 1e6,
        "seconds": times,
        "median_s": statistics.median(times),
        "min_s": min(times),
    }


def time_process(runs: int) -> dict:
    exe = shutil.which("flashscope", path=str(Path(sys.executable).parent))
    cmd = [exe] if exe else [sys.executable, "-m", "flashscope.app.cli.main"]
    cmd += ["simulate", "--gpu", "h100", "--algo", "fa2", "--batch", str(CASE["batch"])]
    cmd += ["--heads", str(CASE["heads"]), "--seq", str(CASE["seq"])]
    cmd += ["--head-dim", str(CASE["head_dim"]), "--block-m", str(CASE["block_m"])]
    cmd += ["--block-n", str(CASE["block_n"]), "--json"]
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=ROOT)
        times.append(time.perf_counter() - t0)
    summary = json.loads(out.stdout)
    return {
        "command": " ".join(["flashscope", *cmd[cmd.index("simulate") :]]),
        "seconds": times,
        "median_s": statistics.median(times),
        "min_s": min(times),
        "simulated_time_us": summary["time_us"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--process-runs", type=int, default=5)
    args = ap.parse_args()

    load_before = os.getloadavg()
    t = TileConfig(CASE["block_m"], CASE["block_n"], 2, 8)
    big = dict(seq_q=CASE["seq"], head_dim=CASE["head_dim"], batch=CASE["batch"])
    main_case = time_in_process(
        "fa2", AttentionProblem(**big, heads=CASE["heads"]), t, args.repeats
    )
    others = [
        time_in_process("fa2", AttentionProblem(**big, heads=32, causal=True), t, args.repeats),
        time_in_process(
            "fa2-bwd", AttentionProblem(**big, heads=32), TileConfig(64, 128, 2, 8), args.repeats
        ),
        time_in_process(
            "naive", AttentionProblem(**big, heads=32), TileConfig(128, 128, 2, 8), args.repeats
        ),
    ]
    process = time_process(args.process_runs)
    from flashscope import app

    today = dt.date.today().isoformat()
    result = {
        "benchmark": "engine_speed",
        "date": today,
        "device": {
            "cpu": cpu_model(platform.processor() or platform.machine()),
            "cores": os.cpu_count(),
            "machine": platform.machine(),
        },
        # the machine is shared: 1-minute load averages before and after, for context
        "load_average_1min": {"before": load_before[0], "after": os.getloadavg()[0]},
        "versions": {
            "python": platform.python_version(),
            "numpy": np.__version__,
            "flashscope": app.__version__,
        },
        "targets": {"in_process_s": TARGET_IN_PROCESS_S, "process_s": TARGET_PROCESS_S},
        "in_process": main_case,
        "process": process,
        "meets_targets": {
            "in_process": main_case["median_s"] < TARGET_IN_PROCESS_S,
            "process": process["median_s"] < TARGET_PROCESS_S,
        },
        "other_cases": others,
    }
    out_dir = ROOT / "benchmarks" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"engine-speed-{today}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"in process: median {main_case['median_s'] * 1e3:.1f} ms over {args.repeats} runs "
        f"({main_case['ctas']} CTAs); whole process: median {process['median_s']:.2f} s "
        f"over {args.process_runs} runs → {path.relative_to(ROOT)}"
    )


if __name__ == "__main__":
    main()
