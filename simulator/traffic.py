"""Closed-form element counts of global-memory (HBM) traffic for each algorithm.

Counted the way the seed documents count: elements of Q, K, V and O (and S, P for naive
attention) read from and written to HBM, for the whole problem. The fp32 row statistics (m, l,
LSE) are reported separately as `stats_*`. Bytes are elements × dtype size (stats × 4).

The event-level sums of every tile program must equal these formulas; tests hold them to it.
"""

from __future__ import annotations

from dataclasses import dataclass

from .problem import STATS_BYTES, AttentionProblem, TileConfig, cdiv


@dataclass(frozen=True)
class Traffic:
    """HBM traffic of one algorithm on one problem, in elements."""

    hbm_read: int
    hbm_write: int
    stats_read: int = 0
    stats_write: int = 0

    @property
    def hbm_total(self) -> int:
        return self.hbm_read + self.hbm_write

    def scaled(self, k: int) -> Traffic:
        return Traffic(
            self.hbm_read * k, self.hbm_write * k, self.stats_read * k, self.stats_write * k
        )

    def as_dict(self, dtype_bytes: int) -> dict[str, dict[str, int]]:
        e = {
            "hbm_read": self.hbm_read,
            "hbm_write": self.hbm_write,
            "hbm_total": self.hbm_total,
            "stats_read": self.stats_read,
            "stats_write": self.stats_write,
        }
        b = {
            "hbm_read": self.hbm_read * dtype_bytes,
            "hbm_write": self.hbm_write * dtype_bytes,
            "hbm_total": self.hbm_total * dtype_bytes,
            "stats_read": self.stats_read * STATS_BYTES,
            "stats_write": self.stats_write * STATS_BYTES,
        }
        return {"elements": e, "bytes": b}


def naive_head(p: AttentionProblem) -> Traffic:
    """Naive attention for one (batch, head): three kernels with S and P in HBM.

    S = QKᵀ reads Q and K and writes S; softmax reads S and writes P; P·V reads P and V and
    writes O. With N = seq_q = seq_k this is 4Nd + 4N² (the seed's formula).
    """
    nq, nk, d = p.seq_q, p.seq_k, p.head_dim
    s = nq * nk  # elements of S (and of P)
    read = (nq * d + nk * d) + s + (s + nk * d)
    write = s + s + nq * d
    return Traffic(read, write)


def fa2_head(p: AttentionProblem, t: TileConfig) -> Traffic:
    """FlashAttention-2 forward for one (batch, head), no causal skipping.

    Each of the ⌈Nq/Bm⌉ query blocks reads its Q rows once, streams every K and V row once, and
    writes its O rows and one LSE per row. Partial last tiles move only the rows that exist.
    """
    nq, nk, d = p.seq_q, p.seq_k, p.head_dim
    n_q_blocks = cdiv(nq, t.block_m)
    read = nq * d + n_q_blocks * 2 * nk * d
    write = nq * d
    return Traffic(read, write, stats_read=0, stats_write=nq)


def seed_flash_head(n: int, d: int, block_r: int, block_c: int) -> int:
    """The seed documents' FlashAttention count (total elements), which rounds rows up to blocks."""
    n_outer = cdiv(n, block_r)
    n_inner = cdiv(n, block_c)
    return n_outer * block_r * d + n_outer * n_inner * 2 * block_c * d + n_outer * block_r * d
