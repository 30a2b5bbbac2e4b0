"""The tile grid of one (batch, head): block sizes, causal visibility and the sums counts need.

Query block i holds r_i = min(BM, Nq − i·BM) rows and key block j holds c_j = min(BN, Nk − j·BN)
columns. Under a bottom-right causal mask (key k visible to query q iff k ≤ q + off, with
off = Nk − Nq) the visible key blocks of a query block form a prefix 0 … n_i − 1, so one integer
per query block describes the whole grid and every sum over visible tiles is a sum over query
blocks: closed forms stay O(Nq / BM) even at N = 131072.

    kinds[i, j]:  0 skipped (every pair masked), 1 partial (some pairs masked), 2 full

    Nq = Nk = 8, BM = BN = 2, causal (off = 0):     Nq = 4, Nk = 8, BM = BN = 2 (off = 4):
        j:  0 1 2 3                                      j:  0 1 2 3
    i = 0   1 0 0 0                                  i = 0   2 2 1 0
    i = 1   2 1 0 0                                  i = 1   2 2 2 1
    i = 2   2 2 1 0
    i = 3   2 2 2 1
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import numpy.typing as npt

from flashscope.simulator.core.problem import AttentionProblem, TileConfig, cdiv, decode_splits

SKIPPED, PARTIAL, FULL = 0, 1, 2


@dataclass(frozen=True)
class TileGrid:
    """Which tiles of the Nq × Nk score matrix a kernel computes, and their sizes."""

    problem: AttentionProblem
    tiles: TileConfig

    @property
    def n_q(self) -> int:
        return cdiv(self.problem.seq_q, self.tiles.block_m)

    @property
    def n_kv(self) -> int:
        return cdiv(self.problem.seq_k, self.tiles.block_n)

    @cached_property
    def rows(self) -> npt.NDArray[np.int64]:
        """r_i, rows of each query block."""
        starts = np.arange(self.n_q, dtype=np.int64) * self.tiles.block_m
        return np.minimum(self.tiles.block_m, self.problem.seq_q - starts)  # (n_q,)

    @cached_property
    def cols(self) -> npt.NDArray[np.int64]:
        """c_j, keys of each key block."""
        starts = np.arange(self.n_kv, dtype=np.int64) * self.tiles.block_n
        return np.minimum(self.tiles.block_n, self.problem.seq_k - starts)  # (n_kv,)

    @cached_property
    def visible(self) -> npt.NDArray[np.int64]:
        """n_i: how many key blocks (a prefix) query block i sees."""
        if not self.problem.causal:
            return np.full(self.n_q, self.n_kv, dtype=np.int64)
        bm, bn = self.tiles.block_m, self.tiles.block_n
        last_row = np.arange(self.n_q, dtype=np.int64) * bm + self.rows - 1  # (n_q,)
        last_key = last_row + self.problem.causal_offset  # highest visible key of the block
        visible: npt.NDArray[np.int64] = np.clip(np.floor_divide(last_key, bn) + 1, 0, self.n_kv)
        return visible

    @cached_property
    def visible_cols(self) -> npt.NDArray[np.int64]:
        """Σ c_j over the visible key blocks of each query block."""
        return np.minimum(self.visible * self.tiles.block_n, self.problem.seq_k)  # (n_q,)

    def q_blocks_of(self, j: int) -> np.ndarray:
        """The query blocks that see key block j, in order (a suffix under causal)."""
        return np.flatnonzero(self.visible > j)

    @property
    def kv_blocks_used(self) -> int:
        """Key blocks that at least one query block sees (all of them: the last query row sees
        every key, whatever the offset)."""
        return int(self.visible.max(initial=0))

    # Sums over visible tiles: the building blocks of every closed form.
    @property
    def n_tiles(self) -> int:
        return int(self.visible.sum())

    @property
    def sum_rows(self) -> int:
        """Σ r over visible tiles."""
        return int((self.rows * self.visible).sum())

    @property
    def sum_cols(self) -> int:
        """Σ c over visible tiles."""
        return int(self.visible_cols.sum())

    @property
    def sum_area(self) -> int:
        """Σ r·c over visible tiles (score elements a kernel computes)."""
        return int((self.rows * self.visible_cols).sum())

    def kinds(self) -> np.ndarray:
        """(n_q, n_kv) matrix: 0 skipped, 1 partial, 2 full."""
        out = np.full((self.n_q, self.n_kv), FULL, dtype=np.int8)
        if not self.problem.causal:
            return out
        bm, bn, off = self.tiles.block_m, self.tiles.block_n, self.problem.causal_offset
        first_row = np.arange(self.n_q, dtype=np.int64)[:, None] * bm  # (n_q, 1)
        last_key = np.arange(self.n_kv, dtype=np.int64)[None, :] * bn + self.cols - 1  # (1, n_kv)
        out[last_key > first_row + off] = PARTIAL
        out[np.arange(self.n_kv)[None, :] >= self.visible[:, None]] = SKIPPED
        return out

    def key_mask(self, j: int, row_lo: int = 0, row_hi: int | None = None) -> np.ndarray | None:
        """Which (row, key) pairs of key block j are visible, for query rows [row_lo, row_hi).

        None when every pair is visible (no mask to apply).
        """
        p = self.problem
        row_hi = p.seq_q if row_hi is None else row_hi
        c0 = j * self.tiles.block_n
        c1 = min(c0 + self.tiles.block_n, p.seq_k)
        if not p.causal or c1 - 1 <= row_lo + p.causal_offset:
            return None
        q_idx = np.arange(row_lo, row_hi)[:, None]  # (rows, 1)
        k_idx = np.arange(c0, c1)[None, :]  # (1, cols)
        return k_idx <= q_idx + p.causal_offset  # (rows, cols)


@dataclass(frozen=True)
class SplitPlan:
    """How Flash-Decoding cuts the key blocks of one (batch, kv_head) into splits.

    Split s covers key blocks [s·chunk, min((s+1)·chunk, n_kv)); empty splits are dropped, so
    `used` ≤ `requested`. `rows` = group · seq_q query rows share each CTA (one K/V read).
    """

    requested: int
    chunk: int  # key blocks per split
    used: int
    n_kv: int
    rows: int

    def blocks(self, s: int) -> range:
        return range(s * self.chunk, min((s + 1) * self.chunk, self.n_kv))


def split_plan(
    problem: AttentionProblem, tiles: TileConfig, splits: int | None = None, sms: int = 132
) -> SplitPlan:
    """The split rule of Flash-Decoding; `splits` overrides the occupancy heuristic."""
    if problem.causal:
        raise ValueError("decode has no causal mask: a decoding query sees the whole KV cache")
    for name, value in (("splits", splits), ("sms", sms)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValueError(f"{name} must be an integer, got {value!r}")
        if value is not None and value < 1:
            raise ValueError(f"{name} must be ≥ 1, got {value}")
    n_kv = cdiv(problem.seq_k, tiles.block_n)
    if splits is None:
        splits = decode_splits(problem.batch * problem.kv_heads, n_kv, sms)
    chunk = cdiv(n_kv, splits)
    return SplitPlan(splits, chunk, cdiv(n_kv, chunk), n_kv, problem.group * problem.seq_q)
