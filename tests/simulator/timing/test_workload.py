"""The engine's workload: per-CTA counts in launch order equal a per-tile loop and the closed
forms of the counting convention, for every algorithm, on random (ragged, causal, GQA) shapes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.teach import traffic
from flashscope.simulator.timing.launch import COUNTS
from flashscope.simulator.timing.workload import ALGOS, build, ctas_of

from .brute_workload import brute

HEADS = st.sampled_from([(1, 1), (2, 2), (4, 2), (4, 1), (3, 3), (6, 2)])


@st.composite
def problems(draw, algo: str):
    heads, kv = draw(HEADS)
    decode = algo == "decode"
    p = AttentionProblem(
        seq_q=draw(st.integers(1, 4)) if decode else draw(st.integers(1, 200)),
        seq_k=draw(st.integers(1, 300)),
        head_dim=draw(st.integers(1, 40)),
        batch=draw(st.integers(1, 3)),
        heads=heads,
        kv_heads=kv,
        causal=False if decode else draw(st.booleans()),
    )
    t = TileConfig(draw(st.sampled_from([1, 2, 16, 32, 64])), draw(st.sampled_from([1, 16, 64])))
    return p, t


def _column(launch, name: str) -> list[int]:
    return getattr(launch, name).tolist()


@pytest.mark.parametrize("algo", ALGOS)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_per_cta_counts_equal_a_per_tile_loop(algo, data):
    p, t = data.draw(problems(algo))
    splits = data.draw(st.one_of(st.none(), st.integers(1, 40))) if algo == "decode" else None
    sms = data.draw(st.integers(1, 200))
    w = build(algo, p, t, sms=sms, splits=splits)
    want = brute(algo, p, t, sms=sms, splits=splits)
    assert len(w.launches) == len(want)
    assert ctas_of(algo, p, t, sms=sms, splits=splits) == sum(x.n_ctas for x in w.launches)
    for launch, ctas in zip(w.launches, want, strict=True):
        assert launch.n_ctas == len(ctas) == int(np.prod(launch.grid)), (algo, p, t)
        for name in (*COUNTS, "iters"):
            assert _column(launch, name) == [c[name] for c in ctas], (algo, name, p, t)


@pytest.mark.parametrize("algo", ALGOS)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_totals_equal_the_closed_forms_of_traffic(algo, data):
    """The counting convention's closed forms (simulator/teach/traffic.py), on larger sizes too."""
    p, t = data.draw(problems(algo))
    scale = data.draw(st.sampled_from([1, 37]))  # ×37: beyond what the per-tile loop could do
    p = AttentionProblem(**{**p.__dict__, "seq_q": p.seq_q * scale, "seq_k": p.seq_k * scale})
    kw = {"sms": data.draw(st.integers(1, 200))} if algo == "decode" else {}
    got = build(algo, p, t, **kw).totals()
    want = traffic.for_algo(algo, p, t, **kw)
    assert got == {k: getattr(want, k) for k in COUNTS}, (algo, p, t)
    if not p.causal and algo in ("fa2", "naive"):  # and the seed-style one-head forms
        head = traffic.fa2_head(p, t) if algo == "fa2" else traffic.naive_head(p)
        assert got["hbm_read"] == head.hbm_read * p.batch * p.heads


def test_seed_table_counts():
    """The seed's HBM access table (d = 64, 128 × 128 blocks, one head)."""
    t = TileConfig(128, 128)
    for n, naive, flash in [(256, 327_680, 98_304), (1024, 4_456_448, 1_179_648)]:
        p = AttentionProblem(seq_q=n, head_dim=64)
        for algo, want in (("naive", naive), ("fa2", flash)):
            got = build(algo, p, t).totals()
            assert got["hbm_read"] + got["hbm_write"] == want, (algo, n)


def test_fa2_grid_runs_query_blocks_of_one_head_first():
    p = AttentionProblem(seq_q=300, head_dim=16, batch=2, heads=4, kv_heads=2, causal=True)
    (launch,) = build("fa2", p, TileConfig(64, 64)).launches
    assert launch.grid == (5, 8)
    # program_id 0 (the query block) varies fastest: causal work ramps up within each head
    assert launch.iters.tolist()[:5] == [1, 2, 3, 4, 5]
    assert launch.iters.tolist()[5:10] == [1, 2, 3, 4, 5]
    # head h of batch b streams kv head b·kv_heads + h // group
    assert launch.stream.reshape(8, 5)[:, 0].tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    assert np.array_equal(launch.kv_head, np.repeat([0, 0, 1, 1, 2, 2, 3, 3], 5))
    mapping = np.array([0, 0, 1, 1, 2, 2, 3, 3])[:, None]
    for algo in ("naive", "fa2-bwd"):
        for k in build(algo, p, TileConfig(64, 64)).launches:
            reads_kv = k.name in ("naive_qk", "naive_pv", "bwd_main")
            want = mapping if reads_kv else -1
            assert np.all(k.kv_head.reshape(8, -1) == want), k.name


def test_decode_drops_empty_splits_and_refuses_causal():
    p = AttentionProblem(seq_q=1, seq_k=10 * 64, head_dim=32, batch=1, heads=8, kv_heads=2)
    w = build("decode", p, TileConfig(16, 64), splits=4)  # 10 blocks, chunks of 3: 4 splits
    assert w.splits == 4
    w = build("decode", p, TileConfig(16, 64), splits=6)  # chunks of 2: 5 non-empty splits
    assert w.splits == 5 and w.launches[0].grid == (5, 2)
    assert w.launches[0].rows == 4  # the group of 4 query heads packed into one CTA
    with pytest.raises(ValueError, match="causal"):
        build("decode", AttentionProblem(seq_q=1, seq_k=64, head_dim=8, causal=True), TileConfig())


def test_decode_is_one_launch_whose_last_split_per_head_merges():
    """As kernels/decode.py runs it: no reduce launch; each head's last split reads every split's
    partial O and LSE and writes O, one merge pass per 32 splits."""
    rng = np.random.default_rng()
    splits = int(rng.integers(2, 80))
    p = AttentionProblem(seq_q=1, seq_k=splits * 64, head_dim=32, batch=2, heads=6, kv_heads=3)
    (w,) = build("decode", p, TileConfig(16, 64), splits=splits).launches
    assert w.grid == (splits, 6)
    per_head = lambda col: np.broadcast_to(getattr(w, col), (w.n_ctas,)).reshape(6, splits)  # noqa: E731
    rows = 2  # the group of query heads packed into one CTA
    assert np.all(per_head("acc_read")[:, :-1] == 0)
    assert np.all(per_head("acc_read")[:, -1] == splits * rows * 32)
    assert np.all(per_head("stats_read")[:, -1] == splits * rows)
    assert (
        np.all(per_head("hbm_write")[:, -1] == rows * 32)
        and not per_head("hbm_write")[:, :-1].any()
    )
    assert np.all(per_head("iters")[:, -1] == 1 + -(-splits // 32))
    assert np.all(per_head("iters")[:, :-1] == 1)


def test_byte_classes_add_up():
    """Edge, stream, self and carried bytes never exceed what a CTA reads and writes."""
    rng = np.random.default_rng()
    n = int(rng.integers(1, 3000))
    p = AttentionProblem(seq_q=n, head_dim=32, batch=2, heads=4, kv_heads=2, causal=True)
    t = TileConfig(32, 64)
    for algo in ALGOS:
        q = p if algo != "decode" else AttentionProblem(seq_q=1, seq_k=n, head_dim=32, heads=4)
        for launch in build(algo, q, t).launches:
            read, write = launch.read_bytes, launch.write_bytes
            parts = launch.edge_read + launch.stream_read + launch.self_read
            assert np.all(parts <= read + 1e-9), (algo, launch.name, n)
            assert np.all(launch.carry_read <= launch.cold_read + 1e-9), (algo, launch.name)
            assert np.all(launch.spread_read <= launch.edge_read), (algo, launch.name)
            assert np.all(launch.edge_write + launch.merge_write <= write + 1e-9), algo


def test_unknown_algorithm():
    with pytest.raises(ValueError, match="algo must be one of"):
        build("fa9", AttentionProblem(), TileConfig())
