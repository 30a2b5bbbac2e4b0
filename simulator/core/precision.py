"""Emulated storage precision: round fp32 values to what fp16, bf16 or fp8 (e4m3) can hold.

A GPU kernel computes in fp32 but stores (and feeds tensor cores) in the input dtype; the
numerics round exactly where the kernel would: inputs, P before P·V, dS before its matmuls, and
every tensor written back in the dtype.

Both roundings work on the fp32 bit pattern (round to nearest, ties to even), which gives the
same values as a cast through numpy's float16 about ten times faster; fp16 also handles its
subnormals (a fixed step of 2⁻²⁴ below 2⁻¹⁴) and overflow to ±∞ beyond 65504.

fp8 is e4m3 (OCP "E4M3FN", Hopper's FP8 tensor-core input): 3 mantissa bits, exponent bias 7,
normals from 2⁻⁶ to 448 = 1.75·2⁸, subnormals in steps of 2⁻⁹, no infinities. Conversion
saturates (PTX's cvt.satfinite): anything beyond ±448, infinities included, becomes ±448.

`round_float64` rounds float64 values straight to a dtype, once: what the distance from an
exact (float64) answer to the nearest storable value needs, where a detour through fp32 rounds
twice and can land on the farther neighbour of a value that fp32 turned into a tie.
"""

from __future__ import annotations

import numpy as np

_F16_MIN_NORMAL = np.float32(2.0**-14)
_F16_STEP_SUBNORMAL = np.float32(2.0**-24)
_F16_MAX = np.float32(65504.0)
E4M3_MAX = 448.0
_E4M3_MIN_NORMAL = np.float32(2.0**-6)
_E4M3_STEP_SUBNORMAL = np.float32(2.0**-9)


def _round_mantissa(x: np.ndarray, drop: int) -> np.ndarray:
    """Round fp32 values to 23 − `drop` mantissa bits, ties to even."""
    bits = np.ascontiguousarray(x).view(np.uint32)
    half = np.uint32((1 << (drop - 1)) - 1)
    rounded = bits + half + ((bits >> np.uint32(drop)) & np.uint32(1))
    return (rounded & np.uint32(~((1 << drop) - 1) & 0xFFFFFFFF)).view(np.float32)


def round_fp8_e4m3(x: np.ndarray) -> np.ndarray:
    """Round values to the nearest e4m3 value (ties to even), saturating at ±448; float32."""
    x = np.asarray(x, dtype=np.float32)
    out = _round_mantissa(x, 20)
    tiny = np.abs(x) < _E4M3_MIN_NORMAL
    if tiny.any():
        out = np.where(tiny, np.round(x / _E4M3_STEP_SUBNORMAL) * _E4M3_STEP_SUBNORMAL, out)
    with np.errstate(invalid="ignore"):
        out = np.where(np.abs(out) > E4M3_MAX, np.copysign(np.float32(E4M3_MAX), x), out)
    return np.where(np.isnan(x), x, out).astype(np.float32)


def round_to_dtype(x: np.ndarray, dtype: str) -> np.ndarray:
    """Round values to the nearest `dtype` value (ties to even), returned as float32."""
    x = np.asarray(x, dtype=np.float32)
    if dtype == "fp32":
        return x
    if dtype == "bf16":
        return np.where(np.isnan(x), x, _round_mantissa(x, 16))  # NaN must not become ±∞
    if dtype == "fp16":
        out = _round_mantissa(x, 13)
        tiny = np.abs(x) < _F16_MIN_NORMAL
        if tiny.any():
            out = np.where(tiny, np.round(x / _F16_STEP_SUBNORMAL) * _F16_STEP_SUBNORMAL, out)
        huge = np.abs(out) > _F16_MAX
        if huge.any():
            out = np.where(huge, np.copysign(np.float32(np.inf), x), out)
        return np.where(np.isnan(x), x, out)
    if dtype == "fp8":
        return round_fp8_e4m3(x)
    raise ValueError(f"dtype must be fp32, fp16, bf16 or fp8, got {dtype!r}")


def _frexp_exp(x: float) -> int:
    """The binary exponent numpy.frexp gives `x` (of a mantissa in [0.5, 1))."""
    return int(np.frexp(x)[1])


_F32 = np.finfo(np.float32)
# significant bits, the frexp exponent of the smallest normal value, and the largest finite
# value of each format
_FORMATS = {
    "fp32": (24, _frexp_exp(float(_F32.tiny)), float(_F32.max)),
    "bf16": (8, _frexp_exp(float(_F32.tiny)), (2.0 - 2.0**-7) * 2.0**127),
    "fp16": (11, _frexp_exp(float(_F16_MIN_NORMAL)), float(_F16_MAX)),
    "fp8": (4, _frexp_exp(float(_E4M3_MIN_NORMAL)), E4M3_MAX),
}


def round_float64(x: np.ndarray, dtype: str) -> np.ndarray:
    """Round float64 values to the nearest `dtype` value in one step (ties to even), returned as
    float64: subnormals in the format's fixed step, beyond its largest value ±∞ (fp8 saturates
    at ±448 as `round_fp8_e4m3` does); NaN and ±∞ stay."""
    if dtype not in _FORMATS:
        raise ValueError(f"dtype must be fp32, fp16, bf16 or fp8, got {dtype!r}")
    bits, min_exp, top = _FORMATS[dtype]
    x = np.asarray(x, dtype=np.float64)
    finite = np.isfinite(x)
    _, exp = np.frexp(np.where(finite, x, 0.0))
    step = np.ldexp(1.0, np.maximum(exp, min_exp) - bits)  # the spacing of values near x
    out = np.rint(np.where(finite, x, 0.0) / step) * step  # exact: step is a power of two
    big = np.copysign(top if dtype == "fp8" else np.inf, x)
    out = np.where(np.abs(out) > top, big, out)
    if dtype == "fp8":
        return np.where(np.isnan(x), x, np.where(finite, out, big))
    return np.where(finite, out, x)
