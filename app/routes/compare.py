"""Measured against simulated: GET /compare and its JSON twin GET /api/compare.

The figures come from the validation datasets shipped in Settings.datasets_dir (measured on real
GPUs, with device, date and versions), so the comparison works without a GPU. For the chosen
configuration the engine runs again (same engine, same calibration as the shipped rows unless those
changed since) to draw its SM timeline and to explain the gap (simulator/calibrate/explain.py).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import HTMLResponse
from pydantic import BaseModel, ConfigDict, Field

from flashscope.app.datasets import Datasets
from flashscope.app.deps import SettingsDep, TemplatesDep
from flashscope.app.figures.report import gantt, measured_schedule
from flashscope.app.middleware.errors import limit_error, refuse
from flashscope.app.views import view_at
from flashscope.simulator.calibrate.explain import kernel_rows, notes
from flashscope.simulator.calibrate.validation import ncu_kernels, simulate_config
from flashscope.simulator.core import hardware

router = APIRouter(tags=["views"])
TILE_TEXT = "{block_m}×{block_n} · {warps} warps · {stages} stages"


class CompareParams(BaseModel):
    """Which dataset and which of its configurations."""

    model_config = ConfigDict(extra="forbid")

    gpu: str | None = Field(None, max_length=40, description="GPU preset of the dataset.")
    id: str | None = Field(None, max_length=80, description="Configuration to explain.")


def _datasets(request: Request) -> Datasets:
    datasets: Datasets = request.app.state.datasets
    return datasets


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


def choose(
    params: CompareParams, data: dict[str, dict[str, Any]]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The dataset and the row the parameters name (the worst-predicted row by default)."""
    if not data:
        raise HTTPException(
            status_code=404,
            detail="no validation dataset in the results folder (FLASHSCOPE_DATASETS_DIR)",
        )
    choices = sorted(data)
    key = params.gpu
    if key is not None:
        try:
            key = hardware.resolve(key)
        except ValueError:
            key = None
    if params.gpu is not None and key not in data:
        raise refuse(
            [
                limit_error(
                    "gpu",
                    f"no dataset for gpu {params.gpu!r}; choose one of {', '.join(choices)}",
                    params.gpu,
                    choices,
                )
            ]
        )
    ds = data[key or ("h100-sxm" if "h100-sxm" in data else choices[0])]
    rows = ds["rows"]
    if params.id is None:
        scored = [r for r in rows if r.get("error_pct") is not None]
        return ds, max(scored or rows, key=lambda r: abs(r.get("error_pct") or 0.0))
    row = next((r for r in rows if r["id"] == params.id), None)
    if row is None:
        raise refuse(
            [
                limit_error(
                    "id",
                    f"no configuration {params.id!r} in the {ds['gpu']} dataset",
                    params.id,
                    f"{len(rows)} ids, e.g. {rows[0]['id']}",
                )
            ]
        )
    return ds, row


@router.get("/api/compare")
def compare(
    params: Annotated[CompareParams, Query()], request: Request, settings: SettingsDep
) -> dict[str, Any]:
    """Every configuration of a shipped dataset, measured and simulated, and one explained."""
    data = _datasets(request).all()
    ds, row = choose(params, data)
    gpu = hardware.from_name(ds["gpu"])
    result = simulate_config(row["config"], gpu)
    # each kernel beside its ncu row (and simulated alone): the table and the notes share them
    kernels = kernel_rows(result, ncu_kernels(row))
    return {
        "datasets": [
            {
                "gpu": k,
                "device": d.get("device"),
                "date": d.get("date"),
                "file": d["file"],
                "rows": len(d["rows"]),
            }
            for k, d in sorted(data.items())
        ],
        "dataset": {
            **{k: ds.get(k) for k in ("gpu", "device", "date", "torch", "triton", "cuda", "file")},
            "summary": {k: ds["summary"][k] for k in ("all", "fit", "holdout", "targets")},
            "ncu": (ds.get("ncu") or {}).get("version"),
        },
        "rows": [_row(r) for r in ds["rows"]],
        "chosen": {
            **_row(row),
            "config": row["config"],
            "simulated_now_us": result.time_s * 1e6,
            "limiter": result.limiter,
            "breakdown_us": {k: v * 1e6 for k, v in result.breakdown.items()},
            "kernels": kernels,
            "notes": notes(row, result, kernels),
            "timeline": gantt(result, settings.compare_timeline_ctas),
            "measured_schedule": measured_schedule(
                request.app.state.timelines.get(ds["gpu"], row["id"]),
                result,
                settings.compare_timeline_ctas,
            ),
        },
    }


@router.get("/compare", response_class=HTMLResponse, include_in_schema=False)
def page(request: Request, templates: TemplatesDep) -> HTMLResponse:
    data = _datasets(request).all()
    return templates.TemplateResponse(
        request,
        "compare.html",
        {"view": view_at("/compare"), "datasets": [data[k] for k in sorted(data)]},
    )
