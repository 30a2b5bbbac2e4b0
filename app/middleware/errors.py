"""One shape for every refused request: HTTP 422 naming the field and the limit.

FastAPI's validation errors already carry `loc` and `msg`; the handler here adds `field` (the
last element of `loc`) and `limit` (the bound that was crossed, where there is one) to each, so a
client or a person reading the response sees at once what to change.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError

_LIMIT_KEYS = ("limit", "le", "lt", "ge", "gt", "multiple_of", "max_length", "min_length")


def limit_error(
    field: str, message: str, value: Any, limit: Any, where: str = "query"
) -> dict[str, Any]:
    """A validation error entry for a value beyond a server limit."""
    return {
        "type": "limit",
        "loc": [where, field],
        "msg": message,
        "input": value,
        "ctx": {"limit": limit},
    }


def value_error(field: str, message: str, value: Any, where: str = "query") -> dict[str, Any]:
    return {"type": "value_error", "loc": [where, field], "msg": message, "input": value}


def _finite(value: Any) -> Any:
    """JSON has no NaN or infinity: echo such inputs back as strings."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def describe(errors: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Add `field` and `limit` to pydantic-style error entries."""
    out = []
    for err in errors:
        err = dict(err)
        loc = err.get("loc") or []
        err["field"] = str(loc[-1]) if loc else None
        ctx = err.get("ctx") or {}
        err["limit"] = next((ctx[k] for k in _LIMIT_KEYS if k in ctx), None)
        if "ctx" in err:
            err["ctx"] = {
                k: (_finite(v) if isinstance(v, int | float | str) else str(v))
                for k, v in ctx.items()
            }
        err.pop("url", None)
        if "input" in err:
            err["input"] = _finite(err["input"])
        out.append(err)
    return out


async def validation_handler(_: Request, exc: RequestValidationError) -> JSONResponse:
    return JSONResponse(
        status_code=422, content=jsonable_encoder({"detail": describe(list(exc.errors()))})
    )


async def value_handler(_: Request, exc: ValueError) -> JSONResponse:
    """A ValueError that escapes a route is bad input, not a server fault.

    The simulator's contract is that it raises ValueError (with a message saying what is wrong)
    for every input it cannot handle and for nothing else; a route that passes a request on
    without checking every rule itself still answers 422, never 500.
    """
    errors: Sequence[Mapping[str, Any]]
    if isinstance(exc, ValidationError):
        errors = list(exc.errors(include_url=False))
    else:
        msg = str(exc) or type(exc).__name__
        errors = [{"type": "value_error", "loc": ["request"], "msg": msg}]
    return JSONResponse(status_code=422, content=jsonable_encoder({"detail": describe(errors)}))


def refuse(errors: list[dict[str, Any]]) -> RequestValidationError:
    """The exception that makes a route answer 422 with these errors."""
    return RequestValidationError(errors)
