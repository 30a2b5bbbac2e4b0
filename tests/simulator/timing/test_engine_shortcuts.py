"""The engine's shortcuts give the figures of the long way round, bit for bit.

Each CTA's duration is computed once per row of a launch's grid where every row holds the same
work; the tail's durations at every residency come from one evaluation; the compulsory hit
rates come without a pass of the L2 model; stream ids are ranked without a sort; causal
launches are built heaviest block first instead of reordered; the L2 model's streams of one
shared range skip their running unions, its streams in runs take their spans by run, and its
hit chances and grouped running maxima are computed in place or not at all where nothing
rises. Each is held here to the way it replaces, on flashscope's kernels and the convention's
launches, causal or not, grouped K/V heads and ragged lengths included.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flashscope.simulator.core.hardware import from_name
from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.timing import kernelplan
from flashscope.simulator.timing.engine import (
    _durations,
    _durations_of,
    _period,
    _Rates,
    _shared_hits,
    _work,
)
from flashscope.simulator.timing.l2model import (
    _grouped_cummax,
    _loop_hit,
    compulsory_hits,
    hit_chance,
    split_traffic,
    streams,
)
from flashscope.simulator.timing.launch import stream_groups
from flashscope.simulator.timing.workload import _fa2, build

GPU = from_name("h100-sxm")

PROBLEMS = [
    AttentionProblem(seq_q=1000, head_dim=64, batch=2, heads=8, kv_heads=2, causal=True),
    AttentionProblem(seq_q=777, seq_k=1500, head_dim=96, batch=3, heads=4, dtype="bf16"),
    AttentionProblem(seq_q=2048, head_dim=128, batch=1, heads=6, kv_heads=3, causal=True),
]
KERNELS = [("fa2", None), ("fa2-bwd", "separate"), ("fa2-bwd", "atomic")]


def _launches():
    for p in PROBLEMS:
        t = TileConfig(64, 32, 2, 4)
        for algo, route in KERNELS:
            yield from kernelplan.build(algo, p, t, gpu_key=GPU.key, route=route).launches
        for algo in ("fa2", "fa2-bwd", "fa1", "naive"):
            yield from build(algo, p, TileConfig(32, 64, 3, 8), sms=GPU.sms).launches


LAUNCHES = list(_launches())


def _hits(w):
    return _shared_hits(w, compulsory_hits(w))


@pytest.mark.parametrize("w", LAUNCHES, ids=lambda w: w.name)
def test_one_row_of_the_grid_stands_for_all_where_they_do_the_same_work(w):
    t = w.tiles or TileConfig(64, 32, 2, 4)
    r = _Rates(GPU, "fp16")
    c = np.full(w.n_ctas, 2.0)
    hits = _hits(w)
    whole = _durations_of(_work(w, t, r, hits, False), t, r, c)
    got = _durations(w, t, r, c, hits, False)
    for a, b in zip(got, whole, strict=True):
        np.testing.assert_array_equal(a, b)


def test_the_attention_launches_repeat_per_head():
    """The shortcut applies where it should: every kernel of these problems but the naive
    convention's, whose K and V reads are shared out over a head's CTAs."""
    for w in LAUNCHES:
        if w.spread_read.any() or len(w.grid) < 2 or w.grid[1] == 1:
            continue
        assert _period(w, np.full(w.n_ctas, 2.0), _hits(w)) == w.grid[0], w.name


def test_a_launch_whose_rows_differ_is_computed_whole():
    (w,) = _fa2(PROBLEMS[0], TileConfig(64, 32, 2, 4))
    hits = _hits(w)
    c = np.full(w.n_ctas, 2.0)
    c[-1] = 3.0  # the last CTA alone shares its SM with more
    assert _period(w, c, hits) == w.n_ctas
    t, r = TileConfig(64, 32, 2, 4), _Rates(GPU, "fp16")
    whole = _durations_of(_work(w, t, r, hits, False), t, r, c)
    for a, b in zip(_durations(w, t, r, c, hits, False), whole, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("w", LAUNCHES[:9], ids=lambda w: w.name)
def test_every_residency_at_once_equals_one_at_a_time(w):
    t = w.tiles or TileConfig(64, 32, 2, 4)
    r = _Rates(GPU, "fp16")
    tail = np.arange(0, w.n_ctas, 3)
    sub = w.reordered(tail)
    x = _work(sub, t, r, _hits(w)[tail], True)
    kmax = 4
    ks = np.repeat(np.arange(1, kmax + 1, dtype=np.float64), tail.size)
    d_all, e_all, parts_all = _durations_of(x.tiled(kmax), t, r, ks)
    for k in range(1, kmax + 1):
        d, e, parts = _durations_of(x, t, r, np.full(tail.size, float(k)))
        at = slice((k - 1) * tail.size, k * tail.size)
        np.testing.assert_array_equal(d_all[at], d)
        np.testing.assert_array_equal(e_all[at], e)
        np.testing.assert_array_equal(parts_all[:, at], parts)


@pytest.mark.parametrize("w", LAUNCHES, ids=lambda w: w.name)
def test_compulsory_hits_are_the_l2_models_with_room_for_everything(w):
    n = w.n_ctas
    zeros = np.zeros(n)
    ideal = split_traffic(w, zeros, zeros, zeros, math.inf, 2.0)
    np.testing.assert_array_equal(compulsory_hits(w), _loop_hit(w, ideal.dram_read))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(-1, 300), min_size=1, max_size=500))
def test_stream_groups_rank_ids_as_a_sort_would(ids):
    stream = np.array(ids, dtype=np.int64)
    inv, k = stream_groups(stream)
    _, want = np.unique(stream, return_inverse=True)
    np.testing.assert_array_equal(inv, want)
    assert k == len(np.unique(stream))


@pytest.mark.parametrize("w", LAUNCHES[:6], ids=lambda w: w.name)
def test_reordering_keeps_one_value_columns_as_they_are(w):
    order = np.random.default_rng().permutation(w.n_ctas)[: max(1, w.n_ctas // 2)]
    got = w.reordered(order).arrays()
    for name, col in w.arrays().items():
        np.testing.assert_array_equal(got[name], col[order], err_msg=name)


@pytest.mark.parametrize("p", PROBLEMS, ids=str)
def test_causal_launches_built_heaviest_first_are_the_reordered_ones(p):
    t = TileConfig(64, 32, 2, 4)
    (plain,) = _fa2(p, t)
    (heavy,) = _fa2(p, t, heavy_first=True)
    per_head, heads = plain.grid
    order = (np.arange(heads)[:, None] * per_head + np.arange(per_head)[::-1]).reshape(-1)
    want = plain.reordered(order).arrays()
    for name, col in heavy.arrays().items():
        np.testing.assert_array_equal(col, want[name], err_msg=name)


def _with_full_columns(w, *names):
    """`w` with the named one-value columns stored CTA by CTA (contiguous): the long way."""
    return dataclasses.replace(w, **{k: np.array(getattr(w, k)) for k in names})


@pytest.mark.parametrize("w", LAUNCHES, ids=lambda w: w.name)
def test_streams_of_one_shared_range_are_the_general_cases(w):
    """Where every CTA reads the same blocks of its stream (one value, broadcast), `streams`
    skips the running unions: the same figures as with the columns stored whole."""
    whole = streams(_with_full_columns(w, "stream_lo", "stream_hi"))
    got = streams(w)
    for f in dataclasses.fields(whole):
        np.testing.assert_array_equal(
            np.broadcast_to(getattr(got, f.name), np.shape(getattr(whole, f.name))),
            getattr(whole, f.name),
            err_msg=f"{w.name} {f.name}",
        )


def test_some_launches_take_the_shared_range_shortcut():
    assert any(
        w.stream_lo.strides == (0,) and w.stream_hi.strides == (0,) and w.stream_lo[0] >= 0
        for w in LAUNCHES
    )


@pytest.mark.parametrize("w", LAUNCHES, ids=lambda w: w.name)
def test_per_run_stream_spans_are_the_scattered_ones(w):
    """Each stream's CTAs in one run: its first start and last end by `reduceat` over the
    runs, as `np.minimum.at`/`np.maximum.at` over the CTAs give them."""
    n = w.n_ctas
    rng = np.random.default_rng(n)
    start = np.sort(rng.uniform(0, 1e-3, n))
    end = start + rng.uniform(1e-6, 1e-4, n)
    edge = np.full(n, 1e-7)
    scattered = dataclasses.replace(w)
    scattered.__dict__["group_runs"] = None  # the cached property, set to the long way
    a = split_traffic(w, start, end, edge, 8e6, 1.5)
    b = split_traffic(scattered, start, end, edge, 8e6, 1.5)
    for f in ("dram_read", "dram_write", "refs"):
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f), err_msg=f"{w.name} {f}")
    assert a.footprint == b.footprint


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.floats(0, 1e9), min_size=1, max_size=200),
    st.floats(1.0, 1e8),
    st.sampled_from([-1.0, 0.0, 0.5, 1.0, 2.0, 0.7, 1.3, 3.0]),
)
def test_hit_chance_in_place_is_the_power_law(distance, capacity, exponent):
    d = np.array(distance)
    want = np.ones_like(d)
    far = d > capacity
    want[far] = (capacity / d[far]) ** exponent
    np.testing.assert_array_equal(hit_chance(d, capacity, exponent), want)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 50)), min_size=1, max_size=200))
def test_grouped_running_max_is_the_per_group_one(pairs):
    pairs.sort(key=lambda x: x[0])
    group = np.array([g for g, _ in pairs], dtype=np.float64)
    value = np.array([v for _, v in pairs], dtype=np.float64)
    want = value.copy()
    for i in range(1, len(want)):
        if group[i] == group[i - 1]:
            want[i] = max(want[i], want[i - 1])
    np.testing.assert_array_equal(_grouped_cummax(group, value), want)
