"""Request and response models of the API; limits come from settings, checked in `check_*`."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from simulator.problem import is_power_of_two
from simulator.trace import PHASES, TRACE_VERSION

from .config import Settings
from .errors import limit_error, value_error

Algo = Literal["fa2"]


class TraceParams(BaseModel):
    """What the tile stepper traces: one (batch, head) on random data."""

    algo: Algo = Field("fa2", description="Tile program to trace.")
    n: int = Field(256, ge=1, description="Sequence length N (query rows).")
    nk: int | None = Field(None, ge=1, description="Key/value length; default N.")
    d: int = Field(64, ge=1, description="Head dimension.")
    bm: int = Field(64, ge=1, description="block_m: query rows per tile (power of two).")
    bn: int = Field(64, ge=1, description="block_n: keys per tile (power of two).")
    seed: int = Field(0, ge=0, description="Seed of the random Q, K, V.")

    def cache_key(self) -> tuple:
        return tuple(self.model_dump().values())


class StrictTraceParams(TraceParams):
    """TraceParams that refuse unknown fields (WebSocket messages carry nothing else)."""

    model_config = ConfigDict(extra="forbid")


def check_trace_params(p: TraceParams, s: Settings, where: str = "query") -> list[dict]:
    """Errors for every field beyond a server limit (empty when all is well)."""
    errs: list[dict] = []
    nk = p.nk if p.nk is not None else p.n
    for field, value, limit in (
        ("n", p.n, s.max_seq),
        ("nk", nk, s.max_seq),
        ("d", p.d, s.max_head_dim),
        ("seed", p.seed, s.max_seed),
    ):
        if value > limit:
            errs.append(
                limit_error(field, f"{field} must be ≤ {limit}, got {value}", value, limit, where)
            )
    for field in ("bm", "bn"):
        value = getattr(p, field)
        if not is_power_of_two(value) or not s.min_block <= value <= s.max_block:
            errs.append(
                limit_error(
                    field,
                    f"{field} must be a power of two from {s.min_block} to {s.max_block}, "
                    f"got {value}",
                    value,
                    [s.min_block, s.max_block],
                    where,
                )
            )
    if not errs:
        n_events = trace_length(p)
        if n_events > s.max_trace_events:
            errs.append(
                limit_error(
                    "bn",
                    f"these sizes make a trace of {n_events} steps; the limit is "
                    f"{s.max_trace_events}: use larger blocks or a smaller N",
                    p.bn,
                    s.max_trace_events,
                    where,
                )
            )
    return errs


def trace_length(p: TraceParams) -> int:
    """Events of an FA-2 trace: per query block, load_q + 4 per key block + store."""
    nk = p.nk if p.nk is not None else p.n
    q_blocks = -(-p.n // p.bm)
    kv_blocks = -(-nk // p.bn)
    return q_blocks * (2 + 4 * kv_blocks)


def check_step(step: int, n_events: int, where: str = "query") -> list[dict]:
    if not 0 <= step < n_events:
        return [
            value_error("step", f"step must be in [0, {n_events - 1}], got {step}", step, where)
        ]
    return []


# --- responses --------------------------------------------------------------------------------

Floats = list[float | None]


class TileStateModel(BaseModel):
    rows: Annotated[list[int], Field(min_length=2, max_length=2)]
    m: Floats
    l: Floats
    alpha: Floats | None
    o: list[Floats]
    o_hat: list[Floats]
    col_stride: int = Field(ge=1)
    final: bool


Phase = Literal[PHASES]  # type: ignore[valid-type]


class TraceEventModel(BaseModel):
    """One event of the tile trace (see simulator/trace.py for the meaning of each field)."""

    step: int = Field(ge=0)
    phase: Phase
    cta: int = Field(ge=0)
    q_block: int | None
    kv_block: int | None
    masked: bool
    line: int
    hbm_read: int = Field(ge=0)
    hbm_write: int = Field(ge=0)
    stats_read: int = Field(ge=0)
    stats_write: int = Field(ge=0)
    sram_read: int = Field(ge=0)
    sram_write: int = Field(ge=0)
    flops: int = Field(ge=0)
    exps: int = Field(ge=0)
    totals: dict[str, int]
    state: TileStateModel
    sm: int | None = None
    t_start: float | None = None
    t_end: float | None = None


class TraceMeta(BaseModel):
    model_config = ConfigDict(extra="allow")

    trace_version: Literal[TRACE_VERSION]  # type: ignore[valid-type]
    n_events: int = Field(ge=0)
    algo: str
    title: str
    pseudocode: list[str]
    max_abs_err: float


class TraceResponse(BaseModel):
    meta: TraceMeta
    start: int
    events: list[TraceEventModel]


class Health(BaseModel):
    status: Literal["ok"]
    version: str
    backend: Literal["cpu", "cuda"]
    gpu: str | None
