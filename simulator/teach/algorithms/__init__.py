"""Tile programs: each algorithm as the ordered operations of its CTAs, with counts per op.

Every module has NAME, TITLE, ORDER (the loop order the tile grid is drawn in), PSEUDOCODE,
LINE (phase → pseudocode line), program(problem, tiles, **kw) → OpTable,
n_events(problem, tiles, **kw), the closed-form length of the program, and the trace hook
trace_parts(request) → TraceParts (hook.py): its numerics, event states, on-chip contents and
counts for simulator/teach/tracing.py. `hook.TileProgram` types the whole interface.
"""

from __future__ import annotations

from flashscope.simulator.teach.algorithms import decode, fa1, fa2, fa2_bwd, naive
from flashscope.simulator.teach.algorithms.hook import TileProgram

_PROGRAMS: tuple[TileProgram, ...] = (naive, fa1, fa2, fa2_bwd, decode)
ALGORITHMS: dict[str, TileProgram] = {m.NAME: m for m in _PROGRAMS}


def get(name: str) -> TileProgram:
    """The tile program called `name`, or ValueError listing the known ones."""
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise ValueError(f"algo must be one of {', '.join(ALGORITHMS)}, got {name!r}") from None
