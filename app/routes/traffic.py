"""POST /api/traffic: closed-form counts of one algorithm on one problem (the CLI's twin)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from flashscope.app.deps import SettingsDep
from flashscope.app.middleware.errors import refuse
from flashscope.app.schemas.traffic import TrafficRequest, check_traffic_request
from flashscope.simulator.teach.traffic import summary

router = APIRouter(tags=["traffic"])


@router.post("/api/traffic")
async def post_traffic(body: TrafficRequest, settings: SettingsDep) -> dict[str, Any]:
    """Elements and bytes per memory level, FLOPs and exponentials, for the whole problem."""
    errs = check_traffic_request(body, settings)
    if errs:
        raise refuse(errs)
    problem, tiles = body.problem()
    return summary(body.algo, problem, tiles, splits=body.splits, sms=body.sms)
