"""How much per-tile state a trace keeps: column downsampling and the memory budget.

Policy: a trace records m, ℓ and α exactly for every row after every key block (forward traces
also each row's error against the exact output), and the output accumulator averaged over
groups of `col_stride` head-dim columns. The stride starts at the smallest power of two that
shows at most `o_col_limit` columns and doubles until the recording fits in `budget_bytes` (one
column per row at the least); beyond that the trace is refused. Tile matrices (S, P, dS) are
averaged the same way over both axes, down to `o_col_limit` per side; the forward rebuilds its
S and P tiles from the inputs when an event is asked for, so they cost no recorded state.
"""

from __future__ import annotations

import numpy as np

FLOAT_BYTES = 4
DEFAULT_BUDGET_BYTES = 64 * 2**20


def shown_columns(d: int, limit: int) -> int:
    """The column stride that brings `d` columns down to at most `limit` shown ones."""
    if limit < 1:
        raise ValueError(f"limit must be ≥ 1, got {limit}")
    stride = 1
    while -(-d // stride) > limit:
        stride *= 2
    return stride


def fit_stride(d: int, limit: int, snapshots: int, fixed_floats: int, budget_bytes: int) -> int:
    """Column stride for `snapshots` rows of d columns, plus `fixed_floats`, within the budget.

    Raises ValueError when even one column per snapshot does not fit.
    """
    stride = shown_columns(d, limit)
    while True:
        shown = -(-d // stride)
        need = (snapshots * shown + fixed_floats) * FLOAT_BYTES
        if need <= budget_bytes:
            return stride
        if shown == 1:
            raise ValueError(
                f"the trace state needs {need / 2**20:.0f} MiB, over the budget of "
                f"{budget_bytes / 2**20:.0f} MiB: use larger blocks or a smaller problem"
            )
        stride *= 2


def block_mean(a: np.ndarray, stride: int, axis: int = -1) -> np.ndarray:
    """Average groups of `stride` entries along `axis`; a short last group averages what it has."""
    if stride == 1:
        return a
    a = np.moveaxis(a, axis, -1)
    n = a.shape[-1]
    whole = n // stride
    # Strided adds: far faster than a mean over a short innermost axis.
    acc = a[..., 0 : whole * stride : stride].astype(np.result_type(a, np.float32), copy=True)
    for k in range(1, stride):
        acc += a[..., k : whole * stride : stride]
    parts = [acc / stride]
    if n % stride:
        parts.append(a[..., whole * stride :].mean(axis=-1, keepdims=True))
    out = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=-1)
    return np.moveaxis(out, -1, axis)


def tile_view(a: np.ndarray, limit: int) -> tuple[np.ndarray, int]:
    """A tile matrix averaged over both axes to at most `limit` per side, and the stride used."""
    stride = shown_columns(max(a.shape), limit)
    return block_mean(block_mean(a, stride, 0), stride, 1), stride


def masked_tile_view(a: np.ndarray, limit: int) -> tuple[np.ndarray, int]:
    """As `tile_view`, for a score tile with masked pairs at −∞: each shown cell averages the
    visible pairs of its group and is −∞ only where the whole group is masked."""
    stride = shown_columns(max(a.shape), limit)
    if stride == 1:
        return a, 1
    seen = np.isfinite(a)
    total = block_mean(block_mean(np.where(seen, a, 0.0), stride, 0), stride, 1)
    count = block_mean(block_mean(seen.astype(np.float32), stride, 0), stride, 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(count > 0, total / count, -np.inf), stride
