"""Float64 attention and its gradients, computed the textbook way: the oracle of every check.

Causal masks are bottom-right aligned (key k visible to query q iff k ≤ q + Nk − Nq). A query row
that sees no key at all (causal with seq_q > seq_k) has, by definition here, output 0,
log-sum-exp −∞ and zero gradients: softmax over an empty set is taken as contributing nothing.
"""

from __future__ import annotations

import numpy as np


def causal_mask(nq: int, nk: int) -> np.ndarray:
    """(nq, nk) booleans: True where query row q may see key k (bottom-right aligned)."""
    return np.arange(nk)[None, :] <= np.arange(nq)[:, None] + (nk - nq)


def attention_probs(
    q: np.ndarray, k: np.ndarray, scale: float, causal: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """P = softmax(QKᵀ·scale) in float64 and the log-sum-exp of each row.

    q: (Nq, d), k: (Nk, d) → P (Nq, Nk) with all-zero rows where nothing is visible, LSE (Nq,)
    with −∞ there.
    """
    q64, k64 = np.asarray(q, np.float64), np.asarray(k, np.float64)
    s = q64 @ k64.T * scale  # (Nq, Nk)
    if causal:
        s = np.where(causal_mask(*s.shape), s, -np.inf)
    m = s.max(axis=1)  # (Nq,)
    m_safe = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(s - m_safe[:, None])  # masked entries: exp(−∞) = 0
    l = e.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.where(l[:, None] > 0, e / l[:, None], 0.0)
        lse = np.where(l > 0, m_safe + np.log(l), -np.inf)
    return p, lse


def naive_attention(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float, causal: bool = False
) -> np.ndarray:
    """softmax(QKᵀ·scale)·V in float64: (Nq, d), rows that see nothing are 0."""
    p, _ = attention_probs(q, k, scale, causal)
    return p @ np.asarray(v, np.float64)


def attention_lse(q: np.ndarray, k: np.ndarray, scale: float, causal: bool = False) -> np.ndarray:
    """Log-sum-exp of each row of QKᵀ·scale in float64 (−∞ where nothing is visible)."""
    return attention_probs(q, k, scale, causal)[1]


def attention_gradients(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    do: np.ndarray,
    scale: float,
    causal: bool = False,
) -> dict[str, np.ndarray]:
    """dQ, dK, dV of O = softmax(QKᵀ·scale)V for the upstream gradient dO, in float64.

    dV = Pᵀ dO; dP = dO Vᵀ; D = rowsum(dO ∘ O); dS = P ∘ (dP − D); dQ = dS K·scale;
    dK = dSᵀ Q·scale.
    """
    q64, k64, v64, do64 = (np.asarray(x, np.float64) for x in (q, k, v, do))
    p, lse = attention_probs(q64, k64, scale, causal)  # (Nq, Nk)
    o = p @ v64  # (Nq, d)
    dv = p.T @ do64  # (Nk, d)
    dp = do64 @ v64.T  # (Nq, Nk)
    delta = (do64 * o).sum(axis=1)  # (Nq,)
    ds = p * (dp - delta[:, None])  # (Nq, Nk)
    return {
        "o": o,
        "lse": lse,
        "delta": delta,
        "dq": ds @ k64 * scale,  # (Nq, d)
        "dk": ds.T @ q64 * scale,  # (Nk, d)
        "dv": dv,
    }
