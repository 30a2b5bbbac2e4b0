"""Closed-form counts of every algorithm: global-memory traffic, SRAM traffic, FLOPs, exps.

Counted the way the seed documents count (elements, not bytes): Q, K, V, O (dO, dQ, dK, dV for
the backward; S and P for naive attention) read from and written to HBM. fp32 row statistics
(m, ℓ, LSE, D) are `stats_*`; fp32 intermediates in global memory (the backward's dQ
accumulator, Flash-Decoding's partial outputs) are `acc_*`. Bytes: elements × dtype size, stats
and acc × 4. The full convention is in each tile program's docstring and in the tests.

Counts are per (batch, head) in the `*_head` functions (decode: per (batch, kv_head)) and for the
whole problem in `naive`, `fa1`, `fa2`, `fa2_bwd`, `decode` and `for_algo`. Sums over visible
causal tiles come from `TileGrid` in O(Nq / BM), so N = 131072 costs milliseconds. The event
sums of every tile program equal these formulas; the tests hold them to it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

from flashscope.simulator.core.problem import (
    STATS_BYTES,
    AttentionProblem,
    TileConfig,
    _check_int,
    cdiv,
)
from flashscope.simulator.core.tiling import TileGrid, split_plan


@dataclass(frozen=True)
class Traffic:
    """Counts of one algorithm on one problem (elements, FLOPs, exponentials)."""

    hbm_read: int
    hbm_write: int
    stats_read: int = 0
    stats_write: int = 0
    acc_read: int = 0
    acc_write: int = 0
    sram_read: int = 0
    sram_write: int = 0
    flops: int = 0
    exps: int = 0

    @property
    def hbm_total(self) -> int:
        return self.hbm_read + self.hbm_write

    def scaled(self, k: int) -> Traffic:
        return Traffic(**{f.name: getattr(self, f.name) * k for f in fields(self)})

    def as_dict(self, dtype_bytes: int) -> dict[str, Any]:
        """{"elements": …, "bytes": …, "flops", "exps"}; bytes of stats and acc are × 4."""
        e = {
            "hbm_read": self.hbm_read,
            "hbm_write": self.hbm_write,
            "hbm_total": self.hbm_total,
            "stats_read": self.stats_read,
            "stats_write": self.stats_write,
            "acc_read": self.acc_read,
            "acc_write": self.acc_write,
            "sram_read": self.sram_read,
            "sram_write": self.sram_write,
        }
        size = {k: STATS_BYTES if k.startswith(("stats", "acc")) else dtype_bytes for k in e}
        b = {k: v * size[k] for k, v in e.items()}
        b["global_total"] = (
            b["hbm_total"] + b["stats_read"] + b["stats_write"] + b["acc_read"] + b["acc_write"]
        )
        return {"elements": e, "bytes": b, "flops": self.flops, "exps": self.exps}


# --- one (batch, head) ------------------------------------------------------------------------


def naive_head(p: AttentionProblem, t: TileConfig | None = None) -> Traffic:
    """Naive attention: three kernels with S and P in HBM (the causal mask changes nothing).

    S = QKᵀ reads Q and K and writes S; softmax reads S and writes P; P·V reads P and V and
    writes O. With N = seq_q = seq_k this is 4Nd + 4N² (the seed's formula). Only the SRAM
    counts depend on the tiles (`t`, default 64 × 64: K and V are re-read per row block).
    """
    t = t or TileConfig()
    nq, nk, d = p.seq_q, p.seq_k, p.head_dim
    n_q = cdiv(nq, t.block_m)
    s = nq * nk  # elements of S (and of P)
    return Traffic(
        hbm_read=(nq * d + nk * d) + s + (s + nk * d),
        hbm_write=s + s + nq * d,
        sram_write=nk * d + nq * d + s + nk * d,
        sram_read=(nq * d + n_q * nk * d) + (s + n_q * nk * d),
        flops=4 * nq * nk * d,
        exps=s,
    )


def fa2_head(p: AttentionProblem, t: TileConfig) -> Traffic:
    """FlashAttention-2 forward: each query block reads Qᵢ once and Kⱼ, Vⱼ of each visible tile,
    then writes Oᵢ and one LSE per row. Ragged blocks move only the rows that exist."""
    g, d = TileGrid(p, t), p.head_dim
    return Traffic(
        hbm_read=p.seq_q * d + 2 * d * g.sum_cols,
        hbm_write=p.seq_q * d,
        stats_write=p.seq_q,
        sram_write=p.seq_q * d + 2 * d * g.sum_cols,
        sram_read=d * (g.sum_rows + 2 * g.sum_cols),
        flops=4 * d * g.sum_area,
        exps=g.sum_area + g.sum_rows,
    )


def fa1_head(p: AttentionProblem, t: TileConfig) -> Traffic:
    """FlashAttention-1 forward: O, ℓ, m initialized in HBM; every visible tile reads Qᵢ, Oᵢ,
    ℓᵢ, mᵢ and writes Oᵢ, ℓᵢ, mᵢ back; each used key block reads Kⱼ, Vⱼ once."""
    g, d, nq = TileGrid(p, t), p.head_dim, p.seq_q
    kv = 2 * d * min(g.kv_blocks_used * t.block_n, p.seq_k)
    return Traffic(
        hbm_read=kv + 2 * d * g.sum_rows,
        hbm_write=nq * d + d * g.sum_rows,
        stats_read=2 * g.sum_rows,
        stats_write=2 * nq + 2 * g.sum_rows,
        sram_write=kv + 2 * d * g.sum_rows,
        sram_read=d * (g.sum_rows + 2 * g.sum_cols),
        flops=4 * d * g.sum_area,
        exps=g.sum_area + g.sum_rows,
    )


def fa2_bwd_head(p: AttentionProblem, t: TileConfig) -> Traffic:
    """FlashAttention-2 backward: preprocess (O, dO → D), the main kernel per key block, and the
    dQ conversion. Five r × c × d matmuls per visible tile; nothing quadratic in memory."""
    g, d, nq, nk = TileGrid(p, t), p.head_dim, p.seq_q, p.seq_k
    return Traffic(
        hbm_read=2 * nq * d + 2 * nk * d + 2 * d * g.sum_rows,
        hbm_write=2 * nk * d + nq * d,
        stats_read=2 * g.sum_rows,
        stats_write=nq,
        acc_read=d * g.sum_rows + nq * d,
        acc_write=d * g.sum_rows,
        sram_write=2 * nq * d + 2 * nk * d + 2 * d * g.sum_rows,
        sram_read=d * (4 * g.sum_rows + 3 * g.sum_cols),
        flops=10 * d * g.sum_area,
        exps=g.sum_area,
    )


def decode_head(
    p: AttentionProblem, t: TileConfig, splits: int | None = None, sms: int = 132
) -> Traffic:
    """Flash-Decoding for one (batch, kv_head): S' split CTAs each read the R packed query rows
    and their chunk of K and V and write an fp32 partial O and LSE; the reduce reads them all
    back and writes O."""
    plan = split_plan(p, t, splits, sms)
    d, nk, r, s = p.head_dim, p.seq_k, plan.rows, plan.used
    return Traffic(
        hbm_read=s * r * d + 2 * nk * d,
        hbm_write=r * d,
        stats_read=s * r,
        stats_write=s * r,
        acc_read=s * r * d,
        acc_write=s * r * d,
        sram_write=s * r * d + 2 * nk * d,
        sram_read=plan.n_kv * r * d + 2 * nk * d,
        flops=4 * r * nk * d,
        exps=r * nk + plan.n_kv * r,
    )


# --- the whole problem ------------------------------------------------------------------------


def _heads(p: AttentionProblem) -> int:
    return p.batch * p.heads


def naive(p: AttentionProblem, t: TileConfig | None = None) -> Traffic:
    return naive_head(p, t).scaled(_heads(p))


def fa1(p: AttentionProblem, t: TileConfig) -> Traffic:
    return fa1_head(p, t).scaled(_heads(p))


def fa2(p: AttentionProblem, t: TileConfig) -> Traffic:
    return fa2_head(p, t).scaled(_heads(p))


def fa2_bwd(p: AttentionProblem, t: TileConfig) -> Traffic:
    return fa2_bwd_head(p, t).scaled(_heads(p))


def decode(
    p: AttentionProblem, t: TileConfig, splits: int | None = None, sms: int = 132
) -> Traffic:
    """Whole problem: per (batch, kv_head) counts × batch · kv_heads (K/V read once per kv head)."""
    return decode_head(p, t, splits, sms).scaled(p.batch * p.kv_heads)


_HEAD = {"naive": naive_head, "fa1": fa1_head, "fa2": fa2_head, "fa2-bwd": fa2_bwd_head}


def head_for_algo(algo: str, p: AttentionProblem, t: TileConfig, **kw: int | None) -> Traffic:
    """Counts of one trace: one (batch, head), or one (batch, kv_head) for decode."""
    if algo == "decode":
        return decode_head(p, t, **kw)  # type: ignore[arg-type]
    if algo not in _HEAD:
        raise ValueError(f"algo must be one of naive, fa1, fa2, fa2-bwd, decode, got {algo!r}")
    return _HEAD[algo](p, t)


def for_algo(algo: str, p: AttentionProblem, t: TileConfig, **kw: int | None) -> Traffic:
    """Counts of the whole problem (every batch and head) for `algo`."""
    if algo == "decode":
        return decode(p, t, **kw)  # type: ignore[arg-type]
    return head_for_algo(algo, p, t).scaled(_heads(p))


def flashscope(
    algo: str,
    p: AttentionProblem,
    t: TileConfig,
    route: str = "separate",
    dq_tiles: TileConfig | None = None,
) -> Traffic:
    """Counts of what flashscope's own kernels do on the whole problem (timing/kernelplan.py).

    fa2: as the convention. fa2-bwd: preprocess (O, dO → D); "separate": a dQ kernel per query
    block (Qᵢ, dOᵢ, LSEᵢ, Dᵢ once, Kⱼ, Vⱼ per visible tile, dQᵢ written; 3 products per tile)
    and a dK/dV kernel per (key block, kv head) (Kⱼ, Vⱼ once, then Qᵢ, dOᵢ, LSEᵢ, Dᵢ per visible
    tile of each query head of the group; 4 products); "atomic": the dK/dV kernel with a 5th
    product reduce-adding dS K into an fp32 buffer (acc_write per tile; the rows key block 0
    meets are fetched once, acc_read), plus PyTorch's zero fill, scale and cast of that buffer.
    """
    if algo == "fa2":
        return fa2(p, t)
    if algo != "fa2-bwd":
        raise ValueError(f"algo must be fa2 or fa2-bwd for flashscope's kernels, got {algo!r}")
    g = TileGrid(p, t)
    d, nq, nk, bh = p.head_dim, p.seq_q, p.seq_k, _heads(p)
    bhk = p.batch * p.kv_heads
    first_rows = int(g.rows[g.visible > 0].sum())  # rows that see key block 0
    main = 2 * d * g.sum_rows * bh
    counts = {
        "hbm_read": 2 * nq * d * bh + 2 * nk * d * bhk + main,
        "hbm_write": 2 * nk * d * bhk,
        "stats_read": 2 * g.sum_rows * bh,
        "stats_write": nq * bh,
        "flops": 8 * d * g.sum_area * bh,
        "exps": g.sum_area * bh,
    }
    if route == "separate":
        q = TileGrid(p, dq_tiles or t)
        counts["hbm_read"] += (2 * nq * d + 2 * d * q.sum_cols) * bh
        counts["hbm_write"] += nq * d * bh
        counts["stats_read"] += 2 * nq * bh
        counts["flops"] += 6 * d * q.sum_area * bh
        counts["exps"] += q.sum_area * bh
        return Traffic(**counts)
    if route != "atomic":
        raise ValueError(f"route must be separate or atomic, got {route!r}")
    counts["flops"] += 2 * d * g.sum_area * bh
    counts["hbm_write"] += nq * d * bh  # the cast
    counts["acc_write"] = (d * g.sum_rows + 2 * nq * d) * bh  # reduce-adds, fill, scale
    counts["acc_read"] = (d * first_rows + 2 * nq * d) * bh  # first fetch, scale, cast
    return Traffic(**counts)


def theta_bound(p: AttentionProblem, sram_bytes: int) -> int:
    """The FlashAttention paper's Θ(N²d²/M) HBM-access bound as a number of elements.

    M = sram_bytes / dtype size (elements of SRAM). The constant is that of the paper's own
    algorithm with its own block sizes: FA-1 with B_c = ⌈M / 4d⌉ makes Nk·4d/M outer passes,
    each reading Q and O and writing O (3·Nq·d elements), so the leading term is
    12·Nq·Nk·d² / M per (batch, head). No algorithm can move less than its compulsory traffic
    (read Q, K, V once and write O once), so the bound is the larger of the two, times
    batch · heads. The Θ-form holds for d ≤ M ≤ N·d; beyond that the compulsory term rules.
    """
    if isinstance(sram_bytes, bool) or not isinstance(sram_bytes, int) or sram_bytes < 1:
        raise ValueError(f"sram_bytes must be a positive integer, got {sram_bytes!r}")
    m = sram_bytes // p.dtype_bytes
    d = p.head_dim
    if m < 4 * d:
        raise ValueError(
            f"SRAM of {sram_bytes} bytes holds {m} elements, fewer than 4·head_dim = {4 * d}: "
            "not even one key row fits beside its query, output and value rows"
        )
    nq, nk = p.seq_q, p.seq_k
    leading = math.ceil(12 * nq * nk * d * d / m)
    compulsory = (2 * nq + 2 * nk) * d
    return max(leading, compulsory) * _heads(p)


def seed_flash_head(n: int, d: int, block_r: int, block_c: int) -> int:
    """The seed documents' FlashAttention count (total elements), which rounds rows up to blocks."""
    for name, value in (("n", n), ("d", d), ("block_r", block_r), ("block_c", block_c)):
        _check_int(name, value, 1)
    n_outer = cdiv(n, block_r)
    n_inner = cdiv(n, block_c)
    return n_outer * block_r * d + n_outer * n_inner * 2 * block_c * d + n_outer * block_r * d


def summary(
    algo: str, p: AttentionProblem, t: TileConfig, splits: int | None = None, sms: int = 132
) -> dict[str, Any]:
    """The whole-problem counts of `algo` as one JSON-ready object (the CLI's and the API's)."""
    if algo != "decode" and splits is not None:
        raise ValueError("splits applies to decode only")
    kw = {"splits": splits, "sms": sms} if algo == "decode" else {}
    out: dict[str, Any] = {
        "algo": algo,
        "problem": {
            "batch": p.batch,
            "heads": p.heads,
            "kv_heads": p.kv_heads,
            "seq_q": p.seq_q,
            "seq_k": p.seq_k,
            "head_dim": p.head_dim,
            "causal": p.causal,
            "dtype": p.dtype,
        },
        "tiles": {"block_m": t.block_m, "block_n": t.block_n},
        **for_algo(algo, p, t, **kw).as_dict(p.dtype_bytes),
    }
    if algo == "decode":
        plan = split_plan(p, t, splits, sms)
        out["splits"] = {"requested": plan.requested, "used": plan.used, "chunk": plan.chunk}
    return out
