"""Hypothesis over the simulator's inputs: invalid input always raises ValueError with a message,
valid input never raises anything else.

Each test states its own rule for "valid" (written here, independently of the code under test)
and checks that the simulator accepts exactly those inputs.
"""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from flashscope.simulator.core.problem import AttentionProblem, TileConfig, decode_splits
from flashscope.simulator.teach import traffic
from flashscope.simulator.teach.tracing import ALGORITHMS, build_trace

# Anything a JSON body or a careless caller could hand over, small valid counts most often.
ANY = st.one_of(
    st.integers(-4, 70),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.text(max_size=4),
    st.lists(st.integers(0, 3), max_size=2),
)
POW2 = st.sampled_from([1, 2, 4, 8, 16, 32, 64])


def spoiled(valid: dict) -> st.SearchStrategy[dict]:
    """Valid keyword arguments, or the same with one of them replaced by anything at all."""
    base = st.fixed_dictionaries(valid)
    bad = st.dictionaries(st.sampled_from(sorted(valid)), ANY, max_size=1)
    return st.builds(lambda b, x: {**b, **x}, base, bad)


def is_count(x, lo: int = 1) -> bool:
    return type(x) is int and x >= lo


def is_pow2(x) -> bool:
    return is_count(x) and x & (x - 1) == 0


def raises_value_error(fn, *args, **kwargs):
    """Call fn; return (result, None) or (None, message) for a ValueError (others propagate)."""
    try:
        return fn(*args, **kwargs), None
    except ValueError as exc:
        assert str(exc), f"{fn.__name__} raised a ValueError without a message"
        return None, str(exc)


@settings(max_examples=1000, deadline=None)
@given(
    spoiled(
        {
            "seq_q": st.integers(1, 300),
            "head_dim": st.integers(1, 256),
            "seq_k": st.one_of(st.none(), st.integers(1, 300)),
            "batch": st.integers(1, 8),
            "heads": st.sampled_from([1, 2, 4, 8]),
            "kv_heads": st.one_of(st.none(), st.sampled_from([1, 2])),
            "causal": st.booleans(),
            "dtype": st.sampled_from(["fp16", "bf16", "fp32"]),
            "sm_scale": st.one_of(st.none(), st.floats(-10, 10), st.integers(-3, 3)),
        }
    )
)
def test_attention_problem_accepts_exactly_the_valid_inputs(kw):
    seq_k = kw["seq_k"] if kw["seq_k"] is not None else kw["seq_q"]
    kv = kw["kv_heads"] if kw["kv_heads"] is not None else kw["heads"]
    scale = kw["sm_scale"]
    valid = (
        all(is_count(x) for x in (kw["seq_q"], seq_k, kw["head_dim"], kw["batch"], kw["heads"], kv))
        and kw["heads"] % kv == 0
        and kw["dtype"] in ("fp16", "bf16", "fp32")
        and isinstance(kw["causal"], bool)
        and (scale is None or (type(scale) in (int, float) and math.isfinite(scale)))
    )
    problem, err = raises_value_error(AttentionProblem, **kw)
    assert (err is None) == valid, (kw, err)
    if problem is not None:
        assert (problem.seq_k, problem.kv_heads) == (seq_k, kv)


@settings(max_examples=1000, deadline=None)
@given(
    spoiled(
        {
            "block_m": POW2,
            "block_n": POW2,
            "stages": st.integers(1, 8),
            "warps": st.sampled_from([1, 2, 4, 8, 16, 32]),
        }
    )
)
def test_tile_config_accepts_exactly_the_valid_inputs(kw):
    valid = (
        is_pow2(kw["block_m"])
        and is_pow2(kw["block_n"])
        and is_count(kw["stages"])
        and kw["stages"] <= 8
        and is_pow2(kw["warps"])
        and kw["warps"] <= 32
    )
    _, err = raises_value_error(TileConfig, **kw)
    assert (err is None) == valid, (kw, err)


@settings(max_examples=30, deadline=None)
@given(
    algo=st.one_of(st.sampled_from(sorted(ALGORITHMS)), st.text(max_size=6)),
    seq_q=st.integers(1, 48),
    seq_k=st.integers(1, 48),
    head_dim=st.integers(1, 16),
    block_m=st.sampled_from([1, 2, 4, 8, 16, 64]),
    block_n=st.sampled_from([1, 2, 4, 8, 16, 64]),
    seed=st.one_of(st.integers(0, 2**64), ANY),
)
def test_the_trace_builder_refuses_bad_names_and_seeds_and_builds_the_rest(
    algo, seq_q, seq_k, head_dim, block_m, block_n, seed
):
    problem = AttentionProblem(seq_q=seq_q, seq_k=seq_k, head_dim=head_dim, dtype="fp32")
    tiles = TileConfig(block_m=block_m, block_n=block_n)
    valid = algo in ALGORITHMS and is_count(seed, lo=0)
    trace, err = raises_value_error(build_trace, algo, problem, tiles, seed)
    if not valid:
        assert err is not None, (algo, seed)
        return
    assert err is None or "limit" in err, err
    if trace is not None:
        assert len(trace) >= 1
        for step in (0, len(trace) - 1):
            assert trace.event(step)["step"] == step


@settings(max_examples=200, deadline=None)
@given(
    spoiled(
        {
            "n": st.integers(1, 5000),
            "d": st.integers(1, 256),
            "block_r": st.integers(1, 300),
            "block_c": st.integers(1, 300),
        }
    )
)
def test_the_seed_count_refuses_exactly_the_invalid_sizes(kw):
    valid = all(is_count(x) for x in kw.values())
    total, err = raises_value_error(traffic.seed_flash_head, **kw)
    assert (err is None) == valid, (kw, err)
    if valid:  # Q, K, V read and O written at least once
        assert type(total) is int and total >= 4 * kw["n"] * kw["d"]


@settings(max_examples=100, deadline=None)
@given(
    seq_q=st.integers(1, 10**6),
    seq_k=st.integers(1, 10**6),
    head_dim=st.integers(1, 512),
    block_m=POW2,
    block_n=POW2,
)
def test_closed_forms_of_valid_problems_are_non_negative_counts(
    seq_q, seq_k, head_dim, block_m, block_n
):
    p = AttentionProblem(seq_q=seq_q, seq_k=seq_k, head_dim=head_dim)
    t = TileConfig(block_m=block_m, block_n=block_n)
    for tr in (traffic.naive_head(p), traffic.fa2_head(p, t)):
        counts = (tr.hbm_read, tr.hbm_write, tr.stats_read, tr.stats_write)
        assert all(type(c) is int and c >= 0 for c in counts), tr
        assert tr.hbm_read >= (seq_q + 2 * seq_k) * head_dim  # every input read at least once


@settings(max_examples=200, deadline=None)
@given(
    spoiled(
        {
            "ctas_without_split": st.integers(1, 2000),
            "kv_blocks": st.integers(1, 2000),
            "sms": st.integers(1, 200),
        }
    )
)
def test_decode_splits_refuses_exactly_the_invalid_counts(kw):
    valid = all(is_count(x) for x in kw.values())
    splits, err = raises_value_error(decode_splits, **kw)
    assert (err is None) == valid, (kw, err)
    if valid:
        assert 1 <= splits <= kw["kv_blocks"]
