"""Attention in float32/float64 with PyTorch ops: the oracle every kernel test compares against.

Conventions shared by every kernel: q (B, H, N_q, d), k and v (B, H_kv, N_k, d), query head h
reads K/V head h // (H / H_kv); causal masks align bottom-right (key j visible to query i iff
j ≤ i + N_k − N_q); a row that sees no key at all has output 0 and log-sum-exp −∞, and gets zero
gradients. LSE is the natural-log log-sum-exp of the scaled, masked scores.
"""

from __future__ import annotations

import math

import torch

# The error rule every kernel is held to (FlashAttention's): against the float64 reference, at
# most twice the error of the same computation done by PyTorch in the input dtype, plus this
# floor.
LOWP_FLOOR = {torch.float32: 2e-5, torch.float16: 5e-4, torch.bfloat16: 4e-3}


def causal_mask(seq_q: int, seq_k: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """(N_q, N_k) bool, True where key j is visible to query i (bottom-right aligned)."""
    i = torch.arange(seq_q, device=device)[:, None]
    j = torch.arange(seq_k, device=device)[None, :]
    return j <= i + (seq_k - seq_q)


def _expand_kv(x: torch.Tensor, heads: int) -> torch.Tensor:
    return x.repeat_interleave(heads // x.shape[1], dim=1)  # (B, H, N_k, d)


def _probabilities(q, k, causal, scale):
    s = torch.matmul(q, k.transpose(-1, -2)) * scale  # (B, H, N_q, N_k)
    if causal:
        s = s.masked_fill(~causal_mask(q.shape[2], k.shape[2], q.device), -math.inf)
    lse = torch.logsumexp(s, dim=-1)  # (B, H, N_q); −∞ for rows that see nothing
    safe = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)
    p = torch.exp(s - safe[..., None])  # exp(−∞) = 0 on masked pairs and empty rows
    return p, lse


def attention_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    sm_scale: float | None = None,
    dtype: torch.dtype = torch.float64,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(O, LSE) computed in `dtype` (float64 by default) from upcast inputs."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else sm_scale
    q, k, v = (x.to(dtype) for x in (q, k, v))
    k, v = _expand_kv(k, q.shape[1]), _expand_kv(v, q.shape[1])
    p, lse = _probabilities(q, k, causal, scale)
    return torch.matmul(p, v), lse.float()  # (B, H, N_q, d), (B, H, N_q)


def attention_backward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    do: torch.Tensor,
    causal: bool = False,
    sm_scale: float | None = None,
    dtype: torch.dtype = torch.float64,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dQ, dK, dV) in `dtype`, from explicit formulas (no autograd), GQA summed over groups.

    P = softmax(S), dV = Pᵀ dO, dP = dO Vᵀ, D = rowsum(dO ∘ O), dS = P ∘ (dP − D),
    dQ = scale · dS K, dK = scale · dSᵀ Q.
    """
    scale = 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else sm_scale
    heads, kv_heads = q.shape[1], k.shape[1]
    q, k, v, do = (x.to(dtype) for x in (q, k, v, do))
    ke, ve = _expand_kv(k, heads), _expand_kv(v, heads)
    p, _ = _probabilities(q, ke, causal, scale)
    o = torch.matmul(p, ve)  # (B, H, N_q, d)
    dv = torch.matmul(p.transpose(-1, -2), do)  # (B, H, N_k, d)
    dp = torch.matmul(do, ve.transpose(-1, -2))  # (B, H, N_q, N_k)
    ds = p * (dp - (do * o).sum(-1, keepdim=True))
    dq = torch.matmul(ds, ke) * scale
    dk = torch.matmul(ds.transpose(-1, -2), q) * scale
    group = heads // kv_heads
    b, _, nk, d = dk.shape
    dk = dk.view(b, kv_heads, group, nk, d).sum(2)  # (B, H_kv, N_k, d)
    dv = dv.view(b, kv_heads, group, nk, d).sum(2)
    return dq, dk, dv
