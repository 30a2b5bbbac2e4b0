"""Query parameters of the teaching views' JSON twins, and their checks against the settings.

Pydantic checks types and hard bounds (block ≥ 1); the `check_*` functions hold every size to its
limit in app/config.py and return error entries for app/middleware/errors.py (empty when all is
well).
"""

from __future__ import annotations

import math
import re
import sys
from typing import Any, Literal

from pydantic import BaseModel, Field

from flashscope.app.config import Settings
from flashscope.app.middleware.errors import limit_error, value_error
from flashscope.app.schemas.head_dim import DESCRIPTION as HEAD_DIM
from flashscope.app.schemas.head_dim import head_dim_errors
from flashscope.app.schemas.trace import Dtype
from flashscope.simulator.core import hardware
from flashscope.simulator.core.problem import (
    AttentionProblem,
    TileConfig,
    is_power_of_two,
)
from flashscope.simulator.teach.memory_wall import walk_length
from flashscope.simulator.timing.workload import ALGOS

ExportFormat = Literal["json", "chrome"]
SimAlgo = Literal[ALGOS]  # type: ignore[valid-type]

SEED_NS = "256,512,1024,2048,4096"
# Minus signs people type for −∞: ASCII hyphen and the typographic minus.
NEG_INF = {"-inf", "−inf", "-∞", "−∞", "-infinity", "−infinity"}
MAX_FLOAT = sys.float_info.max  # what a number in the online-softmax vector may reach


class MemoryWallParams(BaseModel):
    """The memory wall: walks of one (batch, head) and the access table over N."""

    n: int = Field(1024, ge=1, description="Sequence length of the step-by-step walk.")
    d: int = Field(64, ge=1, description=HEAD_DIM)
    bm: int = Field(128, ge=1, description="block_m (B_r): query rows per tile, power of two.")
    bn: int = Field(128, ge=1, description="block_n (B_c): keys per tile, power of two.")
    ns: str = Field(SEED_NS, description="Values of N of the access table, comma-separated.")
    dtype: Dtype = Field("fp16", description="Element type, for bytes (counts are elements).")
    format: ExportFormat = Field("json", description="json, or chrome (Trace Event Format).")


class OnlineSoftmaxParams(BaseModel):
    """The online-softmax explorer: a vector and a block size."""

    x: str = Field("1,2,3,6,2,1", description="Numbers separated by commas or spaces; -inf ok.")
    block: int = Field(3, ge=1, description="Entries per block.")


class MemoryScalingParams(BaseModel):
    """Peak memory of naive and flash attention over N on one GPU."""

    gpu: str = Field("h200", description="GPU whose memory is the limit (a hardware preset).")
    batch: int = Field(1, ge=1)
    heads: int = Field(16, ge=1)
    d: int = Field(64, ge=1, description=HEAD_DIM)
    dtype: Dtype = Field("fp16")
    n_min: int = Field(1024, ge=1, description="Smallest N of the sweep; N doubles from it.")
    n_max: int = Field(131072, ge=1, description="Largest N of the sweep (always included).")


def _limit(field: str, value: int, limit: int, what: str = "") -> dict[str, Any]:
    return limit_error(field, f"{field} must be ≤ {limit}{what}, got {value}", value, limit)


def _check_block(field: str, value: int, s: Settings) -> list[dict[str, Any]]:
    if is_power_of_two(value) and s.min_block <= value <= s.max_block:
        return []
    return [
        limit_error(
            field,
            f"{field} must be a power of two from {s.min_block} to {s.max_block}, got {value}",
            value,
            [s.min_block, s.max_block],
        )
    ]


def parse_ints(
    field: str, raw: str, limit: int, max_count: int
) -> tuple[list[int], list[dict[str, Any]]]:
    """Comma-separated positive integers, each ≤ limit, at most max_count of them."""
    tokens = [t for t in re.split(r"[,\s]+", raw.strip()) if t]
    if not tokens:
        return [], [value_error(field, f"{field} must list at least one value of N", raw)]
    if len(tokens) > max_count:
        return [], [
            limit_error(
                field,
                f"{field} must list at most {max_count} values, got {len(tokens)}",
                len(tokens),
                max_count,
            )
        ]
    out, errs = [], []
    for i, tok in enumerate(tokens):
        if not tok.isdigit() or int(tok) < 1:
            errs.append(
                value_error(field, f"{field}[{i}] must be a positive integer: {tok!r}", tok)
            )
        elif int(tok) > limit:
            errs.append(
                limit_error(field, f"{field}[{i}] must be ≤ {limit}, got {tok}", int(tok), limit)
            )
        else:
            out.append(int(tok))
    return out, errs


def check_memory_wall(p: MemoryWallParams, s: Settings) -> tuple[list[int], list[dict[str, Any]]]:
    """The table's values of N and the errors of every field beyond a limit."""
    errs: list[dict[str, Any]] = []
    if p.n > s.memory_wall_max_seq:
        errs.append(_limit("n", p.n, s.memory_wall_max_seq))
    errs += head_dim_errors("d", p.d, s.max_head_dim, "query")
    errs += _check_block("bm", p.bm, s) + _check_block("bn", p.bn, s)
    ns, ns_errs = parse_ints("ns", p.ns, s.memory_wall_table_max_seq, s.memory_wall_table_max_rows)
    errs += ns_errs
    if not errs:
        steps = walk_length(AttentionProblem(seq_q=p.n, head_dim=p.d), TileConfig(p.bm, p.bn))
        longest = max(steps.values())
        if longest > s.memory_wall_max_steps:
            errs.append(
                limit_error(
                    "bn",
                    f"these sizes make a walk of {longest} steps; the limit is "
                    f"{s.memory_wall_max_steps}: use larger blocks or a smaller N",
                    p.bn,
                    s.memory_wall_max_steps,
                )
            )
    return ns, errs


def parse_vector(raw: str, max_len: int) -> tuple[list[float], list[dict[str, Any]]]:
    """Numbers separated by commas or spaces (brackets ignored); −∞ allowed, NaN and +∞ not."""
    tokens = [t for t in re.split(r"[,\s;]+", raw.strip().strip("[]()")) if t]
    if not tokens:
        return [], [value_error("x", "x must have at least one number", raw)]
    if len(tokens) > max_len:
        return [], [
            limit_error(
                "x",
                f"x must have at most {max_len} numbers, got {len(tokens)}",
                len(tokens),
                max_len,
            )
        ]
    out, errs = [], []
    for i, tok in enumerate(tokens):
        if tok.lower() in NEG_INF:
            out.append(-math.inf)
            continue
        try:
            value = float(tok.replace("−", "-"))
        except ValueError:
            errs.append(value_error("x", f"x[{i}] is not a number: {tok!r}", tok))
            continue
        if math.isnan(value) or value == math.inf:
            errs.append(
                value_error("x", f"x[{i}] must be a finite number or -inf, got {tok!r}", tok)
            )
        elif value == -math.inf:  # a number too large for a float64, not one of the −∞ words
            errs.append(
                limit_error(
                    "x",
                    f"x[{i}] = {tok} is beyond the largest float64 ({MAX_FLOAT:.6g}); "
                    "write -inf for a masked entry",
                    tok,
                    MAX_FLOAT,
                )
            )
        else:
            out.append(value)
    return out, errs


def check_online_softmax(
    p: OnlineSoftmaxParams, s: Settings
) -> tuple[list[float], list[dict[str, Any]]]:
    x, errs = parse_vector(p.x, s.online_softmax_max_len)
    if p.block > s.online_softmax_max_len:
        errs.append(_limit("block", p.block, s.online_softmax_max_len))
    return x, errs


def check_memory_scaling(p: MemoryScalingParams, s: Settings) -> list[dict[str, Any]]:
    errs: list[dict[str, Any]] = []
    try:
        hardware.resolve(p.gpu)
    except ValueError as exc:
        errs.append(value_error("gpu", str(exc), p.gpu))
    for field, value, limit in (
        ("batch", p.batch, s.memory_scaling_max_batch),
        ("heads", p.heads, s.memory_scaling_max_heads),
        ("n_min", p.n_min, s.memory_scaling_max_seq),
        ("n_max", p.n_max, s.memory_scaling_max_seq),
    ):
        if value > limit:
            errs.append(_limit(field, value, limit))
    errs += head_dim_errors("d", p.d, s.max_head_dim, "query")
    if not errs and p.n_min > p.n_max:
        errs.append(
            value_error("n_min", f"n_min must be ≤ n_max ({p.n_max}), got {p.n_min}", p.n_min)
        )
    return errs


# The GPU figures /schedule lets people change (the `custom` lever of simulator/core/hardware.py).
SCHEDULE_SPECS = ("sms", "hbm_gbs", "smem_per_sm_kib", "smem_per_block_kib", "clock_ghz", "l2_mib")


class ScheduleParams(BaseModel):
    """The engine's GPU view: a simulation with its timeline, on a preset or an edited GPU.

    The problem fields are those of POST /api/simulate; each spec left out keeps the preset's.
    """

    gpu: str = Field("h100-sxm", description="Preset or alias (GET /api/hardware lists them).")
    algo: SimAlgo = Field("fa2", description="Algorithm whose kernels to simulate.")
    batch: int = Field(2, ge=1)
    heads: int = Field(16, ge=1)
    kv_heads: int | None = Field(None, ge=1, description="Default: heads (no grouping).")
    seq: int = Field(4096, ge=1, description="Query length N.")
    seq_k: int | None = Field(None, ge=1, description="Key/value length; default N.")
    head_dim: int = Field(128, ge=1, description=HEAD_DIM)
    causal: bool = True
    dtype: Dtype = Field("fp16")
    block_m: int = Field(128, ge=1, description="Query rows per CTA (power of two).")
    block_n: int = Field(64, ge=1, description="Keys per inner step (power of two).")
    stages: int = Field(2, ge=1, le=8, description="Software-pipeline depth.")
    warps: int = Field(8, ge=1, le=32, description="Warps per CTA (power of two).")
    splits: int | None = Field(None, ge=1, description="decode: KV splits (default: the rule).")
    sms: int | None = Field(None, ge=1, description="Streaming multiprocessors.")
    hbm_gbs: float | None = Field(None, gt=0, description="DRAM bandwidth, GB/s.")
    smem_per_sm_kib: int | None = Field(None, ge=1, description="Shared memory per SM, KiB.")
    smem_per_block_kib: int | None = Field(None, ge=1, description="Shared memory per CTA, KiB.")
    clock_ghz: float | None = Field(None, gt=0, description="SM clock; clocked rates scale.")
    l2_mib: float | None = Field(None, gt=0, description="L2 cache size, MiB.")

    def specs(self) -> dict[str, int | float]:
        """The GPU fields this request changes."""
        return {k: getattr(self, k) for k in SCHEDULE_SPECS if getattr(self, k) is not None}

    def simulate_body(self) -> dict[str, Any]:
        """The equivalent POST /api/simulate body (without the timeline)."""
        body = self.model_dump(exclude=set(SCHEDULE_SPECS))
        return {**body, "hardware": self.specs() or None}
