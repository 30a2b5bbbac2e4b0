"""Every forward program on real numbers against float64 attention, fresh inputs each run."""

from __future__ import annotations

import numpy as np
import pytest

from flashscope.simulator.core.precision import round_to_dtype
from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.teach.numerics import (
    decode_forward,
    fa1_forward,
    fa2_forward,
    naive_attention,
    naive_forward,
    online_softmax,
)
from flashscope.simulator.teach.oracle import attention_lse

# Max |error| allowed, relative to max(1, max |O|): fp32 accumulates in fp32; fp16 and bf16
# round P (and FA-1 its O after every tile) to 10 or 7 mantissa bits.
TOL = {"fp32": 2e-5, "fp16": 4 * 2.0**-10, "bf16": 4 * 2.0**-7}

SHAPES = [  # seq_q, seq_k, head_dim, block_m, block_n
    (97, 97, 16, 32, 16),
    (200, 77, 40, 64, 32),  # seq_q > seq_k: causal leaves rows with no key
    (64, 300, 24, 16, 64),
    (1, 17, 8, 16, 16),
    (130, 130, 80, 128, 4),
]


def _seed() -> int:
    return int(np.random.default_rng().integers(2**31))


def _inputs(p: AttentionProblem, seed: int, rows: int | None = None):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((rows or p.seq_q, p.head_dim))
    k, v = (rng.standard_normal((p.seq_k, p.head_dim)) for _ in range(2))
    return [round_to_dtype(x, p.dtype) for x in (q, k, v)]


@pytest.mark.parametrize("algo", ["naive", "fa1", "fa2"])
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
def test_forward_equals_float64_attention(algo, dtype, causal, shape):
    nq, nk, d, bm, bn = shape
    seed = _seed()
    p = AttentionProblem(seq_q=nq, seq_k=nk, head_dim=d, causal=causal, dtype=dtype)
    q, k, v = _inputs(p, seed)
    ref = naive_attention(q, k, v, p.scale, causal)
    if algo == "naive":
        rec = naive_forward(q, k, v, p)
    else:
        run = fa1_forward if algo == "fa1" else fa2_forward
        rec = run(q, k, v, p, TileConfig(bm, bn))
    err = np.abs(rec.o - ref).max()
    assert err <= TOL[dtype] * max(1.0, np.abs(ref).max()), f"seed={seed} err={err}"
    assert rec.o.dtype == np.float32
    np.testing.assert_array_equal(rec.o, round_to_dtype(rec.o, dtype))  # O is stored in dtype
    lse = attention_lse(q, k, p.scale, causal)
    seen = np.isfinite(lse)
    # Naive attention stores S in the dtype, so its LSE carries S's rounding.
    lse_tol = 1e-4 if algo != "naive" else TOL[dtype] * max(1.0, np.abs(lse[seen]).max())
    np.testing.assert_allclose(rec.lse[seen], lse[seen], atol=lse_tol, err_msg=f"seed={seed}")
    assert np.isneginf(rec.lse[~seen]).all()
    assert (rec.o[~seen] == 0).all()


def test_rows_without_keys_give_zero_output_and_minus_infinity():
    """Causal with seq_q = 12 > seq_k = 5: rows 0 … 6 see no key at all (by definition O = 0,
    LSE = −∞); row 7 sees key 0 only."""
    p = AttentionProblem(seq_q=12, seq_k=5, head_dim=4, causal=True, dtype="fp32")
    q, k, v = _inputs(p, _seed())
    for run in (fa1_forward, fa2_forward):
        rec = run(q, k, v, p, TileConfig(4, 2))
        assert (rec.o[:7] == 0).all() and np.isneginf(rec.lse[:7]).all()
        np.testing.assert_allclose(rec.o[7], v[0], rtol=1e-6)
        assert not np.isnan(rec.m).any() and not np.isnan(rec.acc).any()
    assert (naive_attention(q, k, v, p.scale, True)[:7] == 0).all()


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize(
    ("nq", "nk", "heads", "kv_heads", "bn", "splits"),
    [(1, 1000, 8, 2, 64, None), (3, 257, 4, 4, 16, 5), (2, 33, 6, 3, 32, 1), (1, 64, 1, 1, 8, 100)],
)
def test_decode_equals_float64_attention(dtype, nq, nk, heads, kv_heads, bn, splits):
    seed = _seed()
    p = AttentionProblem(
        seq_q=nq, seq_k=nk, head_dim=32, heads=heads, kv_heads=kv_heads, dtype=dtype
    )
    rows = p.group * nq
    q, k, v = _inputs(p, seed, rows)
    rec = decode_forward(q, k, v, p, TileConfig(16, bn), splits=splits)
    ref = naive_attention(q, k, v, p.scale)
    err = np.abs(rec.o - ref).max()
    assert err <= TOL[dtype] * max(1.0, np.abs(ref).max()), f"seed={seed} err={err}"
    # Each partial is attention over its own keys; their merge is the log-sum-exp of all keys.
    for s in range(rec.plan.used):
        blocks = rec.plan.blocks(s)
        keys = slice(blocks.start * bn, min(blocks.stop * bn, nk))
        part = naive_attention(q, k[keys], v[keys], p.scale)
        assert np.abs(rec.partial_o[s] - part).max() <= TOL[dtype] * 2, f"seed={seed}"
    np.testing.assert_allclose(rec.lse, attention_lse(q, k, p.scale), atol=1e-4)
    np.testing.assert_allclose(rec.merged_lse[-1], rec.lse)


@pytest.mark.parametrize("block", [1, 2, 3, 5, 8, 36, 37, 64, 1000])
def test_online_softmax_equals_softmax(block):
    rng = np.random.default_rng()
    x = rng.standard_normal(37) * 10
    x[5] = 1000.0  # large values must not overflow
    x[9] = -np.inf  # a key nobody may see
    x[20:24] = -np.inf  # a whole block of −∞ for block sizes up to 4
    want = np.exp(x - x.max()) / np.exp(x - x.max()).sum()
    got = online_softmax(x, block)
    np.testing.assert_allclose(got["softmax"], want, rtol=1e-12, atol=0)
    assert got["m"][-1] == x.max()
    assert len(got["m"]) == -(-37 // block)
    np.testing.assert_allclose(got["l"][-1], np.exp(x - x.max()).sum(), rtol=1e-12)
    assert not np.isnan(got["alpha"]).any()


def test_online_softmax_with_leading_minus_infinity_blocks():
    x = np.array([-np.inf, -np.inf, -np.inf, 1.0, 2.0, -np.inf, 1000.0])
    got = online_softmax(x, 2)
    assert got["m"][0] == -np.inf and got["l"][0] == 0 and got["alpha"][0] == 0
    assert got["alpha"][1] == 0  # the first finite block: nothing to rescale
    np.testing.assert_allclose(got["softmax"].sum(), 1.0)
    assert got["softmax"][-1] == pytest.approx(1.0)
    allneg = online_softmax(np.full(4, -np.inf), 3)
    assert (allneg["softmax"] == 0).all() and (allneg["l"] == 0).all()
    with pytest.raises(ValueError, match="NaN"):
        online_softmax(np.array([1.0, np.nan]), 1)
    with pytest.raises(ValueError, match="block"):
        online_softmax(np.ones(3), 0)


def test_fa1_keeps_o_normalized_and_fa2_unnormalized():
    p = AttentionProblem(seq_q=40, seq_k=50, head_dim=8, dtype="fp32")
    t = TileConfig(16, 16)
    q, k, v = _inputs(p, _seed())
    one, two = fa1_forward(q, k, v, p, t), fa2_forward(q, k, v, p, t)
    np.testing.assert_allclose(one.m, two.m)
    np.testing.assert_allclose(one.l, two.l, rtol=1e-5)
    for j in range(4):  # FA-1's stored O equals FA-2's Õ / ℓ after every key block
        keys = slice(0, min((j + 1) * 16, 50))
        np.testing.assert_allclose(one.acc[j], two.acc[j] / two.l[j][:, None], atol=2e-6)
        np.testing.assert_allclose(
            one.acc[j], naive_attention(q, k[keys], v[keys], p.scale), atol=2e-6
        )


def test_bf16_rounding_is_round_to_nearest_even():
    x = np.array([1.0, 1.0 + 2**-8, 1.0 + 3 * 2**-8, -2.5, 1e-40, np.inf], np.float32)
    got = round_to_dtype(x, "bf16")
    assert got[1] == 1.0  # a tie rounds to the even mantissa
    assert got[2] == 1.0 + 2**-6  # 1 + 3·2⁻⁸ is a tie between 1 + 2⁻⁷ and 1 + 2⁻⁶: even wins
    assert got[3] == -2.5 and got[5] == np.inf
    assert np.isnan(round_to_dtype(np.array([np.nan], np.float32), "bf16")).all()


def test_fp16_rounding_equals_a_cast_through_float16():
    rng = np.random.default_rng()
    x = rng.standard_normal(20_000) * 10.0 ** rng.integers(-12, 6, 20_000)
    edges = [0.0, -0.0, np.inf, -np.inf, 65504, 65519.9, 65520, 2**-14, 2**-24, 2**-25, 3 * 2**-26]
    x = np.concatenate([x, edges, np.negative(edges)]).astype(np.float32)
    with np.errstate(over="ignore"):
        want = x.astype(np.float16).astype(np.float32)
    got = round_to_dtype(x, "fp16")
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    assert np.isnan(round_to_dtype(np.array([np.nan], np.float32), "fp16")).all()
