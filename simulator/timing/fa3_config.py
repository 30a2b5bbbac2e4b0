"""The FA-3 model's launch configuration (the Hopper kernel's `WsConfig`, which kernels/ holds
and the simulator cannot import), the order of its tiles (the kernel's `_tile`, on the host) and
the interval schema of a warpgroup timeline, simulated or recorded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from flashscope.simulator.core.problem import cdiv
from flashscope.simulator.timing.occupancy import pad_head_dim

PHASES = (
    "load_q",
    "load_k",
    "load_v",
    "wait_k",
    "wait_v",
    "wait_turn",
    "qk",
    "softmax",
    "pv",
    "epilogue",
)
ROLES = ("loader", "consumer")
INTERVAL_KEYS = ("role", "warpgroup", "phase", "tile", "block", "start_ns", "end_ns")
BLOCK_M = 64  # one warpgroup's query rows
SHARED_PER_SM = 233472  # bytes of shared memory all CTAs of an SM may use (Hopper)
SHARED_PER_CTA = 232448
# Share of a pipelined softmax the timed kernel issues before its own P·V is waited for
# (`Fa3Config.softmax_under_pv`), by block_n, or past head_dim 128 (key True)
UNDER_PV: dict[int | bool, float] = {128: 0.07, 256: 0.07, 64: 0.2, True: 0.3}


@dataclass(frozen=True)
class Fa3Config:
    """One launch of the warp-specialized forward (the kernel's WsConfig, block_m fixed at 64).

    `scheduled` and `half_steps` are the kernel's module switches SCHEDULE_TILES and HALF_STEPS
    (both on in the kernel; off, persistent causal programs take their tiles in turn, t =
    program, + programs, …, and an unpipelined causal tile computes its last block whole): the
    kernel ran with both off before it had them, and its benchmark names rows of either one
    off "ws[…]/turns" and "ws[…]/whole". `recorded` is the kernel compiled with its timeline's
    stamps (RECORD, benchmarks/warpgroups.py), which ptxas schedules differently
    (`softmax_under_pv`)."""

    consumers: int = 2
    block_n: int = 128
    stages: int = 2
    pipeline: bool = True
    ctas: int = 1
    pingpong: bool = False
    persistent: bool = False
    band: int = 1
    scheduled: bool = True
    half_steps: bool = True
    recorded: bool = False

    def __post_init__(self) -> None:
        checks = (
            ("consumers", (1, 2, 3)),
            ("block_n", (64, 128, 256)),
            ("stages", (2, 3, 4)),
            ("ctas", (1, 2)),
        )
        for name, allowed in checks:
            value = getattr(self, name)
            if isinstance(value, bool) or value not in allowed:
                raise ValueError(
                    f"{name} must be one of {', '.join(map(str, allowed))}, got {value!r}"
                )
        for name in ("pipeline", "pingpong", "persistent", "scheduled", "half_steps", "recorded"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if isinstance(self.band, bool) or not isinstance(self.band, int) or self.band < 0:
            raise ValueError(f"band must be 0 (all rows) or more, got {self.band!r}")
        if self.pingpong and (self.consumers < 2 or not self.pipeline):
            raise ValueError("pingpong needs pipeline and two or more consumers")

    def softmax_under_pv(self, head_dim: int) -> float:
        """Share of a pipelined step's softmax that the compiled kernel runs before it waits
        for its own warpgroup's P_{j-1} V_{j-1}: the overlap the pipeline is written for.

        The source waits for that product after the softmax (`_pipelined_step`), but ptxas
        hoists the wait (WARPGROUP.DEPBAR.LE gsb0, 0x0) to just after S's: in the sm_90a SASS
        of the timed kernel (Triton 3.6.0, the version of the measured rows, and 3.7.1; ptxas
        12.8) no exp2 of a 128-key block is issued before it (d = 64 and 128; two and three
        warpgroups; causal or not; ping-pong or not), and of the softmax's FP32, SFU and
        shuffle instructions only the row max's first comparisons precede it: 3-13% of them
        with 128-key blocks, 9-27% with 64-key blocks, 11-39% at d = 256 (10 to 16 of 34
        exp2) (UNDER_PV; loop by loop, benchmarks/fa3_softmax_order.py). The softmax then runs
        under the other warpgroups' products only. The recorded kernel (`recorded`), whose
        stamps' clock reads and stores the scheduler keeps in order, issues 64 of a block's 66
        exp2 and 49-80% of those instructions before the wait: its softmax runs under its own
        P V, as the timelines show it (the measured rows time the kernel without them)."""
        if self.recorded:
            return 1.0
        return UNDER_PV[head_dim > 128 or self.block_n]

    @property
    def tile_m(self) -> int:
        return BLOCK_M * self.consumers

    def shared_bytes(self, head_dim: int, elem: int = 2) -> int:
        """Q's and O's stages, the K/V ring and the mbarriers (the kernel's count: past 128
        columns a program of one tile, not persistent, sends O out through Q's stage; a
        head_dim that is not a power of two takes the next one's width, as the kernel's tiles
        do)."""
        head_dim = pad_head_dim(head_dim)
        o_in_q = head_dim > 128 and not self.persistent
        q_and_o = (1 if o_in_q else 2) * self.tile_m * head_dim * elem
        kv = 2 * self.stages * self.block_n * head_dim * elem
        return q_and_o + kv + 8 * (3 * self.consumers + 4 * self.stages)

    def fits(self, head_dim: int, elem: int = 2) -> str | None:
        """Why one CTA of this configuration does not fit in shared memory, or None."""
        need = self.shared_bytes(head_dim, elem)
        if need > SHARED_PER_CTA:
            return (
                f"stages {self.stages} with consumers {self.consumers} and block_n "
                f"{self.block_n} need {need} bytes of shared memory per CTA at head_dim "
                f"{head_dim}; the limit is {SHARED_PER_CTA}"
            )
        return None

    def resident(self, head_dim: int, elem: int = 2) -> int:
        """CTAs one SM holds at once: `ctas`, or fewer where their shared memory does not fit
        (the launch still runs, its CTAs taking turns)."""
        return max(1, min(self.ctas, SHARED_PER_SM // (self.shared_bytes(head_dim, elem) + 1024)))


def causal_bounds(cfg: Fa3Config, rows: int, n_q: int, n_k: int) -> tuple[np.ndarray, np.ndarray]:
    """Of every causal tile in launch order (head by head, in bands of `band` (batch, head) rows,
    heaviest first): its first query row m0 (negative where the top tile starts above row 0)
    and the key it sees up to, hi."""
    n_mb = cdiv(n_q, cfg.tile_m)
    t = np.arange(rows * n_mb)
    band = cfg.band or rows
    first = t // (band * n_mb) * band
    size = np.minimum(band, rows - first)
    rank = (t - first * n_mb) // size
    m0 = n_q - (rank + 1) * cfg.tile_m
    hi = np.clip(np.minimum(n_k, m0 + cfg.tile_m + n_k - n_q), 0, None)
    return m0, hi


def tile_steps(cfg: Fa3Config, rows: int, n_q: int, n_k: int, causal: bool) -> np.ndarray:
    """Key blocks of every tile in launch order (the kernel's `_tile` on the host): tiles go
    head by head; causal ones in bands of `band` (batch, head) rows, heaviest first."""
    if not causal:
        tiles = rows * cdiv(n_q, cfg.tile_m)
        return np.full(tiles, max(cdiv(n_k, cfg.block_n), 1), dtype=np.int64)
    _, hi = causal_bounds(cfg, rows, n_q, n_k)
    steps: np.ndarray = np.maximum(-(-hi // cfg.block_n), 1).astype(np.int64)
    return steps


def tile_masks(
    cfg: Fa3Config, rows: int, n_q: int, n_k: int, causal: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Of every tile in launch order (`tile_steps`' order): its masked steps (the causal
    diagonal's, or the key block N_k does not fill; pipelined, the first step's as well) and
    whether its last step is a half step (the kernel's HALF: unpipelined causal tiles whose
    block_n does not divide their rows compute a last step that sees no key past its block's
    first half over that half alone)."""
    steps = tile_steps(cfg, rows, n_q, n_k, causal)
    if not causal:
        edge = int(n_k % cfg.block_n != 0)
        # pipelined, the first step's softmax is the masked one too (its own code path)
        lead = edge * int(cfg.pipeline and n_k >= cfg.block_n)
        masked = np.full(steps.size, edge + lead, dtype=np.int64)
        return masked, np.zeros(steps.size, dtype=np.int64)
    m0, hi = causal_bounds(cfg, rows, n_q, n_k)
    full = np.minimum(np.clip(m0 + n_k - n_q + 1, 0, None) // cfg.block_n, hi // cfg.block_n)
    masked = (steps - full + (full >= 1) * int(cfg.pipeline)).astype(np.int64)
    half = np.zeros(steps.size, dtype=np.int64)
    if cfg.half_steps and not cfg.pipeline and cfg.tile_m % cfg.block_n != 0:
        half = ((full < steps) & (hi - (steps - 1) * cfg.block_n <= cfg.block_n // 2)).astype(
            np.int64
        )
    return masked, half


def interval_problems(intervals: list[dict[str, Any]], consumers: int) -> list[str]:
    """What is wrong with a warpgroup timeline (empty when it keeps the schema): each interval a
    dict of exactly INTERVAL_KEYS; role loader with warpgroup −1 and a load phase, or consumer
    with warpgroup 0…consumers−1 and any other phase; tile ≥ 0; block ≥ −1 (−1 for per-tile
    phases: load_q, epilogue); finite times with 0 ≤ start_ns ≤ end_ns."""
    out: list[str] = []
    for i, iv in enumerate(intervals):
        if not isinstance(iv, dict) or set(iv) != set(INTERVAL_KEYS):
            out.append(f"interval {i}: keys must be {', '.join(INTERVAL_KEYS)}")
            continue
        role, wg, phase = iv["role"], iv["warpgroup"], iv["phase"]
        if phase not in PHASES:
            out.append(f"interval {i}: unknown phase {phase!r}")
        elif role == "loader":
            if wg != -1 or not phase.startswith("load_"):
                out.append(f"interval {i}: the loader is warpgroup -1 and only loads")
        elif role == "consumer":
            if not (isinstance(wg, int) and 0 <= wg < consumers) or phase.startswith("load_"):
                out.append(f"interval {i}: a consumer is warpgroup 0..{consumers - 1}, no loads")
        else:
            out.append(f"interval {i}: role must be loader or consumer, got {role!r}")
        for key, low in (("tile", 0), ("block", -1)):
            value = iv[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                out.append(f"interval {i}: {key} must be an integer ≥ {low}")
        if phase in ("load_q", "epilogue") and iv["block"] != -1:
            out.append(f"interval {i}: {phase} is per tile (block -1)")
        start, end = iv["start_ns"], iv["end_ns"]
        if not all(isinstance(t, int | float) and math.isfinite(t) for t in (start, end)):
            out.append(f"interval {i}: times must be finite numbers")
        elif not 0 <= start <= end:
            out.append(f"interval {i}: needs 0 ≤ start_ns ≤ end_ns")
    return out
