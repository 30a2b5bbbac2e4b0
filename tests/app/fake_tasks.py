"""Stand-in tasks for the compute pool's tests: sleep, allocate, fail, report the process."""

from __future__ import annotations

import os
import time
from typing import Any


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
    raise ValueError(f"bad input for {name}")
