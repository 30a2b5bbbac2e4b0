"""Stand-in tasks for the compute pool's tests: sleep, allocate, fail, report the process, and
the routes' tasks as requests that never end in a test's time."""

from __future__ import annotations

import os
import time
from typing import Any

ROUTE_TASKS = ("simulate", "schedule", "schedule.chrome", "memory_wall", "compare", "trace.meta")

# a worker's import as slow as a busy machine makes NumPy's and the simulator's
time.sleep(float(os.environ.get("FAKE_TASKS_IMPORT_S", "0")))


def run(name: str, payload: Any, state: dict[str, Any]) -> Any:
    if name == "pid":
        return os.getpid()
    if name == "sleep":
        time.sleep(payload)
        return "slept"
    if name == "allocate":
        block = bytearray(payload * 2**20)
        return len(block)
    if name == "count":  # state survives between tasks of one worker
        state["n"] = state.get("n", 0) + 1
        return state["n"]
    if name in ROUTE_TASKS:  # stopped by its time limit, its client leaving, or the pool closing
        time.sleep(60)
        return b"{}"
    raise ValueError(f"bad input for {name}")
