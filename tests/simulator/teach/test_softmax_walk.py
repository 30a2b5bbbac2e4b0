"""The online-softmax walk: per-block detail consistent with the recurrence, exact at the end."""

from __future__ import annotations

import math

import numpy as np
import pytest

from flashscope.simulator.teach.softmax_walk import standard_softmax, walk


def test_seed_example():
    w = walk(np.array([1.0, 2.0, 3.0, 6.0, 2.0, 1.0]), 3)
    first, second = w.steps
    assert (first.m_before, first.m_after, first.alpha, first.l_before) == (-math.inf, 3, 0, 0)
    assert first.l_after == pytest.approx(math.exp(-2) + math.exp(-1) + 1)
    assert second.alpha == pytest.approx(math.exp(-3))
    assert second.l_after == pytest.approx(
        first.l_after * math.exp(-3) + 1 + math.exp(-4) + math.exp(-5)
    )
    want = [0.006126, 0.016652, 0.045265, 0.909178, 0.016652, 0.006126]
    np.testing.assert_allclose(w.online, want, atol=5e-7)
    assert w.max_abs_diff < 1e-15


def test_fresh_vectors_with_masked_entries_and_ragged_blocks():
    seed = int(np.random.SeedSequence().entropy % 2**32)
    rng = np.random.default_rng(seed)
    for _ in range(20):
        n = int(rng.integers(1, 60))
        x = rng.normal(0, 5, n)
        x[rng.random(n) < 0.2] = -np.inf
        if np.all(np.isneginf(x)):
            x[0] = 0.0
        block = int(rng.integers(1, n + 3))
        w = walk(x, block)
        msg = f"seed={seed} n={n} block={block}"
        assert len(w.steps) == -(-n // block), msg
        for s in w.steps:
            seen = x[: s.stop]
            assert s.m_after == seen.max(), msg
            assert s.block_max == x[s.start : s.stop].max(), msg
            assert s.l_after == pytest.approx(s.alpha * s.l_before + s.block_sum, rel=1e-12), msg
            if s.m_after > -np.inf:
                assert s.weights.sum() == pytest.approx(1.0, rel=1e-12), msg
        np.testing.assert_allclose(w.steps[-1].weights, w.standard, rtol=1e-12, err_msg=msg)
        assert w.max_abs_diff < 1e-12, msg


def test_huge_values_do_not_overflow():
    w = walk(np.array([1.0, 2.0, 1000.0, 3.0]), 2)
    assert np.isfinite(w.online).all()
    assert w.online[2] == pytest.approx(1.0)
    assert w.steps[1].alpha == 0.0  # e^(2 − 1000) underflows to zero, as it should


def test_all_masked():
    w = walk(np.full(4, -np.inf), 3)
    assert not standard_softmax(np.full(4, -np.inf)).any()
    assert all(s.m_after == -np.inf and s.l_after == 0 for s in w.steps)
    # The recurrence's convention (NaN or zeros) decides; either way the walk says so honestly.
    assert (np.isnan(w.online).all() and math.isnan(w.max_abs_diff)) or (
        not w.online.any() and w.max_abs_diff == 0
    )
