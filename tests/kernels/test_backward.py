"""Backward kernels (autograd through flash_attention) against the float64 reference gradients."""

from __future__ import annotations

import pytest
import torch

from flashscope.kernels import KernelConfig, flash_attention, flash_attention_lse
from flashscope.kernels.backward import launch_backward
from flashscope.kernels.reference import attention_backward, attention_forward

from .conftest import assert_close, rand

F16 = torch.float16


def check_backward(seed, b, h, h_kv, n_q, n_k, d, causal, dtype=F16, **kw):
    q = rand(b, h, n_q, d, dtype=dtype).requires_grad_()
    k = rand(b, h_kv, n_k, d, dtype=dtype).requires_grad_()
    v = rand(b, h_kv, n_k, d, dtype=dtype).requires_grad_()
    do = rand(b, h, n_q, d, dtype=dtype)
    o = flash_attention(q, k, v, causal, **kw)
    got = torch.autograd.grad(o, (q, k, v), do)
    ref = attention_backward(q.detach(), k.detach(), v.detach(), do, causal)
    lowp = attention_backward(q.detach(), k.detach(), v.detach(), do, causal, dtype=dtype)
    for g, r, lp, name in zip(got, ref, lowp, ("dQ", "dK", "dV"), strict=True):
        what = f"{name} b={b} h={h}/{h_kv} n={n_q}x{n_k} d={d} causal={causal} {dtype}"
        assert g.shape == r.shape and g.dtype == dtype, what
        assert_close(g, r, lp, what, seed)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("n", [1, 17, 97, 200])
def test_square_lengths_gqa(seed: int, n: int, causal: bool) -> None:
    check_backward(seed, 1, 4, 2, n, n, 64, causal)


@pytest.mark.parametrize("d", [16, 80, 128])
def test_head_dims(seed: int, d: int) -> None:
    check_backward(seed, 1, 2, 1, 97, 97, d, True)


@pytest.mark.parametrize(("n_q", "n_k"), [(17, 200), (200, 17), (130, 300)])
def test_unequal_lengths_causal(seed: int, n_q: int, n_k: int) -> None:
    check_backward(seed, 1, 2, 2, n_q, n_k, 32, True)


def test_unequal_lengths_full(seed: int) -> None:
    check_backward(seed, 2, 2, 1, 60, 300, 32, False)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_dtypes(seed: int, dtype: torch.dtype) -> None:
    check_backward(seed, 1, 2, 1, 97, 70, 64, True, dtype)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_atomic_dq_route(seed: int, causal: bool) -> None:
    """The FlashAttention-2 route: dQ accumulated in fp32 by the dK/dV programs."""
    q, k, v = rand(1, 4, 150, 64), rand(1, 2, 97, 64), rand(1, 2, 97, 64)
    do = rand(1, 4, 150, 64)
    o, lse = flash_attention_lse(q, k, v, causal)
    got = launch_backward(q, k, v, o, lse, do, causal, 64**-0.5, dq_mode="atomic")
    ref = attention_backward(q, k, v, do, causal)
    lowp = attention_backward(q, k, v, do, causal, dtype=F16)
    for g, r, lp, name in zip(got, ref, lowp, ("dQ", "dK", "dV"), strict=True):
        assert_close(g, r, lp, f"atomic route {name} causal={causal}", seed)


def test_tensor_descriptor_path(seed: int) -> None:
    check_backward(seed, 1, 2, 1, 97, 130, 80, True, use_tma=True)


def test_explicit_tiles(seed: int) -> None:
    check_backward(seed, 1, 2, 1, 100, 100, 32, True, bwd_config=KernelConfig(32, 16, 4, 1))


def test_gradient_through_lse(seed: int) -> None:
    """A loss on LSE too: its gradient enters dS (D becomes rowsum(dO ∘ O) − dLSE)."""
    q, k, v = (rand(1, 2, 60, 32, dtype=torch.float32).requires_grad_() for _ in range(3))
    do, dlse = rand(1, 2, 60, 32, dtype=torch.float32), rand(1, 2, 60, dtype=torch.float32)
    o, lse = flash_attention_lse(q, k, v, False)
    got = torch.autograd.grad((o * do).sum() + (lse * dlse).sum(), (q, k, v))
    q64, k64, v64 = (x.detach().double().requires_grad_() for x in (q, k, v))
    o64, _ = attention_forward(q64, k64, v64)
    lse64 = torch.logsumexp(q64 @ k64.transpose(-1, -2) * 32**-0.5, -1)
    want = torch.autograd.grad((o64 * do).sum() + (lse64 * dlse).sum(), (q64, k64, v64))
    for g, w, name in zip(got, want, "qkv", strict=True):
        err = float((g.double() - w).abs().max())
        assert err < 1e-4, f"d{name} with LSE gradient: error {err:.3g}, seed={seed}"


def test_gradient_through_lse_alone(seed: int) -> None:
    """A loss on LSE only: O's gradient arrives as None (grads are not materialised)."""
    q, k, v = (rand(1, 2, 50, 32, dtype=torch.float32).requires_grad_() for _ in range(3))
    dlse = rand(1, 2, 50, dtype=torch.float32)
    _, lse = flash_attention_lse(q, k, v, True)
    got = torch.autograd.grad((lse * dlse).sum(), (q, k, v), allow_unused=True)
    q64, k64, v64 = (x.detach().double().requires_grad_() for x in (q, k, v))
    s = q64 @ k64.transpose(-1, -2) * 32**-0.5
    s = s.masked_fill(torch.ones(50, 50, dtype=torch.bool).triu(1), float("-inf"))
    want = torch.autograd.grad((torch.logsumexp(s, -1) * dlse).sum(), (q64, k64, v64),
                               allow_unused=True)  # fmt: skip
    assert want[2] is None  # V does not enter LSE; the kernel's dV is zero
    assert float(got[2].abs().max()) == 0.0, f"dV without a loss on O, seed={seed}"
    for g, w, name in zip(got[:2], want[:2], "qk", strict=True):
        err = float((g.double() - w).abs().max())
        assert err < 1e-4, f"d{name} from LSE alone: error {err:.3g}, seed={seed}"


def test_no_graph_without_gradients(seed: int) -> None:
    """Inputs that need no gradient (or no_grad): the same output, and no autograd node."""
    q, k, v = (rand(1, 2, 40, 16) for _ in range(3))
    plain = flash_attention(q, k, v, True)
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    tracked = flash_attention(*leaves, True)
    with torch.no_grad():
        quiet = flash_attention(*leaves, True)
    assert plain.grad_fn is None and quiet.grad_fn is None and tracked.grad_fn is not None
    assert torch.equal(plain, tracked.detach()) and torch.equal(plain, quiet), f"seed={seed}"


def test_strided_grad_output(seed: int) -> None:
    q, k, v = (rand(1, 2, 64, 32).requires_grad_() for _ in range(3))
    do = rand(1, 64, 2, 32).transpose(1, 2)  # (B, H, N, d) view of a (B, N, H, d) tensor
    got = torch.autograd.grad(flash_attention(q, k, v, True), (q, k, v), do)
    ref = attention_backward(q.detach(), k.detach(), v.detach(), do, True)
    lowp = attention_backward(q.detach(), k.detach(), v.detach(), do, True, dtype=F16)
    for g, r, lp, name in zip(got, ref, lowp, ("dQ", "dK", "dV"), strict=True):
        assert_close(g, r, lp, f"strided dO {name}", seed)


@pytest.mark.parametrize("route", ["separate", "atomic"])
@pytest.mark.parametrize("band", [2, 3])
def test_banded_causal_order_gives_the_same_gradients(seed: int, band: int, route: str) -> None:
    """dK/dV programs (key block 0 first) and dQ programs in bands of 2 or 3 of five rows."""
    q, k, v, do = (rand(1, 5, 97, 32) for _ in range(4))
    o, lse = flash_attention_lse(q, k, v, True)
    got = launch_backward(
        q, k, v, o, lse, do, True, 32**-0.5, KernelConfig(16, 32, 4, 1),
        dq_mode=route, dq_config=KernelConfig(32, 16, 4, 1), band=band,
    )  # fmt: skip
    ref = attention_backward(q, k, v, do, True)
    lowp = attention_backward(q, k, v, do, True, dtype=F16)
    for g, r, lp, name in zip(got, ref, lowp, ("dQ", "dK", "dV"), strict=True):
        assert_close(g, r, lp, f"band {band} {route} {name}", seed)


def test_band_must_be_positive(seed: int) -> None:
    q = rand(1, 1, 16, 16)
    o, lse = flash_attention_lse(q, q, q, True)
    with pytest.raises(ValueError, match="band"):
        launch_backward(q, q, q, o, lse, q, True, 0.25, band=0)


@pytest.mark.parametrize(("n_q", "d"), [(1, 64), (97, 80), (200, 128), (130, 256)])
def test_preprocess_zeroes_the_dq_buffer_it_is_given(seed: int, n_q: int, d: int) -> None:
    """D = rowsum(dO ∘ O) with and without the dQ buffer to zero (the Gluon backward's), the
    buffer full of NaN before: every element zero after, D the same and right."""
    from flashscope.kernels.backward import preprocess

    o, do = rand(2, 3, n_q, d), rand(2, 3, n_q, d)
    buf = torch.full((2, 3, n_q, d), float("nan"))
    delta = preprocess(o, do, zero_dq=buf)
    assert torch.equal(buf, torch.zeros_like(buf))
    want = (o.double() * do.double()).sum(-1)
    assert torch.allclose(delta.double(), want, atol=1e-3, rtol=1e-3)
    assert torch.equal(preprocess(o, do), delta)
    with pytest.raises(ValueError, match="zero_dq"):
        preprocess(o, do, zero_dq=torch.zeros(2, 3, n_q, d + 1))
