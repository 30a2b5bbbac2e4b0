"""How the engine places a CTA's warpgroups on Hopper's 64-row matrix instructions."""

from __future__ import annotations

import random

import pytest

from simulator import kernelplan
from simulator.engine import mma_factor, simulate_workload
from simulator.hardware import custom, from_name
from simulator.problem import AttentionProblem, TileConfig


def test_without_a_layout_only_the_width_counts():
    h = random.uniform(1.0, 64.0)
    shapes = ((0.5, 64), (0.5, 128))
    want = (0.5 * (1 + h / 64) + 0.5 * (1 + h / 128)) / (1 + h / 256)
    assert mma_factor(shapes, h) == pytest.approx(want)
    assert mma_factor((), h, 32, 8, 2.0) == 1.0  # no products, nothing to slow


@pytest.mark.parametrize(
    ("rows", "warps", "pad", "gn"),
    [
        (128, 8, 1.0, 1),  # two warpgroups, one 64-row slice each
        (64, 4, 1.0, 1),
        (64, 8, 1.0, 2),  # one slice for two warpgroups: they split the columns
        (32, 4, 2.0, 1),  # a 32-row tile still issues 64-row instructions
        (64, 16, 1.0, 4),
        (256, 8, 1.0, 1),  # more slices than warpgroups: each takes two
    ],
)
def test_warpgroups_fill_rows_first_then_split_columns(rows, warps, pad, gn):
    split = random.uniform(0.0, 2.0)
    shapes = ((1.0, 128),)
    surcharge = pad * (1 + split * (gn - 1))
    assert mma_factor(shapes, 0.0, rows, warps, split) == pytest.approx(surcharge)
    h = random.uniform(1.0, 64.0)
    width = (1 + h * gn / 128) / (1 + h / 256)  # each warpgroup's product is 128 / gn wide
    assert mma_factor(shapes, h, rows, warps, split) == pytest.approx(surcharge * width)


def test_a_column_split_backward_slows_only_with_its_surcharge():
    gpu = from_name("h200", calibrated=False)
    p = AttentionProblem(seq_q=2048, head_dim=128, batch=2, heads=8)
    split8 = kernelplan.build("fa2-bwd", p, TileConfig(64, 64, 2, 8), route="separate",
                              dq_tiles=TileConfig(64, 64, 2, 4))  # fmt: skip
    base = simulate_workload(split8, custom(gpu, wg_split=0.0)).kernels[-1].time_s
    slow = simulate_workload(split8, custom(gpu, wg_split=1.0)).kernels[-1].time_s
    assert slow > 1.2 * base
    # four warps on the same tile place one warpgroup per 64 rows: the surcharge changes nothing
    four = kernelplan.build("fa2-bwd", p, TileConfig(64, 64, 2, 4), route="separate",
                            dq_tiles=TileConfig(64, 64, 2, 4))  # fmt: skip
    a = simulate_workload(four, custom(gpu, wg_split=0.0)).time_s
    b = simulate_workload(four, custom(gpu, wg_split=1.0)).time_s
    assert a == b
