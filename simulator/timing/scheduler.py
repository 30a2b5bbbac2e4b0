"""CTAs to SM slots in launch order, as slots free up: greedy list scheduling, vectorized.

An SM that holds `occ` CTAs at once is `occ` slots; slot s belongs to SM s mod sms, so the first
CTAs of a launch spread one per SM before any SM takes a second (the block scheduler's
breadth-first fill). CTA k starts on the slot that frees first (lowest slot on ties) once CTAs
0 … k−1 have started — exactly what a heap of (free time, slot) pairs would give.

Vectorized: the next m CTAs go to the m earliest free slots in one step, which is exact as long
as none of them ends before a slot later in that step frees (checked with a running minimum);
the step is cut where that fails. CTAs of equal work fill whole waves per step; uneven ones
(causal) take shorter steps, and runs of very short steps fall back to a plain heap. Where a
whole wave left the slots in the order they freed in, the next waves are tried together
(`_waves`): every slot's free times over those waves are one running sum, the same additions
as step by step, and the waves are kept up to the first one that would be cut or would reorder
the slots.
"""

from __future__ import annotations

import heapq

import numpy as np

_SHORT_STEP = 4  # steps placing fewer CTAs than this hand the next wave to the heap
_WAVE_CELLS = 1 << 15  # CTAs that `_waves` tries at once, at most


def list_schedule(
    durations: np.ndarray, slots: int, free_at: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Start time and slot of every CTA (durations in launch order, all > 0).

    `free_at` (slots,): when each slot first becomes free (a concurrent kernel still holds it
    until then); None: every slot is free at time 0.
    """
    dur = np.asarray(durations, dtype=np.float64)
    n = len(dur)
    start = np.zeros(n)
    slot = np.zeros(n, dtype=np.int64)
    if free_at is None:
        m = min(n, slots)
        slot[:m] = np.arange(m)
        if n <= slots:
            return start, slot
        free_t = dur[:slots].copy()  # (slots,) when each slot frees, sorted with free_s
        k = slots
    else:
        free_t = np.asarray(free_at, dtype=np.float64).copy()
        k = 0
    # When each slot frees, by slot (a stable sort of it orders the slots by time, then slot),
    # and the slots in that order with their times.
    by_slot = free_t
    free_s = np.argsort(by_slot, kind="stable")
    free_t = by_slot[free_s]
    waves = 0  # whole waves to try together next (0: the last step did not keep the order)
    while k < n:
        if waves and n - k >= 2 * slots:
            w = min(waves, (n - k) // slots)
            done = _waves(dur[k : k + w * slots], free_t, free_s, start[k:], slot[k:])
            if done:
                k += done * slots
                last = slice(k - slots, k)  # the last wave placed: its ends free the slots
                free_t = start[last] + dur[last]
                by_slot[free_s] = free_t
                waves = min(2 * waves, max(2, _WAVE_CELLS // slots)) if done == w else 0
                continue
            waves = 0
        m = min(slots, n - k)
        f = free_t[:m]
        ends = f + dur[k : k + m]
        run_min = np.minimum.accumulate(ends)
        bad = run_min[:-1] <= f[1:]
        j = int(bad.argmax()) if m > 1 else 0  # the first True, or 0
        v = j + 1 if m > 1 and bad[j] else m
        if v < _SHORT_STEP:
            v = min(slots, n - k)
            free_t, free_s = _heap_step(dur, k, v, free_t, free_s, start, slot)
            by_slot[free_s] = free_t
            k += v
            continue
        start[k : k + v] = f[:v]
        slot[k : k + v] = free_s[:v]
        by_slot[free_s[:v]] = ends[:v]
        k += v
        if v < slots:
            # The slots left, in order, then the v that took a CTA: a stable sort by time
            # merges them (fast: one sorted run), unless two slots free at the same instant
            # (then they go by slot: sorted again below).
            new_t = np.concatenate([free_t[v:], ends[:v]])
            order = np.argsort(new_t, kind="stable")
            new_t = new_t[order]
            if not (new_t[1:] == new_t[:-1]).any():
                free_t = new_t
                free_s = np.concatenate([free_s[v:], free_s[:v]])[order]
                continue
        new_s = np.argsort(by_slot, kind="stable")
        # a whole wave that left the slots in their order: the next waves may go together
        waves = 2 if v == slots >= _SHORT_STEP and np.array_equal(new_s, free_s) else 0
        free_s = new_s
        free_t = by_slot[free_s]
    return start, slot


def _waves(
    dur: np.ndarray, free_t: np.ndarray, free_s: np.ndarray, start: np.ndarray, slot: np.ndarray
) -> int:
    """Place whole waves of CTAs (`dur`: w waves of len(free_t) slots) at once where each
    wave, step by step, would go whole to the slots in the order `free_s` (free at `free_t`,
    sorted) and leave them in that order; fill `start` and `slot` (from their first element)
    for those waves, and return how many they are (the leading ones that qualify; 0: none).

    Each slot's free times over the waves are a running sum from `free_t` (the additions step
    by step does, in its order). A wave qualifies where no CTA of it ends before a later slot
    of it frees (the step's cut) and its ends are sorted, ties by slot (the order the step's
    stable sort by free time, then slot, would give again).
    """
    slots = len(free_t)
    w = len(dur) // slots
    d = dur.reshape(w, slots)
    t = np.empty((w + 1, slots))  # row i: when each slot frees after i waves
    t[0] = free_t
    for i in range(w):
        np.add(t[i], d[i], out=t[i + 1])
    f, ends = t[:-1], t[1:]
    # cut where a CTA ends before a later slot of its wave frees: never where every CTA ends
    # after the wave's last slot frees (f is sorted), else as the step checks
    cut = ends.min(axis=1) <= f[:, -1]
    if cut.any():
        cut[cut] = (np.minimum.accumulate(ends[cut], axis=1)[:, :-1] <= f[cut, 1:]).any(axis=1)
    step = np.diff(ends, axis=1)
    later = np.diff(free_s) > 0
    reordered = ((step < 0) | ((step == 0) & ~later)).any(axis=1)
    bad = cut | reordered
    done = int(bad.argmax()) if bad.any() else w
    if done:
        start[: done * slots] = f[:done].reshape(-1)
        slot[: done * slots] = np.tile(free_s, done)
    return done


def _heap_step(
    dur: np.ndarray,
    k: int,
    count: int,
    free_t: np.ndarray,
    free_s: np.ndarray,
    start: np.ndarray,
    slot: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Place CTAs k … k+count−1 with a heap; return the free list sorted again."""
    heap = list(zip(free_t.tolist(), free_s.tolist(), strict=True))  # already a sorted heap
    d = dur[k : k + count].tolist()
    starts, slots_ = [], []
    for x in d:
        t, s = heap[0]
        heapq.heapreplace(heap, (t + x, s))
        starts.append(t)
        slots_.append(s)
    start[k : k + count] = starts
    slot[k : k + count] = slots_
    heap.sort()
    return (
        np.fromiter((h[0] for h in heap), np.float64, len(heap)),
        np.fromiter((h[1] for h in heap), np.int64, len(heap)),
    )


def sm_time_order(sm: np.ndarray, t: np.ndarray) -> np.ndarray:
    """The order of CTAs (or events) by SM, then time, ties in index order: np.lexsort((t, sm))
    as a stable sort by time and then one by SM (a radix sort: SM numbers are small)."""
    by_t = np.argsort(t, kind="stable")
    sms = sm[by_t]
    if sms.size and sms.min() >= 0 and sms.max() < 1 << 16:
        sms = sms.astype(np.uint16)
    order: np.ndarray = by_t[np.argsort(sms, kind="stable")]
    return order


def coresidency(start: np.ndarray, end: np.ndarray, sm: np.ndarray) -> np.ndarray:
    """Mean number of CTAs resident on each CTA's SM over its lifetime (itself included)."""
    n = len(start)
    if n == 0:
        return np.zeros(0)
    # Events per SM by time, an end before a start at the same instant (no false overlap).
    t = np.concatenate([end, start])
    order = sm_time_order(np.concatenate([sm, sm]), t)
    count = np.cumsum(np.where(order < n, -1.0, 1.0))  # residents after each event
    ts = t[order]
    seg = np.diff(ts, append=ts[-1])  # to the next event (0 across SM boundaries: count is 0)
    area = np.empty(2 * n)  # ∫ residents up to each event, by event
    area[order] = np.concatenate([[0.0], np.cumsum(count * seg)])[:-1]
    life = end - start
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = (area[:n] - area[n:]) / life  # ends first, then starts
    return np.where(life > 0, np.maximum(mean, 1.0), 1.0)


def share_tail(
    sm: np.ndarray, left: np.ndarray, levels: np.ndarray, t0: float
) -> tuple[np.ndarray, np.ndarray]:
    """End times of the CTAs still running at `t0`, after which no CTA starts, on SMs that
    share their throughput among whoever is left.

    `sm` (m,): each CTA's SM; `left` (m,): the share of its work still to do at t0;
    `levels` (m, K): its duration when k + 1 CTAs share its SM (column k). Each SM runs alone:
    with k CTAs resident each progresses at 1 / levels[:, k − 1] of its work per second; when
    one ends the others speed up. Returns (end (m,), work (m, K): the share of each CTA's work
    done while k + 1 CTAs shared its SM).
    """
    m, kmax = levels.shape
    end = np.full(m, t0)
    work = np.zeros((m, kmax))
    if m == 0:
        return end, work
    order = np.argsort(sm, kind="stable")
    s_sorted = sm[order]
    first = np.flatnonzero(np.r_[True, s_sorted[1:] != s_sorted[:-1]])
    row = np.repeat(np.arange(len(first)), np.diff(np.r_[first, m]))
    col = np.arange(m) - first[row]
    width = int(col.max()) + 1
    if width > kmax:
        raise ValueError(f"{width} CTAs share an SM but durations are given for {kmax}")
    idx = np.full((len(first), width), -1)
    idx[row, col] = order
    alive = idx >= 0
    safe = np.maximum(idx, 0)
    rows = np.arange(len(first))
    rest = np.where(alive, left[safe], 0.0)
    clock = np.full(len(first), float(t0))
    for _ in range(width):
        k = alive.sum(axis=1)
        on = k > 0
        dur = levels[safe, np.maximum(k - 1, 0)[:, None]]  # (rows, width)
        to_end = np.where(alive, rest * dur, np.inf)
        j = np.argmin(to_end, axis=1)
        step = np.where(on, to_end[rows, j], 0.0)
        done = np.where(alive, step[:, None] / dur, 0.0)
        rest = np.where(alive, rest - done, 0.0)
        # each CTA once (a CTA holds one cell of idx): a plain indexed add (rows that are
        # on are those with a CTA alive)
        r, q = np.nonzero(alive)
        work[idx[r, q], k[r] - 1] += done[r, q]
        clock = clock + step
        live = rows[on]
        end[idx[live, j[live]]] = clock[live]
        alive[live, j[live]] = False
    return end, work
