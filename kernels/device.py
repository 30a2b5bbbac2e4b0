"""Which backend the Triton kernels run on: a CUDA GPU when one is present, else the interpreter.

Triton reads TRITON_INTERPRET when a `@triton.jit` function is defined, so `configure()` must run
before any kernel module is imported; `kernels/__init__.py` calls it first. In the interpreter,
bf16 `tl.dot` gives wrong results, so kernels upcast bf16 tiles to fp32 there (`INTERPRET`).
"""

from __future__ import annotations

import os
from functools import lru_cache
from typing import TypedDict


@lru_cache
def has_cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


@lru_cache
def configure() -> bool:
    """Set up the interpreter when there is no GPU; returns True when interpreting.

    TRITON_INTERPRET=0 set explicitly on a machine without a GPU keeps Triton's compiler: kernels
    can then be compiled for a GPU target (flashscope.kernels.hopper_forward.compile_sm90) but not
    run.
    """
    if os.environ.get("TRITON_INTERPRET") == "1":
        return True
    if os.environ.get("TRITON_INTERPRET") == "0":
        return False
    if not has_cuda():
        os.environ["TRITON_INTERPRET"] = "1"
        return True
    return False


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


class DeviceInfo(TypedDict):
    backend: str  # "cuda" or "cpu"
    gpu: str | None  # the device's name; None on the CPU


def describe() -> DeviceInfo:
    """{"backend": "cuda" | "cpu", "gpu": device name or None}."""
    if has_cuda():
        import torch

        return {"backend": "cuda", "gpu": torch.cuda.get_device_name(0)}
    return {"backend": "cpu", "gpu": None}


def device() -> str:
    """The torch device kernels run on: "cuda" or "cpu" (interpreter)."""
    return "cuda" if has_cuda() and not interpreting() else "cpu"
