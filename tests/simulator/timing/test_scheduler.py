"""Greedy CTA scheduling: the vectorized scheduler equals a plain heap, CTA for CTA."""

from __future__ import annotations

import heapq
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flashscope.simulator.timing.scheduler import coresidency, list_schedule, share_tail


def heap_schedule(durations, slots, free_at=None):
    """The textbook version: each CTA takes the slot that frees first (lowest slot on ties)."""
    heap = [(0.0 if free_at is None else float(free_at[s]), s) for s in range(slots)]
    heapq.heapify(heap)
    start, slot = [], []
    for d in durations:
        t, s = heapq.heappop(heap)
        start.append(t)
        slot.append(s)
        heapq.heappush(heap, (t + d, s))
    return np.array(start), np.array(slot)


DURATIONS = st.one_of(
    st.lists(st.floats(0.01, 10.0), min_size=1, max_size=400),  # anything
    st.lists(st.integers(1, 3).map(float), min_size=1, max_size=400),  # many ties
    st.integers(1, 50).flatmap(  # causal-like ramps repeated per head
        lambda m: st.integers(1, 12).map(lambda h: [float(k + 1) for k in range(m)] * h)
    ),
)


@settings(max_examples=200, deadline=None)
@given(durations=DURATIONS, slots=st.integers(1, 140))
def test_equals_the_heap(durations, slots):
    got_start, got_slot = list_schedule(np.array(durations), slots)
    want_start, want_slot = heap_schedule(durations, slots)
    np.testing.assert_array_equal(got_start, want_start)
    np.testing.assert_array_equal(got_slot, want_slot)


@settings(max_examples=100, deadline=None)
@given(durations=DURATIONS, slots=st.integers(1, 60), data=st.data())
def test_slots_busy_at_first_equal_the_heap(durations, slots, data):
    """Beside a concurrent kernel, slots free at given times: still exactly the heap's order."""
    free_at = data.draw(
        st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.0, 7.25]), min_size=slots, max_size=slots)
    )
    got_start, got_slot = list_schedule(np.array(durations), slots, np.array(free_at))
    want_start, want_slot = heap_schedule(durations, slots, free_at)
    np.testing.assert_array_equal(got_start, want_start)
    np.testing.assert_array_equal(got_slot, want_slot)


def test_equal_ctas_fill_waves_round_robin():
    rng = np.random.default_rng()
    slots, n = int(rng.integers(1, 300)), int(rng.integers(1, 5000))
    start, slot = list_schedule(np.full(n, 2.5), slots)
    k = np.arange(n)
    np.testing.assert_array_equal(slot, k % slots, err_msg=f"slots={slots} n={n}")
    np.testing.assert_array_equal(start, (k // slots) * 2.5)


@pytest.mark.parametrize("seed", range(6))
def test_long_launches_of_mostly_equal_ctas_equal_the_heap(seed):
    """Many whole waves (placed several at once) broken by a few odd CTAs and by slots that a
    concurrent kernel frees late: still exactly the heap's order."""
    rng = np.random.default_rng(seed)
    slots, n = int(rng.integers(4, 70)), int(rng.integers(500, 4000))
    dur = np.full(n, 1.0 + float(rng.random()))
    odd = rng.integers(0, n, size=max(1, n // 300))
    dur[odd] = rng.random(len(odd)) * 4.0 + 0.1
    if seed % 2:  # per-slot durations that repeat every wave (ties between slots)
        dur = np.tile(rng.integers(1, 4, size=slots).astype(float), n // slots + 1)[:n]
    free_at = rng.choice([0.0, 0.5, 2.0], size=slots) if seed % 3 == 0 else None
    got_start, got_slot = list_schedule(dur, slots, free_at)
    want_start, want_slot = heap_schedule(dur.tolist(), slots, free_at)
    np.testing.assert_array_equal(got_start, want_start)
    np.testing.assert_array_equal(got_slot, want_slot)


@settings(max_examples=50, deadline=None)
@given(durations=DURATIONS, slots=st.integers(1, 20), sms=st.integers(1, 8))
def test_coresidency_is_the_mean_resident_count(durations, slots, sms):
    dur = np.array(durations)
    start, slot = list_schedule(dur, slots)
    end = start + dur
    sm = slot % sms
    got = coresidency(start, end, sm)
    for k in range(0, len(dur), max(1, len(dur) // 15)):  # a sample of CTAs, by brute force
        same = np.flatnonzero(sm == sm[k])
        edges = np.unique(np.concatenate([[start[k], end[k]], start[same], end[same]]))
        edges = edges[(edges >= start[k]) & (edges <= end[k])]
        area = 0.0
        for a, b in itertools.pairwise(edges):
            mid = 0.5 * (a + b)
            area += (b - a) * np.sum((start[same] <= mid) & (end[same] > mid))
        assert np.isclose(got[k], area / dur[k], rtol=1e-9), k


def shared_ends(sm, left, levels, t0):
    """The textbook version, SM by SM: with k CTAs left each runs at 1 / its duration at k;
    step to the next end, take the finished one away, repeat."""
    end = [0.0] * len(sm)
    for s in set(sm):
        rest = {i: left[i] for i in range(len(sm)) if sm[i] == s}
        t = t0
        while rest:
            k = len(rest)
            i_next = min(rest, key=lambda i: rest[i] * levels[i][k - 1])
            dt = rest[i_next] * levels[i_next][k - 1]
            for i in rest:
                rest[i] -= dt / levels[i][k - 1]
            t += dt
            end[i_next] = t
            del rest[i_next]
    return np.array(end)


@settings(max_examples=200, deadline=None)
@given(data=st.data(), sms=st.integers(1, 8), kmax=st.integers(1, 5), t0=st.floats(0.0, 100.0))
def test_shared_tail_equals_stepping_through_each_sm(data, sms, kmax, t0):
    """CTAs left at t0 on their SMs; each SM's survivors speed up as the others end."""
    sm = data.draw(st.lists(st.integers(0, sms - 1), min_size=1, max_size=sms * kmax))
    counts = np.bincount(sm)
    if counts.max() > kmax:
        kmax = int(counts.max())
    m = len(sm)
    left = data.draw(st.lists(st.floats(0.01, 1.0), min_size=m, max_size=m))
    # durations never shorter with more CTAs sharing the SM
    steps = data.draw(
        st.lists(st.lists(st.floats(0.0, 5.0), min_size=kmax, max_size=kmax), min_size=m,
                 max_size=m)
    )  # fmt: skip
    levels = np.cumsum(np.array(steps) + 0.1, axis=1)
    end, work = share_tail(np.array(sm), np.array(left), levels, t0)
    want = shared_ends(sm, left, levels.tolist(), t0)
    assert np.allclose(end, want, rtol=1e-9, atol=1e-9)
    assert np.allclose(work.sum(axis=1), left)  # each CTA does exactly the work it had left
    assert np.all(work >= -1e-12)
    # the SM's time is accounted for: time at k resident = work done there × duration there
    for s in set(sm):
        mine = np.array(sm) == s
        spent = (work[mine] * levels[mine]).sum(axis=0) / np.arange(1, kmax + 1)
        assert spent.sum() == pytest.approx(end[mine].max() - t0, rel=1e-9, abs=1e-9)


def test_shared_tail_refuses_more_ctas_than_durations_given():
    with pytest.raises(ValueError, match="share an SM"):
        share_tail(np.array([0, 0, 0]), np.ones(3), np.ones((3, 2)), 0.0)
