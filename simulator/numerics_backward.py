"""FlashAttention-2 backward on real numbers: recompute P from the saved LSE, then dV, dP, dS.

The main kernel runs one CTA per key block j; rows of all query blocks are handled at once per
key block (P, dP and dS of different rows never interact). Precision follows the Triton/CUDA
kernels: fp32 scores, statistics and accumulators; P rounded to the dtype before dV = Pᵀ dO; dS
rounded before dQ += dS K and dK += dSᵀ Q; dQ accumulated in fp32 across key blocks (the
global accumulator), dK and dV in fp32 within the CTA; scale applied once at the end; dQ, dK, dV
written in the dtype.

The recording keeps the fp32 P and dS matrices (Nq × Nk); partial sums that a trace shows
(dQ of query block i after key block j, dK and dV of key block j after query block i) are
rebuilt from them on request, in the kernel's order, so memory stays O(Nq·Nk) instead of one
accumulator per tile.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .numerics_forward import fa2_forward, row_starts, tile_scores
from .precision import round_to_dtype
from .problem import AttentionProblem, TileConfig
from .tiling import TileGrid


@dataclass
class BackwardRecording:
    """Everything the FA-2 backward computed for one head; partials on request."""

    grid: TileGrid
    q: np.ndarray  # (Nq, d) inputs as fp32
    k: np.ndarray  # (Nk, d)
    v: np.ndarray  # (Nk, d)
    do: np.ndarray  # (Nq, d)
    o: np.ndarray  # (Nq, d) forward output in the dtype
    lse: np.ndarray  # (Nq,) −∞ for rows that see nothing
    delta: np.ndarray  # (Nq,) D = rowsum(dO ∘ O)
    p: np.ndarray | None  # (Nq, Nk) fp32 probabilities (None without recording)
    ds: np.ndarray | None  # (Nq, Nk) fp32 dS
    dq: np.ndarray  # (Nq, d) in the dtype
    dk: np.ndarray  # (Nk, d)
    dv: np.ndarray  # (Nk, d)

    def _rows(self, i: int) -> slice:
        bm = self.grid.tiles.block_m
        return slice(i * bm, min((i + 1) * bm, self.grid.problem.seq_q))

    def _cols(self, j: int) -> slice:
        bn = self.grid.tiles.block_n
        return slice(j * bn, min((j + 1) * bn, self.grid.problem.seq_k))

    def _need(self) -> tuple[np.ndarray, np.ndarray]:
        if self.p is None or self.ds is None:
            raise ValueError("run fa2_backward with record=True to get partial sums")
        return self.p, self.ds

    def dq_partial(self, i: int, j: int) -> np.ndarray:
        """scale · Σ_{j' ≤ j} dS[i, j'] K[j'] for query block i, summed in fp32 in key order."""
        _, ds = self._need()
        rows, dtype = self._rows(i), self.grid.problem.dtype
        acc = np.zeros((rows.stop - rows.start, self.q.shape[1]), np.float32)
        for jj in range(min(j + 1, int(self.grid.visible[i]))):
            cols = self._cols(jj)
            acc += round_to_dtype(ds[rows, cols], dtype) @ self.k[cols]  # (r, d)
        return acc * np.float32(self.grid.problem.scale)

    def dkdv_partial(self, j: int, i: int) -> tuple[np.ndarray, np.ndarray]:
        """(dK, dV) of key block j after query blocks 0 … i, in fp32 (dK scaled)."""
        p, ds = self._need()
        cols, dtype = self._cols(j), self.grid.problem.dtype
        rows = slice(0, self._rows(i).stop)
        dv = round_to_dtype(p[rows, cols], dtype).T @ self.do[rows]  # (c, d)
        dk = round_to_dtype(ds[rows, cols], dtype).T @ self.q[rows]  # (c, d)
        return dk * np.float32(self.grid.problem.scale), dv


def fa2_backward(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    do: np.ndarray,
    problem: AttentionProblem,
    tiles: TileConfig,
    *,
    record: bool = True,
) -> BackwardRecording:
    """The FA-2 backward of one head: q, do (Nq, d); k, v (Nk, d), already in the dtype.

    Runs the FA-2 forward first for O and LSE (what the forward would have saved).
    """
    q, k, v, do = (np.asarray(x, dtype=np.float32) for x in (q, k, v, do))
    grid = TileGrid(problem, tiles)
    dtype, bn = problem.dtype, tiles.block_n
    nq, nk = q.shape[0], k.shape[0]
    fwd = fa2_forward(q, k, v, problem, tiles, record=False)
    delta = (do * fwd.o).sum(axis=1, dtype=np.float32)  # (Nq,) the preprocess kernel
    lse_sub = np.where(np.isneginf(fwd.lse), np.float32(0), fwd.lse)  # those rows are all −∞
    dq_acc = np.zeros_like(q)  # the fp32 global accumulator
    dk = np.zeros_like(k)
    dv = np.zeros_like(v)
    p_all = np.zeros((nq, nk), np.float32) if record else None
    ds_all = np.zeros((nq, nk), np.float32) if record else None
    starts = row_starts(grid)
    for j in range(grid.n_kv):
        lo = int(starts[j])
        if lo >= nq:
            continue
        cols = slice(j * bn, min((j + 1) * bn, nk))
        s = tile_scores(grid, q, k, j, lo)  # (rows, c)
        p = np.exp(s - lse_sub[lo:, None])  # masked pairs: e^(−∞) = 0
        dv[cols] = round_to_dtype(p, dtype).T @ do[lo:]
        dp = do[lo:] @ v[cols].T  # (rows, c)
        ds = p * (dp - delta[lo:, None])
        ds_lo = round_to_dtype(ds, dtype)
        dk[cols] = ds_lo.T @ q[lo:]
        dq_acc[lo:] += ds_lo @ k[cols]
        if record:
            p_all[lo:, cols] = p  # type: ignore[index]
            ds_all[lo:, cols] = ds  # type: ignore[index]
    scale = np.float32(problem.scale)
    return BackwardRecording(
        grid=grid,
        q=q,
        k=k,
        v=v,
        do=do,
        o=fwd.o,
        lse=fwd.lse,
        delta=delta,
        p=p_all,
        ds=ds_all,
        dq=round_to_dtype(dq_acc * scale, dtype),
        dk=round_to_dtype(dk * scale, dtype),
        dv=round_to_dtype(dv, dtype),
    )
