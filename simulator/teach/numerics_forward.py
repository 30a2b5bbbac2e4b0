"""Forward tile programs on real numbers: FlashAttention-2, FlashAttention-1 and naive attention.

Rows of different query blocks never interact in a forward pass, so each recurrence runs once
per key block j for every row that a visible tile (i, j) covers, all query blocks at once; the
snapshot after key block j holds, row by row, exactly the state the owning CTA has after its
tile (i, j). Rows of query blocks that skip tile j keep their state unchanged, as the kernel does.

Precision follows the kernels: inputs arrive rounded to the dtype, scores and statistics are
fp32, P is rounded to the dtype before P·V (fp32 accumulation), and whatever is written to HBM
is rounded to the dtype (FA-1 writes its normalized O after every tile, so it rounds each time).

Rows that see no key at all (causal, seq_q > seq_k) end with O = 0 and LSE = −∞.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from flashscope.simulator.core.precision import round_to_dtype
from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.core.tiling import TileGrid
from flashscope.simulator.teach.snapshots import block_mean, shown_columns

NEG_INF = np.float32(-np.inf)


@dataclass
class ForwardRecording:
    """State of every query row after each key block: arrays indexed [j, row].

    `acc` is the unnormalized accumulator Õ for FA-2 and the normalized O as stored in HBM for
    FA-1 (`normalized` says which), averaged over groups of `col_stride` head-dim columns.
    Without recording, the per-block arrays are empty and only `o` and `lse` are filled.

    Given the float64 reference output, the recording also holds each row's error: `err[j]`
    is max over the head dim of |O_so_far − O_exact| after key block j, where O_so_far is Õ / ℓ
    (FA-2; 0 while ℓ = 0) or the stored O (FA-1), at full resolution; `err_init` the error of
    O_so_far = 0, `err_final` that of the output as written (rounded to the dtype), `ref_max`
    max |O_exact| per row. `q`, `k`, `v` (the inputs as fp32) let a state rebuild its tile
    (`tile_numbers`).
    """

    m: np.ndarray  # (n_kv, Nq)
    l: np.ndarray  # (n_kv, Nq)
    alpha: np.ndarray  # (n_kv, Nq)
    acc: np.ndarray  # (n_kv, Nq, d_shown)
    o: np.ndarray  # (Nq, d) final output, rounded to the dtype
    lse: np.ndarray  # (Nq,)
    col_stride: int
    normalized: bool = False
    q: np.ndarray | None = None  # (Nq, d) the inputs as the numerics used them
    k: np.ndarray | None = None  # (Nk, d)
    v: np.ndarray | None = None  # (Nk, d)
    err: np.ndarray | None = None  # (n_kv, Nq)
    err_init: np.ndarray | None = None  # (Nq,)
    err_final: np.ndarray | None = None  # (Nq,)
    ref_max: np.ndarray | None = None  # (Nq,)


@dataclass
class NaiveRecording:
    """Naive attention's row statistics and output (S and P are whole matrices in HBM)."""

    m: np.ndarray  # (Nq,) row max of S
    l: np.ndarray  # (Nq,) row sum of e^(S − m)
    o: np.ndarray  # (Nq, d) rounded to the dtype
    o_shown: np.ndarray  # (Nq, d_shown)
    lse: np.ndarray  # (Nq,)
    col_stride: int


def _as32(*xs: np.ndarray) -> list[np.ndarray]:
    return [np.asarray(x, dtype=np.float32) for x in xs]


def row_starts(grid: TileGrid) -> np.ndarray:
    """First query row of the first query block that sees key block j (Nq if none does)."""
    first_block = np.searchsorted(grid.visible, np.arange(grid.n_kv), side="right")  # (n_kv,)
    return np.minimum(first_block * grid.tiles.block_m, grid.problem.seq_q)


def tile_scores(grid: TileGrid, q: np.ndarray, k: np.ndarray, j: int, lo: int) -> np.ndarray:
    """S = Q[lo:] Kⱼᵀ · scale in fp32, causal-masked pairs at −∞."""
    bn = grid.tiles.block_n
    s = (q[lo:] @ k[j * bn : (j + 1) * bn].T) * np.float32(grid.problem.scale)  # (rows, c)
    mask = grid.key_mask(j, lo)
    return s if mask is None else np.where(mask, s, NEG_INF)


def finite_or_zero(m: np.ndarray) -> np.ndarray:
    """The max to subtract: a row that has seen only −∞ subtracts 0 (so e^(−∞ − 0) = 0)."""
    return np.where(np.isneginf(m), np.float32(0), m)


def _finish(
    acc: np.ndarray, m: np.ndarray, l: np.ndarray, normalized: bool, dtype: str
) -> tuple[np.ndarray, np.ndarray]:
    with np.errstate(divide="ignore", invalid="ignore"):
        o = acc if normalized else np.where(l[:, None] > 0, acc / l[:, None], np.float32(0))
        lse = np.where(l > 0, finite_or_zero(m) + np.log(l), NEG_INF).astype(np.float32)
    return round_to_dtype(o, dtype), lse


def flash_forward(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    problem: AttentionProblem,
    tiles: TileConfig,
    *,
    algo: str = "fa2",
    o_col_limit: int = 64,
    col_stride: int | None = None,
    record: bool = True,
    reference: np.ndarray | None = None,
) -> ForwardRecording:
    """FA-2 (`algo="fa2"`) or FA-1 (`algo="fa1"`) forward of one head, recording each block.

    q: (Nq, d), k and v: (Nk, d), already rounded to problem.dtype; `reference`: the exact
    output (Nq, d) in float64, whose distance to the running output is recorded per block.
    """
    if algo not in ("fa1", "fa2"):
        raise ValueError(f"algo must be fa1 or fa2, got {algo!r}")
    q, k, v = _as32(q, k, v)
    grid = TileGrid(problem, tiles)
    nq, d = q.shape
    n_kv, bn, dtype = grid.n_kv, tiles.block_n, problem.dtype
    stride = col_stride or shown_columns(d, o_col_limit)
    d_shown = -(-d // stride)
    m = np.full(nq, NEG_INF)
    l = np.zeros(nq, np.float32)
    alpha = np.ones(nq, np.float32)
    acc = np.zeros((nq, d), np.float32)  # FA-2: Õ in registers; FA-1: O in HBM
    rec_n = n_kv if record else 0
    ms, ls, alphas = (np.empty((rec_n, nq), np.float32) for _ in range(3))
    accs = np.empty((rec_n, nq, d_shown), np.float32)
    ref = None if reference is None or not record else np.asarray(reference, np.float64)
    errs = np.empty((rec_n if ref is not None else 0, nq))
    starts = row_starts(grid)
    for j in range(n_kv):
        lo = int(starts[j])
        if lo < nq:
            vj = v[j * bn : (j + 1) * bn]  # (c, d)
            s = tile_scores(grid, q, k, j, lo)  # (rows, c)
            if algo == "fa2":
                m_new = np.maximum(m[lo:], s.max(axis=1))
                m_sub = finite_or_zero(m_new)
                a = np.exp(m[lo:] - m_sub)  # e^(−∞) = 0 on a row's first visible block
                p = np.exp(s - m_sub[:, None])  # (rows, c)
                l[lo:] = a * l[lo:] + p.sum(axis=1)
                acc[lo:] = a[:, None] * acc[lo:] + round_to_dtype(p, dtype) @ vj
            else:
                m_blk = s.max(axis=1)
                p = np.exp(s - finite_or_zero(m_blk)[:, None])  # P̃ of this block
                m_new = np.maximum(m[lo:], m_blk)
                m_sub = finite_or_zero(m_new)
                a = np.exp(m[lo:] - m_sub)
                b = np.exp(m_blk - m_sub)
                l_new = a * l[lo:] + b * p.sum(axis=1)
                num = (l[lo:] * a)[:, None] * acc[lo:] + b[:, None] * (
                    round_to_dtype(p, dtype) @ vj
                )
                with np.errstate(divide="ignore", invalid="ignore"):
                    o_new = np.where(l_new[:, None] > 0, num / l_new[:, None], np.float32(0))
                acc[lo:] = round_to_dtype(o_new, dtype)
                l[lo:] = l_new
            alpha[:lo] = 1.0
            alpha[lo:] = a
            m[lo:] = m_new
        if record:
            ms[j], ls[j], alphas[j] = m, l, alpha
            accs[j] = block_mean(acc, stride)
            if ref is not None:
                errs[j] = row_error(acc if algo == "fa1" else normalize(acc, l), ref)
    o, lse = _finish(acc, m, l, algo == "fa1", dtype)
    rec = ForwardRecording(ms, ls, alphas, accs, o, lse, stride, normalized=algo == "fa1")
    if ref is not None:
        rec.q, rec.k, rec.v, rec.err = q, k, v, errs
        rec.err_init = np.abs(ref).max(axis=1, initial=0.0)
        rec.err_final = row_error(o, ref)
        rec.ref_max = rec.err_init
    return rec


def normalize(acc: np.ndarray, l: np.ndarray) -> np.ndarray:
    """Õ / ℓ row by row, 0 on rows whose ℓ is still 0 (nothing seen yet)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(l[:, None] > 0, acc / np.where(l > 0, l, 1)[:, None], np.float32(0))


def row_error(o: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """max over the head dim of |o − ref|, per row, in float64."""
    gap: np.ndarray = np.abs(np.asarray(o, np.float64) - ref).max(axis=1, initial=0.0)
    return gap


@dataclass(frozen=True)
class TileNumbers:
    """One tile (i, j) of a flash forward as the CTA computes it, for rows [r0, r1).

    s: S = Qᵢ Kⱼᵀ · scale (fp32, masked pairs −∞); p: the exponentials the algorithm sums
    (FA-2: e^(S − m′); FA-1: P̃ = e^(S − m̃) with m̃ the tile's own row max); alpha: e^(m − m′);
    l_rescaled: α·ℓ, the old sum rescaled; p_sum: what the tile adds to ℓ (FA-2: rowsum P;
    FA-1: β·rowsum P̃), so that ℓ′ = l_rescaled + p_sum; m_new: m′; pv (FA-2, given V): P·Vⱼ
    with P rounded to the dtype, what the tile adds to Õ after the rescale α·Õ.
    """

    s: np.ndarray  # (rows, c)
    p: np.ndarray  # (rows, c)
    alpha: np.ndarray  # (rows,)
    l_rescaled: np.ndarray  # (rows,)
    p_sum: np.ndarray  # (rows,)
    m_new: np.ndarray  # (rows,)
    pv: np.ndarray | None = None  # (rows, d)


def tile_numbers(
    grid: TileGrid,
    q: np.ndarray,
    k: np.ndarray,
    j: int,
    r0: int,
    r1: int,
    m_prev: np.ndarray,
    l_prev: np.ndarray,
    *,
    algo: str = "fa2",
    v: np.ndarray | None = None,
) -> TileNumbers:
    """Rebuild tile (rows r0:r1, key block j) from the inputs and the rows' m, ℓ before it,
    with the same fp32 operations as `flash_forward`."""
    bn = grid.tiles.block_n
    s = (q[r0:r1] @ k[j * bn : (j + 1) * bn].T) * np.float32(grid.problem.scale)  # (rows, c)
    mask = grid.key_mask(j, r0, r1)
    if mask is not None:
        s = np.where(mask, s, NEG_INF)
    m_blk = s.max(axis=1)
    m_new = np.maximum(m_prev, m_blk)
    m_sub = finite_or_zero(m_new)
    alpha = np.exp(m_prev - m_sub)
    pv = None
    if algo == "fa2":
        p = np.exp(s - m_sub[:, None])
        p_sum = p.sum(axis=1)
        if v is not None:
            pv = round_to_dtype(p, grid.problem.dtype) @ v[j * bn : (j + 1) * bn]
    else:
        p = np.exp(s - finite_or_zero(m_blk)[:, None])
        p_sum = np.exp(m_blk - m_sub) * p.sum(axis=1)
    return TileNumbers(s, p, alpha, alpha * l_prev, p_sum, m_new, pv)


def fa2_forward(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    problem: AttentionProblem,
    tiles: TileConfig,
    **kw: Any,
) -> ForwardRecording:
    """FlashAttention-2 forward: deferred normalization, one LSE per row at the end."""
    return flash_forward(q, k, v, problem, tiles, algo="fa2", **kw)


def fa1_forward(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    problem: AttentionProblem,
    tiles: TileConfig,
    **kw: Any,
) -> ForwardRecording:
    """FlashAttention-1 forward: O normalized and written back (in the dtype) after every tile."""
    return flash_forward(q, k, v, problem, tiles, algo="fa1", **kw)


def naive_forward(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    problem: AttentionProblem,
    *,
    o_col_limit: int = 64,
    col_stride: int | None = None,
) -> NaiveRecording:
    """The three naive kernels: S = QKᵀ·scale stored in the dtype, softmax → P stored in the
    dtype, O = P·V with fp32 accumulation. A causal mask sets S to −∞ before the softmax."""
    q, k, v = _as32(q, k, v)
    nq, nk, d = q.shape[0], k.shape[0], q.shape[1]
    dtype = problem.dtype
    s = round_to_dtype((q @ k.T) * np.float32(problem.scale), dtype)  # (Nq, Nk) in HBM
    if problem.causal:
        s = np.where(np.arange(nk)[None, :] <= np.arange(nq)[:, None] + nk - nq, s, NEG_INF)
    m = s.max(axis=1)
    e = np.exp(s - finite_or_zero(m)[:, None])  # (Nq, Nk)
    l = e.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = round_to_dtype(np.where(l[:, None] > 0, e / l[:, None], np.float32(0)), dtype)
    o = round_to_dtype(p @ v, dtype)  # (Nq, d)
    _, lse = _finish(o, m, l, True, dtype)
    stride = col_stride or shown_columns(d, o_col_limit)
    return NaiveRecording(m, l, o, block_mean(o, stride), lse, stride)
