"""FlashAttention-2 backward on real numbers: recompute P from the saved LSE, then dV, dP, dS.

The main kernel runs one CTA per key block j; rows of all query blocks are handled at once per
key block (P, dP and dS of different rows never interact). Precision follows the Triton/CUDA
kernels: fp32 scores, statistics and accumulators; P rounded to the dtype before dV = Pᵀ dO; dS
rounded before dQ += dS K and dK += dSᵀ Q; dQ accumulated in fp32 across key blocks (the
global accumulator), dK and dV in fp32 within the CTA; scale applied once at the end; dQ, dK, dV
written in the dtype.

The recording keeps the fp32 P and dS of every key block (the rows that block's CTA visits,
at most Nq × Nk in all); partial sums that a trace shows (dQ of query block i after key block
j, dK and dV of key block j after query block i) are rebuilt from them on request, in the
kernel's order, so memory stays O(Nq·Nk) instead of one accumulator per tile.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from flashscope.simulator.core.precision import round_to_dtype
from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.core.tiling import TileGrid
from flashscope.simulator.teach.numerics_forward import fa2_forward, row_starts, tile_scores


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
    dq: np.ndarray  # (Nq, d) in the dtype
    dk: np.ndarray  # (Nk, d)
    dv: np.ndarray  # (Nk, d)
    first_row: np.ndarray  # (n_kv,) first query row the CTA of key block j visits
    p_blocks: list[np.ndarray] | None = None  # [j] (Nq − first_row[j], c_j) fp32 P
    ds_blocks: list[np.ndarray] | None = None  # [j] same shape, fp32 dS

    def _rows(self, i: int) -> slice:
        bm = self.grid.tiles.block_m
        return slice(i * bm, min((i + 1) * bm, self.grid.problem.seq_q))

    def _cols(self, j: int) -> slice:
        bn = self.grid.tiles.block_n
        return slice(j * bn, min((j + 1) * bn, self.grid.problem.seq_k))

    def _need(self) -> tuple[list[np.ndarray], list[np.ndarray]]:
        if self.p_blocks is None or self.ds_blocks is None:
            raise ValueError("run fa2_backward with record=True to get partial sums")
        return self.p_blocks, self.ds_blocks

    def _matrix(self, blocks: list[np.ndarray]) -> np.ndarray:
        out = np.zeros((self.q.shape[0], self.k.shape[0]), np.float32)
        for j, block in enumerate(blocks):
            out[int(self.first_row[j]) :, self._cols(j)] = block
        return out

    @property
    def p(self) -> np.ndarray:
        """P (Nq, Nk) in fp32, zero where no CTA computed it."""
        return self._matrix(self._need()[0])

    @property
    def ds(self) -> np.ndarray:
        """dS (Nq, Nk) in fp32, zero where no CTA computed it."""
        return self._matrix(self._need()[1])

    def tile(self, name: str, i: int, j: int) -> np.ndarray:
        """The fp32 `p` or `ds` tile (i, j): (r, c)."""
        blocks = self._need()[0 if name == "p" else 1]
        rows, lo = self._rows(i), int(self.first_row[j])
        return blocks[j][rows.start - lo : rows.stop - lo]

    def dq_partial(self, i: int, j: int) -> np.ndarray:
        """scale · Σ_{j' ≤ j} dS[i, j'] K[j'] for query block i, summed in fp32 in key order."""
        rows, dtype = self._rows(i), self.grid.problem.dtype
        acc = np.zeros((rows.stop - rows.start, self.q.shape[1]), np.float32)
        for jj in range(min(j + 1, int(self.grid.visible[i]))):
            acc += round_to_dtype(self.tile("ds", i, jj), dtype) @ self.k[self._cols(jj)]
        return acc * np.float32(self.grid.problem.scale)

    def dkdv_partial(self, j: int, i: int) -> tuple[np.ndarray, np.ndarray]:
        """(dK, dV) of key block j after query blocks 0 … i, in fp32 (dK scaled)."""
        p_blocks, ds_blocks = self._need()
        dtype, lo = self.grid.problem.dtype, int(self.first_row[j])
        stop = self._rows(i).stop
        n = max(0, stop - lo)
        dv = round_to_dtype(p_blocks[j][:n], dtype).T @ self.do[lo : lo + n]  # (c, d)
        dk = round_to_dtype(ds_blocks[j][:n], dtype).T @ self.q[lo : lo + n]  # (c, d)
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
    p_blocks: list[np.ndarray] = []
    ds_blocks: list[np.ndarray] = []
    starts = row_starts(grid)
    for j in range(grid.n_kv):
        lo = int(starts[j])
        if lo >= nq:  # never: the last query row sees every key block
            raise AssertionError(f"key block {j} has no query block")
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
            p_blocks.append(p)
            ds_blocks.append(ds)
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
        dq=round_to_dtype(dq_acc * scale, dtype),
        dk=round_to_dtype(dk * scale, dtype),
        dv=round_to_dtype(dv, dtype),
        first_row=starts,
        p_blocks=p_blocks if record else None,
        ds_blocks=ds_blocks if record else None,
    )
