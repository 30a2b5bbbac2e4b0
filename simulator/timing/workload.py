"""The per-CTA work of each kernel launch of each algorithm, in launch order, vectorized.

Each algorithm becomes a `Workload`: its kernel launches (`launch.Launch`) in the order they
run, each with its grid flattened in launch order (program_id 0 fastest) and per-CTA arrays:
the counts of the counting convention that `simulator/teach/traffic.py` states in closed form (their
sums equal it), and what only the timing engine needs (see `launch.py`).

Grids (x fastest, as Triton launches them):
    fa2       (q_blocks, batch·heads)   query blocks of one head are neighbours in launch order,
                                        so the CTAs resident together share K/V in L2 (the
                                        Triton tutorial's grid; causal blocks run light → heavy)
    fa1       (batch·heads,)            one CTA runs both loops of one head
    naive     3 × (q_blocks, batch·heads)
    fa2-bwd   preprocess (q_blocks, B·H), main (kv_blocks, B·H), postprocess (q_blocks, B·H)
    decode    split (splits, batch·kv_heads); the last split of each head merges its partials

Non-matmul FLOPs (engine-only, not part of the convention), per visible tile of r × c scores:
forward 4·r·c (scale, max, subtract, sum) + r·d (α·O), epilogue r·d + 2·r; fa1 4·r·c + 3·r·d;
backward 6·r·c (P, dS = P∘(dP − D), casts); naive 1, 4 and 0 per score in its three kernels;
row-wise kernels 2 per element. The merge of Flash-Decoding's partials uses exponentials that
the convention does not count as `exps`; they are charged here as 4 FLOPs per element.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from flashscope.simulator.core.problem import (
    STATS_BYTES,
    AttentionProblem,
    TileConfig,
    cdiv,
    decode_splits,
)
from flashscope.simulator.timing.launch import ACC_BYTES, COUNTS, Launch

ALGOS = ("naive", "fa1", "fa2", "fa2-bwd", "decode")


@dataclass(frozen=True, eq=False)
class Workload:
    """Every launch of one algorithm on one problem, in the order they run."""

    algo: str
    problem: AttentionProblem
    tiles: TileConfig
    launches: tuple[Launch, ...]
    useful_flops: float  # the papers' convention: 4·B·H·Nq·Nk·d, ½ causal, 2.5× backward
    splits: int | None = None  # decode: non-empty splits per (batch, kv_head)
    impl: str = "convention"  # or "flashscope": the launches of flashscope's kernels
    route: str | None = None  # flashscope fa2-bwd: "separate" or "atomic"

    def totals(self) -> dict[str, int]:
        out = dict.fromkeys(COUNTS, 0)
        for launch in self.launches:
            for k, v in launch.totals().items():
                out[k] += v
        return out


def alone(workload: Workload, name: str) -> Workload:
    """`workload` reduced to its launch `name`, on its own stream (as Nsight Compute runs it)."""
    (launch,) = [w for w in workload.launches if w.name == name]
    return dataclasses.replace(workload, launches=(dataclasses.replace(launch, concurrent=False),))


def _query_grid(
    p: AttentionProblem, t: TileConfig
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Rows r_i, visible key blocks n_i (a prefix) and their columns Σc_j per query block."""
    bm, bn = t.block_m, t.block_n
    n_q, n_kv = cdiv(p.seq_q, bm), cdiv(p.seq_k, bn)
    rows = np.minimum(bm, p.seq_q - np.arange(n_q, dtype=np.int64) * bm)  # (n_q,)
    if p.causal:
        last_key = np.arange(n_q, dtype=np.int64) * bm + rows - 1 + p.causal_offset
        vis = np.clip(np.floor_divide(last_key, bn) + 1, 0, n_kv)  # (n_q,)
    else:
        vis = np.full(n_q, n_kv, dtype=np.int64)
    vcols = np.minimum(vis * bn, p.seq_k)  # (n_q,)
    return rows, vis, vcols, n_kv


def _heads(p: AttentionProblem, per_head: int) -> tuple[np.ndarray, np.ndarray]:
    """For a grid (per_head, batch·heads): the head index and kv-head index of every CTA."""
    bh = np.repeat(np.arange(p.batch * p.heads, dtype=np.int64), per_head)
    kv = (bh // p.heads) * p.kv_heads + (bh % p.heads) // p.group
    return bh, kv


def _kv_stream(p: AttentionProblem, t: TileConfig) -> dict[str, float]:
    """Block count and ragged tail of a K/V stream."""
    n_kv = cdiv(p.seq_k, t.block_n)
    last = p.seq_k - (n_kv - 1) * t.block_n
    return {"stream_blocks": n_kv, "stream_tail": last / t.block_n}


def per_head(x: npt.ArrayLike, heads: int, heavy_first: bool = False) -> np.ndarray:
    """A column of one head's query blocks repeated for `heads` heads; `heavy_first`: each
    head's blocks in reverse (program 0 of a head runs its last, heaviest block)."""
    x = np.asarray(x)
    return np.tile(x[::-1] if heavy_first else x, heads)


def _fa2(
    p: AttentionProblem, t: TileConfig, heavy_first: bool = False, acc_cols: int | None = None
) -> tuple[Launch, ...]:
    """The FA-2 forward; `acc_cols`: the O accumulator's columns on chip (head_dim where None),
    which its rescale each step and its normalization at the end run over."""
    e, d, bh_n = p.dtype_bytes, p.head_dim, p.batch * p.heads
    acc = d if acc_cols is None else acc_cols
    rows, vis, vcols, _ = _query_grid(p, t)
    n_q = len(rows)
    area = rows * vcols
    _, kv = _heads(p, n_q)  # one value per head: the same in either order

    def tile(x: npt.ArrayLike) -> np.ndarray:
        return per_head(x, bh_n, heavy_first)

    return (
        Launch.make(
            "fa2",
            "fwd",
            t.block_m,
            (n_q, bh_n),
            e,
            iters=tile(vis),
            hbm_read=tile(rows * d + 2 * d * vcols),
            hbm_write=tile(rows * d),
            stats_write=tile(rows),
            flops=tile(4 * d * area),
            exps=tile(area + rows * vis),
            alu=tile(4.0 * area + rows * acc * vis + rows * acc + 2 * rows),
            edge_read=tile(rows * d * e),
            edge_write=tile(rows * d * e + rows * STATS_BYTES),
            stream_read=tile(2.0 * d * vcols * e),
            kv_head=kv,
            stream=np.where(tile(vis) > 0, kv, -1),
            stream_hi=tile(vis),
            **_kv_stream(p, t),
        ),
    )


def _fa1(p: AttentionProblem, t: TileConfig) -> tuple[Launch, ...]:
    e, d, nq, bh_n = p.dtype_bytes, p.head_dim, p.seq_q, p.batch * p.heads
    rows, vis, vcols, _ = _query_grid(p, t)
    used = int(vis.max(initial=0))
    kv_cols = min(used * t.block_n, p.seq_k)
    sum_rows, sum_area, tiles = int((rows * vis).sum()), int((rows * vcols).sum()), int(vis.sum())
    first = int(rows[vis > 0].sum())  # rows whose Q, O, ℓ, m the first visit reads cold
    qo_bytes = 2 * d * e + 2 * STATS_BYTES  # per row and visit: Q and O, ℓ and m
    _, kv = _heads(p, 1)
    return (
        Launch.make(
            "fa1",
            "fa1",
            t.block_m,
            (bh_n,),
            e,
            iters=tiles,
            hbm_read=2 * d * kv_cols + 2 * d * sum_rows,
            hbm_write=nq * d + d * sum_rows,
            stats_read=2 * sum_rows,
            stats_write=2 * nq + 2 * sum_rows,
            flops=4 * d * sum_area,
            exps=sum_area + sum_rows,
            alu=4.0 * sum_area + 3.0 * d * sum_rows,
            edge_write=nq * d * e + 2 * nq * STATS_BYTES,
            stream_read=2.0 * d * kv_cols * e,
            self_read=float(qo_bytes * (sum_rows - first)),
            merge_write=float((d * e + 2 * STATS_BYTES) * sum_rows),
            kv_head=kv,
            stream=np.where(used > 0, kv, -1),
            stream_hi=used,
            passes=max(used, 1),
            **_kv_stream(p, t),
        ),
    )


def _naive(p: AttentionProblem, t: TileConfig) -> tuple[Launch, ...]:
    e, d, nk, bh_n = p.dtype_bytes, p.head_dim, p.seq_k, p.batch * p.heads
    rows, _, _, n_kv = _query_grid(p, t)
    n_q = len(rows)
    first = np.zeros(n_q, dtype=np.int64)
    first[0] = 1  # K (kernel 1) and V (kernel 3) are charged to the first CTA of each head
    s = rows * nk  # (n_q,) score elements per row block

    def tile(x: npt.ArrayLike) -> np.ndarray:
        return np.tile(x, bh_n)

    grid = (n_q, bh_n)
    bh, kv = _heads(p, n_q)
    common = {"iters": n_kv}
    return (
        Launch.make(
            "naive_qk",
            "naive_qk",
            t.block_m,
            grid,
            e,
            hbm_read=tile(rows * d + first * nk * d),
            hbm_write=tile(s),
            flops=tile(2 * d * s),
            alu=tile(1.0 * s),
            edge_read=tile((rows * d + first * nk * d) * e),
            spread_read=tile(first * nk * d * e),
            stream=bh,
            kv_head=kv,
            **common,
        ),
        Launch.make(
            "naive_softmax",
            "naive_softmax",
            t.block_m,
            grid,
            e,
            hbm_read=tile(s),
            hbm_write=tile(s),
            exps=tile(s),
            alu=tile(4.0 * s),
            carry_read=tile(s * e),
            **common,
        ),
        Launch.make(
            "naive_pv",
            "naive_pv",
            t.block_m,
            grid,
            e,
            hbm_read=tile(s + first * nk * d),
            hbm_write=tile(rows * d),
            flops=tile(2 * d * s),
            edge_read=tile(first * nk * d * e),
            spread_read=tile(first * nk * d * e),
            stream=bh,
            kv_head=kv,
            edge_write=tile(rows * d * e),
            carry_read=tile(s * e),
            **common,
        ),
    )


def _fa2_bwd(p: AttentionProblem, t: TileConfig) -> tuple[Launch, ...]:
    e, d, nk, bh_n = p.dtype_bytes, p.head_dim, p.seq_k, p.batch * p.heads
    rows, vis, _, n_kv = _query_grid(p, t)
    n_q = len(rows)
    bn = t.block_n
    cols = np.minimum(bn, nk - np.arange(n_kv, dtype=np.int64) * bn)  # (n_kv,)
    lo = np.searchsorted(vis, np.arange(n_kv), side="right")  # first query block seeing j
    suffix = np.concatenate([np.cumsum(rows[::-1])[::-1], [0]])  # Σ r_i for i ≥ k
    sr = suffix[lo]  # (n_kv,) rows of the visible query blocks
    bh_kv, kv = _heads(p, n_kv)
    stream_bytes = sr * (2 * d * e + 2 * STATS_BYTES + d * ACC_BYTES)

    def tq(x: npt.ArrayLike) -> np.ndarray:
        return np.tile(x, bh_n)

    pre = Launch.make(
        "bwd_preprocess",
        "rowwise",
        t.block_m,
        (n_q, bh_n),
        e,
        iters=1,
        hbm_read=tq(2 * rows * d),
        stats_write=tq(rows),
        alu=tq(2.0 * rows * d),
    )
    main = Launch.make(
        "bwd_main",
        "bwd",
        t.block_m,
        (n_kv, bh_n),
        e,
        iters=tq(n_q - lo),
        hbm_read=tq(2 * cols * d + 2 * d * sr),
        hbm_write=tq(2 * cols * d),
        stats_read=tq(2 * sr),
        acc_read=tq(d * sr),
        acc_write=tq(d * sr),
        flops=tq(10 * d * cols * sr),
        exps=tq(cols * sr),
        alu=tq(6.0 * cols * sr),
        edge_read=tq(2.0 * cols * d * e),
        edge_write=tq(2.0 * cols * d * e),
        stream_read=tq(stream_bytes.astype(np.float64)),
        merge_write=tq(sr * d * ACC_BYTES),
        kv_head=kv,
        stream=bh_kv,
        stream_lo=tq(lo),
        stream_hi=n_q,
        stream_blocks=n_q,
        stream_tail=float(rows[-1]) / t.block_m,
    )
    post = Launch.make(
        "bwd_postprocess",
        "rowwise",
        t.block_m,
        (n_q, bh_n),
        e,
        iters=1,
        acc_read=tq(rows * d),
        hbm_write=tq(rows * d),
        alu=tq(1.0 * rows * d),
        carry_read=tq(rows * d * ACC_BYTES),
    )
    return pre, main, post


def decode_plan(
    p: AttentionProblem, t: TileConfig, splits: int | None, sms: int
) -> tuple[int, int, int]:
    """(chunk, used splits, key blocks) of Flash-Decoding's split rule."""
    if p.causal:
        raise ValueError("causal must be false for decode: a new token sees the whole KV cache")
    if splits is not None and (isinstance(splits, bool) or not isinstance(splits, int)):
        raise ValueError(f"splits must be an integer, got {splits!r}")
    if splits is not None and splits < 1:
        raise ValueError(f"splits must be ≥ 1, got {splits}")
    n_kv = cdiv(p.seq_k, t.block_n)
    if splits is None:
        splits = decode_splits(p.batch * p.kv_heads, n_kv, sms)
    chunk = cdiv(n_kv, splits)
    return chunk, cdiv(n_kv, chunk), n_kv


# Splits the last program of a head merges per load of their partials (kernels/decode.py
# MAX_S_BLOCK): its merge loop runs ceil(splits / this) times.
MERGE_BLOCK = 32


def _decode(
    p: AttentionProblem, t: TileConfig, splits: int | None, sms: int
) -> tuple[tuple[Launch, ...], int]:
    """Flash-Decoding as flashscope's kernel runs it: one launch of `used` splits per
    (batch, K/V head), each streaming its chunk of the cache and writing an fp32 partial O and
    its LSE; the split that finishes last merges the head's partials by their LSE and writes O
    (kernels/decode.py). The engine charges the merge to the head's last split, which starts
    last and, its chunk being the shortest or equal, is taken to finish last. The published
    form's separate reduce launch (the /decode lesson's) moves the same bytes; here it costs no
    second launch and no wait for a whole wave of splits."""
    e, d, nk, bn = p.dtype_bytes, p.head_dim, p.seq_k, t.block_n
    chunk, used, n_kv = decode_plan(p, t, splits, sms)
    r = p.group * p.seq_q  # query rows packed into one CTA
    heads = p.batch * p.kv_heads
    first = np.arange(used, dtype=np.int64) * chunk
    blocks = np.minimum(first + chunk, n_kv) - first  # (used,)
    cols = np.minimum((first + blocks) * bn, nk) - first * bn  # (used,)
    last = (np.arange(used) == used - 1).astype(np.int64)  # the split that merges

    def ts(x: npt.ArrayLike) -> np.ndarray:
        return np.tile(x, heads)

    split = Launch.make(
        "decode_split",
        "fwd",
        r,
        (used, heads),
        e,
        iters=ts(blocks + last * cdiv(used, MERGE_BLOCK)),
        hbm_read=ts(r * d + 2 * cols * d),
        hbm_write=ts(last * r * d),
        acc_write=r * d,
        acc_read=ts(last * used * r * d),
        stats_write=r,
        stats_read=ts(last * used * r),
        flops=ts(4 * r * cols * d),
        exps=ts(r * cols + r * blocks),
        alu=ts(4.0 * r * cols + r * d * blocks + r * d + last * 4.0 * used * r * d),
        edge_read=r * d * e,
        edge_write=ts(r * d * ACC_BYTES + r * STATS_BYTES + last * r * d * e),
        kv_head=np.repeat(np.arange(heads, dtype=np.int64), used),
    )
    return (split,), used


def ctas_of(
    algo: str, p: AttentionProblem, t: TileConfig, sms: int = 132, splits: int | None = None
) -> int:
    """How many CTAs `build` would launch in all, without building anything (for limits)."""
    bh = p.batch * p.heads
    n_q, n_kv = cdiv(p.seq_q, t.block_m), cdiv(p.seq_k, t.block_n)
    if algo == "fa2":
        return n_q * bh
    if algo == "fa1":
        return bh
    if algo == "naive":
        return 3 * n_q * bh
    if algo == "fa2-bwd":
        return (2 * n_q + n_kv) * bh
    if algo == "decode":
        _, used, _ = decode_plan(p, t, splits, sms)
        return used * p.batch * p.kv_heads
    raise ValueError(f"algo must be one of {', '.join(ALGOS)}, got {algo!r}")


def build(
    algo: str,
    p: AttentionProblem,
    t: TileConfig,
    sms: int = 132,
    splits: int | None = None,
) -> Workload:
    """The launches of `algo` on problem `p` with tiles `t` (decode: `sms` sets the splits)."""
    useful = 4.0 * p.batch * p.heads * p.seq_q * p.seq_k * p.head_dim
    if p.causal:
        useful /= 2
    used = None
    if algo == "fa2":
        launches = _fa2(p, t)
    elif algo == "fa1":
        launches = _fa1(p, t)
    elif algo == "naive":
        launches = _naive(p, t)
    elif algo == "fa2-bwd":
        launches, useful = _fa2_bwd(p, t), 2.5 * useful
    elif algo == "decode":
        launches, used = _decode(p, t, splits, sms)
    else:
        raise ValueError(f"algo must be one of {', '.join(ALGOS)}, got {algo!r}")
    return Workload(algo, p, t, launches, useful, used)
