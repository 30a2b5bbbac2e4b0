"""The stand-in executor of fake_jobs.py behind an import that takes 3 s, as torch and triton
take on a small machine: for tests of what happens while a run's worker starts."""

from __future__ import annotations

import time

from .fake_jobs import execute

time.sleep(3)

__all__ = ["execute"]
