"""The memory wall: naive attention and FlashAttention-2 as two walks of tile-sized steps.

Both walks cover the same score matrix, cut into the same BM × BN tiles, for one (batch, head),
and count HBM traffic the way simulator/teach/traffic.py does (elements; the seed's convention), so
each walk's totals equal `traffic.naive_head` and `traffic.fa2_head`. One step is one tile-sized
operation, which makes the two comparable step for step:

naive (three kernels; S and P live in HBM between them)
    kernel 1, per query block i:  load Qᵢ;  per key block j: Sᵢⱼ = Qᵢ Kⱼᵀ, written to HBM
                                  (K is read once, charged to the first query block)
    kernel 2, per query block i:  read the row block Sᵢ, write Pᵢ = softmax(Sᵢ)
    kernel 3, per query block i:  per key block j: read Pᵢⱼ (V once, charged to block 0);
                                  then write Oᵢ
flash (FlashAttention-2 forward, one CTA per query block)
    per query block i:  load Qᵢ;  per key block j: load Kⱼ, Vⱼ and compute Sᵢⱼ, Pᵢⱼ and
                        their share of Oᵢ on chip;  then write Oᵢ and LSEᵢ

Besides the counters, each walk gives, per tile, the step at which the tile entered each state
(written to HBM, read back, computed on chip): the view draws the grid at step k by comparing
those steps with k, never by rerunning the algorithm.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.teach import traffic

MATRICES = ("Q", "K", "V", "S", "P", "O")
KINDS = ("load_q", "qk", "softmax", "pv", "store", "tile")
NEVER = -1  # a tile that never enters a state


@dataclass(frozen=True)
class Walk:
    """One algorithm's steps: per-step columns and per-tile state-change steps."""

    name: str
    kind: np.ndarray  # (steps,) index into KINDS
    kernel: np.ndarray  # (steps,) 1, 2, 3 for naive; 1 for flash
    q_block: np.ndarray  # (steps,)
    kv_block: np.ndarray  # (steps,) −1 when the step covers a whole row block
    read: dict[str, np.ndarray]  # matrix → (steps,) elements read from HBM by the step
    write: dict[str, np.ndarray]  # matrix → (steps,) elements written to HBM by the step
    stats_write: np.ndarray  # (steps,) fp32 LSE entries written
    tile_steps: dict[str, np.ndarray]  # state → (q_blocks, kv_blocks) step it begins, or −1

    def __len__(self) -> int:
        return len(self.kind)

    @property
    def hbm_read(self) -> np.ndarray:
        return sum(self.read.values())  # type: ignore[return-value]

    @property
    def hbm_write(self) -> np.ndarray:
        return sum(self.write.values())  # type: ignore[return-value]


def walk_length(p: AttentionProblem, t: TileConfig) -> dict[str, int]:
    """Steps of each walk, without building them (for limits)."""
    nq, nk = t.q_blocks(p), t.kv_blocks(p)
    return {"naive": 2 * nq * nk + 3 * nq, "flash": nq * (nk + 2)}


class _Steps:
    """Append-only builder of a walk's columns."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.i = 0
        self.kind = np.zeros(n, np.int64)
        self.kernel = np.zeros(n, np.int64)
        self.q_block = np.zeros(n, np.int64)
        self.kv_block = np.full(n, -1, np.int64)
        self.read = {m: np.zeros(n, np.int64) for m in MATRICES}
        self.write = {m: np.zeros(n, np.int64) for m in MATRICES}
        self.stats_write = np.zeros(n, np.int64)

    def add(self, kind: str, kernel: int, i: int, j: int = -1, **moved: int) -> int:
        k = self.i
        self.kind[k], self.kernel[k], self.q_block[k], self.kv_block[k] = (
            KINDS.index(kind),
            kernel,
            i,
            j,
        )
        for key, value in moved.items():
            if key == "lse":
                self.stats_write[k] = value
                continue
            direction, matrix = key.split("_")
            (self.read if direction == "r" else self.write)[matrix][k] = value
        self.i += 1
        return k

    def walk(self, name: str, tile_steps: dict[str, np.ndarray]) -> Walk:
        assert self.i == self.n, (self.i, self.n)
        return Walk(
            name,
            self.kind,
            self.kernel,
            self.q_block,
            self.kv_block,
            self.read,
            self.write,
            self.stats_write,
            tile_steps,
        )


def _extents(p: AttentionProblem, t: TileConfig) -> tuple[list[int], list[int]]:
    rows = [min(t.block_m, p.seq_q - i * t.block_m) for i in range(t.q_blocks(p))]
    cols = [min(t.block_n, p.seq_k - j * t.block_n) for j in range(t.kv_blocks(p))]
    return rows, cols


def naive_walk(p: AttentionProblem, t: TileConfig) -> Walk:
    """Naive attention's three kernels, one tile (or one row block for the softmax) per step."""
    d, nk_len = p.head_dim, p.seq_k
    rows, cols = _extents(p, t)
    nq, nk = len(rows), len(cols)
    s = _Steps(walk_length(p, t)["naive"])
    grid = {
        name: np.full((nq, nk), NEVER, np.int64)
        for name in ("s_written", "s_read", "p_written", "p_read")
    }
    for i, r in enumerate(rows):
        s.add("load_q", 1, i, r_Q=r * d)
        for j, c in enumerate(cols):
            k = s.add("qk", 1, i, j, r_K=c * d if i == 0 else 0, w_S=r * c)
            grid["s_written"][i, j] = k
    for i, r in enumerate(rows):
        k = s.add("softmax", 2, i, r_S=r * nk_len, w_P=r * nk_len)
        grid["s_read"][i, :] = k
        grid["p_written"][i, :] = k
    for i, r in enumerate(rows):
        for j, c in enumerate(cols):
            k = s.add("pv", 3, i, j, r_P=r * c, r_V=c * d if i == 0 else 0)
            grid["p_read"][i, j] = k
        s.add("store", 3, i, w_O=r * d)
    return s.walk("naive", grid)


def flash_walk(p: AttentionProblem, t: TileConfig) -> Walk:
    """FlashAttention-2's CTAs one after another: a tile per step, nothing N×N leaves the chip."""
    d = p.head_dim
    rows, cols = _extents(p, t)
    nq, nk = len(rows), len(cols)
    s = _Steps(walk_length(p, t)["flash"])
    on_chip = np.full((nq, nk), NEVER, np.int64)
    for i, r in enumerate(rows):
        s.add("load_q", 1, i, r_Q=r * d)
        for j, c in enumerate(cols):
            on_chip[i, j] = s.add("tile", 1, i, j, r_K=c * d, r_V=c * d)
        s.add("store", 1, i, w_O=r * d, lse=r)
    return s.walk("flash", {"on_chip": on_chip})


def access_table(ns: list[int], head_dim: int, tiles: TileConfig) -> list[dict[str, int | float]]:
    """The access table over N: total HBM elements of both algorithms, their ratio and saving.

    `flash` is the exact count (partial last tiles move only the rows that exist); `flash_seed`
    is the seed documents' formula, which rounds every block up to full size: the two agree
    whenever N is a multiple of the blocks. Per (batch, head), from simulator/teach/traffic.py.
    """
    out = []
    for n in ns:
        p = AttentionProblem(seq_q=n, head_dim=head_dim)
        naive = traffic.naive_head(p).hbm_total
        flash = traffic.fa2_head(p, tiles).hbm_total
        out.append(
            {
                "n": n,
                "naive": naive,
                "flash": flash,
                "flash_seed": traffic.seed_flash_head(n, head_dim, tiles.block_m, tiles.block_n),
                "ratio": naive / flash,
                "saving": 1.0 - flash / naive,
            }
        )
    return out
