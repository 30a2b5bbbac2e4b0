"""Rooms: POST /api/rooms makes one, GET /api/rooms/{code} describes it, DELETE ends it,
WS /ws/rooms/{code} follows (or, with the drive token, drives) it.

WebSocket protocol (JSON text messages, each at most `room_max_message_bytes`):
    client → {"type": "join", "token": "<drive token>", "presence": true}   first, within 10 s;
             token only to drive; presence to be told who is in the room as it changes
    server → {"type": "welcome", "code", "role": "driver" | "attendee", "seq", "state", "clients",
              "drivers"}
    server → {"type": "presence", "clients", "drivers"}   (asked for) to a driver when the count
             changes, to an attendee when its lecturer leaves (drivers 0) or comes back
    driver → {"type": "state", "state": {"path", "params", "step"}, "base": <seq>}
             →  {"type": "ack", "seq"}, or {"type": "stale", "seq"} when refused as stale
    server → {"type": "state", "seq", "state"}   to everyone else in the room, in seq order
    server → {"type": "room-gone", "final": false, "reason"}  the room store lost the room
             (Redis restarted or does not answer); the connection stays
    server → {"type": "room-back", "seq", "clients", "state"?}  it is back; `state` when newer
    server → {"type": "room-gone", "final": true, "reason"}, then close 4410: it has closed
    client → {"type": "detach"} stops the states; {"type": "attach"} sends the latest and resumes
    client → {"type": "ping"}  →  {"type": "pong"}
`base` (optional) is the newest seq the driver had seen when its page produced the state. With
several drivers (the lecturer's laptop and tablet), a state built on an older room state than
another driver's newest one is refused as stale: it is an echo of something the room has left
behind, and the newer state is already on its way to the sender. The first of two drivers acting
at once wins; a driver's own quick succession of states never counts against it.
A recoverable mistake (an attendee trying to drive, a bad state, a bad message, a state sent
while the store does not answer) gets {"type": "error", "errors": [...]} with `field` and
`limit`, and changes nothing. Otherwise the server closes with a reason: 4400 bad code or first
message, 4403 drive token does not match or the page's Origin is not allowed, 4404 no such
room, 4408 no join message, 4409 room full (or full for the client's address), 4410 room
closed, 4429 too many look-ups, 1009 message too large, 1011 room store unavailable, 1013 too
slow to keep up.

Limits on who may do what: creating rooms needs a JSON request from this server's own pages (or
an allowed origin) and is capped per client and per address; every look-up of a code (GET, a
join, a DELETE) without the room's drive token draws on the client's look-up budget.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from typing import Annotated, Any

from fastapi import APIRouter, Header, Path, Request, Response, WebSocket, WebSocketDisconnect
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.types import Scope

from flashscope.app.config import Settings
from flashscope.app.deps import SettingsDep
from flashscope.app.middleware.errors import limit_error
from flashscope.app.middleware.identity import address_key, client_key
from flashscope.app.middleware.origin import refusal, same_origin
from flashscope.app.rooms.connection import close_reason, join, serve
from flashscope.app.rooms.service import (
    CODE_PATTERN,
    OwnerFull,
    Rooms,
    RoomsFull,
    token_matches,
)
from flashscope.app.rooms.state import RoomState
from flashscope.app.rooms.store import RoomRecord, RoomsUnavailable

router = APIRouter(tags=["rooms"])

Code = Annotated[str, Path(pattern=CODE_PATTERN, description="The room's join code.")]
DriveToken = Annotated[
    str | None,
    Header(
        max_length=128,
        description="The room's drive token: spares the look-up budget; needed to end a room.",
    ),
]
NO_OPTIONS = {
    "required": False,
    "content": {
        "application/json": {
            "schema": {
                "type": "object",
                "maxProperties": 0,
                "description": "Rooms take no options.",
            }
        }
    },
}


class RoomCreated(BaseModel):
    code: str
    drive_token: str
    join_path: str
    drive_path: str


class RoomInfo(BaseModel):
    code: str
    clients: int
    seq: int
    state: RoomState | None


class Problem(BaseModel):
    detail: Any


def _rooms(conn: Request | WebSocket) -> Rooms:
    rooms: Rooms = conn.app.state.rooms
    return rooms


def _refused(status: int, entry: dict[str, Any], retry: int | None = None) -> JSONResponse:
    entry = {"loc": ["request"], "field": None, "limit": None, **entry}
    headers = {"Retry-After": str(retry)} if retry is not None else None
    return JSONResponse(status_code=status, headers=headers, content={"detail": [entry]})


def _foreign(scope: Scope) -> JSONResponse:
    return _refused(
        403,
        {"type": "origin", "loc": ["header", "Origin"], "field": "Origin", "msg": refusal(scope)},
    )


def _unavailable(exc: RoomsUnavailable) -> JSONResponse:
    return _refused(
        503, {"type": "unavailable", "loc": ["server"], "msg": f"rooms are unavailable: {exc}"}
    )


def _lookup_wait(rooms: Rooms, scope: Scope) -> float:
    return rooms.lookups.take_for(scope, "lookup")


def _too_many_lookups(wait: float, settings: Settings) -> JSONResponse:
    retry = max(1, math.ceil(wait))
    burst, per_s = settings.rate_lookup_burst, settings.rate_lookup_per_s
    return _refused(
        429,
        {
            "type": "rate_limit",
            "field": "lookup",
            "limit": {"per_s": per_s, "burst": burst},
            "msg": f"too many room look-ups from this client: at most {burst} at once and "
            f"{per_s:g} per second; retry after {retry} s",
        },
        retry,
    )


async def _no_options(request: Request) -> JSONResponse | None:
    """Refuse a body that is not JSON (415: a cross-site form or text/plain) or not `{}` (422)."""
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media != "application/json":
        return _refused(
            415,
            {
                "type": "content_type",
                "loc": ["header", "Content-Type"],
                "field": "Content-Type",
                "limit": "application/json",
                "msg": f"send Content-Type: application/json (got {media or 'none'})",
            },
        )
    body = await request.body()
    try:
        value = json.loads(body) if body.strip() else {}
    except ValueError:
        value = None
    if value != {}:
        return _refused(
            422,
            {
                "type": "value_error",
                "loc": ["body"],
                "field": "body",
                "msg": "rooms take no options: send {} or nothing",
            },
        )
    return None


def _owner_full(exc: OwnerFull, settings: Settings) -> JSONResponse:
    who = "this browser" if exc.per == "client" else "your address"
    name = "rooms_per_client" if exc.per == "client" else "rooms_per_address"
    unjoined = round(settings.room_unjoined_ttl_s / 60)
    return _refused(
        429,
        {
            "type": "limit",
            "loc": ["server"],
            "field": name,
            "limit": exc.limit,
            "msg": f"{who} already has {exc.limit} rooms open (the limit): end one with its "
            f"drive link, or wait until it closes ({unjoined} min after its last client leaves "
            "when no attendee ever joined it)",
        },
        60,
    )


@router.post(
    "/api/rooms",
    status_code=201,
    response_model=RoomCreated,
    openapi_extra={"requestBody": NO_OPTIONS},
    responses={
        403: {"model": Problem, "description": "The page's Origin is not this server's."},
        415: {"model": Problem, "description": "The request is not JSON."},
        422: {"model": Problem, "description": "The body is not {}."},
        429: {"model": Problem, "description": "Too many rooms, or too many requests."},
        503: {"model": Problem, "description": "The shared room store does not answer."},
    },
)
async def create_room(request: Request, settings: SettingsDep) -> Any:
    """Make a room: a join code for attendees and a drive token for the lecturer (secret)."""
    if not same_origin(request.scope, settings):
        return _foreign(request.scope)
    if refused := await _no_options(request):
        return refused
    try:
        code, token = await _rooms(request).create(
            client_key(request.scope), address_key(request.scope)
        )
    except RoomsUnavailable as exc:
        return _unavailable(exc)
    except OwnerFull as exc:
        return _owner_full(exc, settings)
    except RoomsFull:
        return _refused(
            429,
            limit_error(
                "rooms",
                f"this server already has {settings.rooms_max} rooms open (the limit); "
                "idle rooms close on their own",
                None,
                settings.rooms_max,
                "server",
            )
            | {"field": "rooms", "limit": settings.rooms_max},
            60,
        )
    return RoomCreated(
        code=code,
        drive_token=token,
        join_path=f"/?room={code}",
        drive_path=f"/#room={code}&drive={token}",
    )


async def _look_up(
    request: Request, settings: Settings, code: str, token: str | None
) -> RoomRecord | JSONResponse | None:
    """The room, None, or the refusal: a look-up without the room's token costs one from the
    client's look-up budget, taken before anything about the code is told."""
    rooms = _rooms(request)
    if token is None and (wait := _lookup_wait(rooms, request.scope)) > 0:
        return _too_many_lookups(wait, settings)
    try:
        record = await rooms.get(code)
    except RoomsUnavailable as exc:
        return _unavailable(exc)
    paid = token is None or (record is not None and token_matches(token, record))
    if not paid and (wait := _lookup_wait(rooms, request.scope)) > 0:
        return _too_many_lookups(wait, settings)
    return record


def _no_room(code: str) -> JSONResponse:
    return _refused(
        404,
        {"type": "not_found", "loc": ["path", "code"], "field": "code", "msg": f"no room {code!r}"},
    )


@router.get(
    "/api/rooms/{code}",
    response_model=RoomInfo,
    responses={
        404: {"model": Problem, "description": "No room has this code."},
        429: {"model": Problem, "description": "Too many look-ups from this client."},
        503: {"model": Problem, "description": "The shared room store does not answer."},
    },
)
async def room_info(
    code: Code, request: Request, settings: SettingsDep, x_drive_token: DriveToken = None
) -> Any:
    """Who is in a room and what it shows now (the drive token is never returned)."""
    code = code.upper()
    record = await _look_up(request, settings, code, x_drive_token)
    if isinstance(record, JSONResponse):
        return record
    if record is None:
        return _no_room(code)
    state = json.loads(record.state) if record.state else None
    return {"code": record.code, "clients": record.clients, "seq": record.seq, "state": state}


@router.delete(
    "/api/rooms/{code}",
    status_code=204,
    response_class=Response,
    response_model=None,
    responses={
        403: {"model": Problem, "description": "Wrong drive token, or a foreign Origin."},
        404: {"model": Problem, "description": "No room has this code."},
        422: {"model": Problem, "description": "No drive token."},
        429: {"model": Problem, "description": "Too many look-ups from this client."},
        503: {"model": Problem, "description": "The shared room store does not answer."},
    },
)
async def end_room(
    code: Code, request: Request, settings: SettingsDep, x_drive_token: DriveToken = None
) -> Response:
    """End a room for everyone in it (its drive token's holder only)."""
    code = code.upper()
    if not same_origin(request.scope, settings):
        return _foreign(request.scope)
    if x_drive_token is None:
        return _refused(
            422,
            {
                "type": "missing",
                "loc": ["header", "X-Drive-Token"],
                "field": "X-Drive-Token",
                "msg": "send the room's drive token in the X-Drive-Token header",
            },
        )
    record = await _look_up(request, settings, code, x_drive_token)
    if isinstance(record, JSONResponse):
        return record
    if record is None:
        return _no_room(code)
    if not token_matches(x_drive_token, record):
        return _refused(
            403,
            {
                "type": "token",
                "loc": ["header", "X-Drive-Token"],
                "field": "X-Drive-Token",
                "msg": "the drive token does not match this room",
            },
        )
    try:
        await _rooms(request).delete(code, x_drive_token)
    except RoomsUnavailable as exc:
        return _unavailable(exc)
    return Response(status_code=204)


# --- the WebSocket ---------------------------------------------------------------------------


@router.websocket("/ws/rooms/{code}")
async def room_stream(ws: WebSocket, code: str, settings: SettingsDep) -> None:
    rooms = _rooms(ws)
    await ws.accept()
    if not same_origin(ws.scope, settings):
        await ws.close(code=4403, reason=close_reason(refusal(ws.scope)))
        return
    if not re.fullmatch(CODE_PATTERN, code):
        await ws.close(code=4400, reason="a room code is 4 to 12 letters or digits")
        return
    code = code.upper()
    try:
        joined = await join(ws, rooms, settings, code)
        if joined is None:
            return
        role, follower, record = joined
        try:
            welcome = {
                "type": "welcome",
                "code": code,
                "role": role,
                "seq": record.seq,
                "clients": record.clients,
                "drivers": record.drivers,
                "limits": {
                    "message_bytes": settings.room_max_message_bytes,
                    "states_per_s": settings.room_states_per_s,
                },
                "state": json.loads(record.state) if record.state else None,
            }
            follower.send(json.dumps(welcome))
            follower.ready(record.seq)
            await serve(ws, rooms, settings, code, role, follower)
        finally:
            await rooms.leave(code, follower.member)
    except WebSocketDisconnect:
        return
    except RoomsUnavailable as exc:
        with contextlib.suppress(RuntimeError):
            await ws.close(code=1011, reason=close_reason(f"rooms are unavailable: {exc}"))
