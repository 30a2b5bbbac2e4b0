"""A stand-in executor for run-queue tests: behaviour chosen by the request's seed.

seed 1: sleeps past any test timeout; seed 2: raises; seed 3: kills its own process; seed 4:
reports its pid, starts a child process (reported too) and sleeps; seed 7: allocates 2 GiB;
anything else: reports two progress messages and echoes the request, with the worker's pid,
process group, memory cap and niceness. On a device named cuda, a
timed run answers as the real executor's GPU path would (invented figures: a fixed rate of
useful work), so the measure-now routes can be tested without a GPU.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time


def execute(job: dict, device: str, progress) -> dict:
    seed = job.get("seed", 0)
    if seed == 1:
        time.sleep(60)
    if seed == 2:
        raise RuntimeError("the kernel refused this problem")
    if seed == 3:
        os._exit(7)
    if seed == 4:
        progress(f"pid {os.getpid()}")
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        progress(f"child {child.pid}")
        time.sleep(120)
    if seed == 7:
        return {"size": len(bytearray(2 << 30))}
    progress("compiling")
    time.sleep(0.05)
    progress("running")
    if device.startswith("cuda") and job.get("what") == "time":
        return _timed(job)
    if device.startswith("cuda") and job.get("what") == "timeline":
        return _timeline(job)
    return {
        "device": device,
        "echo": job,
        "pid": os.getpid(),
        "pgid": os.getpgid(0),
        "nice": os.nice(0),
        "memory_cap": resource.getrlimit(resource.RLIMIT_AS)[0],
    }


def _timed(job: dict) -> dict:
    from flashscope.app.runs.jobs import _config
    from flashscope.simulator.calibrate.validation import problem_of
    from flashscope.simulator.timing.kernelplan import useful_flops

    config = _config(job)
    simulable = {k: v for k, v in config.items() if k != "route_choice"}
    flops = useful_flops(config["algo"], problem_of(config))
    # 300 TFLOP/s, a little faster for wider tiles: an order the test can predict
    us = flops / 300e12 * 1e6 * (64 / job["block_m"]) ** 0.1
    return {
        "backend": "cuda",
        "device": "NVIDIA H100 80GB HBM3",
        "env": {
            "device": "NVIDIA H100 80GB HBM3",
            "date": "2026-01-01",
            "torch": "fake",
            "triton": "fake",
            "cuda": "fake",
            "python": "3",
            "sms": 132,
            "l2_bytes": 50 << 20,
        },
        "config": config,
        "simulated_config": simulable,
        "timing": {
            "kernel_us": us,
            "call_us": us + 40.0,
            "median_us": us * 1.02,
            "gluon": False,
            "measured_row": {
                "ms": us * 1.02e-3,
                "tflops": flops / (us * 1e-6) / 1e12,
                "route": None,
            },
        },
        "simulated": {"gpu": "h100-sxm", "time_us": us * 1.1, "limiter": {}},
    }


def _timeline(job: dict) -> dict:
    """Programs in launch order, 132 SMs each running one at a time for 10 µs (invented)."""
    programs = -(-job["seq"] // job["block_m"]) * job["batch"] * job["heads"]
    start = [10.0 * (i // 132) for i in range(programs)]
    return {
        "backend": "cuda",
        "device": "NVIDIA H100 80GB HBM3",
        "timeline": {
            "start_us": start,
            "end_us": [t + 10.0 for t in start],
            "sm": [i % 132 for i in range(programs)],
            "span_us": max(start) + 10.0,
            "sms": 132,
        },
    }
