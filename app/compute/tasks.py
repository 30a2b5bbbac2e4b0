"""The tasks a compute worker runs (app/compute/pool.py), by name; each returns picklable,
JSON-ready values. `state` is the worker's own: its trace cache lives there.

    trace.meta    (params)                      → the trace's metadata
    trace.step    (params, step)                → one event as JSON text (/ws/trace)
    trace.window  (params, start, count, limit) → events as JSON texts, refused past `limit`
                                                  bytes before they are all built
    trace.ops     (params)                      → GET /api/trace/ops's body
    trace.chrome  (params)                      → GET /api/trace/chrome's body

The other tasks (TASKS) are module-level functions of a JSON payload (the request's checked
parameters and the limits they need) that return the route's whole response body as JSON bytes,
serialised here as FastAPI would have done it in the server, so the server only forwards them:

    simulate           {body, timeline_ctas}           → POST /api/simulate (algo fa3: the
                                                         FA-3 model, app/figures/fa3.py)
    schedule           {params, timeline_ctas}         → GET /api/schedule
    schedule.chrome    {params, timeline_ctas}         → GET /api/schedule/chrome
    schedule.measured  {params, record, timeline_ctas} → GET /api/schedule/measured/{id}, or None
                                                         when the launch is not one kernel
    memory_wall        {params, ns}                    → GET /api/memory-wall
    compare            {folder, dataset, id, timeline_ctas} → GET /api/compare (dataset: its
                                                          key, datasets.dataset_key)
    compare.dataset    {entries, measured, env, gpu, left_out} → POST /api/compare/dataset
    hopper             {params, folder, record, live}  → GET /api/hopper (app/compute/hopper.py;
                                                         the worker reads the warpgroup data)

A ValueError is the request's fault (the route answers 422); `DoesNotFit` (a ValueError too)
says the kernel cannot launch on the GPU asked for, so the route can name the field.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter

from flashscope.app.compute.hopper import response as hopper_response
from flashscope.app.compute.simulation import parts
from flashscope.app.datasets import SWEEPS, Datasets, Timelines, Warpgroups, sweep_of
from flashscope.app.figures.chrome_trace import from_tile_trace, from_timeline, from_walks
from flashscope.app.figures.fa3 import response as fa3_response
from flashscope.app.figures.report import (
    gantt,
    limiter_bars,
    measured_schedule,
    roofline,
    summary,
)
from flashscope.app.figures.schedule import (
    cursor,
    gantt_by_wave,
    imbalance,
    occupancy_table,
    shown_sms,
    utilization,
)
from flashscope.app.schemas.hopper import HopperParams
from flashscope.app.schemas.simulate import SimulateRequest
from flashscope.app.schemas.trace import TraceEventModel, TraceParams
from flashscope.app.schemas.views import MemoryWallParams, ScheduleParams
from flashscope.simulator.calibrate.explain import kernel_rows, notes
from flashscope.simulator.calibrate.known_misses import MISS_BEYOND_PCT, measured_misses
from flashscope.simulator.calibrate.validation import (
    Entry,
    build_dataset,
    ncu_kernels,
    simulate_config,
)
from flashscope.simulator.core import hardware
from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.core.trace import COUNTERS, PHASES, Trace
from flashscope.simulator.teach import traffic
from flashscope.simulator.teach.memory_wall import (
    KINDS,
    MATRICES,
    Walk,
    access_table,
    flash_walk,
    naive_walk,
)
from flashscope.simulator.teach.tracing import build_trace
from flashscope.simulator.timing import compiled, fa3
from flashscope.simulator.timing.engine import call_time_s
from flashscope.simulator.timing.results import SimResult

CURSOR_STEPS = 100  # the schedule's time cursor stops at 0 %, 1 %, …, 100 % of the run

# The serialisers of FastAPI's own fast path, for routes whose return type is Any or a dict.
_ANY: TypeAdapter[Any] = TypeAdapter(Any)
_DICT: TypeAdapter[dict[str, Any]] = TypeAdapter(dict[str, Any])


def _json(out: Any, adapter: TypeAdapter[Any] = _DICT) -> bytes:
    return adapter.dump_json(adapter.validate_python(out))


class ResponseTooLarge(ValueError):
    """A window of events would exceed the response limit: `fits` events would fit."""

    def __init__(self, fits: int) -> None:
        super().__init__(f"fits={fits}")
        self.fits = fits


def _trace(params: TraceParams, options: dict[str, Any], state: dict[str, Any]) -> Trace:
    """The trace of `params`, from the worker's cache (LRU of `options['cache']` traces)."""
    cache: OrderedDict[tuple[Any, ...], Trace] = state.setdefault("traces", OrderedDict())
    key = params.cache_key()
    if key in cache:
        cache.move_to_end(key)
        return cache[key]
    problem, tiles, kw = params.problem()
    trace = build_trace(
        params.algo,
        problem,
        tiles,
        params.seed,
        o_col_limit=options["o_col_limit"],
        budget_bytes=options["state_bytes"],
        **kw,
    )
    cache[key] = trace
    while len(cache) > options["cache"]:
        cache.popitem(last=False)
    return trace


def _event_json(trace: Trace, step: int) -> str:
    return TraceEventModel.model_validate(trace.event(step)).model_dump_json()


def _window(trace: Trace, start: int, count: int, limit: int) -> list[str]:
    """Events start … start + count − 1 as JSON, refused before building them all when the first
    one shows the window cannot fit in `limit` bytes (events of one trace are alike in size)."""
    stop = min(start + count, len(trace))
    out: list[str] = []
    room = limit
    for step in range(start, stop):
        text = _event_json(trace, step)
        room -= len(text) + 1
        if step == start and (len(text) + 1) * (stop - start) > limit * 2:
            raise ResponseTooLarge(max(1, limit // (len(text) + 1)))
        if room < 0:
            raise ResponseTooLarge(max(1, len(out)))
        out.append(text)
    return out


def simulate(payload: dict[str, Any], state: dict[str, Any]) -> bytes:
    """POST /api/simulate's body: the summary, and the SM timeline when asked."""
    body = SimulateRequest.model_validate(payload["body"])
    if body.algo == fa3.ALGO:
        return _json(fa3_response(parts(body).run_fa3()), _ANY)
    result = _run(body, payload)
    out = summary(result) | {"compiling": payload.get("compiling", {})}
    if body.timeline:
        out["timeline"] = gantt(result, payload["timeline_ctas"])
    return _json(out, _ANY)


def _run(body: SimulateRequest, payload: dict[str, Any]) -> SimResult:
    """The request's simulation, with the kernels compiled on this machine where the route
    gave their cache."""
    root = payload.get("compile_cache")
    with compiled.local_cache(None if root is None else Path(root)):
        return parts(body).run()


def _scheduled(payload: dict[str, Any]) -> tuple[ScheduleParams, SimResult]:
    params = ScheduleParams.model_validate(payload["params"])
    body = SimulateRequest.model_validate(params.simulate_body())
    return params, _run(body, payload)


def schedule(payload: dict[str, Any], state: dict[str, Any]) -> bytes:
    """GET /api/schedule's body: the summary plus the figures and tables of /schedule."""
    params, result = _scheduled(payload)
    table = cursor(result, CURSOR_STEPS)
    imb = imbalance(result)
    return _json(
        {
            **summary(result),
            "params": params.model_dump(),
            "gpu_specs": result.gpu.specs(),
            "edited": sorted(params.specs()),
            "cursor": table,
            "occupancy": occupancy_table(result),
            "imbalance": {k: v for k, v in imb.items() if k != "figure"},
            "figures": {
                "gantt": gantt_by_wave(result, payload["timeline_ctas"]),
                "utilization": utilization(table),
                "imbalance": imb["figure"],
                "limiter": limiter_bars(result),
                "roofline": roofline(result),
            },
        }
    )


def schedule_chrome(payload: dict[str, Any], state: dict[str, Any]) -> bytes:
    """GET /api/schedule/chrome's body: one track per SM, one span per CTA."""
    _, result = _scheduled(payload)
    return _json(from_timeline(result, shown_sms(result, payload["timeline_ctas"])))


def schedule_measured(payload: dict[str, Any], state: dict[str, Any]) -> bytes | None:
    """A measured timeline beside the engine's schedule of the same launch (None: the
    simulated launch is not one kernel)."""
    _, result = _scheduled(payload)
    shown = measured_schedule(payload["record"], result, payload["timeline_ctas"])
    return None if shown is None else _json(shown)


def _walk_json(w: Walk, closed_form: traffic.Traffic, dtype_bytes: int) -> dict[str, Any]:
    read, write = w.hbm_read, w.hbm_write
    return {
        "steps": len(w),
        "kind": w.kind.tolist(),
        "kernel": w.kernel.tolist(),
        "q_block": w.q_block.tolist(),
        "kv_block": w.kv_block.tolist(),
        "step_read": read.tolist(),
        "step_write": write.tolist(),
        "cum_read": read.cumsum().tolist(),
        "cum_write": write.cumsum().tolist(),
        "cum_by_matrix": {m: (w.read[m] + w.write[m]).cumsum().tolist() for m in MATRICES},
        "cum_stats_write": w.stats_write.cumsum().tolist(),
        "tile_steps": {k: v.tolist() for k, v in w.tile_steps.items()},
        "closed_form": closed_form.as_dict(dtype_bytes),
    }


def memory_wall(payload: dict[str, Any], state: dict[str, Any]) -> bytes:
    """GET /api/memory-wall's body: both walks and the access table, or a Chrome trace."""
    params = MemoryWallParams.model_validate(payload["params"])
    problem = AttentionProblem(seq_q=params.n, head_dim=params.d, dtype=params.dtype)
    tiles = TileConfig(params.bm, params.bn)
    naive, flash = naive_walk(problem, tiles), flash_walk(problem, tiles)
    about = {
        "params": params.model_dump(),
        "problem": {"seq": params.n, "head_dim": params.d, "dtype": params.dtype},
        "dtype_bytes": problem.dtype_bytes,
        "tiles": {"block_m": params.bm, "block_n": params.bn},
        "grid": {"q_blocks": tiles.q_blocks(problem), "kv_blocks": tiles.kv_blocks(problem)},
    }
    if params.format == "chrome":
        return _json(from_walks([naive, flash], {"source": "flashscope memory wall", **about}))
    return _json(
        {
            **about,
            "kinds": list(KINDS),
            "matrices": list(MATRICES),
            "walks": {
                "naive": _walk_json(naive, traffic.naive_head(problem), problem.dtype_bytes),
                "flash": _walk_json(flash, traffic.fa2_head(problem, tiles), problem.dtype_bytes),
            },
            "table": access_table(payload["ns"], params.d, tiles),
        }
    )


TILE_TEXT = "{block_m}×{block_n} · {warps} warps · {stages} stages"


def _tiles(c: dict[str, Any]) -> str:
    text = TILE_TEXT.format(**c)
    if c.get("maxnreg"):
        text += f" · ≤ {c['maxnreg']} registers"
    if c.get("dq_block_m"):
        text += f"; dQ {c['dq_block_m']}×{c['dq_block_n']} · {c['dq_warps']} warps"
    return text


def _row(r: dict[str, Any]) -> dict[str, Any]:
    c = r["config"]
    lim: dict[str, float] = (r.get("simulated") or {}).get("limiter") or {}
    return {
        "id": r["id"],
        "subset": r.get("subset"),
        "mode": "bwd" if c["algo"] == "fa2-bwd" else "fwd",
        "head_dim": c["head_dim"],
        "causal": bool(c.get("causal")),
        "seq": c["seq"],
        "tile": r["id"].rsplit("-", 1)[-1],
        "tiles": _tiles(c),
        "route": c.get("route"),
        "measured_us": r.get("measured_us"),
        "simulated_us": r.get("simulated_us"),
        "error_pct": r.get("error_pct"),
        "measured_dram_bytes": r.get("measured_dram_bytes"),
        "simulated_dram_bytes": r.get("simulated_dram_bytes"),
        "measured_l2_bytes": r.get("measured_l2_bytes"),
        "simulated_l2_bytes": r.get("simulated_l2_bytes"),
        "top_limiter": max(lim, key=lim.__getitem__) if lim else None,
    }


def _sweep(ds: dict[str, Any]) -> dict[str, Any]:
    """A dataset's sweep, its label and the subset its headline figures are of."""
    sweep = sweep_of(ds)
    return {"sweep": sweep, **SWEEPS.get(sweep, {"label": sweep, "headline": "holdout"})}


def compare(payload: dict[str, Any], state: dict[str, Any]) -> bytes:
    """GET /api/compare's body: every row of dataset `dataset`, and row `id` simulated again and
    explained. The worker reads the datasets and measured schedules of `folder` itself, and
    keeps them (re-read when a file changes)."""
    folder = Path(payload["folder"])
    if state.get("datasets_folder") != folder:
        state["datasets_folder"] = folder
        state["datasets"], state["timelines"] = Datasets(folder), Timelines(folder)
    data = state["datasets"].all()
    ds = data.get(payload["dataset"])
    row = next((r for r in (ds or {}).get("rows", []) if r["id"] == payload["id"]), None)
    if ds is None or row is None:
        raise LookupError(f"{payload['dataset']} {payload['id']} left the datasets folder")
    ctas = payload["timeline_ctas"]
    result = simulate_config(row["config"], hardware.from_name(ds["gpu"]))
    # each kernel beside its ncu row (and simulated alone): the table and the notes share them
    kernels = kernel_rows(result, ncu_kernels(row))
    call_us = call_time_s(result) * 1e6
    breakdown = {k: v * 1e6 for k, v in result.breakdown.items()}
    if call_us > result.time_s * 1e6:  # the host's floor: what the call waits beyond its kernels
        breakdown["host"] = call_us - result.time_s * 1e6
    return _json(
        {
            "datasets": [
                {
                    "key": k,
                    "gpu": d["gpu"],
                    **_sweep(d),
                    "device": d.get("device"),
                    "date": d.get("date"),
                    "file": d["file"],
                    "rows": len(d["rows"]),
                }
                for k, d in sorted(data.items())
            ],
            "dataset": {
                "key": payload["dataset"],
                **{
                    k: ds.get(k)
                    for k in ("gpu", "device", "date", "torch", "triton", "cuda", "file")
                },
                **_sweep(ds),
                "summary": {k: ds["summary"][k] for k in ("all", "fit", "holdout", "targets")},
                "ncu": (ds.get("ncu") or {}).get("version"),
                "known_misses": {
                    "subset": "holdout",
                    "beyond_pct": MISS_BEYOND_PCT,
                    "classes": measured_misses(ds["rows"], "holdout", MISS_BEYOND_PCT),
                },
            },
            "rows": [_row(r) for r in ds["rows"]],
            "chosen": {
                **_row(row),
                "config": row["config"],
                # the whole call, as the measured time is (its host floor included)
                "simulated_now_us": call_us,
                "simulated_kernels_now_us": result.time_s * 1e6,
                "limiter": result.limiter,
                "breakdown_us": breakdown,
                "kernels": kernels,
                "notes": notes(row, result, kernels),
                "timeline": gantt(result, ctas),
                "measured_schedule": measured_schedule(
                    state["timelines"].get(ds["gpu"], row["id"]), result, ctas
                ),
            },
        }
    )


def compare_dataset(payload: dict[str, Any], state: dict[str, Any]) -> bytes:
    """POST /api/compare/dataset's body: finished timed runs as a validation dataset, each
    simulated again on the preset `gpu`."""
    entries = [Entry(**e) for e in payload["entries"]]
    gpu = hardware.from_name(payload["gpu"])
    data = build_dataset(entries, payload["measured"], payload["env"], gpu)
    data["source"] = "flashscope /compare: measure now"
    data["left_out"] = payload["left_out"]
    return _json(data)


def hopper(payload: dict[str, Any], state: dict[str, Any]) -> bytes:
    """GET /api/hopper's body: the FA-3 model beside the measured warpgroups of the chosen GPU
    (the worker reads the warpgroup datasets of `folder` itself and keeps them)."""
    params = HopperParams.model_validate(payload["params"])
    folder = Path(payload["folder"])
    if state.get("warpgroups_folder") != folder:
        state["warpgroups_folder"], state["warpgroups"] = folder, Warpgroups(folder)
    doc = state["warpgroups"].all().get(params.gpu_key())
    return _json(hopper_response(params, doc, payload.get("live"), payload.get("record")))


TASKS: dict[str, Callable[[dict[str, Any], dict[str, Any]], Any]] = {
    "simulate": simulate,
    "schedule": schedule,
    "schedule.chrome": schedule_chrome,
    "schedule.measured": schedule_measured,
    "memory_wall": memory_wall,
    "compare": compare,
    "compare.dataset": compare_dataset,
    "hopper": hopper,
}


def run(name: str, payload: Any, state: dict[str, Any]) -> Any:
    """Run task `name` (see the module docstring)."""
    if name in TASKS:
        return TASKS[name](payload, state)
    params, options, *args = payload
    trace = _trace(params, options, state)
    if name == "trace.meta":
        return trace.describe()
    if name == "trace.step":
        return _event_json(trace, args[0])
    if name == "trace.window":
        start, count, limit = args
        return trace.describe(), _window(trace, start, count, limit)
    if name == "trace.ops":
        c = trace.ops.columns
        return {
            "meta": trace.describe(),
            "columns": {
                "phase": [PHASES[int(x)] for x in c["phase"]],
                **{k: c[k].tolist() for k in ("cta", "q_block", "kv_block", "masked", "line")},
                **{k: c[k].tolist() for k in COUNTERS},
            },
            "note": "q_block/kv_block −1: none",
        }
    if name == "trace.chrome":
        return from_tile_trace(trace)
    raise ValueError(f"no task {name!r}")
