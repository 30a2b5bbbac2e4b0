"""Kernel-test helpers: fresh seeds, poisoned outputs, and the error rule against the oracle.

The rule (FlashAttention's): the kernel's error against the float64 reference is at most twice
the error of the same computation done by PyTorch in the input dtype, plus a small floor.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from flashscope.kernels.device import device
from flashscope.kernels.reference import LOWP_FLOOR as FLOOR

DEV = device()


@pytest.fixture
def seed() -> int:
    """A seed drawn at test time (put in every assertion message)."""
    s = random.SystemRandom().randrange(2**31)
    torch.manual_seed(s)
    return s


@pytest.fixture(autouse=True)
def poisoned_outputs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every kernel output starts as NaN, so an element the kernel never writes fails."""
    monkeypatch.setenv("FLASHSCOPE_POISON", "1")


def rand(*shape: int, dtype: torch.dtype = torch.float16) -> torch.Tensor:
    return torch.randn(*shape, dtype=torch.float32).to(device=DEV, dtype=dtype)


def max_err(x: torch.Tensor, ref: torch.Tensor) -> float:
    return float((x.double() - ref.double().to(x.device)).abs().max())


def assert_close(
    out: torch.Tensor, ref: torch.Tensor, lowp: torch.Tensor, what: str, seed: int
) -> None:
    """out vs the float64 reference, bounded by 2 × PyTorch's own low-precision error + floor."""
    assert not torch.isnan(out).any(), f"{what}: NaN (unwritten or invalid) elements, seed={seed}"
    err, base = max_err(out, ref), max_err(lowp, ref)
    bound = 2 * base + FLOOR[out.dtype]
    assert err <= bound, (
        f"{what}: error {err:.3g} > bound {bound:.3g} (pytorch {base:.3g}), seed={seed}"
    )


def compiled_apart(module: str, wanted: list, *flags: str) -> list[dict]:
    """`python -m flashscope.kernels.<module>` in a process of its own (Triton's compiler, not its
    interpreter, which this suite turns on): the compile report of each (configuration list,
    head_dim) of a Gluon kernel."""
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    out = subprocess.run(
        [sys.executable, "-m", f"flashscope.kernels.{module}", json.dumps(wanted), *flags],
        cwd=Path(__file__).resolve().parents[2], env=env, capture_output=True, text=True,
        check=True, timeout=600,
    )  # fmt: skip
    return json.loads(out.stdout)
