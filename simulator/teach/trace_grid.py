"""Where each tile of the score matrix falls in a trace's steps, for drawing the grid in order.

The front end colours tile (i, j) as done, current or not yet by comparing the step on screen
with the first and last step of that tile's ops; it never needs to know the loop order. FA-2
fills the grid row by row (q-outer), FA-1 and the backward column by column (kv-outer),
Flash-Decoding a key block of every split in turn (its splits run at once). `out_writes` lists,
per query block, the steps at which that block's running output leaves the chip for global
memory: once per block for FA-2, after every tile for FA-1 (Oᵢ, ℓᵢ, mᵢ), and the backward's
fp32 dQ accumulator after every tile.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from flashscope.simulator.core.trace import PHASE_INDEX, OpTable

# Ops whose global-memory write is a query block's running output (see the module docstring).
OUT_WRITE_PHASES = ("store", "dq", "convert_dq")


def tile_steps(ops: OpTable, n_q: int, n_kv: int) -> dict[str, Any]:
    """(n_q, n_kv) first and last step of each tile's ops (−1: never visited)."""
    c = ops.columns
    qb, kb = c["q_block"], c["kv_block"]
    on_tile = np.flatnonzero((qb >= 0) & (kb >= 0))
    first = np.full((n_q, n_kv), np.iinfo(np.int64).max, dtype=np.int64)
    last = np.full((n_q, n_kv), -1, dtype=np.int64)
    np.minimum.at(first, (qb[on_tile], kb[on_tile]), on_tile)
    np.maximum.at(last, (qb[on_tile], kb[on_tile]), on_tile)
    first[last < 0] = -1
    return {"tile_first": first.tolist(), "tile_last": last.tolist()}


def out_writes(ops: OpTable, n_q: int, algo: str) -> list[list[int]]:
    """Per query block, the steps that write its output (or dQ accumulator) to global memory.

    FA-1's initialization writes every block's O = 0 at step 0 and counts as a first write.
    """
    c = ops.columns
    writes = np.isin(c["phase"], [PHASE_INDEX[p] for p in OUT_WRITE_PHASES])
    writes &= (c["hbm_write"] > 0) | (c["acc_write"] > 0)
    out: list[list[int]] = [[] for _ in range(n_q)]
    if algo == "fa1":
        init = np.flatnonzero(c["phase"] == PHASE_INDEX["init"])
        for block in out:
            block.extend(int(s) for s in init)
    steps = np.flatnonzero(writes & (c["q_block"] >= 0))
    for s in steps.tolist():
        out[int(c["q_block"][s])].append(s)
    return out
