"""Measure now: /compare's problem timed live on this server's GPU, and kept as a dataset.

POST /api/compare/measure queues, through the one run queue, a timed run of every tile
configuration the shipped dataset has for the problem on screen, and one of what
`flash_attention` picks by default (the Gluon forward on Hopper included); the page follows each
run's events and draws its point as it lands. POST /api/compare/dataset turns finished runs
into a validation dataset (`flashscope validate --measured` reads it). Without a GPU there is
nothing to time: measure answers 422 with the reason, and the page says the same.
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from flashscope.app.compute.http import pool_errors, run_task
from flashscope.app.compute.pool import TaskError
from flashscope.app.datasets import Datasets
from flashscope.app.middleware.errors import refuse, value_error
from flashscope.app.routes.compare import CompareParams, choose
from flashscope.app.routes.runs import queue_full, request_key
from flashscope.app.runs.queue import QueueFull, RunQueue
from flashscope.app.schemas.trace import RunRequest, check_run_request
from flashscope.simulator.calibrate.validation import Entry
from flashscope.simulator.core import hardware

router = APIRouter(tags=["runs"])
NO_GPU = (
    "timing needs a GPU: this server has none (its kernels run in Triton's interpreter), so the "
    "shipped datasets, measured on an H100 and an H200, stand in"
)
RUN_FIELDS = ("batch", "heads", "kv_heads", "seq", "seq_k", "head_dim", "causal", "dtype")
TILE_FIELDS = ("block_m", "block_n", "stages", "warps", "maxnreg")


class MeasureRequest(CompareParams):
    """The problem on screen: a dataset and one of its configurations (its tiles' siblings and
    the default route are measured)."""

    seed: int = Field(0, ge=0, le=2**32 - 1)


class DatasetRequest(BaseModel):
    """Finished timed runs to keep as a validation dataset."""

    model_config = ConfigDict(extra="forbid")

    runs: list[str] = Field(min_length=1, max_length=64)


def plan(row: dict[str, Any], rows: list[dict[str, Any]], seed: int) -> list[dict[str, Any]]:
    """The run requests for `row`'s problem: each tile configuration the dataset has for it, in
    the dataset's order, then the default route (tiles of the first, unused)."""
    c = row["config"]
    same = [r for r in rows if all(r["config"].get(f) == c.get(f) for f in ("algo", *RUN_FIELDS))]
    mode = "bwd" if c["algo"] == "fa2-bwd" else "fwd"

    def body(config: dict[str, Any], route: str, tile: str) -> dict[str, Any]:
        fields = {f: config.get(f) for f in (*RUN_FIELDS, *TILE_FIELDS)}
        return {
            "tile": tile,
            "request": {**fields, "mode": mode, "what": "time", "route": route, "seed": seed},
        }

    out = [body(r["config"], "tiles", r["id"].rsplit("-", 1)[-1]) for r in same]
    return [*out, body(c, "default", "default")]


@router.post("/api/compare/measure", status_code=202)
async def measure(body: MeasureRequest, request: Request) -> dict[str, Any]:
    """Queue the timed runs of the problem on screen; their ids, to follow and to keep."""
    service = request.app.state.runs
    backend = await service.ready()
    if backend != "cuda":
        raise refuse([value_error("gpu", NO_GPU, backend, "body")])
    datasets: Datasets = request.app.state.datasets
    ds, row = choose(body, datasets.all())
    settings = request.app.state.settings
    queue: RunQueue = service.get()
    runs = []
    for item in plan(row, ds["rows"], body.seed):
        run_request = RunRequest(**{k: v for k, v in item["request"].items() if v is not None})
        errs = check_run_request(run_request, settings, backend)
        if errs:
            raise refuse(errs)
        try:
            run, cached = queue.submit(request_key(run_request), run_request.model_dump())
        except QueueFull as full:
            return queue_full(full)  # type: ignore[return-value]
        runs.append({"tile": item["tile"], "id": run.id, "cached": cached})
    return {"problem": row["id"].rsplit("-", 1)[0], "runs": runs}


def _entry(run: Any, tile: str) -> tuple[Entry, dict[str, Any]] | None:
    """A finished timed run as a dataset entry and its measurement (None: not one to keep)."""
    result = run.result or {}
    timing = result.get("timing")
    config = result.get("simulated_config")
    if run.state != "done" or not timing or not config:
        return None
    config = {k: v for k, v in config.items() if k != "route_choice"}
    tiles = "default" if tile == "default" else "candidate"
    row_id = f"live-{config['algo']}-d{config['head_dim']}-n{config['seq']}-{tile}"
    return Entry(row_id, "live", config, False, tiles), {"id": row_id, **timing["measured_row"]}


@router.post("/api/compare/dataset", response_model=dict[str, Any])
async def dataset(body: DatasetRequest, request: Request) -> Response:
    """The finished runs as a validation dataset, simulated on the preset of the GPU they ran
    on (runs that failed, are not timed runs, or ran the Gluon forward are left out)."""
    service = request.app.state.runs
    entries: list[Entry] = []
    measured: list[dict[str, Any]] = []
    left_out: list[str] = []
    env: dict[str, Any] = {}
    for run_id in body.runs:
        run = service.find(run_id)
        tile = "default" if run and run.request.get("route") == "default" else None
        if run is not None and tile is None:
            tile = f"{run.request['block_m']}x{run.request['block_n']}w{run.request['warps']}"
            tile += f"s{run.request['stages']}"
        got = _entry(run, tile or "") if run is not None else None
        if got is None:
            left_out.append(run_id)
            continue
        entries.append(got[0])
        measured.append(got[1])
        env = run.result.get("env") or env
    if not entries:
        why = "no finished timed run that the engine can simulate among them"
        raise refuse([value_error("runs", why, body.runs, "body")])
    try:
        gpu = hardware.from_name(hardware.resolve(env.get("device") or ""))
    except ValueError as exc:
        why = f"the runs' GPU has no preset: {exc}"
        raise refuse([value_error("runs", why, env.get("device"), "body")]) from None
    env.setdefault("date", datetime.now(UTC).strftime("%Y-%m-%d"))
    payload = {
        "entries": [asdict(e) for e in entries],
        "measured": measured,
        "env": env,
        "gpu": gpu.key,
        "left_out": left_out,
    }
    try:  # each run simulated again: up to half a second for 64 runs, in a compute worker
        out = await run_task(request, "compare.dataset", payload)
    except TaskError as exc:
        raise pool_errors(exc, request.app.state.settings, field=None) from None
    return Response(out, media_type="application/json")
