"""Memory-wall walks: their sums equal the closed forms, their tiles change state in order."""

from __future__ import annotations

import numpy as np
import pytest

from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.teach import traffic
from flashscope.simulator.teach.memory_wall import (
    KINDS,
    MATRICES,
    access_table,
    flash_walk,
    naive_walk,
    walk_length,
)

SEED_TABLE = {  # N: (naive, flash) at d = 64, 128 × 128 tiles (the seed's table)
    256: (327_680, 98_304),
    512: (1_179_648, 327_680),
    1024: (4_456_448, 1_179_648),
    2048: (17_301_504, 4_456_448),
    4096: (68_157_440, 17_301_504),
}


def _sizes(rng: np.random.Generator) -> list[tuple[int, int, int, int, int]]:
    """Awkward fixed sizes plus fresh random ones: (seq_q, seq_k, d, block_m, block_n)."""
    fixed = [(1, 1, 1, 2, 2), (17, 17, 8, 4, 8), (97, 200, 64, 32, 16), (200, 97, 16, 64, 128)]
    fresh = [
        (
            int(rng.integers(1, 300)),
            int(rng.integers(1, 300)),
            int(rng.integers(1, 80)),
            int(2 ** rng.integers(1, 8)),
            int(2 ** rng.integers(1, 8)),
        )
        for _ in range(6)
    ]
    return fixed + fresh


def test_walk_totals_equal_the_closed_forms():
    seed = int(np.random.SeedSequence().entropy % 2**32)
    for nq, nk, d, bm, bn in _sizes(np.random.default_rng(seed)):
        p = AttentionProblem(seq_q=nq, seq_k=nk, head_dim=d)
        t = TileConfig(bm, bn)
        msg = f"seed={seed} nq={nq} nk={nk} d={d} bm={bm} bn={bn}"
        naive, flash = naive_walk(p, t), flash_walk(p, t)
        assert {"naive": len(naive), "flash": len(flash)} == walk_length(p, t), msg
        want = traffic.naive_head(p)
        assert int(naive.hbm_read.sum()) == want.hbm_read, msg
        assert int(naive.hbm_write.sum()) == want.hbm_write, msg
        want = traffic.fa2_head(p, t)
        assert int(flash.hbm_read.sum()) == want.hbm_read, msg
        assert int(flash.hbm_write.sum()) == want.hbm_write, msg
        assert int(flash.stats_write.sum()) == want.stats_write, msg
        # S and P cross HBM twice each for naive (written, read back) and never for flash.
        for m in ("S", "P"):
            assert int(naive.write[m].sum()) == nq * nk == int(naive.read[m].sum()), msg
            assert not flash.read[m].any() and not flash.write[m].any(), msg
        for m in ("Q", "K", "V"):  # naive reads each input once
            assert int(naive.read[m].sum()) == (nq if m == "Q" else nk) * d, msg
        assert set(naive.read) == set(MATRICES)


def test_tiles_change_state_in_order():
    seed = int(np.random.SeedSequence().entropy % 2**32)
    for nq, nk, d, bm, bn in _sizes(np.random.default_rng(seed)):
        p = AttentionProblem(seq_q=nq, seq_k=nk, head_dim=d)
        t = TileConfig(bm, bn)
        msg = f"seed={seed} nq={nq} nk={nk} bm={bm} bn={bn}"
        g = naive_walk(p, t).tile_steps
        shape = (t.q_blocks(p), t.kv_blocks(p))
        for grid in g.values():
            assert grid.shape == shape and (grid >= 0).all(), msg
        # Written by kernel 1, read back and turned into P by kernel 2, read by kernel 3.
        assert (g["s_written"] < g["s_read"]).all(), msg
        assert (g["s_read"] == g["p_written"]).all(), msg
        assert (g["p_written"] < g["p_read"]).all(), msg
        # Kernel 2 starts only after kernel 1 wrote every tile.
        assert g["s_read"].min() > g["s_written"].max(), msg
        flash = flash_walk(p, t)
        on_chip = flash.tile_steps["on_chip"]
        assert (np.diff(on_chip.ravel()) > 0).all(), msg  # row-major, one tile per step
        assert all(KINDS[k] == "tile" for k in flash.kind[on_chip.ravel()]), msg


def test_access_table_reproduces_the_seed():
    rows = access_table(list(SEED_TABLE), 64, TileConfig(128, 128))
    for row in rows:
        naive, flash = SEED_TABLE[row["n"]]
        assert (row["naive"], row["flash"], row["flash_seed"]) == (naive, flash, flash)
        assert row["ratio"] == pytest.approx(naive / flash)
        assert row["saving"] == pytest.approx(1 - flash / naive)


@pytest.mark.parametrize("n", [1, 17, 97, 200, 1000])
def test_seed_formula_rounds_partial_tiles_up(n):
    (row,) = access_table([n], 64, TileConfig(128, 64))
    assert row["flash_seed"] >= row["flash"]
    assert (row["flash_seed"] == row["flash"]) == (n % 128 == 0)
