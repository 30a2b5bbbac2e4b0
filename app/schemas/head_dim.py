"""The head_dim check of every request naming a problem (the rule: simulator/core/problem.py)."""

from __future__ import annotations

from typing import Any

from flashscope.app.middleware.errors import limit_error
from flashscope.simulator.core.problem import HEAD_DIM_STEP, MAX_HEAD_DIM, head_dim_refusal

DESCRIPTION = (
    f"Head dimension: a multiple of {HEAD_DIM_STEP} up to {MAX_HEAD_DIM} "
    "(the head dimensions the kernels run)."
)


def head_dim_errors(field: str, value: int, limit: int, where: str) -> list[dict[str, Any]]:
    """A 422 entry for a head_dim the kernels cannot run or beyond this server's `limit`
    (`field` is the request's name for it: `d` on the views, `head_dim` elsewhere)."""
    refused = head_dim_refusal(value, limit)
    if refused is None:
        return []
    why, bound = refused
    return [limit_error(field, why.replace("head_dim", field, 1), value, bound, where)]
