"""The tile trace: the one data contract between simulator, instrumented kernel and front end.

A trace covers one (batch, head) (Flash-Decoding: one (batch, kv_head)). It is a list of events,
one per operation of the tile program (load a tile, a matmul, the online-softmax update, a
store, …), in the order one GPU would run them if the CTAs of that head ran one after another
(kernels in launch order). Each event says what the operation moved and computed, and the
numeric state it leaves behind:

    step, phase, cta, q_block, kv_block, masked (a partial causal tile), line (of the pseudocode)
    hbm_read, hbm_write        elements of Q, K, V, O, dO, dQ, dK, dV (S, P for naive) moved
    stats_read, stats_write    elements of the fp32 row statistics (m, ℓ, LSE, D)
    acc_read, acc_write        elements of fp32 intermediates kept in global memory
                               (the backward's dQ accumulator, Flash-Decoding's partial O)
    sram_read, sram_write      elements read from / written into shared memory
    flops, exps                matmul FLOPs (2·m·n·k) and exponentials
    totals                     running sums of the counters above, this event included
    state                      the quantities of the current tile (see below)
    onchip                     (optional) the buffers the CTA holds in shared memory and
                               registers during this op, with their bytes
                               (simulator/teach/onchip.py)

`state` always has `final` and `col_stride`; the other keys depend on the algorithm family and
are null when they do not apply:
    forward   rows [r0, r1), m, l, alpha, o (as the kernel holds it), o_hat (o / l)
    backward  rows, cols [c0, c1), lse, delta, p, ds (tiles, averaged by tile_stride), dq, dk, dv
    decode    rows, split, m, l, alpha, o, o_hat; partial_o, lse after a split; the merge in
              o, lse during the reduce, with `weight` = e^(LSEₛ − LSE), split s's share

"Global" reads are the requests the kernel makes; on a GPU most K/V re-reads hit in L2, and the
engine splits them into L2 and DRAM traffic. Memory-level names follow the seed documents.

Events are built lazily from column arrays, so a trace of tens of thousands of steps costs only
the state the numerics recorded. JSON has no infinities: m = −∞ is sent as null.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

TRACE_VERSION = 2

FORWARD_PHASES = ("load_q", "load_kv", "qk", "softmax", "pv", "rescale", "store", "init")
BACKWARD_PHASES = (
    "preprocess_d",
    "load_kv_bwd",
    "load_q_bwd",
    "recompute_p",
    "dv",
    "dp",
    "ds",
    "dq",
    "dk",
    "store_dkdv",
    "convert_dq",
)
DECODE_PHASES = ("store_partial", "reduce")
NAIVE_PHASES = ("naive_qk", "naive_softmax", "naive_pv")
PHASES = FORWARD_PHASES + BACKWARD_PHASES + DECODE_PHASES + NAIVE_PHASES

PHASE_INDEX = {name: i for i, name in enumerate(PHASES)}

COUNTERS = (
    "hbm_read",
    "hbm_write",
    "stats_read",
    "stats_write",
    "acc_read",
    "acc_write",
    "sram_read",
    "sram_write",
    "flops",
    "exps",
)


class OpTable:
    """Column store of a tile program's operations; append in order, then `freeze()`.

    `lines` maps a phase to the pseudocode line it executes (used when `add` gets no line).
    """

    def __init__(self, lines: Mapping[str, int] | None = None) -> None:
        self._lines = dict(lines or {})
        self._rows: list[tuple[Any, ...]] = []
        self.columns: dict[str, np.ndarray] = {}

    def add(
        self,
        phase: str,
        *,
        cta: int,
        q_block: int = -1,
        kv_block: int = -1,
        masked: bool = False,
        line: int | None = None,
        snapshot: int = -1,
        **counts: int,
    ) -> None:
        unknown = set(counts) - set(COUNTERS)
        if unknown:
            raise KeyError(f"unknown counters {sorted(unknown)}")
        self._rows.append(
            (
                PHASE_INDEX[phase],
                cta,
                q_block,
                kv_block,
                masked,
                self._lines.get(phase, -1) if line is None else line,
                snapshot,
                *(int(counts.get(c, 0)) for c in COUNTERS),
            )
        )

    def freeze(self) -> OpTable:
        names = ("phase", "cta", "q_block", "kv_block", "masked", "line", "snapshot", *COUNTERS)
        cols = list(zip(*self._rows, strict=True)) if self._rows else [() for _ in names]
        for name, col in zip(names, cols, strict=True):
            dtype = bool if name == "masked" else np.int64
            self.columns[name] = np.asarray(col, dtype=dtype)
        for c in COUNTERS:
            self.columns[f"total_{c}"] = np.cumsum(self.columns[c])
        self._rows = []
        return self

    def __len__(self) -> int:
        return len(self.columns["phase"]) if self.columns else len(self._rows)

    def totals(self) -> dict[str, int]:
        return {c: int(self.columns[c].sum()) for c in COUNTERS}


def json_floats(a: np.ndarray | None, decimals: int = 6) -> Any:
    """Array → nested lists for JSON: rounded, with ±∞ and NaN as null."""
    if a is None:
        return None
    a = np.asarray(a, dtype=np.float64)
    # Rounding scales by 10**decimals, which overflows to ∞ for |a| beyond ~1e(308 − decimals):
    # such values have no decimals to round, so they go out as they are (a null means ±∞ only).
    with np.errstate(over="ignore", invalid="ignore"):
        rounded = np.round(a, decimals)
    a = np.where(np.isfinite(rounded) | ~np.isfinite(a), rounded, a)
    if np.all(np.isfinite(a)):
        return a.tolist()
    out = a.astype(object)
    out[~np.isfinite(a)] = None
    return out.tolist()


StateFn = Callable[[int], dict[str, Any]]


@dataclass
class Trace:
    """A tile trace for one (batch, head): metadata, the op table and a state lookup."""

    meta: dict[str, Any]
    ops: OpTable
    state_of: StateFn  # event index → state dict (already JSON-ready)
    extras: dict[str, Any] = field(default_factory=dict)
    onchip_of: StateFn | None = None  # event index → what the CTA holds on chip (optional)

    def __len__(self) -> int:
        return len(self.ops)

    def event(self, i: int) -> dict[str, Any]:
        n = len(self.ops)
        if not 0 <= i < n:
            raise IndexError(f"step must be in [0, {n - 1}], got {i}")
        c = self.ops.columns
        ev: dict[str, Any] = {
            "step": i,
            "phase": PHASES[int(c["phase"][i])],
            "cta": int(c["cta"][i]),
            "q_block": _opt(c["q_block"][i]),
            "kv_block": _opt(c["kv_block"][i]),
            "masked": bool(c["masked"][i]),
            "line": int(c["line"][i]),
        }
        for name in COUNTERS:
            ev[name] = int(c[name][i])
        ev["totals"] = {name: int(c[f"total_{name}"][i]) for name in COUNTERS}
        ev["state"] = self.state_of(i)
        if self.onchip_of is not None:
            ev["onchip"] = self.onchip_of(i)
        return ev

    def describe(self) -> dict[str, Any]:
        return {"trace_version": TRACE_VERSION, "n_events": len(self), **self.meta}


def _opt(x: np.integer) -> int | None:
    v = int(x)
    return None if v < 0 else v
