"""FA-2 backward on real numbers: closed-form float64 gradients, finite differences, partials."""

from __future__ import annotations

import numpy as np
import pytest

from flashscope.simulator.core.precision import round_to_dtype
from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.teach.numerics import attention_gradients, fa2_backward, naive_attention
from flashscope.simulator.teach.oracle import attention_probs

TOL = {"fp32": 2e-5, "fp16": 4 * 2.0**-10, "bf16": 4 * 2.0**-7}


def _seed() -> int:
    return int(np.random.default_rng().integers(2**31))


def _inputs(p: AttentionProblem, seed: int):
    rng = np.random.default_rng(seed)
    shapes = [(p.seq_q, p.head_dim), (p.seq_k, p.head_dim), (p.seq_k, p.head_dim)]
    shapes.append((p.seq_q, p.head_dim))
    return [round_to_dtype(rng.standard_normal(s), p.dtype) for s in shapes]


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(
    ("nq", "nk", "d", "bm", "bn"),
    [(97, 97, 16, 32, 16), (200, 77, 40, 64, 32), (64, 300, 24, 16, 64), (1, 1, 8, 16, 16)],
)
def test_gradients_equal_closed_form_float64(dtype, causal, nq, nk, d, bm, bn):
    seed = _seed()
    p = AttentionProblem(seq_q=nq, seq_k=nk, head_dim=d, causal=causal, dtype=dtype)
    q, k, v, do = _inputs(p, seed)
    rec = fa2_backward(q, k, v, do, p, TileConfig(bm, bn))
    ref = attention_gradients(q, k, v, do, p.scale, causal)
    for name in ("dq", "dk", "dv"):
        got, want = getattr(rec, name), ref[name]
        err = np.abs(got - want).max()
        assert err <= TOL[dtype] * max(1.0, np.abs(want).max()), f"{name} seed={seed} err={err}"
        np.testing.assert_array_equal(got, round_to_dtype(got, dtype))  # written in the dtype
    np.testing.assert_allclose(rec.delta, ref["delta"], atol=TOL[dtype] * 4, err_msg=str(seed))
    if causal and nq > nk:  # rows with no key get no gradient
        assert (rec.dq[: nq - nk] == 0).all()


def test_finite_differences_on_a_tiny_causal_case():
    """dL/dX for L = Σ O ∘ dO, by central differences of float64 attention."""
    seed = _seed()
    p = AttentionProblem(seq_q=5, seq_k=7, head_dim=3, causal=True, dtype="fp32")
    q, k, v, do = (x.astype(np.float64) for x in _inputs(p, seed))
    rec = fa2_backward(q, k, v, do, p, TileConfig(2, 2))
    eps = 1e-6

    def loss(tensors):
        return float((naive_attention(*tensors, p.scale, True) * do).sum())

    for pos, name in enumerate(("dq", "dk", "dv")):
        x = (q, k, v)[pos]
        num = np.zeros_like(x)
        for idx in np.ndindex(x.shape):
            up, down = [q, k, v], [q, k, v]
            up[pos], down[pos] = x.copy(), x.copy()
            up[pos][idx] += eps
            down[pos][idx] -= eps
            num[idx] = (loss(up) - loss(down)) / (2 * eps)
        np.testing.assert_allclose(getattr(rec, name), num, atol=2e-5, err_msg=f"seed={seed}")


def test_partials_sum_to_the_finals_in_kernel_order():
    seed = _seed()
    p = AttentionProblem(seq_q=70, seq_k=90, head_dim=16, causal=True, dtype="fp32")
    t = TileConfig(16, 32)
    q, k, v, do = _inputs(p, seed)
    rec = fa2_backward(q, k, v, do, p, t)
    g = rec.grid
    for i in range(g.n_q):
        rows = slice(i * 16, min(i * 16 + 16, 70))
        np.testing.assert_allclose(rec.dq_partial(i, g.n_kv - 1), rec.dq[rows], atol=1e-5)
        assert (rec.dq_partial(i, -1) == 0).all()
    for j in range(g.n_kv):
        cols = slice(j * 32, min(j * 32 + 32, 90))
        dk, dv = rec.dkdv_partial(j, g.n_q - 1)
        np.testing.assert_allclose(dk, rec.dk[cols], atol=1e-5, err_msg=f"seed={seed}")
        np.testing.assert_allclose(dv, rec.dv[cols], atol=1e-5, err_msg=f"seed={seed}")
    # A partial after key block j is the gradient restricted to keys 0 … j: dS K over them.
    ref = attention_gradients(q, k, v, do, p.scale, True)
    p64, _ = attention_probs(q, k, p.scale, True)
    ds = p64 * (do.astype(np.float64) @ v.T.astype(np.float64) - ref["delta"][:, None])
    np.testing.assert_allclose(rec.dq_partial(3, 0), ds[48:64, :32] @ k[:32] * p.scale, atol=1e-5)
    assert rec.p is not None
    np.testing.assert_allclose(rec.p, p64, atol=1e-6)


def test_without_recording_partials_are_refused():
    p = AttentionProblem(seq_q=8, head_dim=4, dtype="fp32")
    rec = fa2_backward(*_inputs(p, 0), p, TileConfig(4, 4), record=False)
    with pytest.raises(ValueError, match="record=True"):
        rec.dq_partial(0, 0)
