"""The trace hook of a tile program: what `build_trace` asks of an algorithm, and what it gets.

Every algorithm module has `trace_parts(request: TraceRequest) -> TraceParts`: it checks its
recorded state against the request's budget, draws the request's random inputs, runs its
numerics and returns its tile program with the states of its events, what a CTA holds on chip
at each, its outputs against the float64 reference, its traffic and what it adds to the grid
metadata. simulator/teach/tracing.py assembles these into a `Trace`, whatever the algorithm.
`TileProgram` is the whole interface of an algorithm module (algorithms/__init__.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from flashscope.simulator.core.precision import round_to_dtype
from flashscope.simulator.core.problem import AttentionProblem, TileConfig, _check_int
from flashscope.simulator.core.trace import OpTable
from flashscope.simulator.teach.onchip import OnChip
from flashscope.simulator.teach.snapshots import DEFAULT_BUDGET_BYTES
from flashscope.simulator.teach.trace_states import StateFn
from flashscope.simulator.teach.traffic import Traffic


def random_inputs(
    p: AttentionProblem, seed: int, *, q_rows: int | None = None, grad: bool = False
) -> tuple[np.ndarray, ...]:
    """Q (q_rows or seq_q, d), K and V (seq_k, d) for one head, standard normal, rounded to
    p.dtype; with `grad`, also the upstream gradient dO shaped like Q."""
    _check_int("seed", seed, 0)
    rng = np.random.default_rng(seed)
    rows = p.seq_q if q_rows is None else q_rows
    shapes = [(rows, p.head_dim), (p.seq_k, p.head_dim), (p.seq_k, p.head_dim)]
    if grad:
        shapes.append((rows, p.head_dim))
    return tuple(round_to_dtype(rng.standard_normal(s), p.dtype) for s in shapes)


@dataclass(frozen=True)
class TraceRequest:
    """One trace to build: the problem and tiles, the seed of its inputs and its limits."""

    problem: AttentionProblem
    tiles: TileConfig
    seed: int = 0
    o_col_limit: int = 64  # head-dim columns shown of an output (averaged in strides beyond)
    budget_bytes: int = DEFAULT_BUDGET_BYTES  # the most recorded state the trace may keep
    splits: int | None = None  # Flash-Decoding: splits (None: the occupancy rule)
    sms: int = 132  # Flash-Decoding: SMs the occupancy rule fills

    def inputs(self, *, q_rows: int | None = None, grad: bool = False) -> tuple[np.ndarray, ...]:
        """The trace's random inputs (`random_inputs` of its problem and seed)."""
        return random_inputs(self.problem, self.seed, q_rows=q_rows, grad=grad)

    def check_budget(self, need_bytes: int) -> None:
        """ValueError where `need_bytes` of recorded state would exceed the budget."""
        if need_bytes > self.budget_bytes:
            raise ValueError(
                f"the trace state needs {need_bytes / 2**20:.0f} MiB, over the budget of "
                f"{self.budget_bytes / 2**20:.0f} MiB: use larger blocks or a smaller problem"
            )


@dataclass(frozen=True)
class TraceParts:
    """What an algorithm supplies to its trace (the hook's answer to a `TraceRequest`)."""

    ops: OpTable  # the tile program of one (batch, head), or of one (batch, kv_head)
    state_of: StateFn  # event index → its state, from the numerics recording
    onchip: OnChip  # what the event's CTA holds in shared memory and registers
    extras: dict[str, Any]  # the outputs and their references, for tests and the API
    compared: list[dict[str, Any]]  # exactness.compare of each output against its reference
    col_stride: int  # head-dim columns averaged into one shown column
    traffic: Traffic  # the algorithm's counts for what the trace covers
    heads: int = 1  # query heads the trace covers (naive attention's counts are scaled by it)
    grid: dict[str, Any] = field(default_factory=dict)  # grid metadata to add or replace


class TileProgram(Protocol):
    """An algorithm module: its names, pseudocode, tile program and trace hook."""

    # the module's constants, read-only here
    @property
    def NAME(self) -> str: ...

    @property
    def TITLE(self) -> str: ...

    @property
    def ORDER(self) -> str: ...  # the loop order the tile grid is drawn in

    @property
    def PSEUDOCODE(self) -> tuple[str, ...]: ...

    @property
    def LINE(self) -> dict[str, int]: ...  # phase → pseudocode line

    def n_events(
        self, p: AttentionProblem, t: TileConfig, *, splits: int | None = ..., sms: int = ...
    ) -> int:
        """The closed-form length of the program."""

    def program(
        self, p: AttentionProblem, t: TileConfig, *, splits: int | None = ..., sms: int = ...
    ) -> OpTable:
        """The ops of one (batch, head), CTAs in launch order."""

    def trace_parts(self, request: TraceRequest) -> TraceParts:
        """The algorithm's parts of the trace `request` asks for."""
