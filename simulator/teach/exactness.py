"""How close a traced result is to the float64 oracle, measured against the dtype's own rounding.

An fp16 kernel cannot be closer to the exact answer than the exact answer stored in fp16: the
`rounding_floor` (max |round(ref) − ref|) is that limit, and a sound kernel's error is a small
multiple of it (flash-attention's tests allow twice a low-precision reference's error). The
unit roundoff u (half the distance from 1 to the next value) sets the relative scale.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from flashscope.simulator.core.precision import round_float64

# Half an ulp at 1.0: 2^-(mantissa bits + 1).
UNIT_ROUNDOFF = {"fp32": 2.0**-24, "fp16": 2.0**-11, "bf16": 2.0**-8}


def compare(name: str, got: np.ndarray, ref: np.ndarray, dtype: str) -> dict[str, Any]:
    """Max abs error of `got` against the float64 `ref`, and the floor of storing ref in dtype."""
    ref64 = np.asarray(ref, np.float64)
    err = float(np.abs(np.asarray(got, np.float64) - ref64).max(initial=0.0))
    floor = float(np.abs(round_float64(ref64, dtype) - ref64).max(initial=0.0))
    return {
        "name": name,
        "max_abs_err": err,
        "rounding_floor": floor,
        "max_abs_ref": float(np.abs(ref64).max(initial=0.0)),
    }


def report(dtype: str, outputs: list[dict[str, Any]]) -> dict[str, Any]:
    """The `exactness` entry of a trace's metadata."""
    return {"dtype": dtype, "unit_roundoff": UNIT_ROUNDOFF[dtype], "outputs": outputs}


# How far a kernel's recorded state may sit from the simulator's on the same inputs: fp32 state
# agrees to summation order (1e-4 relative); in fp16 and bf16 both round each probability to the
# dtype before P·V, and a probability at a rounding midpoint may round either way, so the
# accumulator of a row may differ by one ulp per key, bounded by ulp · ℓ · max|v|, and Õ/ℓ by
# ulp · max|v| (the bound tests/kernels/test_instrumented.py holds the instrumented kernel to).
STATE_RTOL = {"fp32": 1e-4, "fp16": 3e-2, "bf16": 3e-2}
FLIP_ULP = {"fp32": 0.0, "fp16": 2.0**-10, "bf16": 2.0**-7}


def state_gap(
    key: str,
    kernel: Any,
    simulated: Any,
    dtype: str,
    v_max: float,
    l_rows: Any = None,
) -> tuple[float, float]:
    """(max |kernel − simulated|, that gap over its tolerance) for one state quantity of a step.

    `key` is m, l, alpha, o (the accumulator Õ) or o_hat (Õ/ℓ); None stands for −∞ (equal when
    both are). A ratio above 1 is beyond the tolerance of the dtype; an infinite one means the
    shapes differ or only one side is −∞.
    """
    x = np.array(np.nan if kernel is None else kernel, dtype=float)
    y = np.array(np.nan if simulated is None else simulated, dtype=float)
    if x.shape != y.shape:
        return math.inf, math.inf
    rtol = STATE_RTOL[dtype]
    atol = np.full(y.shape, rtol)
    if key == "o_hat":
        atol = atol + FLIP_ULP[dtype] * v_max
    elif key == "o":
        rows = np.nan_to_num(np.asarray(l_rows, dtype=float)) if l_rows is not None else 1.0
        extra = FLIP_ULP[dtype] * v_max * np.asarray(rows, dtype=float)
        atol = atol + (extra.reshape(-1, *([1] * (y.ndim - 1))) if np.ndim(extra) else extra)
    both = np.isnan(x) & np.isnan(y)
    gap = np.where(both, 0.0, np.abs(x - y))
    gap = np.where(np.isnan(gap), np.inf, gap)
    bound = atol + rtol * np.nan_to_num(np.abs(y))
    worst = float(gap.max(initial=0.0))
    ratio = float((gap / bound).max(initial=0.0))
    return worst, ratio
