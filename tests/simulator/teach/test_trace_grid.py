"""Tile steps and output writes in trace metadata: the loop order of each algorithm, read back."""

from __future__ import annotations

import numpy as np
import pytest

from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.core.tiling import SKIPPED, TileGrid
from flashscope.simulator.teach.tracing import build_trace


def _case(algo: str):
    seed = int(np.random.default_rng().integers(2**31))
    rng = np.random.default_rng(seed)
    p = AttentionProblem(
        seq_q=int(rng.integers(17, 120)),
        seq_k=int(rng.integers(17, 120)),
        head_dim=16,
        causal=bool(rng.integers(2)),
        dtype="fp32",
    )
    t = TileConfig(int(rng.choice([8, 16, 32])), int(rng.choice([8, 16, 32])))
    return p, t, build_trace(algo, p, t, seed), seed


def _visible(p, t):
    kinds = TileGrid(p, t).kinds()
    return [(i, j) for i in range(kinds.shape[0]) for j in range(kinds.shape[1]) if kinds[i, j]]


@pytest.mark.parametrize(("algo", "row_major"), [("fa2", True), ("fa1", False), ("fa2-bwd", False)])
def test_tiles_are_visited_in_the_loop_order(algo, row_major):
    p, t, trace, seed = _case(algo)
    g = trace.meta["grid"]
    first, last = np.array(g["tile_first"]), np.array(g["tile_last"])
    kinds = np.array(g["kinds"])
    assert ((first < 0) == (kinds == SKIPPED)).all(), f"seed={seed}"
    order = sorted(_visible(p, t), key=(lambda ij: ij) if row_major else (lambda ij: ij[::-1]))
    steps = [(first[i, j], last[i, j]) for i, j in order]
    assert all(a <= b for a, b in steps), f"seed={seed}"
    assert all(steps[k][1] < steps[k + 1][0] for k in range(len(steps) - 1)), f"seed={seed}"
    # Brute force: the first and last event of each tile.
    for i, j in order[:: max(1, len(order) // 7)]:
        hits = [
            k
            for k in range(len(trace))
            if (trace.event(k)["q_block"], trace.event(k)["kv_block"]) == (i, j)
        ]
        assert (first[i, j], last[i, j]) == (min(hits), max(hits)), f"seed={seed} tile {i},{j}"


@pytest.mark.parametrize("algo", ["fa2", "fa1", "fa2-bwd"])
def test_output_writes_per_query_block_match_the_counting_convention(algo):
    p, t, trace, seed = _case(algo)
    grid = TileGrid(p, t)
    writes = trace.meta["grid"]["out_writes"]
    per_block = [len(w) for w in writes]
    if algo == "fa2":
        expect = [1] * grid.n_q  # O once, at the block's store
    elif algo == "fa1":
        expect = (1 + grid.visible).tolist()  # the zero init, then after every visible tile
    else:
        expect = (grid.visible + 1).tolist()  # the dQ accumulator per tile, then the conversion
    assert per_block == expect, f"seed={seed}"
    c = trace.ops.columns
    for block, steps in enumerate(writes):
        assert steps == sorted(steps)
        for s in steps:
            wrote = int(c["hbm_write"][s]) + int(c["acc_write"][s])
            assert wrote > 0, f"seed={seed} block {block} step {s}"
    if algo == "fa1":  # every write of O is Nq·d (init) or r_i·d: the HBM writes add up
        total = sum(int(grid.rows[i]) * p.head_dim * (n - 1) for i, n in enumerate(per_block))
        assert total + p.seq_q * p.head_dim == trace.event(len(trace) - 1)["totals"]["hbm_write"]
