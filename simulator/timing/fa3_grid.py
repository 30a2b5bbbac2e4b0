"""The FA-3 model's grid: which slot or program runs each tile of a launch, and for how long.

Non-persistent launches: the CTA scheduler gives each CTA, in launch order, to the slot (SMs ×
resident CTAs) that frees first. Persistent causal launches: the kernel's host schedule
(kernels/hopper_forward.py `schedule`) gives each tile, in launch order, to the program that
would be free first were its cost its key blocks plus one (a half step as half), ties to the
lowest program; launches of more than MAX_SCHEDULED_TILES tiles take their tiles in turn, as
do persistent launches that are not causal.

Both are list schedules, sequential by nature. Exact for launches of at most LIST_WAVES waves;
in longer ones the slots stay level through whole waves but the last LIST_WAVES and the
remainder (a list schedule leaves them at most one tile apart), which are scheduled tile by
tile: a launch of any size costs fewer than (LIST_WAVES + 1) · slots heap steps. The remainder
stays in the tile-by-tile part so that a launch of equal tiles ends as it does on the GPU, its
last partial wave a whole tile long (levelling it would end 21⅓ waves of equal tiles after 21⅓
tiles rather than 22). (Giving each wave's tiles one to a slot instead loses the short causal
tiles' packing: 49% too slow on 16 heads × 16384 at d = 128, against the measured rows of
benchmarks/results/hopper-forward-d128-NVIDIA-H200-2026-11-22.json.)
"""

from __future__ import annotations

import heapq

import numpy as np

LIST_WAVES = 16  # the last waves of a launch scheduled tile by tile
MAX_SCHEDULED_TILES = 1 << 17  # the kernel's: longer persistent causal launches share in turn


def _levelled(n: int, slots: int) -> int:
    """How many of n tiles the slots take level: whole waves, all but the last LIST_WAVES and
    the partial one (which are scheduled tile by tile)."""
    return max(0, n - LIST_WAVES * slots) // slots * slots


def first_free(cost: np.ndarray, slots: int, gap: float = 0.0) -> np.ndarray:
    """Each slot's busy time when tiles, in launch order with these costs, each go to the slot
    free first; a slot waits `gap` between two tiles (CTA dispatch)."""
    n = cost.size
    head = _levelled(n, slots)
    level = (float(cost[:head].sum()) + head * gap) / slots if head else 0.0
    free = [(level, s) for s in range(slots)]
    for c in cost[head:].tolist():
        at, s = heapq.heappop(free)
        heapq.heappush(free, (at + c + gap, s))
    busy = np.empty(slots)
    for at, s in free:
        busy[s] = at
    used = min(n, slots)
    busy[:used] -= gap  # no wait after a slot's last tile
    busy[used:] = np.maximum(busy[used:], 0.0)
    return busy


def host_costs(steps: np.ndarray, half: np.ndarray) -> np.ndarray:
    """The host schedule's cost of each tile (`tile_costs` in the kernel): key blocks, a half
    step as half, plus one for the tile's own work."""
    return steps - 0.5 * half + 1.0


def owners(host: np.ndarray, programs: int, count: int | None = None) -> np.ndarray:
    """The program of each of the first `count` tiles (all by default) under the host schedule
    (each tile to the program free first, ties to the lowest)."""
    n = host.size if count is None else min(count, host.size)
    if host.size > MAX_SCHEDULED_TILES:
        return np.arange(n) % programs
    free = [(0.0, p) for p in range(programs)]
    out = np.empty(n, dtype=np.int64)
    for t, c in enumerate(host[:n].tolist()):
        at, p = heapq.heappop(free)
        out[t] = p
        heapq.heappush(free, (at + c, p))
    return out


def scheduled_busy(
    first: np.ndarray, further: np.ndarray, host: np.ndarray, programs: int
) -> np.ndarray:
    """Each persistent causal program's busy time: its first tile at `first`, every later one
    at `further` (the model's costs), the tiles shared by the host schedule (`host` costs).
    Exact for at most LIST_WAVES tiles per program; longer launches keep the programs level
    (in host cost) until their last LIST_WAVES waves, as `first_free`."""
    n = host.size
    if n > MAX_SCHEDULED_TILES:
        share = np.arange(n) % programs
        busy: np.ndarray = np.bincount(share, weights=further, minlength=programs)
        return busy + np.bincount(share[:programs], weights=(first - further)[:programs],
                                  minlength=programs)  # fmt: skip
    head = _levelled(n, programs)
    busy = np.zeros(programs)
    start = 0.0
    if head:
        busy += float(further[:head].sum()) / programs
        start = float(host[:head].sum()) / programs
    free = [(start, p) for p in range(programs)]
    heapq.heapify(free)
    for t in range(head, n):
        at, p = heapq.heappop(free)
        busy[p] += further[t]
        heapq.heappush(free, (at + host[t], p))
    # the first `programs` tiles go one to each program, in order (all free at once)
    firsts = min(n, programs)
    busy[:firsts] += (first - further)[:firsts]
    return busy
