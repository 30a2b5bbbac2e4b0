"""Parallel worker processes that a GPU benchmark script runs of itself.

Compiling Triton kernels dominates a tuning sweep; each script hands a share of its jobs to
copies of itself (`python script --its-worker-flag i/count …`), which fill Triton's shared disk
cache (or write their results where the script reads them), then times in its own process.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_workers(script: str, flag: str, count: int, *extra: str) -> None:
    """Run `python script flag i/count extra…` for i < count side by side and wait for all.

    The workers import the repository's packages (PYTHONPATH is its root); a worker that fails
    is not an error here: the caller finds its share missing.
    """
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    procs = [
        subprocess.Popen([sys.executable, script, flag, f"{i}/{count}", *extra], env=env)
        for i in range(count)
    ]
    for proc in procs:
        proc.wait()
