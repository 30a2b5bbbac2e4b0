"""Request and response models of the API; limits come from settings, checked in `check_*`."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from flashscope.app.config import Settings
from flashscope.app.middleware.errors import limit_error, value_error
from flashscope.app.runs.cost import budget_errors
from flashscope.app.runs.jobs import NEEDS_HOPPER, NO_GPU_HERE
from flashscope.app.schemas.head_dim import DESCRIPTION as HEAD_DIM
from flashscope.app.schemas.head_dim import head_dim_errors
from flashscope.app.schemas.simulate import RegisterCap
from flashscope.simulator.core.problem import (
    MAX_HEAD_DIM,
    AttentionProblem,
    TileConfig,
    is_power_of_two,
)
from flashscope.simulator.core.trace import PHASES, TRACE_VERSION
from flashscope.simulator.teach.algorithms import ALGORITHMS
from flashscope.simulator.timing.fa3_config import SHARED_PER_CTA, Fa3Config

Algo = Literal["naive", "fa1", "fa2", "fa2-bwd", "decode"]
Dtype = Literal["fp32", "fp16", "bf16"]


class TraceParams(BaseModel):
    """What the tile stepper traces: one (batch, head) — decode: one (batch, kv_head) — on
    random data."""

    algo: Algo = Field("fa2", description="Tile program to trace.")
    n: int = Field(256, ge=1, description="Sequence length N (query rows).")
    nk: int | None = Field(None, ge=1, description="Key/value length; default N.")
    d: int = Field(64, ge=1, description=HEAD_DIM)
    bm: int = Field(64, ge=1, description="block_m: query rows per tile (power of two).")
    bn: int = Field(64, ge=1, description="block_n: keys per tile (power of two).")
    seed: int = Field(0, ge=0, description="Seed of the random Q, K, V (and dO).")
    causal: bool = Field(False, description="Causal mask, aligned bottom-right.")
    dtype: Dtype = Field("fp32", description="Storage dtype whose rounding is emulated.")
    group: int = Field(1, ge=1, description="decode: query heads sharing the K/V head.")
    splits: int | None = Field(
        None, ge=1, description="decode: KV splits; default the occupancy rule."
    )

    def cache_key(self) -> tuple[Any, ...]:
        return tuple(self.model_dump().values())

    def problem(self) -> tuple[AttentionProblem, TileConfig, dict[str, Any]]:
        """The simulator's problem, tiles and extra program arguments for these parameters."""
        problem = AttentionProblem(
            seq_q=self.n,
            seq_k=self.nk,
            head_dim=self.d,
            heads=self.group,
            kv_heads=1,
            causal=self.causal,
            dtype=self.dtype,
        )
        kw = {"splits": self.splits} if self.algo == "decode" else {}
        return problem, TileConfig(block_m=self.bm, block_n=self.bn), kw


class StrictTraceParams(TraceParams):
    """TraceParams that refuse unknown fields (WebSocket messages carry nothing else)."""

    model_config = ConfigDict(extra="forbid")


def over_limit(field: str, value: int, limit: int, where: str) -> dict[str, Any]:
    return limit_error(field, f"{field} must be ≤ {limit}, got {value}", value, limit, where)


def block_errors(fields: dict[str, int], s: Settings, where: str) -> list[dict[str, Any]]:
    errs = []
    for field, value in fields.items():
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
    return errs


def check_trace_params(p: TraceParams, s: Settings, where: str = "query") -> list[dict[str, Any]]:
    """Errors for every field beyond a server limit (empty when all is well)."""
    nk = p.nk if p.nk is not None else p.n
    # Decoding has few query rows: its cache may be far longer than a forward trace's keys.
    nk_limit = s.max_decode_cache if p.algo == "decode" else s.max_seq
    errs = [
        over_limit(field, value, limit, where)
        for field, value, limit in (
            ("n", p.n, s.max_seq),
            ("nk", nk, nk_limit),
            ("seed", p.seed, s.max_seed),
            ("group", p.group, s.max_group),
            ("splits", p.splits or 0, s.max_splits),
        )
        if value > limit
    ]
    errs += head_dim_errors("d", p.d, s.max_head_dim, where)
    errs += block_errors({"bm": p.bm, "bn": p.bn}, s, where)
    if p.algo == "decode":
        if p.causal:
            errs.append(
                value_error("causal", "decode has no causal mask: set causal=false", True, where)
            )
        if p.group * p.n > s.max_decode_rows:
            errs.append(
                limit_error(
                    "n",
                    f"decode packs group × n = {p.group * p.n} query rows into one CTA; "
                    f"the limit is {s.max_decode_rows}",
                    p.n,
                    s.max_decode_rows,
                    where,
                )
            )
    if not errs:
        problem, tiles, kw = p.problem()
        n_events = ALGORITHMS[p.algo].n_events(problem, tiles, **kw)
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


def check_step(step: int, n_events: int, where: str = "query") -> list[dict[str, Any]]:
    if not 0 <= step < n_events:
        return [
            value_error("step", f"step must be in [0, {n_events - 1}], got {step}", step, where)
        ]
    return []


# --- responses --------------------------------------------------------------------------------

Floats = list[float | None]


Matrix = list[Floats]
Span = Annotated[list[int], Field(min_length=2, max_length=2)]


class TileStateModel(BaseModel):
    """The numeric state an event leaves behind; keys that do not apply are null.

    forward: rows, m, l, alpha, o, o_hat; on a tile also cols, s (the score tile, masked pairs
    null) and from the softmax on p, l_prev, l_rescaled (α·ℓ), p_sum (ℓ′ = l_rescaled + p_sum),
    at FA-2's P·V o_rescaled (α·Õ) and pv (P·Vⱼ); the simulator's forward also err (per row,
    max |O_so_far − O_exact|), err_history (the block's largest error after each key block) and
    err_floor (u · max |O_exact|). backward: rows, cols, lse, delta, p, ds (tile_stride), dq, dk,
    dv; decode: rows, split, m, l, alpha, o, o_hat, partial_o, partial_lse, weight, lse.
    Row vectors have one entry per row of `rows`; dk and dv one row per key of `cols`.
    """

    model_config = ConfigDict(extra="forbid")

    col_stride: int = Field(ge=1)
    final: bool
    rows: Span | None = None
    cols: Span | None = None
    m: Floats | None = None
    l: Floats | None = None
    alpha: Floats | None = None
    o: Matrix | None = None
    o_hat: Matrix | None = None
    lse: Floats | None = None
    delta: Floats | None = None
    p: Matrix | None = None
    ds: Matrix | None = None
    tile_stride: int | None = Field(None, ge=1)
    dq: Matrix | None = None
    dk: Matrix | None = None
    dv: Matrix | None = None
    split: int | None = Field(None, ge=0)
    partial_o: Matrix | None = None
    partial_lse: Floats | None = None
    weight: Floats | None = None
    s: Matrix | None = None
    l_prev: Floats | None = None
    l_rescaled: Floats | None = None
    p_sum: Floats | None = None
    o_rescaled: Matrix | None = None
    pv: Matrix | None = None
    err: list[float] | None = None
    err_history: list[float] | None = None
    err_floor: float | None = Field(None, ge=0)

    @model_validator(mode="after")
    def _shapes_agree(self) -> TileStateModel:
        for name in ("rows", "cols"):
            span = getattr(self, name)
            if span is not None and not 0 <= span[0] <= span[1]:
                raise ValueError(f"{name} must be [start, stop] with 0 ≤ start ≤ stop")
        per_row: tuple[str, ...] = ("m", "l", "alpha", "lse", "delta", "partial_lse", "o")
        per_row += ("o_hat", "dq", "err", "l_prev", "l_rescaled", "p_sum", "o_rescaled", "pv")
        checks = [(self.rows, (*per_row, "partial_o", "weight")), (self.cols, ("dk", "dv"))]
        for span, names in checks:
            for name in names:
                value = getattr(self, name)
                if value is None:
                    continue
                if span is None:
                    raise ValueError(f"{name} needs {'cols' if name in ('dk', 'dv') else 'rows'}")
                if len(value) != span[1] - span[0]:
                    raise ValueError(f"{name} has {len(value)} entries for {span[1] - span[0]}")
        matrices = ("o", "o_hat", "p", "ds", "dq", "dk", "dv", "partial_o", "s", "o_rescaled", "pv")
        for name in matrices:
            value = getattr(self, name)
            if value and len({len(row) for row in value}) > 1:
                raise ValueError(f"{name} rows must all have the same length")
        if self.s and self.p and (len(self.s), len(self.s[0])) != (len(self.p), len(self.p[0])):
            raise ValueError("s and p must have the same shape")
        return self


Phase = Literal[PHASES]  # type: ignore[valid-type]


class OnChipBuffer(BaseModel):
    """One tile or vector a CTA holds on chip (simulator/teach/onchip.py)."""

    name: str
    where: Literal["smem", "regs"]
    shape: Span
    elem_bytes: int = Field(ge=1)
    bytes: int = Field(ge=0)
    what: str


class OnChip(BaseModel):
    """What the CTA holds on chip during one op: buffers and their bytes by storage."""

    buffers: list[OnChipBuffer]
    smem_bytes: int = Field(ge=0)
    reg_bytes: int = Field(ge=0)


class TraceEventModel(BaseModel):
    """One event of the tile trace (see simulator/core/trace.py for the meaning of each field)."""

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
    acc_read: int = Field(ge=0)
    acc_write: int = Field(ge=0)
    sram_read: int = Field(ge=0)
    sram_write: int = Field(ge=0)
    flops: int = Field(ge=0)
    exps: int = Field(ge=0)
    totals: dict[str, int]
    state: TileStateModel
    onchip: OnChip | None = None
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
    status: Literal["ok", "degraded"] = Field(
        description="'ok', or 'degraded' when a part (the shared room store) does not work; "
        "pages and computations still do."
    )
    reasons: list[str] = Field(
        default_factory=list, description="What does not work, when degraded."
    )
    version: str
    backend: Literal["cpu", "cuda"]
    gpu: str | None
    label: str = Field(
        description="What the server runs on, as every page's header shows it: "
        "'CPU: simulator and Triton interpreter' or 'GPU: <name>'."
    )
    live_timing: bool = Field(description="Whether live runs can be timed (a GPU is there).")


# --- live runs --------------------------------------------------------------------------------


class RunRequest(BaseModel):
    """A live run of flashscope's kernel on one problem and tile configuration."""

    model_config = ConfigDict(extra="forbid")

    batch: int = Field(1, ge=1)
    heads: int = Field(1, ge=1)
    kv_heads: int | None = Field(None, ge=1, description="Default: heads (no grouping).")
    seq: int = Field(256, ge=1, description="Query length N.")
    seq_k: int | None = Field(None, ge=1, description="Key/value length; default N.")
    head_dim: int = Field(64, ge=1, description=HEAD_DIM)
    causal: bool = False
    dtype: Literal["fp16", "bf16", "fp32"] = "fp16"
    block_m: int = Field(64, ge=16, le=256)
    block_n: int = Field(64, ge=16, le=256)
    stages: int = Field(2, ge=1, le=8)
    warps: int = Field(4, ge=1, le=16)
    maxnreg: RegisterCap = None
    mode: Literal["fwd", "bwd", "decode"] = Field(
        "fwd",
        description="fwd, bwd, or decode (Flash-Decoding: heads = the group of query heads of "
        "one K/V head, seq = new tokens, seq_k = the cache).",
    )
    what: Literal["time", "trace", "both", "timeline", "warpgroups"] = Field(
        "time",
        description="time (GPU), trace (the kernel against the simulator on the same inputs), "
        "both, timeline (GPU, fwd: each program's start, end and SM), or warpgroups (an H100 "
        "or H200, fwd: the Gluon forward's warpgroups recorded phase by phase, and the "
        "recording's overhead).",
    )
    route: Literal["tiles", "default"] = Field(
        "tiles",
        description="tiles: the kernel at the request's tiles; default: what flash_attention "
        "picks on its own (tuned tiles, or the Gluon forward on Hopper). Timing only.",
    )
    splits: int | None = Field(None, ge=1, description="decode: KV splits (default: the rule).")
    consumers: int = Field(
        2, ge=1, le=3, description="warpgroups: consumer warpgroups of 64 query rows each."
    )
    pipeline: bool = Field(
        True, description="warpgroups: S of the next block issued before this block's P·V."
    )
    pingpong: bool = Field(False, description="warpgroups: the consumers take turns.")
    persistent: bool = Field(False, description="warpgroups: one program per SM, over tiles.")
    seed: int = Field(0, ge=0, le=2**32 - 1)


def check_run_request(
    r: RunRequest,
    s: Settings,
    backend: str,
    capability: str | None = None,
    gpu: str | None = None,
) -> list[dict[str, Any]]:
    """Errors for a run beyond the server's limits on this backend (empty when all is well):
    each field's own bound, then what the run would compute against the backend's budgets
    (app/runs/cost.py), all before any work starts. `capability` ("9.0") and `gpu` (its name):
    the server's GPU where known, for the runs only some GPUs can do."""
    errs: list[dict[str, Any]] = []
    where = "body"
    for field in ("block_m", "block_n", "warps"):
        value = getattr(r, field)
        if not is_power_of_two(value):
            errs.append(
                value_error(field, f"{field} must be a power of two, got {value}", value, where)
            )
    errs += head_dim_errors("head_dim", r.head_dim, MAX_HEAD_DIM, where)
    kv = r.kv_heads if r.kv_heads is not None else r.heads
    if r.heads % kv:
        errs.append(
            value_error("kv_heads", f"kv_heads must divide heads ({r.heads}), got {kv}", kv, where)
        )
    if r.batch > s.runs_max_batch:
        errs.append(
            limit_error(
                "batch",
                f"batch must be ≤ {s.runs_max_batch}, got {r.batch}",
                r.batch,
                s.runs_max_batch,
                where,
            )
        )
    if r.heads > s.runs_max_heads:
        errs.append(
            limit_error(
                "heads",
                f"heads must be ≤ {s.runs_max_heads}, got {r.heads}",
                r.heads,
                s.runs_max_heads,
                where,
            )
        )
    errs += _mode_errors(r, s, backend)
    errs += warpgroup_errors(r, backend, capability, gpu)
    if r.what == "warpgroups":
        limit, why = s.runs_max_seq_warpgroups, "for a recorded warpgroup timeline"
    elif backend == "cpu":
        limit, why = s.runs_max_seq_cpu, "in Triton's interpreter (no GPU here)"
    elif r.what in ("trace", "both"):
        limit, why = s.runs_max_seq_trace, "for an instrumented trace"
    else:
        limit, why = s.runs_max_seq_gpu, "on the GPU"
    fields = ("seq",) if r.mode == "decode" else ("seq", "seq_k")
    for field in fields:
        value = getattr(r, field)
        if value is not None and value > limit:
            errs.append(
                limit_error(
                    field, f"{field} must be ≤ {limit} {why}, got {value}", value, limit, where
                )
            )
    if not errs:  # what the run would compute, against this backend's budgets
        errs += budget_errors(r, s, backend, limit)
    return errs


def _mode_errors(r: RunRequest, s: Settings, backend: str) -> list[dict[str, Any]]:
    """What a run's mode, `what` and `route` allow together, and decode's own limits."""
    errs: list[dict[str, Any]] = []

    def bad(field: str, msg: str, value: object) -> None:
        errs.append(value_error(field, msg, value, "body"))

    def over(field: str, msg: str, value: int, limit: int) -> None:
        errs.append(limit_error(field, msg, value, limit, "body"))

    if r.what == "timeline" and (r.mode != "fwd" or backend != "cuda"):
        why = "a GPU (the interpreter has no clock)" if backend != "cuda" else "mode fwd"
        bad("what", f"a measured timeline needs {why}", r.what)
    if r.route == "default" and r.what != "time":
        bad("route", "route default times what flash_attention picks: what must be time", r.route)
    if r.splits is not None and r.mode != "decode":
        bad("splits", "splits belong to mode decode", r.splits)
    if r.mode != "decode":
        return errs
    if r.what != "trace":
        bad(
            "what", "decode runs check each split against the simulator: what must be trace", r.what
        )
    if r.kv_heads not in (None, 1) or r.batch != 1:
        bad("kv_heads", "decode runs take batch 1 and one K/V head; heads is its group", r.kv_heads)
    if r.seq > 16:
        over("seq", f"seq (new tokens) must be ≤ 16, got {r.seq}", r.seq, 16)
    cache = r.seq_k if r.seq_k is not None else r.seq
    limit = s.runs_max_cache_cpu if backend == "cpu" else s.max_decode_cache
    if cache > limit:
        over("seq_k", f"seq_k (the cache) must be ≤ {limit} for a decode run here, got {cache}",
             cache, limit)  # fmt: skip
    if r.splits is not None and r.splits > s.max_splits:
        over("splits", f"splits must be ≤ {s.max_splits}, got {r.splits}", r.splits, s.max_splits)
    return errs


WARPGROUP_FIELDS = {"consumers": 2, "pipeline": True, "pingpong": False, "persistent": False}
WARPGROUP_HEAD_DIMS = (40, 256)  # the Gluon forward's head_dim, a multiple of 8 (padded up)


def warpgroup_errors(
    r: RunRequest, backend: str, capability: str | None, gpu: str | None
) -> list[dict[str, Any]]:
    """What a recorded warpgroup timeline (what warpgroups) needs: an H100 or H200, the forward,
    and a configuration of the Gluon forward (kernels/hopper_forward.py `WsConfig`, `supports`);
    other runs leave its fields at their defaults."""
    errs: list[dict[str, Any]] = []
    where = "body"
    if r.what != "warpgroups":
        for field, default in WARPGROUP_FIELDS.items():
            if getattr(r, field) != default:
                msg = f"{field} belongs to what warpgroups (the Gluon forward's variant)"
                errs.append(value_error(field, msg, getattr(r, field), where))
        return errs
    if backend != "cuda":
        errs.append(value_error("what", f"{NEEDS_HOPPER}: {NO_GPU_HERE}", r.what, where))
    elif capability is not None and not capability.startswith("9."):
        named = f"this server's GPU, {gpu}," if gpu else "this server's GPU"
        here = f"{named} is compute capability {capability}"
        errs.append(value_error("what", f"{NEEDS_HOPPER}: {here}", r.what, where))
    if r.mode != "fwd":
        errs.append(value_error("mode", "a warpgroup timeline records the forward: mode must "
                                "be fwd", r.mode, where))  # fmt: skip
    if r.dtype not in ("fp16", "bf16"):
        errs.append(limit_error("dtype", f"the Hopper forward runs fp16 and bf16, got {r.dtype}",
                                r.dtype, ["fp16", "bf16"], where))  # fmt: skip
    lo, hi = WARPGROUP_HEAD_DIMS
    if not lo <= r.head_dim <= hi:
        msg = f"the Hopper forward takes a head_dim from {lo} to {hi}, got {r.head_dim}"
        errs.append(limit_error("head_dim", msg, r.head_dim, [lo, hi], where))
    if r.block_n not in (64, 128, 256):
        msg = f"block_n must be 64, 128 or 256 for the Hopper forward, got {r.block_n}"
        errs.append(limit_error("block_n", msg, r.block_n, [64, 128, 256], where))
    if not 2 <= r.stages <= 4:
        msg = f"stages must be from 2 to 4 for the Hopper forward, got {r.stages}"
        errs.append(limit_error("stages", msg, r.stages, [2, 4], where))
    if r.pingpong and (r.consumers < 2 or not r.pipeline):
        why = "pingpong needs pipeline and two or more consumers"
        errs.append(value_error("pingpong", why, r.pingpong, where))
    if errs:
        return errs
    cfg = Fa3Config(r.consumers, r.block_n, r.stages, r.pipeline, 1, pingpong=r.pingpong,
                    persistent=r.persistent)  # fmt: skip
    padded = 64 if r.head_dim <= 64 else 128 if r.head_dim <= 128 else 256
    why_not = cfg.fits(padded)
    if why_not is not None:
        errs.append(limit_error("stages", why_not, r.stages, SHARED_PER_CTA, where))
    return errs
