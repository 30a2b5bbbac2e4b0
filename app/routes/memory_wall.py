"""The memory wall: GET /memory-wall and its JSON twin GET /api/memory-wall.

The twin returns both walks (naive and FlashAttention-2, one tile-sized step each) with running
HBM counters and the step at which every tile changes state, plus the access table over N;
`format=chrome` returns the walks as a Chrome/Perfetto trace instead.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from flashscope.app.deps import SettingsDep, TemplatesDep
from flashscope.app.figures.chrome_trace import from_walks
from flashscope.app.middleware.errors import refuse
from flashscope.app.schemas.views import MemoryWallParams, check_memory_wall
from flashscope.app.views import view_at
from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.teach import traffic
from flashscope.simulator.teach.memory_wall import (
    KINDS,
    MATRICES,
    Walk,
    access_table,
    flash_walk,
    naive_walk,
)

router = APIRouter(tags=["views"])


@router.get("/memory-wall", response_class=HTMLResponse, include_in_schema=False)
def page(request: Request, templates: TemplatesDep, settings: SettingsDep) -> HTMLResponse:
    limits = {
        "max_seq": settings.memory_wall_max_seq,
        "max_head_dim": settings.max_head_dim,
        "min_block": settings.min_block,
        "max_block": settings.max_block,
        "max_steps": settings.memory_wall_max_steps,
    }
    return templates.TemplateResponse(
        request, "memory_wall.html", {"view": view_at("/memory-wall"), "limits": limits}
    )


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


@router.get("/api/memory-wall")
def memory_wall(
    params: Annotated[MemoryWallParams, Query()], settings: SettingsDep
) -> dict[str, Any]:
    """Naive and FlashAttention-2 walks of one (batch, head), and the HBM access table over N."""
    ns, errs = check_memory_wall(params, settings)
    if errs:
        raise refuse(errs)
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
        return from_walks([naive, flash], {"source": "flashscope memory wall", **about})
    return {
        **about,
        "kinds": list(KINDS),
        "matrices": list(MATRICES),
        "walks": {
            "naive": _walk_json(naive, traffic.naive_head(problem), problem.dtype_bytes),
            "flash": _walk_json(flash, traffic.fa2_head(problem, tiles), problem.dtype_bytes),
        },
        "table": access_table(ns, params.d, tiles),
    }
