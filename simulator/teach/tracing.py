"""Build a tile trace: random inputs → tile program + numerics → lazily materialized events.

Memory policy (see simulator/teach/snapshots.py): a trace keeps at most `budget_bytes` of recorded
state. Forward and decode traces keep m, ℓ, α per row after every key block and the output
accumulator averaged over head-dim columns (the stride grows until it fits); the backward keeps
its fp32 P and dS (Nq × Nk each) and rebuilds partial sums on request. A trace whose state cannot
fit, or longer than `max_events`, is refused with ValueError before anything is computed.

What differs between algorithms comes from each one's trace hook, `trace_parts`
(simulator/teach/algorithms/hook.py); this module assembles the trace's metadata around it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from flashscope.simulator.core.precision import round_to_dtype
from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.core.tiling import TileGrid
from flashscope.simulator.core.trace import PHASE_INDEX, PHASES, OpTable, Trace
from flashscope.simulator.teach import exactness, traffic
from flashscope.simulator.teach.algorithms import ALGORITHMS, get
from flashscope.simulator.teach.algorithms.hook import (
    TileProgram,
    TraceParts,
    TraceRequest,
    random_inputs,
)
from flashscope.simulator.teach.snapshots import DEFAULT_BUDGET_BYTES
from flashscope.simulator.teach.trace_grid import out_writes, tile_steps

__all__ = ["ALGORITHMS", "build_trace", "random_inputs", "round_to_dtype"]

# Phases where a new tile (or a CTA's first or last op) begins: Shift+→ jumps between them.
MARK_PHASES = (
    "init",
    "load_q",
    "load_kv",
    "store",
    "preprocess_d",
    "load_kv_bwd",
    "load_q_bwd",
    "store_dkdv",
    "convert_dq",
    "store_partial",
    "reduce",
    "naive_softmax",
    "naive_pv",
)

# Where a stepper opens: the first op of this phase (on this key block, where one is named),
# a step that already shows the algorithm at work rather than its empty start.
OPENING = {
    "fa2": ("softmax", 1),  # the first rescale: a second key block meets a running max
    "fa1": ("softmax", 1),
    "fa2-bwd": ("ds", None),  # P, dV and dP in place, dS just formed
    "decode": ("softmax", 1),
    "naive": ("naive_softmax", None),
}


def build_trace(
    algo: str,
    problem: AttentionProblem,
    tiles: TileConfig,
    seed: int = 0,
    *,
    o_col_limit: int = 64,
    budget_bytes: int = DEFAULT_BUDGET_BYTES,
    max_events: int | None = None,
    splits: int | None = None,
    sms: int = 132,
) -> Trace:
    """The stepper's trace of one (batch, head) — decode: one (batch, kv_head) — of `problem`
    on random data drawn from `seed`."""
    module = get(algo)
    n_events = module.n_events(problem, tiles, splits=splits, sms=sms)
    if max_events is not None and n_events > max_events:
        raise ValueError(f"the trace would have {n_events} events, over the limit {max_events}")
    request = TraceRequest(
        problem=problem,
        tiles=tiles,
        seed=seed,
        o_col_limit=o_col_limit,
        budget_bytes=budget_bytes,
        splits=splits,
        sms=sms,
    )
    parts = module.trace_parts(request)
    meta = _meta(module, request, parts)
    return Trace(
        meta=meta,
        ops=parts.ops,
        state_of=parts.state_of,
        extras=parts.extras,
        onchip_of=parts.onchip.at,
    )


def _meta(module: TileProgram, request: TraceRequest, parts: TraceParts) -> dict[str, Any]:
    """The trace's metadata: the algorithm and problem, its grid, exactness, on-chip peak,
    traffic against naive attention's, the shown columns and the steps Shift+→ jumps to."""
    p, t, stride = request.problem, request.tiles, parts.col_stride
    naive = traffic.naive_head(p, t).scaled(parts.heads)
    return {
        "algo": module.NAME,
        "title": module.TITLE,
        "pseudocode": list(module.PSEUDOCODE),
        "line_phases": line_phases(parts.ops, len(module.PSEUDOCODE)),
        "problem": {
            "seq_q": p.seq_q,
            "seq_k": p.seq_k,
            "head_dim": p.head_dim,
            "causal": p.causal,
            "dtype": p.dtype,
            "scale": p.scale,
            "group": p.group,
        },
        "tiles": {"block_m": t.block_m, "block_n": t.block_n},
        "grid": _grid(module, request, parts),
        "seed": request.seed,
        "max_abs_err": float(max(c["max_abs_err"] for c in parts.compared)),
        "exactness": exactness.report(p.dtype, parts.compared),
        "onchip_peak": parts.onchip.peak(),
        "traffic": {
            "algo": parts.traffic.as_dict(p.dtype_bytes),
            "naive": naive.as_dict(p.dtype_bytes),
        },
        "col_stride": stride,
        "d_shown": -(-p.head_dim // stride),
        "marks": _marks(parts.ops),
        "opening_step": opening_step(parts.ops, module.NAME),
    }


def line_phases(ops: OpTable, n_lines: int) -> list[list[str]]:
    """Per pseudocode line, the phases of the ops that run it (a page links each line to the
    figures those phases change)."""
    out: list[list[str]] = [[] for _ in range(n_lines)]
    pairs = np.unique(np.stack([ops.columns["line"], ops.columns["phase"]]), axis=1)
    for line, phase in pairs.T.tolist():
        if 0 <= line < n_lines:
            out[line].append(PHASES[phase])
    return out


def _grid(module: TileProgram, request: TraceRequest, parts: TraceParts) -> dict[str, Any]:
    """The tile grid's metadata: blocks, loop order and tile kinds (with the hook's entries),
    then each tile's first and last step and each query block's output writes."""
    grid = TileGrid(request.problem, request.tiles)
    out: dict[str, Any] = {
        "q_blocks": grid.n_q,
        "kv_blocks": grid.n_kv,
        "order": module.ORDER,
        "kinds": grid.kinds().tolist(),
        **parts.grid,
    }
    out.update(tile_steps(parts.ops, out["q_blocks"], out["kv_blocks"]))
    out["out_writes"] = out_writes(parts.ops, out["q_blocks"], module.NAME)
    return out


def _marks(ops: OpTable) -> list[int]:
    """The steps of MARK_PHASES, in order."""
    marks = np.flatnonzero(np.isin(ops.columns["phase"], [PHASE_INDEX[x] for x in MARK_PHASES]))
    return [int(i) for i in marks]


def opening_step(ops: OpTable, algo: str) -> int:
    """The step a stepper opens on (OPENING): the first op of the phase on the key block, else
    the first op of the phase, else 0."""
    phase, kv_block = OPENING.get(algo, ("", None))
    if phase not in PHASE_INDEX:
        return 0
    hits = ops.columns["phase"] == PHASE_INDEX[phase]
    if kv_block is not None:
        on_block = np.flatnonzero(hits & (ops.columns["kv_block"] == kv_block))
        if on_block.size:
            return int(on_block[0])
    found = np.flatnonzero(hits)
    return int(found[0]) if found.size else 0
