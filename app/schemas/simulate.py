"""Request models and limit checks of the timing engine's API (POST /api/simulate)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from flashscope.app.config import Settings
from flashscope.app.middleware.errors import limit_error, value_error
from flashscope.app.schemas.head_dim import DESCRIPTION as HEAD_DIM
from flashscope.app.schemas.head_dim import head_dim_errors
from flashscope.simulator.core import hardware
from flashscope.simulator.core.problem import (
    MAX_REG_CAP,
    MIN_REG_CAP,
    REG_CAP_STEP,
    is_power_of_two,
)
from flashscope.simulator.timing.workload import ALGOS

Algo = Literal[ALGOS]  # type: ignore[valid-type]


# A register cap per thread (Triton's maxnreg), as every request that takes tiles accepts it.
RegisterCap = Annotated[
    int | None,
    Field(
        ge=MIN_REG_CAP,
        le=MAX_REG_CAP,
        multiple_of=REG_CAP_STEP,
        description="Cap on registers per thread (Triton's maxnreg); default: none (255).",
    ),
]


class SimulateRequest(BaseModel):
    """One simulation: an algorithm on a problem with a tile configuration, on a GPU."""

    model_config = ConfigDict(extra="forbid")

    gpu: str = Field("h100-sxm", description="Preset or alias (GET /api/hardware lists them).")
    algo: Algo = Field("fa2", description="Algorithm whose kernels to simulate.")
    batch: int = Field(1, ge=1)
    heads: int = Field(1, ge=1)
    kv_heads: int | None = Field(None, ge=1, description="Default: heads (no grouping).")
    seq: int = Field(4096, ge=1, description="Query length N.")
    seq_k: int | None = Field(None, ge=1, description="Key/value length; default N.")
    head_dim: int = Field(128, ge=1, description=HEAD_DIM)
    causal: bool = False
    dtype: Literal["fp16", "bf16", "fp32"] = "fp16"
    block_m: int = Field(128, ge=1, description="Query rows per CTA (power of two).")
    block_n: int = Field(64, ge=1, description="Keys per inner step (power of two).")
    stages: int = Field(2, ge=1, le=8, description="Software-pipeline depth.")
    warps: int = Field(8, ge=1, le=32, description="Warps per CTA (power of two).")
    maxnreg: RegisterCap = None
    splits: int | None = Field(None, ge=1, description="decode: KV splits (default: the rule).")
    hardware: dict[str, int | float] | None = Field(
        None, description="Hardware or efficiency fields to change, e.g. {smem_per_sm_kib: 456}."
    )
    timeline: bool = Field(False, description="Include the SM Gantt chart (Plotly figure).")
    impl: Literal["convention", "flashscope"] = Field(
        "convention",
        description="The papers' algorithm (counting convention) or flashscope's own kernels "
        "(fa2 and fa2-bwd only).",
    )
    route: Literal["separate", "atomic"] | None = Field(
        None, description="flashscope fa2-bwd: the dQ route; default: the kernels' choice."
    )
    dq_block_m: int | None = Field(None, ge=1, description="flashscope fa2-bwd: dQ kernel rows.")
    dq_block_n: int | None = Field(None, ge=1, description="flashscope fa2-bwd: dQ kernel keys.")
    dq_stages: int | None = Field(None, ge=1, le=8, description="flashscope fa2-bwd: dQ stages.")
    dq_warps: int | None = Field(None, ge=1, le=32, description="flashscope fa2-bwd: dQ warps.")


def check_simulate_request(r: SimulateRequest, s: Settings) -> list[dict[str, Any]]:
    """Errors for every field beyond a server limit or invalid together (empty when fine)."""
    where = "body"
    errs: list[dict[str, Any]] = []
    try:
        hardware.resolve(r.gpu)
    except ValueError:
        choices = hardware.names()
        errs.append(
            limit_error(
                "gpu",
                f"unknown gpu {r.gpu!r}; choose one of {', '.join(choices)}",
                r.gpu,
                choices,
                where,
            )
        )
    for field, limit in (
        ("batch", s.simulate_max_batch),
        ("heads", s.simulate_max_heads),
        ("seq", s.simulate_max_seq),
        ("seq_k", s.simulate_max_seq),
        ("splits", s.simulate_max_splits),
    ):
        value = getattr(r, field)
        if value is not None and value > limit:
            errs.append(
                limit_error(field, f"{field} must be ≤ {limit}, got {value}", value, limit, where)
            )
    errs += head_dim_errors("head_dim", r.head_dim, s.simulate_max_head_dim, where)
    for field in ("block_m", "block_n"):
        errs += _tile_errors(field, getattr(r, field), s, where)
    errs += _warps_errors("warps", r.warps, where)
    kv = r.kv_heads if r.kv_heads is not None else r.heads
    if r.heads % kv:
        errs.append(
            value_error("kv_heads", f"kv_heads must divide heads ({r.heads}), got {kv}", kv, where)
        )
    if r.causal and r.algo == "decode":
        errs.append(
            value_error(
                "causal",
                "causal must be false for decode: a new token sees the whole KV cache",
                r.causal,
                where,
            )
        )
    errs += _check_hardware_changes(r, s, where)
    errs += _check_kernels(r, s, where)
    return errs


def _check_kernels(r: SimulateRequest, s: Settings, where: str) -> list[dict[str, Any]]:
    """impl flashscope: fa2 or fa2-bwd; route and dQ tiles only there, blocks in range."""
    errs: list[dict[str, Any]] = []
    dq = {f: getattr(r, f) for f in ("dq_block_m", "dq_block_n", "dq_stages", "dq_warps")}
    if r.impl == "flashscope" and r.algo not in ("fa2", "fa2-bwd"):
        errs.append(
            value_error("algo", "impl flashscope has the kernels fa2 and fa2-bwd", r.algo, where)
        )
    if (r.route is not None or any(v is not None for v in dq.values())) and (
        r.impl != "flashscope" or r.algo != "fa2-bwd"
    ):
        errs.append(
            value_error(
                "route", "route and the dQ tiles apply to impl flashscope, fa2-bwd", r.route, where
            )
        )
    for field in ("dq_block_m", "dq_block_n"):
        if dq[field] is not None:
            errs += _tile_errors(field, dq[field], s, where)
    if dq["dq_warps"] is not None:
        errs += _warps_errors("dq_warps", dq["dq_warps"], where)
    return errs


def _tile_errors(field: str, value: int, s: Settings, where: str) -> list[dict[str, Any]]:
    """A tile side must be a power of two within the settings' bounds."""
    lo, hi = s.simulate_min_block, s.simulate_max_block
    if is_power_of_two(value) and lo <= value <= hi:
        return []
    msg = f"{field} must be a power of two from {lo} to {hi}, got {value}"
    return [limit_error(field, msg, value, [lo, hi], where)]


def _warps_errors(field: str, value: int, where: str) -> list[dict[str, Any]]:
    if is_power_of_two(value):
        return []
    return [value_error(field, f"{field} must be a power of two, got {value}", value, where)]


def _check_hardware_changes(r: SimulateRequest, s: Settings, where: str) -> list[dict[str, Any]]:
    """Unknown fields are refused; every field stays in its range around the preset's
    (`hardware.change_bounds`: within a factor for figures, fixed bounds for fractions)."""
    errs: list[dict[str, Any]] = []
    try:
        base = hardware.from_name(r.gpu)
    except ValueError:
        return errs  # the unknown gpu has its own error
    factor = s.simulate_max_hardware_factor
    for name, value in (r.hardware or {}).items():
        if name not in hardware.GPU_FIELDS + hardware.EFFICIENCY_FIELDS:
            errs.append(
                limit_error(
                    name,
                    f"unknown hardware field {name!r}",
                    name,
                    list(hardware.GPU_FIELDS + hardware.EFFICIENCY_FIELDS),
                    where,
                )
            )
            continue
        problem = hardware.check_change(base, name, value, factor)
        if problem is not None:
            bounds = list(hardware.change_bounds(base, name, factor))
            errs.append(limit_error(name, problem, value, bounds, where))
    return errs
