"""Rounding float64 values straight to a storage format (`precision.round_float64`)."""

from __future__ import annotations

import numpy as np
import pytest

from flashscope.simulator.core.precision import round_float64, round_to_dtype


def _values(rng: np.random.Generator, n: int = 50_000) -> np.ndarray:
    """Signed values over many binades, subnormals and overflow of fp16 included."""
    return rng.standard_normal(n) * np.exp(rng.uniform(-40.0, 15.0, n))


def test_fp16_and_fp32_match_numpys_direct_casts():
    rng = np.random.default_rng()
    x = _values(rng)
    with np.errstate(over="ignore"):
        assert np.array_equal(round_float64(x, "fp16"), x.astype(np.float16).astype(np.float64))
        assert np.array_equal(round_float64(x, "fp32"), x.astype(np.float32).astype(np.float64))


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp8"])
def test_values_fp32_holds_round_as_the_fp32_bit_path(dtype):
    """On values fp32 holds exactly there is one rounding either way: both paths agree."""
    x = _values(np.random.default_rng()).astype(np.float32)
    got = round_float64(x.astype(np.float64), dtype)
    assert np.array_equal(got, round_to_dtype(x, dtype).astype(np.float64))


def test_one_rounding_where_fp32_makes_a_tie():
    """−0.16162109028 lies just inside half a bf16 step of −0.1611328125, but fp32 rounds it to
    −0.16162109375, exactly halfway, and ties to even then picks −0.162109375."""
    x = np.array([-0.16162109028, 0.16162109028])
    assert round_to_dtype(x, "bf16")[0] == np.float32(-0.162109375)  # the detour's answer
    assert list(round_float64(x, "bf16")) == [-0.1611328125, 0.1611328125]
    # every result is a nearest value: no farther than half the step around it
    rng = np.random.default_rng()
    v = _values(rng)
    v = v[np.abs(v) < 1e30]
    r = round_float64(v, "bf16")
    step = np.ldexp(1.0, np.maximum(np.frexp(v)[1], -125) - 8)
    assert np.all(np.abs(r - v) <= step / 2)


def test_specials_and_saturation():
    x = np.array([np.inf, -np.inf, np.nan, 1e6, -1e6, 0.0])
    fp16 = round_float64(x, "fp16")
    assert fp16[0] == np.inf and fp16[1] == -np.inf and np.isnan(fp16[2])
    assert fp16[3] == np.inf and fp16[4] == -np.inf and fp16[5] == 0.0
    fp8 = round_float64(x, "fp8")
    assert list(fp8[[0, 1, 3, 4]]) == [448.0, -448.0, 448.0, -448.0] and np.isnan(fp8[2])
    assert round_float64(np.array([2.0**-24 * 0.75]), "fp16")[0] == 2.0**-24  # subnormal step
    with pytest.raises(ValueError, match="dtype"):
        round_float64(x, "int8")
