"""Test-wide setup: Triton's interpreter on CPU, before any kernel module is imported."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")
