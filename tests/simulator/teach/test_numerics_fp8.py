"""FP8 (e4m3) rounding and per-block scales (simulator/core/precision.py,
simulator/teach/numerics_fp8.py): hand-worked values, ties, saturation, and attention's error
growing from fp32 through bf16/fp16 to fp8."""

from __future__ import annotations

import numpy as np
import pytest

from flashscope.simulator.core.precision import E4M3_MAX, round_fp8_e4m3, round_to_dtype
from flashscope.simulator.teach.numerics_fp8 import (
    PRECISIONS,
    attention_in,
    precision_errors,
    quantize_blocks,
)


def e4m3_values() -> np.ndarray:
    """Every finite non-negative e4m3 value, from its bits (exponent bias 7, no ∞, S.1111.111
    is NaN)."""
    out = []
    for e in range(16):
        for m in range(8):
            if e == 15 and m == 7:
                continue
            out.append(m / 8 * 2.0**-6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7))
    return np.array(out, dtype=np.float32)


def test_every_e4m3_value_is_unchanged():
    v = e4m3_values()
    assert v.max() == E4M3_MAX and v[1] == 2.0**-9
    for x in (v, -v):
        assert np.array_equal(round_fp8_e4m3(x), x)


@pytest.mark.parametrize(
    "x,expected",
    [
        (1.0625, 1.0),  # halfway between 1 and 1.125: to the even mantissa (000)
        (1.1875, 1.25),  # halfway between 1.125 (001) and 1.25 (010): to 010
        (0.3, 0.3125),  # 0.28125 and 0.3125 are the neighbours
        (2.0**-10, 0.0),  # halfway between 0 and the smallest subnormal: to 0
        (3 * 2.0**-10, 2.0**-8),  # halfway between 1 and 2 steps of 2⁻⁹: to 2
        (100.0, 96.0),  # steps of 8 between 64 and 128: 96 and 104, 100 a tie, 96 even (100)
        (-17.0, -16.0),  # steps of 2 from 16: a tie between 16 (000) and 18 (001)
        (449.0, 448.0),
        (464.0, 448.0),  # would round to 480, beyond the largest value: saturates
        (1e9, 448.0),
        (-np.inf, -448.0),
    ],
)
def test_hand_worked_roundings(x, expected):
    assert round_fp8_e4m3(np.array([x], dtype=np.float32))[0] == np.float32(expected)


def test_nan_stays_nan_and_round_to_dtype_knows_fp8():
    assert np.isnan(round_fp8_e4m3(np.array([np.nan], dtype=np.float32))[0])
    x = np.linspace(-500, 500, 1001, dtype=np.float32)
    assert np.array_equal(round_to_dtype(x, "fp8"), round_fp8_e4m3(x))


def test_rounding_is_to_the_nearest_value():
    rng = np.random.default_rng(7)
    x = (rng.standard_normal(20000) * 10.0 ** rng.uniform(-3, 2.5, 20000)).astype(np.float32)
    x = x[np.abs(x) <= E4M3_MAX]
    grid = np.concatenate([-e4m3_values()[::-1], e4m3_values()])
    nearest = np.abs(x[:, None] - grid[None, :]).min(axis=1)
    assert np.allclose(np.abs(round_fp8_e4m3(x) - x), nearest, rtol=0, atol=1e-12)


def test_block_scales_put_each_block_amax_on_448():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((200, 16)).astype(np.float32)
    x[64:128] *= 1000  # a block of large values must not crush the others
    qz = quantize_blocks(x, 64)
    assert qz.scales.shape == (4,)
    for b in range(4):
        block = x[b * 64 : (b + 1) * 64]
        assert qz.scales[b] == pytest.approx(np.abs(block).max() / 448, rel=1e-6)
        assert np.abs(qz.values[b * 64 : (b + 1) * 64]).max() == 448
    rel = np.abs(qz.dequantized() - x) / np.abs(x).max(axis=1, keepdims=True)
    assert rel.max() < 2**-3  # 3 mantissa bits: half a step relative to each block's range
    assert quantize_blocks(np.zeros((4, 2)), 2).scales.tolist() == [1.0, 1.0]


@pytest.mark.parametrize("causal", [False, True])
def test_error_grows_from_fp32_to_16_bit_to_fp8(causal):
    err = precision_errors(n_q=200, n_k=300, head_dim=64, causal=causal, seed=3)
    assert list(err) == list(PRECISIONS)
    rms = {k: v["relative_rms"] for k, v in err.items()}
    assert rms["fp32"] < 1e-5 < rms["fp16"] < rms["bf16"] < 0.02 < rms["fp8"] < 0.2
    assert err["fp8"]["simulated"] and not err["bf16"]["simulated"]


def test_attention_in_fp32_matches_exact_attention():
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((n, 32)).astype(np.float32) for n in (97, 130, 130))
    from flashscope.simulator.teach.oracle import naive_attention

    exact = naive_attention(q, k, v, 0.2, causal=True)
    assert np.allclose(attention_in(q, k, v, 0.2, "fp32", causal=True), exact, atol=1e-5)
    with pytest.raises(ValueError, match="dtype"):
        attention_in(q, k, v, 0.2, "int8")
