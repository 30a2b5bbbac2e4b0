"""The FA-3 model's grid (simulator/timing/fa3_grid.py): list schedules of CTAs on slots and of
persistent causal tiles on programs, and the tiles' masked and half steps (fa3_config)."""

from __future__ import annotations

import heapq

import numpy as np
import pytest

from flashscope.simulator.core import hardware
from flashscope.simulator.core.problem import AttentionProblem
from flashscope.simulator.timing import fa3_grid
from flashscope.simulator.timing.fa3 import Fa3Config, simulate_fa3
from flashscope.simulator.timing.fa3_config import tile_masks, tile_steps

H100 = hardware.from_name("h100")


def exact_first_free(cost: np.ndarray, slots: int, gap: float) -> np.ndarray:
    """Tile by tile, each to the slot free first: the reference."""
    free = [(0.0, s) for s in range(slots)]
    for c in cost:
        at, s = heapq.heappop(free)
        heapq.heappush(free, (at + c + gap, s))
    busy = np.zeros(slots)
    for at, s in free:
        busy[s] = max(at - gap, 0.0)
    return busy


def test_first_free_is_the_list_schedule_for_short_launches():
    rng = np.random.default_rng(0)
    for n, slots in ((5, 8), (100, 8), (8 * fa3_grid.LIST_WAVES, 8)):
        cost = rng.uniform(1.0, 50.0, n)
        got = fa3_grid.first_free(cost, slots, 2.0)
        assert np.allclose(np.sort(got), np.sort(exact_first_free(cost, slots, 2.0)))


def test_first_free_of_a_long_launch_is_near_the_list_schedule():
    """Past LIST_WAVES waves the slots are kept level until the last waves: the longest slot is
    within one tile of the exact schedule's."""
    rng = np.random.default_rng(1)
    cost = rng.uniform(1.0, 50.0, 40 * 16)
    got = fa3_grid.first_free(cost, 16)
    want = exact_first_free(cost, 16, 0.0)
    assert abs(got.max() - want.max()) <= cost.max()
    assert got.sum() == pytest.approx(cost.sum())


def test_equal_tiles_of_a_long_launch_end_a_whole_tile_after_the_full_waves():
    """A partial last wave lasts a whole tile, however many waves come before it (levelling
    the remainder would spread it as a fraction of a tile over every slot)."""
    rng = np.random.default_rng(2)
    for _ in range(20):
        slots = int(rng.integers(2, 40))
        waves = int(rng.integers(fa3_grid.LIST_WAVES + 1, 3 * fa3_grid.LIST_WAVES))
        n = waves * slots + int(rng.integers(1, slots))
        tile, gap = float(rng.uniform(1.0, 50.0)), float(rng.uniform(0.0, 3.0))
        got = fa3_grid.first_free(np.full(n, tile), slots, gap)
        assert got.max() == pytest.approx(exact_first_free(np.full(n, tile), slots, gap).max())
        assert got.max() == pytest.approx((waves + 1) * (tile + gap) - gap)


def test_short_causal_tiles_fill_the_slots_the_long_ones_leave():
    """Heaviest first, head by head: the makespan is near the mean load, not a wave of the
    longest tiles per slot (giving each wave's tiles one to a slot is 49% over)."""
    cfg = Fa3Config(2, 128, 2, True, pingpong=True)
    steps = tile_steps(cfg, 16, 16384, 16384, causal=True)
    cost = 2000.0 + 1500.0 * steps
    busy = fa3_grid.first_free(cost, H100.sms, 250.0)
    assert busy.max() < 1.02 * (cost.sum() + 250.0 * cost.size) / H100.sms


def test_the_model_keeps_the_measured_causal_share_at_long_lengths():
    """16 heads × 16384 at d = 128 (benchmarks/results/hopper-forward-d128-NVIDIA-H200-*.json):
    causal measures 0.52–0.55 of full; the model's share stays near half its key blocks."""
    full = AttentionProblem(seq_q=16384, head_dim=128, heads=16, batch=1)
    causal = AttentionProblem(seq_q=16384, head_dim=128, heads=16, batch=1, causal=True)
    cfg = Fa3Config(2, 128, 2, True, pingpong=True)
    share = simulate_fa3(causal, cfg, H100).time_ns / simulate_fa3(full, cfg, H100).time_ns
    assert 0.48 < share < 0.6


def test_owners_follow_the_kernels_host_schedule():
    host = np.array([9.0, 8.0, 6.0, 5.0, 3.0, 2.0] * 4)
    got = fa3_grid.owners(host, 4)
    # the first four tiles one to each program, then each to the program free first
    assert got[:4].tolist() == [0, 1, 2, 3]
    assert got[4] == 3 and got[5] == 2  # free at 5, then at 6 (program 3 then at 8)
    loads = np.bincount(got, weights=host, minlength=4)
    assert loads.max() - loads.min() <= host.max()
    many = np.ones(fa3_grid.MAX_SCHEDULED_TILES + 1)
    assert fa3_grid.owners(many, 7, count=9).tolist() == [0, 1, 2, 3, 4, 5, 6, 0, 1]


def test_scheduled_busy_counts_each_programs_tiles_once():
    rng = np.random.default_rng(2)
    host = rng.integers(2, 20, 500).astype(float)
    first, further = 100.0 * host + 50.0, 100.0 * host
    for programs in (7, 132):
        busy = fa3_grid.scheduled_busy(first, further, host, programs)
        assert busy.sum() == pytest.approx(further.sum() + 50.0 * min(programs, host.size))


def test_masked_and_half_steps_are_the_kernels():
    """Causal tiles of 128 rows and 256-key blocks, unpipelined: every tile's last step is
    masked, and a half step where it sees no key past its block's first half (the kernel's
    HALF); pipelined, the first step is masked too and no step is halved."""
    plain = Fa3Config(2, 256, 2, False)
    steps = tile_steps(plain, 1, 1024, 1024, True)
    masked, half = tile_masks(plain, 1, 1024, 1024, True)
    assert steps.tolist() == [4, 4, 3, 3, 2, 2, 1, 1]
    assert masked.tolist() == [1] * 8
    assert half.tolist() == [0, 1] * 4
    piped = Fa3Config(2, 256, 2, True)
    masked, half = tile_masks(piped, 1, 1024, 1024, True)
    assert masked.tolist() == [2, 2, 2, 2, 2, 2, 1, 1] and not half.any()
    # not causal: a key block N_k does not fill is the masked one
    assert tile_masks(plain, 1, 1024, 1000, False)[0].tolist() == [1] * 8
    assert not tile_masks(plain, 1, 1024, 1024, False)[0].any()
