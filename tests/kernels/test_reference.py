"""The oracle itself: its gradients equal autograd's, masks align bottom-right, empty rows are 0."""

from __future__ import annotations

import math

import torch

from flashscope.kernels.reference import attention_backward, attention_forward, causal_mask


def test_causal_mask_is_bottom_right() -> None:
    m = causal_mask(2, 4)
    assert m.tolist() == [[True, True, True, False], [True, True, True, True]]
    m = causal_mask(4, 2)
    assert m.tolist() == [[False, False], [False, False], [True, False], [True, True]]


def test_fully_masked_rows_give_zero_and_minus_inf(seed: int) -> None:
    q, k, v = torch.randn(1, 2, 5, 8), torch.randn(1, 1, 3, 8), torch.randn(1, 1, 3, 8)
    o, lse = attention_forward(q, k, v, causal=True)
    assert torch.all(o[:, :, :2] == 0), f"seed={seed}"
    assert torch.all(lse[:, :, :2] == -math.inf), f"seed={seed}"
    assert torch.isfinite(lse[:, :, 2:]).all(), f"seed={seed}"
    dq, _, _ = attention_backward(q, k, v, torch.randn(1, 2, 5, 8), causal=True)
    assert torch.all(dq[:, :, :2] == 0), f"seed={seed}"


def test_gradients_match_autograd(seed: int) -> None:
    q = torch.randn(2, 4, 7, 16, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 2, 9, 16, dtype=torch.float64, requires_grad=True)
    v = torch.randn(2, 2, 9, 16, dtype=torch.float64, requires_grad=True)
    do = torch.randn(2, 4, 7, 16, dtype=torch.float64)
    for causal in (False, True):
        o, _ = attention_forward(q, k, v, causal=causal, sm_scale=0.3)
        want = torch.autograd.grad(o, (q, k, v), do)
        got = attention_backward(q, k, v, do, causal=causal, sm_scale=0.3)
        for g, w, name in zip(got, want, "qkv", strict=True):
            assert torch.allclose(g, w, atol=1e-10), f"d{name}, causal={causal}, seed={seed}"


def test_forward_matches_softmax_definition(seed: int) -> None:
    q, k, v = (torch.randn(1, 1, 6, 8, dtype=torch.float64) for _ in range(3))
    o, lse = attention_forward(q, k, v, sm_scale=0.5)
    s = q[0, 0] @ k[0, 0].T * 0.5
    assert torch.allclose(o[0, 0], torch.softmax(s, -1) @ v[0, 0]), f"seed={seed}"
    assert torch.allclose(lse[0, 0].double(), torch.logsumexp(s, -1), atol=1e-6), f"seed={seed}"
