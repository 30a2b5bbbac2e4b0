"""The online-softmax explorer: GET /online-softmax and its JSON twin GET /api/online-softmax."""

from __future__ import annotations

from typing import Annotated, Any

import numpy as np
from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from flashscope.app.deps import SettingsDep, TemplatesDep
from flashscope.app.middleware.errors import refuse
from flashscope.app.schemas.views import OnlineSoftmaxParams, check_online_softmax
from flashscope.app.views import view_at
from flashscope.simulator.core.trace import json_floats
from flashscope.simulator.teach.softmax_walk import walk

router = APIRouter(tags=["views"])

# Worked examples offered on the page: (label, vector, block).
PRESETS = (
    ("The seed's example", "1, 2, 3, 6, 2, 1", 3),
    ("A huge value", "1, 2, 1000, 3, 2, 1", 2),
    ("Masked entries (−∞)", "-inf, -inf, 2, 0.5, -inf, 1, 3, -inf", 3),
    ("A whole block masked", "-inf, -inf, -inf, 4, 1, 2", 3),
    ("Rising values", "0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11", 4),
    ("One block per entry", "3, 1, 4, 1, 5, 9, 2, 6", 1),
)


@router.get("/online-softmax", response_class=HTMLResponse, include_in_schema=False)
def page(request: Request, templates: TemplatesDep, settings: SettingsDep) -> HTMLResponse:
    return templates.TemplateResponse(
        request,
        "online_softmax.html",
        {
            "view": view_at("/online-softmax"),
            "limits": {"max_len": settings.online_softmax_max_len},
            "presets": PRESETS,
        },
    )


def _num(v: float) -> float | None:
    """JSON has no infinities: −∞ (and NaN) go out as null, as in the tile trace."""
    return v if np.isfinite(v) else None


@router.get("/api/online-softmax")
def online_softmax(
    params: Annotated[OnlineSoftmaxParams, Query()], settings: SettingsDep
) -> dict[str, Any]:
    """The recurrence block by block (m, ℓ, α and the weights so far), then the exact softmax."""
    x, errs = check_online_softmax(params, settings)
    if errs:
        raise refuse(errs)
    w = walk(np.array(x), params.block)
    return {
        "x": json_floats(w.x, 12),
        "block": w.block,
        "blocks": [
            {
                "start": s.start,
                "stop": s.stop,
                "block_max": _num(s.block_max),
                "m_before": _num(s.m_before),
                "m_after": _num(s.m_after),
                "alpha": _num(s.alpha),
                "l_before": s.l_before,
                "block_sum": s.block_sum,
                "l_after": s.l_after,
                "weights": json_floats(s.weights, 12),
            }
            for s in w.steps
        ],
        "online": json_floats(w.online, 12),
        "standard": json_floats(w.standard, 12),
        "max_abs_diff": _num(w.max_abs_diff),
        "note": "null stands for −∞ in x, m and block_max (JSON has no infinities)",
    }
