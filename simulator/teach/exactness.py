"""How close a traced result is to the float64 oracle, measured against the dtype's own rounding.

An fp16 kernel cannot be closer to the exact answer than the exact answer stored in fp16: the
`rounding_floor` (max |round(ref) − ref|) is that limit, and a sound kernel's error is a small
multiple of it (flash-attention's tests allow twice a low-precision reference's error). The
unit roundoff u (half the distance from 1 to the next value) sets the relative scale.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from flashscope.simulator.core.precision import round_to_dtype

# Half an ulp at 1.0: 2^-(mantissa bits + 1).
UNIT_ROUNDOFF = {"fp32": 2.0**-24, "fp16": 2.0**-11, "bf16": 2.0**-8}


def compare(name: str, got: np.ndarray, ref: np.ndarray, dtype: str) -> dict[str, Any]:
    """Max abs error of `got` against the float64 `ref`, and the floor of storing ref in dtype."""
    ref64 = np.asarray(ref, np.float64)
    err = float(np.abs(np.asarray(got, np.float64) - ref64).max(initial=0.0))
    floor = float(np.abs(round_to_dtype(ref64, dtype).astype(np.float64) - ref64).max(initial=0.0))
    return {
        "name": name,
        "max_abs_err": err,
        "rounding_floor": floor,
        "max_abs_ref": float(np.abs(ref64).max(initial=0.0)),
    }


def report(dtype: str, outputs: list[dict[str, Any]]) -> dict[str, Any]:
    """The `exactness` entry of a trace's metadata."""
    return {"dtype": dtype, "unit_roundoff": UNIT_ROUNDOFF[dtype], "outputs": outputs}
