"""Tile programs on real numbers: the online-softmax recurrence and the entry points of every
algorithm's numerics (the recurrences themselves live in numerics_forward, numerics_backward
and numerics_decode; the float64 oracle in oracle).
"""

from __future__ import annotations

import numpy as np

from flashscope.simulator.teach.numerics_backward import BackwardRecording, fa2_backward
from flashscope.simulator.teach.numerics_decode import DecodeRecording, decode_forward
from flashscope.simulator.teach.numerics_forward import (
    ForwardRecording,
    NaiveRecording,
    fa1_forward,
    fa2_forward,
    flash_forward,
    naive_forward,
)
from flashscope.simulator.teach.oracle import attention_gradients, attention_lse, naive_attention
from flashscope.simulator.teach.snapshots import shown_columns

__all__ = [
    "BackwardRecording",
    "DecodeRecording",
    "ForwardRecording",
    "NaiveRecording",
    "attention_gradients",
    "attention_lse",
    "decode_forward",
    "fa1_forward",
    "fa2_backward",
    "fa2_forward",
    "flash_forward",
    "naive_attention",
    "naive_forward",
    "online_softmax",
    "shown_columns",
]


def online_softmax(x: np.ndarray, block: int) -> dict[str, np.ndarray]:
    """The online-softmax recurrence over a 1-D vector, `block` entries at a time, in float64.

    Returns the running max m, running sum ℓ and rescale factor α = e^(m_old − m_new) after
    each block, and the final softmax e^(x − m) / ℓ. Entries of −∞ weigh nothing, also when a
    whole block is −∞ (m stays, α = 1; before any finite entry m = −∞, ℓ = 0, α = 0). If every
    entry is −∞ the softmax is all zeros (the convention of fully masked attention rows).
    """
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 1 or x.size == 0:
        raise ValueError("x must be a non-empty 1-D vector")
    if np.isnan(x).any() or np.isposinf(x).any():
        raise ValueError("x must not contain NaN or +∞")
    if isinstance(block, bool) or not isinstance(block, int | np.integer) or block < 1:
        raise ValueError(f"block must be an integer ≥ 1, got {block!r}")
    n_blocks = -(-x.size // block)
    ms, ls, alphas = np.empty(n_blocks), np.empty(n_blocks), np.empty(n_blocks)
    m, l = -np.inf, 0.0
    for b in range(n_blocks):
        chunk = x[b * block : (b + 1) * block]
        m_new = max(m, float(chunk.max()))
        sub = m_new if np.isfinite(m_new) else 0.0  # nothing finite yet: every term is 0
        alpha = float(np.exp(m - sub))
        l = alpha * l + float(np.exp(chunk - sub).sum())
        m = m_new
        ms[b], ls[b], alphas[b] = m, l, alpha
    out = np.exp(x - m) / l if l > 0 else np.zeros_like(x)
    return {"m": ms, "l": ls, "alpha": alphas, "softmax": out}
