"""Input checks shared by every public kernel entry point: a clear ValueError for each mismatch.

Attention inputs are q (B, H, N_q, d) and k, v (B, H_kv, N_k, d): one dtype among fp16, bf16
and fp32, one device (CUDA, or the CPU when Triton's interpreter runs the kernels), a head_dim
that is a multiple of 8 up to 256, and H divisible by H_kv (grouped-query attention).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from flashscope.kernels.device import interpreting

DTYPES = (torch.float16, torch.bfloat16, torch.float32)
MAX_HEAD_DIM = 256


@dataclass(frozen=True)
class Shapes:
    """The sizes of one attention call, read off its checked inputs."""

    batch: int
    heads: int
    kv_heads: int
    seq_q: int
    seq_k: int
    head_dim: int
    scale: float

    @property
    def group(self) -> int:
        return self.heads // self.kv_heads


def _check_tensor(name: str, x: object) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != 4:
        raise ValueError(
            f"{name} must be 4-D (batch, heads, seq, head_dim), got shape {tuple(x.shape)}"
        )
    if x.dtype not in DTYPES:
        raise ValueError(f"{name} dtype must be float16, bfloat16 or float32, got {x.dtype}")
    if any(s == 0 for s in x.shape):
        raise ValueError(f"{name} must not have an empty dimension, got shape {tuple(x.shape)}")
    return x


def check_device(x: torch.Tensor) -> None:
    """Kernels run on CUDA tensors, or on CPU tensors when Triton interprets them."""
    want = "cpu" if interpreting() else "cuda"
    if x.device.type != want:
        raise ValueError(f"tensors must be on {want} (the kernel backend), got {x.device}")


def check_scale(sm_scale: object, head_dim: int) -> float:
    if sm_scale is None:
        return 1.0 / math.sqrt(head_dim)
    if isinstance(sm_scale, bool) or not isinstance(sm_scale, int | float):
        raise ValueError(f"sm_scale must be a finite number or None, got {sm_scale!r}")
    if not math.isfinite(sm_scale):
        raise ValueError(f"sm_scale must be finite, got {sm_scale!r}")
    return float(sm_scale)


def check_alike(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_name: str = "k", v_name: str = "v"
) -> None:
    """K and V of one shape; Q, K and V of one dtype, on one device, the kernels' backend."""
    if k.shape != v.shape:
        raise ValueError(
            f"{k_name} and {v_name} must have the same shape, got {tuple(k.shape)} and "
            f"{tuple(v.shape)}"
        )
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(
            f"q, {k_name} and {v_name} must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}"
        )
    if not (q.device == k.device == v.device):
        raise ValueError(
            f"q, {k_name} and {v_name} must be on one device, got {q.device}, {k.device}, "
            f"{v.device}"
        )
    check_device(q)


def check_attention(q: object, k: object, v: object, causal: object, sm_scale: object) -> Shapes:
    """Validate an attention call's inputs; returns its sizes and the softmax scale."""
    q, k, v = _check_tensor("q", q), _check_tensor("k", k), _check_tensor("v", v)
    if not isinstance(causal, bool):
        raise ValueError(f"causal must be a bool, got {causal!r}")
    check_alike(q, k, v)
    b, h, _, d = q.shape
    bk, hk, nk, dk = k.shape
    if bk != b:
        raise ValueError(f"batch mismatch: q has {b}, k and v have {bk}")
    if dk != d:
        raise ValueError(f"head_dim mismatch: q has {d}, k and v have {dk}")
    if d % 8 or d > MAX_HEAD_DIM:
        raise ValueError(f"head_dim must be a multiple of 8 and at most {MAX_HEAD_DIM}, got {d}")
    if h % hk:
        raise ValueError(f"heads of q ({h}) must be divisible by heads of k and v ({hk})")
    return Shapes(b, h, hk, q.shape[2], nk, d, check_scale(sm_scale, d))


def last_dim_contiguous(x: torch.Tensor) -> torch.Tensor:
    """The kernels index rows by stride and columns densely: copy only when columns are strided."""
    return x if x.stride(-1) == 1 else x.contiguous()


def tma_ready(*xs: torch.Tensor) -> bool:
    """Can every tensor be described to the tensor-memory copy engine per (batch, head)?

    Each head's base address and row stride must be 16-byte aligned, columns dense.
    """
    for x in xs:
        size = x.element_size()
        if x.stride(-1) != 1 or x.data_ptr() % 16:
            return False
        if any((s * size) % 16 for s in x.stride()[:-1]):
            return False
    return True
