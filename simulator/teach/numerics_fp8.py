"""Attention in emulated low precision beside exact attention: fp32, bf16, fp16 and fp8 (e4m3).

Where the precision enters is where a FlashAttention forward rounds: its inputs Q, K, V (stored
in the dtype), P before the P·V product (fed to the tensor cores in the dtype) and O (written
back in the dtype). Products accumulate in fp32 and the softmax runs in fp32.

fp8 adds per-block scales, as FP8 attention kernels use them: each block of `block_m` rows of Q
and of `block_n` rows of K and V is divided by its scale amax/448 before rounding to e4m3 (so
its largest entry lands on 448, e4m3's largest finite value) and the products are multiplied
back by the scales; P, whose entries lie in [0, 1], takes the fixed scale 1/448. O is written
in bf16 (FP8 kernels keep a 16-bit output).

The softmax here is the whole row's (P rounded relative to the row's final max), not the tile
by tile recurrence: the rounding points are the kernel's, the rescales of O are not emulated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from flashscope.simulator.core.precision import E4M3_MAX, round_fp8_e4m3, round_to_dtype
from flashscope.simulator.teach.oracle import causal_mask, naive_attention

PRECISIONS = ("fp32", "bf16", "fp16", "fp8")


@dataclass(frozen=True)
class Quantized:
    """A tensor quantized to e4m3 block by block: values (as float32) and one scale per block."""

    values: np.ndarray  # (N, d), e4m3 values
    scales: np.ndarray  # (blocks,)
    block: int

    def dequantized(self) -> np.ndarray:
        out: np.ndarray = self.values * np.repeat(self.scales, self.block)[: len(self.values), None]
        return out


def quantize_blocks(x: np.ndarray, block: int) -> Quantized:
    """x (N, d) in e4m3 with one scale amax/448 per block of `block` rows (1 for an all-zero
    block)."""
    x = np.asarray(x, dtype=np.float32)
    n = len(x)
    blocks = -(-n // block)
    pad = np.zeros((blocks * block - n, x.shape[1]), dtype=np.float32)
    amax = np.abs(np.concatenate([x, pad]).reshape(blocks, block, -1)).max(axis=(1, 2))
    scales = np.where(amax > 0, amax / np.float32(E4M3_MAX), 1.0).astype(np.float32)
    values = round_fp8_e4m3(x / np.repeat(scales, block)[:n, None])
    return Quantized(values, scales, block)


def attention_in(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    scale: float,
    dtype: str,
    causal: bool = False,
    block_m: int = 64,
    block_n: int = 128,
) -> np.ndarray:
    """softmax(QKᵀ·scale)·V with the roundings of a kernel storing `dtype` (see the module
    docstring); q (Nq, d), k and v (Nk, d) → O (Nq, d) as float64."""
    if dtype not in PRECISIONS:
        raise ValueError(f"dtype must be one of {', '.join(PRECISIONS)}, got {dtype!r}")
    if dtype == "fp8":
        qq, kq, vq = (
            quantize_blocks(q, block_m),
            quantize_blocks(k, block_n),
            quantize_blocks(v, block_n),
        )
        q32, k32, v32 = qq.dequantized(), kq.dequantized(), vq.dequantized()
    else:
        q32, k32, v32 = (round_to_dtype(x, dtype) for x in (q, k, v))
    s = (q32 @ k32.T).astype(np.float32) * np.float32(scale)  # (Nq, Nk), fp32 accumulation
    if causal:
        s = np.where(causal_mask(*s.shape), s, -np.inf)
    m = s.max(axis=1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(s - m).astype(np.float32)  # unnormalized, in [0, 1]
    l = p.sum(axis=1, keepdims=True)
    if dtype == "fp8":
        p_in = round_fp8_e4m3(p * np.float32(E4M3_MAX)) / np.float32(E4M3_MAX)
    else:
        p_in = round_to_dtype(p, dtype)
    with np.errstate(divide="ignore", invalid="ignore"):
        o = np.where(l > 0, (p_in @ v32) / l, 0.0).astype(np.float32)
    return round_to_dtype(o, "bf16" if dtype == "fp8" else dtype).astype(np.float64)


def precision_errors(
    n_q: int = 256,
    n_k: int = 256,
    head_dim: int = 64,
    causal: bool = False,
    seed: int = 0,
    block_m: int = 64,
    block_n: int = 128,
) -> dict[str, dict[str, Any]]:
    """Error of O against exact (float64) attention for each precision, on one head of fresh
    standard-normal Q, K, V (`seed`): max and RMS absolute error, and RMS relative to O's RMS."""
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((n, head_dim)).astype(np.float32) for n in (n_q, n_k, n_k))
    scale = 1.0 / np.sqrt(head_dim)
    exact = naive_attention(q, k, v, scale, causal)
    size = float(np.sqrt(np.mean(exact**2))) or 1.0
    out = {}
    for dtype in PRECISIONS:
        err = attention_in(q, k, v, scale, dtype, causal, block_m, block_n) - exact
        rms = float(np.sqrt(np.mean(err**2)))
        out[dtype] = {
            "max_abs": float(np.abs(err).max()),
            "rms": rms,
            "relative_rms": rms / size,
            "simulated": dtype == "fp8",
        }
    return out
