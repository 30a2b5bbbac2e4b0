"""The state a lecturer sends to a room: which page, its parameters and its step, validated.

A state is small and plain on purpose: every follower's page applies it through its view's
`applyState`, so it holds only numbers, strings, booleans, null and short lists of them.
"""

from __future__ import annotations

import math
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from flashscope.app.config import Settings
from flashscope.app.middleware.errors import limit_error, value_error

SAFE_INT = 2**53  # integers beyond this do not survive JavaScript's numbers

PARAM_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]{0,63}$")
MAX_TEXT = 200  # characters of a string parameter
MAX_LIST = 64  # items of a list parameter


class RoomState(BaseModel):
    """What every follower's page shows: which page, its parameters and its step."""

    model_config = ConfigDict(extra="forbid", strict=True)

    path: str = Field(
        max_length=200,
        pattern=r"^/([A-Za-z0-9._~\-][A-Za-z0-9._~\-/]*)?$",
        description="A path of this server (never another origin).",
    )
    params: dict[str, Any] = Field(
        default_factory=dict,
        description="The view's parameters: numbers, strings, booleans, null, or lists of them.",
    )
    step: int | None = Field(None, ge=0)


def _scalar_problem(value: Any) -> str | None:
    """Why `value` cannot be a parameter value, or None when it can."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return None if abs(value) <= SAFE_INT else f"integers must be within ±2**53, got {value}"
    if isinstance(value, float):
        return None if math.isfinite(value) else f"numbers must be finite, got {value}"
    if isinstance(value, str):
        n = len(value)
        return None if n <= MAX_TEXT else f"strings must be ≤ {MAX_TEXT} characters, got {n}"
    return f"must be a number, a string, true/false or null, got {type(value).__name__}"


def check_room_state(state: RoomState, s: Settings) -> list[dict[str, Any]]:
    """Errors for parameters a page could not hold and sizes beyond the settings' limits."""
    where = "state"
    errs = []
    n = len(state.params)
    if n > s.room_max_params:
        msg = f"a room state may hold at most {s.room_max_params} parameters, got {n}"
        errs.append(limit_error("params", msg, n, s.room_max_params, where))
    for key, value in list(state.params.items())[: s.room_max_params]:
        if not PARAM_KEY.match(key):
            errs.append(
                value_error(
                    key,
                    "a parameter name is a letter or _ then up to 63 of letters, digits, _ . -",
                    key,
                    where,
                )
            )
            continue
        items = value if isinstance(value, list) else [value]
        if len(items) > MAX_LIST:
            errs.append(
                limit_error(key, f"lists must be ≤ {MAX_LIST} items", len(items), MAX_LIST, where)
            )
            continue
        for item in items:
            if problem := _scalar_problem(item):
                errs.append(value_error(key, f"{key}: {problem}", None, where))
                break
    if state.step is not None and state.step > s.room_max_step:
        msg = f"step must be ≤ {s.room_max_step}, got {state.step}"
        errs.append(limit_error("step", msg, state.step, s.room_max_step, where))
    return errs


def state_message(seq: int, state_json: str) -> str:
    return f'{{"type":"state","seq":{seq},"state":{state_json}}}'
