"""Run tile programs on real numbers and record the per-tile state.

Rows of different query blocks never interact in the forward pass, so the FlashAttention-2
recurrence is evaluated for all query rows at once per key block (vectorized over query blocks);
the snapshot after key block j holds, for every row, exactly the state the CTA owning that row
has after its j-th inner iteration.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def naive_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float) -> np.ndarray:
    """softmax(QKᵀ·scale)·V in float64, the oracle for exactness readouts."""
    q64, k64, v64 = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    s = q64 @ k64.T * scale  # (Nq, Nk)
    s -= s.max(axis=1, keepdims=True)
    p = np.exp(s)
    p /= p.sum(axis=1, keepdims=True)
    return p @ v64  # (Nq, d)


def online_softmax(x: np.ndarray, block: int) -> dict[str, np.ndarray]:
    """The online-softmax recurrence over a 1-D vector, one block at a time.

    Returns the running max m, running sum l and rescale factor alpha after each block, and the
    final softmax exp(x − m) / l.
    """
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 1 or x.size == 0:
        raise ValueError("x must be a non-empty 1-D vector")
    if block < 1:
        raise ValueError(f"block must be ≥ 1, got {block}")
    m, l = -np.inf, 0.0
    ms, ls, alphas = [], [], []
    for start in range(0, x.size, block):
        chunk = x[start : start + block]
        m_new = max(m, float(chunk.max()))
        alpha = 0.0 if m_new == -np.inf else float(np.exp(m - m_new))
        l = alpha * l + (float(np.exp(chunk - m_new).sum()) if m_new > -np.inf else 0.0)
        m = m_new
        ms.append(m)
        ls.append(l)
        alphas.append(alpha)
    out = np.exp(x - m) / l if l > 0 else np.full_like(x, np.nan)
    return {"m": np.array(ms), "l": np.array(ls), "alpha": np.array(alphas), "softmax": out}


@dataclass
class ForwardRecording:
    """State of every query row after each key block: arrays indexed [j, row]."""

    m: np.ndarray  # (n_kv, Nq)
    l: np.ndarray  # (n_kv, Nq)
    alpha: np.ndarray  # (n_kv, Nq)
    acc: np.ndarray  # (n_kv, Nq, d_shown) unnormalized accumulator, columns as shown
    o: np.ndarray  # (Nq, d) final output
    lse: np.ndarray  # (Nq,)
    col_stride: int  # each shown column is the mean of this many columns of d


def shown_columns(d: int, limit: int) -> int:
    """The column stride that brings head_dim down to at most `limit` shown columns."""
    stride = 1
    while d // stride > limit:
        stride *= 2
    return stride


def _downsample(a: np.ndarray, stride: int) -> np.ndarray:
    if stride == 1:
        return a
    d = a.shape[-1]
    keep = (d // stride) * stride
    return a[..., :keep].reshape(*a.shape[:-1], d // stride, stride).mean(axis=-1)


def fa2_forward(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    block_n: int,
    scale: float,
    *,
    o_col_limit: int = 64,
    record: bool = True,
) -> ForwardRecording:
    """FlashAttention-2 forward in float32 with fp32 accumulation, recording every snapshot."""
    q = np.asarray(q, dtype=np.float32)
    k = np.asarray(k, dtype=np.float32)
    v = np.asarray(v, dtype=np.float32)
    nq, d = q.shape
    nk = k.shape[0]
    n_kv = -(-nk // block_n)
    stride = shown_columns(d, o_col_limit)
    d_shown = d // stride
    m = np.full(nq, -np.inf, dtype=np.float32)
    l = np.zeros(nq, dtype=np.float32)
    acc = np.zeros((nq, d), dtype=np.float32)
    rec_shape = (n_kv if record else 0, nq)
    ms = np.empty(rec_shape, np.float32)
    ls = np.empty(rec_shape, np.float32)
    alphas = np.empty(rec_shape, np.float32)
    accs = np.empty((*rec_shape, d_shown), np.float32)
    scale32 = np.float32(scale)
    for j in range(n_kv):
        kj = k[j * block_n : (j + 1) * block_n]  # (bn, d)
        vj = v[j * block_n : (j + 1) * block_n]  # (bn, d)
        s = (q @ kj.T) * scale32  # (Nq, bn): every query block's tile at once
        m_new = np.maximum(m, s.max(axis=1))
        alpha = np.exp(m - m_new)  # exp(−∞) = 0 on the first block
        p = np.exp(s - m_new[:, None])
        l = alpha * l + p.sum(axis=1)
        acc = alpha[:, None] * acc + p @ vj
        m = m_new
        if record:
            ms[j], ls[j], alphas[j] = m, l, alpha
            accs[j] = _downsample(acc, stride)
    o = acc / l[:, None]
    lse = m + np.log(l)
    return ForwardRecording(ms, ls, alphas, accs, o, lse, stride)
