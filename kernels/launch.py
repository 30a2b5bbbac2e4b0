"""What every kernel launcher decides the same way: padded head_dim, dot precision, the
bf16 upcast of the interpreter, whether tiles move through tensor descriptors, and which tile
configuration to run."""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import lru_cache

import torch
import triton

from flashscope.kernels.config import INTERPRETER, KernelConfig, first_tuned, lookup, table_key
from flashscope.kernels.device import interpreting
from flashscope.kernels.inputs import tma_ready
from flashscope.kernels.tuning import autotuned
from flashscope.simulator.core.problem import cdiv as cdiv
from flashscope.simulator.timing.occupancy import pad_head_dim

LOG2E = 1.4426950408889634  # scores go to the log2 domain with one multiply (exp2, not exp)


def flat_rows(x: torch.Tensor) -> bool:
    """Is (B, H, N, d) laid out as one (B·H·N, d) matrix of row stride x.stride(2)?"""
    b, h, n, _ = x.shape
    s_b, s_h, s_n, _ = x.stride()
    return (h == 1 or s_h == n * s_n) and (b == 1 or s_b == h * s_h)


def output(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """An output buffer; NaN-filled when FLASHSCOPE_POISON=1, so tests catch unwritten elements."""
    if os.environ.get("FLASHSCOPE_POISON") == "1":
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    return torch.empty(shape, dtype=dtype, device=device)


# `triton.cdiv` and `triton.next_power_of_2` are constexpr functions: called on the host they
# go through Triton's JIT call machinery, about 5.5 µs a call, and a forward's host path asked
# them about ten times (benchmarks/results/host-path-*.json). The launch paths use these (the
# ceiling division is the simulator's, re-exported).


def next_pow2(n: int) -> int:
    """The smallest power of two ≥ n (n ≥ 1), as `triton.next_power_of_2` gives it."""
    return 1 << (n - 1).bit_length()


# head_dim as held on chip: the next power of two, at least 16 (the smallest dot); the timing
# engine's own rule, so the kernels and their model pad alike
pad_dim = pad_head_dim


def dot_precision(dtype: torch.dtype) -> str:
    """fp32 inputs get full-precision products (no tf32 rounding); 16-bit inputs are exact."""
    return "ieee" if dtype == torch.float32 else "tf32"


def upcast(dtype: torch.dtype) -> bool:
    """The interpreter's bf16 dot is wrong: there, bf16 tiles go to fp32 before each dot."""
    return interpreting() and dtype == torch.bfloat16


@lru_cache
def _hopper_or_newer() -> bool:
    return torch.cuda.get_device_capability()[0] >= 9


def use_tma_for(tensors: list[torch.Tensor], override: bool | None = None) -> bool:
    """Tensor descriptors on Hopper (or when asked), when every stride allows them.

    FLASHSCOPE_TMA=0 in the environment turns them off (for comparisons).
    """
    if override is not None:
        return override and tma_ready(*tensors)
    if interpreting() or os.environ.get("FLASHSCOPE_TMA") == "0":
        return False
    return _hopper_or_newer() and tma_ready(*tensors)


def _scratch(size: int, alignment: int, stream: int | None) -> torch.Tensor:
    return torch.empty(size, dtype=torch.int8, device="cuda")


def prepare_tma(tma: bool) -> None:
    """Descriptors built inside a kernel live in a global scratch buffer that Triton allocates.

    Triton keeps the allocator in a context variable, so it is set on every launch: autograd
    runs the backward on a thread of its own, where a setting made elsewhere is not seen.
    """
    if tma and not interpreting():
        triton.set_allocator(_scratch)


def gpu_name() -> str:
    return "interpreter" if interpreting() else _cuda_name()


def dtype_key(mode: str, dtype: torch.dtype, d_pad: int, causal: bool) -> str:
    """The tuned-table key of `mode` for inputs of `dtype` ("fwd/16/d128/causal": fp16 and bf16
    share the 16-bit entries, fp32 has its own)."""
    return table_key(mode, 32 if dtype == torch.float32 else 16, d_pad, causal)


@lru_cache
def _cuda_name() -> str:
    return torch.cuda.get_device_name()


def choose_config(
    mode: str,
    dtype: torch.dtype,
    d_pad: int,
    causal: bool,
    run: Callable[[KernelConfig], object],
    seq_len: int | None = None,
) -> KernelConfig:
    """The interpreter's fixed tiles, else this GPU's tuned entry, else autotune with `run`.

    With `seq_len`, an entry tuned for the smallest sequence-length bucket that holds it
    ("…/n2048" for 1025–2048) comes first (benchmarks/tune_forward_n.py and
    tune_backward_n.py write them).
    """
    if interpreting():
        return INTERPRETER[mode]
    key = dtype_key(mode, dtype, d_pad, causal)
    found = first_tuned(lookup, gpu_name(), key, seq_len)
    return found if found is not None else autotuned(gpu_name(), mode, key, d_pad, run)
