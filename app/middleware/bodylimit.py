"""A limit on request bodies: HTTP 413 with a JSON body naming the limit.

A declared Content-Length over the limit is refused before the route runs. A body sent without
one (chunked) is counted as it arrives; the route's read raises BodyTooLarge once it passes the
limit, an HTTPException that FastAPI turns into the same 413.
"""

from __future__ import annotations

from typing import Any

from fastapi import HTTPException
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send


def _detail(limit: int, size: int | None) -> list[dict[str, Any]]:
    got = f"{size} bytes" if size is not None else "more"
    return [
        {
            "type": "body_too_large",
            "loc": ["body"],
            "field": "body",
            "msg": f"request body must be ≤ {limit} bytes, got {got}",
            "limit": limit,
        }
    ]


class BodyTooLarge(HTTPException):
    """Raised into the route when a streamed body passes the limit."""

    def __init__(self, limit: int) -> None:
        super().__init__(status_code=413, detail=_detail(limit, None))


def too_large(limit: int, size: int | None) -> JSONResponse:
    return JSONResponse(status_code=413, content={"detail": _detail(limit, size)})


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await too_large(self.max_bytes, declared)(scope, receive, send)
            return
        seen = 0

        async def counted_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise BodyTooLarge(self.max_bytes)
            return message

        await self.app(scope, counted_receive, send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
