"""Tile programs: each algorithm as the ordered operations of its CTAs, with counts per op.

Every module has NAME, TITLE, ORDER (the loop order the tile grid is drawn in), PSEUDOCODE,
LINE (phase → pseudocode line), program(problem, tiles, **kw) → OpTable and
n_events(problem, tiles, **kw), the closed-form length of the program.
"""

from __future__ import annotations

from types import ModuleType

from flashscope.simulator.teach.algorithms import decode, fa1, fa2, fa2_bwd, naive

ALGORITHMS: dict[str, ModuleType] = {m.NAME: m for m in (naive, fa1, fa2, fa2_bwd, decode)}


def get(name: str) -> ModuleType:
    """The tile program called `name`, or ValueError listing the known ones."""
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise ValueError(f"algo must be one of {', '.join(ALGORITHMS)}, got {name!r}") from None
