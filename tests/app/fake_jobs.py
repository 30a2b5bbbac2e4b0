"""A stand-in executor for run-queue tests: behaviour chosen by the request's seed.

seed 1: sleeps past any test timeout; seed 2: raises; seed 3: kills its own process;
anything else: reports two progress messages and echoes the request.
"""

from __future__ import annotations

import os
import time


def execute(job: dict, device: str, progress) -> dict:
    seed = job.get("seed", 0)
    if seed == 1:
        time.sleep(60)
    if seed == 2:
        raise RuntimeError("the kernel refused this problem")
    if seed == 3:
        os._exit(7)
    progress("compiling")
    time.sleep(0.05)
    progress("running")
    return {"device": device, "echo": job, "pid": os.getpid()}
