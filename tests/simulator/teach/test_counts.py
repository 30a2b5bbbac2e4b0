"""Every count three ways: the tile program's event sums, the closed forms of traffic.py, and a
literal per-tile reading of the counting convention on a brute-force causal mask."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flashscope.simulator.core.problem import AttentionProblem, TileConfig, decode_splits
from flashscope.simulator.core.trace import COUNTERS
from flashscope.simulator.teach import traffic
from flashscope.simulator.teach.algorithms import ALGORITHMS
from flashscope.simulator.teach.oracle import causal_mask

GLOBAL = ("hbm_read", "hbm_write", "stats_read", "stats_write", "acc_read", "acc_write")


def _visible_tiles(p: AttentionProblem, t: TileConfig):
    """(i, r, j, c) of every tile with at least one visible pair, from the element mask."""
    nq, nk, bm, bn = p.seq_q, p.seq_k, t.block_m, t.block_n
    mask = causal_mask(nq, nk) if p.causal else np.ones((nq, nk), bool)
    for i in range(-(-nq // bm)):
        for j in range(-(-nk // bn)):
            tile = mask[i * bm : (i + 1) * bm, j * bn : (j + 1) * bn]
            if tile.any():
                yield i, tile.shape[0], j, tile.shape[1]


def convention(algo: str, p: AttentionProblem, t: TileConfig, splits=None) -> dict[str, int]:
    """Global-memory counts, FLOPs and exps of one (batch, head) (decode: (batch, kv_head)),
    read off the counting convention tile by tile."""
    c = dict.fromkeys((*GLOBAL, "flops", "exps"), 0)
    nq, nk, d = p.seq_q, p.seq_k, p.head_dim
    tiles = list(_visible_tiles(p, t))
    if algo == "naive":
        c["hbm_read"] = nq * d + nk * d + nq * nk + nq * nk + nk * d
        c["hbm_write"] = 2 * nq * nk + nq * d
        c["flops"], c["exps"] = 4 * nq * nk * d, nq * nk
    elif algo == "fa2":
        c["hbm_read"] = nq * d + sum(2 * cj * d for _, _, _, cj in tiles)
        c["hbm_write"], c["stats_write"] = nq * d, nq
    elif algo == "fa1":
        c["hbm_write"], c["stats_write"] = nq * d, 2 * nq
        for j in sorted({(j, cj) for _, _, j, cj in tiles}):
            c["hbm_read"] += 2 * j[1] * d
        for _, r, _, _ in tiles:
            c["hbm_read"] += 2 * r * d
            c["stats_read"] += 2 * r
            c["hbm_write"] += r * d
            c["stats_write"] += 2 * r
    elif algo == "fa2-bwd":
        c["hbm_read"] = 2 * nq * d + 2 * nk * d
        c["stats_write"] = nq
        c["hbm_write"] = 2 * nk * d + nq * d
        c["acc_read"] = nq * d
        for _, r, _, _ in tiles:
            c["hbm_read"] += 2 * r * d
            c["stats_read"] += 2 * r
            c["acc_read"] += r * d
            c["acc_write"] += r * d
    elif algo == "decode":
        rows, n_kv = p.group * nq, -(-nk // t.block_n)
        s = splits or decode_splits(p.batch * p.kv_heads, n_kv)
        chunk = -(-n_kv // s)
        used = sum(1 for k in range(s) if k * chunk < n_kv)
        c["hbm_read"] = used * rows * d + 2 * nk * d
        c["acc_write"] = c["acc_read"] = used * rows * d
        c["stats_write"] = c["stats_read"] = used * rows
        c["hbm_write"] = rows * d
        c["flops"] = 4 * rows * nk * d
        c["exps"] = rows * nk + n_kv * rows
        return c
    if algo != "naive":
        per_tile = 10 if algo == "fa2-bwd" else 4
        c["flops"] = sum(per_tile * r * cj * d for _, r, _, cj in tiles)
        extra = 0 if algo == "fa2-bwd" else 1
        c["exps"] = sum(r * cj + extra * r for _, r, _, cj in tiles)
    return c


shapes = st.fixed_dictionaries(
    {
        "seq_q": st.integers(1, 160),
        "seq_k": st.integers(1, 160),
        "head_dim": st.integers(1, 48),
        "batch": st.integers(1, 3),
        "kv_heads": st.integers(1, 3),
        "group": st.sampled_from([1, 2, 4]),
        "causal": st.booleans(),
        "dtype": st.sampled_from(["fp32", "fp16", "bf16"]),
    }
)
blocks = st.sampled_from([4, 8, 16, 32, 64, 128])


@pytest.mark.parametrize("algo", list(ALGORITHMS))
@settings(max_examples=40, deadline=None)
@given(shape=shapes, bm=blocks, bn=blocks, splits=st.none() | st.integers(1, 12))
def test_event_sums_equal_closed_forms(algo, shape, bm, bn, splits):
    shape = dict(shape)
    group = shape.pop("group")
    shape["heads"] = shape["kv_heads"] * group
    if algo == "decode":
        shape["causal"] = False
    p = AttentionProblem(**shape)
    t = TileConfig(bm, bn)
    kw = {"splits": splits} if algo == "decode" else {}
    module = ALGORITHMS[algo]
    ops = module.program(p, t, **kw)
    got = ops.totals()
    head = traffic.head_for_algo(algo, p, t, **kw)
    assert got == {k: getattr(head, k) for k in COUNTERS}
    assert len(ops) == module.n_events(p, t, **kw)
    want = convention(algo, p, t, splits)
    assert {k: got[k] for k in want} == want
    # Whole problem: per query head, except decode (per K/V head: K and V read once).
    copies = p.batch * (p.kv_heads if algo == "decode" else p.heads)
    assert traffic.for_algo(algo, p, t, **kw) == head.scaled(copies)
    # Events never move negative amounts, and the running totals end at the sums.
    for name in COUNTERS:
        assert (ops.columns[name] >= 0).all()
        assert ops.columns[f"total_{name}"][-1] == got[name]


@pytest.mark.parametrize(
    ("n", "naive", "flash"),
    [
        (256, 327_680, 98_304),
        (512, 1_179_648, 327_680),
        (1024, 4_456_448, 1_179_648),
        (2048, 17_301_504, 4_456_448),
        (4096, 68_157_440, 17_301_504),
    ],
)
def test_seed_table_for_every_flash_forward(n, naive, flash):
    """d = 64, 128 × 128 tiles, one head: FA-2's counts are the seed's; so is naive."""
    p = AttentionProblem(seq_q=n, head_dim=64)
    t = TileConfig(128, 128)
    assert traffic.naive(p).hbm_total == naive == 4 * n * 64 + 4 * n * n
    assert traffic.fa2(p, t).hbm_total == flash
    assert traffic.for_algo("fa2", p, t).hbm_total == flash
    # FA-1: K, V once and O initialized (3Nd), then per key block all of Q and O read and O
    # written (3Nd each); FA-2: Q, O once (2Nd) plus K, V once per query block (2Nd each).
    nd, blocks = n * 64, n // 128
    assert flash == (2 + 2 * blocks) * nd
    assert traffic.fa1(p, t).hbm_total == (3 + 3 * blocks) * nd


def test_causal_halves_the_work_the_way_the_grid_says():
    n, d = 1024, 64
    p = AttentionProblem(seq_q=n, head_dim=d, causal=True)
    one = TileConfig(1, 1)
    assert traffic.fa2(p, one).flops == 4 * d * n * (n + 1) // 2
    t = TileConfig(128, 128)
    blocks = n // 128
    tiles = blocks * (blocks + 1) // 2
    assert traffic.fa2(p, t).flops == 4 * d * tiles * 128 * 128
    assert traffic.fa2_bwd(p, t).flops == 10 * d * tiles * 128 * 128
    assert traffic.naive(p) == traffic.naive(AttentionProblem(seq_q=n, head_dim=d))


def test_seq_q_longer_than_seq_k_leaves_rows_without_keys():
    """Nq = 300, Nk = 100, causal: the first 200 rows see nothing; their blocks skip every
    tile but still load Q and write O and LSE."""
    p = AttentionProblem(seq_q=300, seq_k=100, head_dim=8, causal=True)
    t = TileConfig(64, 32)
    c = traffic.fa2_head(p, t)
    assert c.hbm_write == 300 * 8 and c.stats_write == 300
    ops = ALGORITHMS["fa2"].program(p, t)
    phases = ops.columns["phase"]
    assert (ops.columns["q_block"][phases == 0] == np.arange(5)).all()  # every block loads Q


def test_decode_reads_kv_once_per_kv_head():
    p = AttentionProblem(seq_q=1, seq_k=8192, head_dim=128, batch=2, heads=32, kv_heads=8)
    t = TileConfig(16, 128)
    c = traffic.decode(p, t, splits=4)
    kv = 2 * 8192 * 128 * 2 * 8
    assert c.hbm_read == kv + 4 * 4 * 128 * 2 * 8  # plus Q (4 rows) once per split
    assert c.acc_write == c.acc_read == 4 * 4 * 128 * 16
    auto = traffic.decode(p, t)
    assert auto == traffic.decode(p, t, splits=decode_splits(16, 64))


def test_theta_bound_constant_and_compulsory_floor():
    p = AttentionProblem(seq_q=4096, head_dim=64, dtype="fp16", heads=2)
    sram = 100 * 1024  # bytes → 51,200 fp16 elements
    m = sram // 2
    assert traffic.theta_bound(p, sram) == 2 * math.ceil(12 * 4096 * 4096 * 64 * 64 / m)
    # The bound scales as 1/M …
    assert traffic.theta_bound(p, 2 * sram) == pytest.approx(traffic.theta_bound(p, sram) / 2, 1e-6)
    # … but never below reading Q, K, V and writing O once.
    small = AttentionProblem(seq_q=64, head_dim=64)
    assert traffic.theta_bound(small, 2**30) == 4 * 64 * 64
    with pytest.raises(ValueError, match="fewer than 4·head_dim"):
        traffic.theta_bound(p, 256)


def test_traffic_bytes_follow_dtype_and_fp32_statistics():
    p = AttentionProblem(seq_q=100, head_dim=32, dtype="bf16")
    t = TileConfig(32, 32)
    out = traffic.fa2_bwd(p, t).as_dict(p.dtype_bytes)
    e, b = out["elements"], out["bytes"]
    for key in ("hbm_read", "hbm_write", "hbm_total", "sram_read", "sram_write"):
        assert b[key] == 2 * e[key]
    for key in ("stats_read", "stats_write", "acc_read", "acc_write"):
        assert b[key] == 4 * e[key]
    assert b["global_total"] == b["hbm_total"] + 4 * (
        e["stats_read"] + e["stats_write"] + e["acc_read"] + e["acc_write"]
    )


def test_closed_forms_at_n_131072_use_the_grid_not_the_tiles():
    p = AttentionProblem(seq_q=131072, head_dim=128, causal=True, batch=2, heads=16)
    t = TileConfig(64, 64)
    c = traffic.fa2(p, t)
    blocks = 131072 // 64
    assert c.flops == 32 * 4 * 128 * 64 * 64 * blocks * (blocks + 1) // 2
