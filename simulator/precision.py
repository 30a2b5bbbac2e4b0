"""Emulated storage precision: round fp32 values to what fp16 or bf16 can hold.

A GPU kernel computes in fp32 but stores (and feeds tensor cores) in the input dtype; the
numerics round exactly where the kernel would: inputs, P before P·V, dS before its matmuls, and
every tensor written back in the dtype.
"""

from __future__ import annotations

import numpy as np


def round_to_dtype(x: np.ndarray, dtype: str) -> np.ndarray:
    """Round values to the nearest `dtype` value (ties to even), returned as float32."""
    x = np.asarray(x, dtype=np.float32)
    if dtype == "fp16":
        return x.astype(np.float16).astype(np.float32)
    if dtype == "bf16":
        bits = np.ascontiguousarray(x).view(np.uint32)
        rounded = bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))
        out = (rounded & np.uint32(0xFFFF0000)).view(np.float32)
        return np.where(np.isnan(x), x, out)  # NaN payloads must not round to ±∞
    if dtype == "fp32":
        return x
    raise ValueError(f"dtype must be fp32, fp16 or bf16, got {dtype!r}")
