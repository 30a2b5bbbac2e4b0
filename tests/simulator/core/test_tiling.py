"""The tile grid against a brute-force element mask: visibility, partial tiles, sums."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.core.tiling import FULL, PARTIAL, SKIPPED, TileGrid, split_plan
from flashscope.simulator.teach.oracle import causal_mask


def _brute_kinds(nq: int, nk: int, bm: int, bn: int, causal: bool) -> np.ndarray:
    mask = causal_mask(nq, nk) if causal else np.ones((nq, nk), bool)
    kinds = np.empty((-(-nq // bm), -(-nk // bn)), np.int8)
    for i in range(kinds.shape[0]):
        for j in range(kinds.shape[1]):
            tile = mask[i * bm : (i + 1) * bm, j * bn : (j + 1) * bn]
            kinds[i, j] = FULL if tile.all() else PARTIAL if tile.any() else SKIPPED
    return kinds


@settings(max_examples=80, deadline=None)
@given(
    nq=st.integers(1, 150),
    nk=st.integers(1, 150),
    bm=st.sampled_from([1, 2, 4, 8, 16, 32, 64]),
    bn=st.sampled_from([1, 2, 4, 8, 16, 32, 64]),
    causal=st.booleans(),
)
def test_kinds_and_sums_match_the_element_mask(nq, nk, bm, bn, causal):
    g = TileGrid(AttentionProblem(seq_q=nq, seq_k=nk, causal=causal), TileConfig(bm, bn))
    want = _brute_kinds(nq, nk, bm, bn, causal)
    np.testing.assert_array_equal(g.kinds(), want)
    visible = want != SKIPPED
    rows = np.minimum(bm, nq - np.arange(g.n_q) * bm)
    cols = np.minimum(bn, nk - np.arange(g.n_kv) * bn)
    assert g.n_tiles == visible.sum()
    assert g.sum_rows == (visible * rows[:, None]).sum()
    assert g.sum_cols == (visible * cols[None, :]).sum()
    assert g.sum_area == (visible * np.outer(rows, cols)).sum()
    # Visible key blocks are a prefix per query block, and every key block is seen by someone.
    np.testing.assert_array_equal(visible.sum(axis=1), g.visible)
    assert all(visible[i, : g.visible[i]].all() for i in range(g.n_q))
    assert g.kv_blocks_used == g.n_kv
    for j in range(g.n_kv):
        np.testing.assert_array_equal(g.q_blocks_of(j), np.flatnonzero(visible[:, j]))


def test_key_mask_is_none_only_when_every_pair_is_visible():
    p = AttentionProblem(seq_q=10, seq_k=14, causal=True)
    g = TileGrid(p, TileConfig(4, 4))
    full = causal_mask(10, 14)
    for j in range(g.n_kv):
        for lo in range(10):
            mask = g.key_mask(j, lo)
            want = full[lo:, j * 4 : (j + 1) * 4]
            if mask is None:
                assert want.all()
            else:
                np.testing.assert_array_equal(mask, want)


@pytest.mark.parametrize(
    ("nk", "bn", "splits", "want"),
    [  # (requested, chunk, used)
        (1024, 64, 4, (4, 4, 4)),
        (1000, 64, 5, (5, 4, 4)),  # 16 blocks in chunks of 4: the fifth split would be empty
        (64, 64, 8, (8, 1, 1)),
        (130, 16, 3, (3, 3, 3)),
    ],
)
def test_split_plan_drops_empty_splits(nk, bn, splits, want):
    plan = split_plan(AttentionProblem(seq_q=1, seq_k=nk), TileConfig(16, bn), splits)
    assert (plan.requested, plan.chunk, plan.used) == want
    covered = [j for s in range(plan.used) for j in plan.blocks(s)]
    assert covered == list(range(-(-nk // bn)))
    assert all(len(plan.blocks(s)) > 0 for s in range(plan.used))


def test_split_plan_refuses_causal_and_bad_splits():
    with pytest.raises(ValueError, match="causal"):
        split_plan(AttentionProblem(seq_q=1, causal=True), TileConfig())
    with pytest.raises(ValueError, match="splits must be ≥ 1"):
        split_plan(AttentionProblem(seq_q=1), TileConfig(), splits=0)
