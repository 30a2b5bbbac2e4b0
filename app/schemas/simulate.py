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
from flashscope.simulator.timing import fa3
from flashscope.simulator.timing.kernelplan import WS_DTYPES, WS_HEAD_DIMS
from flashscope.simulator.timing.workload import ALGOS

Algo = Literal[(*ALGOS, fa3.ALGO)]  # type: ignore[valid-type]
# The FA-3 model's own fields (algo fa3 only; None: the kernel's default).
FA3_FIELDS = ("consumers", "pipeline", "pingpong", "persistent", "ctas", "band", "program",
              "shown_tiles")  # fmt: skip
FA3_DEFAULTS = {"consumers": 2, "pipeline": True, "pingpong": False, "persistent": False,
                "ctas": 1, "band": 1, "program": 0, "shown_tiles": 2}  # fmt: skip
FA3_MAX_INTERVALS = 2000  # the most timeline intervals an fa3 response carries


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
    dtype: Literal["fp16", "bf16", "fp32", "fp8"] = Field(
        "fp16", description="fp8 (e4m3): fa3 only, a simulated what-if."
    )
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
    route: Literal["separate", "atomic", "ws"] | None = Field(
        None,
        description="flashscope fa2-bwd: the Triton backward's dQ route, or ws (the Gluon "
        f"backward: fp16/bf16, head_dim {WS_HEAD_DIMS[0]}-{WS_HEAD_DIMS[1]}, a multiple of 8); "
        "default: the kernels' choice.",
    )
    dq_block_m: int | None = Field(None, ge=1, description="flashscope fa2-bwd: dQ kernel rows.")
    dq_block_n: int | None = Field(None, ge=1, description="flashscope fa2-bwd: dQ kernel keys.")
    dq_stages: int | None = Field(None, ge=1, le=8, description="flashscope fa2-bwd: dQ stages.")
    dq_warps: int | None = Field(None, ge=1, le=32, description="flashscope fa2-bwd: dQ warps.")
    consumers: int | None = Field(
        None, ge=1, le=3, description="fa3: consumer warpgroups of 64 query rows (default 2)."
    )
    pipeline: bool | None = Field(
        None, description="fa3: S of the next block issued before this one's P·V (default true)."
    )
    pingpong: bool | None = Field(
        None, description="fa3: warpgroups take turns issuing their products (default false)."
    )
    persistent: bool | None = Field(
        None, description="fa3: one program per CTA slot looping over tiles (default false)."
    )
    ctas: int | None = Field(None, ge=1, le=2, description="fa3: CTAs per SM (default 1).")
    band: int | None = Field(
        None, ge=0, le=65536, description="fa3 causal: heads per band of tiles, 0 all (default 1)."
    )
    program: int | None = Field(
        None, ge=0, description="fa3: the program (CTA) whose timeline is shown (default 0)."
    )
    shown_tiles: int | None = Field(
        None, ge=1, le=4, description="fa3: tiles of that program the timeline shows (default 2)."
    )

    def fa3_options(self) -> dict[str, Any]:
        """The FA-3 fields with the kernel's defaults filled in."""
        return {k: v if (v := getattr(self, k)) is not None else FA3_DEFAULTS[k]
                for k in FA3_FIELDS}  # fmt: skip


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
    errs += _check_fa3(r, where)
    return errs


def _check_fa3(r: SimulateRequest, where: str) -> list[dict[str, Any]]:
    """algo fa3: its fields in the kernel's ranges (block_n 64/128/256, stages 2–4, ping-pong
    with pipeline and two or more consumers, shared memory that fits, a shown program that
    exists); other algorithms: none of its fields, no fp8."""
    errs: list[dict[str, Any]] = []
    if r.algo != fa3.ALGO:
        for name in FA3_FIELDS:
            if getattr(r, name) is not None:
                errs.append(value_error(name, f"{name} applies to algo fa3", getattr(r, name),
                                        where))  # fmt: skip
        if r.dtype == "fp8":
            errs.append(value_error("dtype", "dtype fp8 is a what-if of algo fa3", r.dtype, where))
        return errs
    o = r.fa3_options()
    if r.dtype == "fp32":
        errs.append(limit_error("dtype", "dtype must be fp16, bf16 or fp8 for fa3", r.dtype,
                                list(fa3.DTYPES), where))  # fmt: skip
    if r.block_n not in (64, 128, 256):
        errs.append(limit_error("block_n", f"block_n must be 64, 128 or 256 for fa3, got "
                                f"{r.block_n}", r.block_n, [64, 256], where))  # fmt: skip
    if not 2 <= r.stages <= 4:
        errs.append(limit_error("stages", f"stages must be from 2 to 4 for fa3, got {r.stages}",
                                r.stages, [2, 4], where))  # fmt: skip
    if o["pingpong"] and (o["consumers"] < 2 or not o["pipeline"]):
        errs.append(value_error("pingpong", "pingpong needs pipeline and two or more consumers",
                                o["pingpong"], where))  # fmt: skip
    if errs:
        return errs
    cfg = fa3_config(r)
    why = cfg.fits(r.head_dim, fa3.ELEMENT_BYTES[r.dtype])
    if why is not None:
        limit = fa3.SHARED_PER_CTA
        errs.append(limit_error("stages", why, r.stages, limit, where))
    return errs


def fa3_config(r: SimulateRequest) -> fa3.Fa3Config:
    """The FA-3 configuration of a checked request."""
    o = r.fa3_options()
    return fa3.Fa3Config(o["consumers"], r.block_n, r.stages, o["pipeline"], o["ctas"],
                         pingpong=o["pingpong"], persistent=o["persistent"],
                         band=o["band"])  # fmt: skip


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
    lo, hi = WS_HEAD_DIMS
    if r.route == "ws" and not (
        r.dtype in WS_DTYPES and lo <= r.head_dim <= hi and r.head_dim % 8 == 0
    ):
        msg = (
            f"route ws (the Gluon backward) takes fp16 or bf16, head_dim {lo}-{hi}, a multiple of 8"
        )
        errs.append(value_error("route", msg, r.route, where))
    if r.route == "ws" and any(v is not None for v in dq.values()):
        msg = "the dQ tiles apply to the separate route, not ws"
        errs.append(value_error("route", msg, r.route, where))
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
