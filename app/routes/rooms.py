"""Rooms: POST /api/rooms makes one, GET /api/rooms/{code} describes it, WS /ws/rooms/{code}
follows (or, with the drive token, drives) it.

WebSocket protocol (JSON text messages, each at most `room_max_message_bytes`):
    client → {"type": "join", "token": "<drive token>"}   first, within 10 s; token only to drive
    server → {"type": "welcome", "code", "role": "driver" | "attendee", "seq", "state", "clients"}
    driver → {"type": "state", "state": {"path", "params", "step"}, "base": <seq>}
             →  {"type": "ack", "seq"}, or {"type": "stale", "seq"} when refused as stale
    server → {"type": "state", "seq", "state"}   to everyone else in the room, in seq order
    client → {"type": "detach"} stops the states; {"type": "attach"} sends the latest and resumes
    client → {"type": "ping"}  →  {"type": "pong"}
`base` (optional) is the newest seq the driver had seen when its page produced the state. With
several drivers (the lecturer's laptop and tablet), a state built on an older room state than
another driver's newest one is refused as stale: it is an echo of something the room has left
behind, and the newer state is already on its way to the sender. The first of two drivers acting
at once wins; a driver's own quick succession of states never counts against it.
A recoverable mistake (an attendee trying to drive, a bad state, a bad message) gets
{"type": "error", "errors": [...]} with `field` and `limit`, and changes nothing. Otherwise the
server closes with a reason: 4400 bad code or first message, 4403 drive token does not match,
4404 no such room, 4408 no join message, 4409 room full, 4410 room closed, 1009 message too
large, 1013 client too slow to keep up.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import re
import secrets
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError

from flashscope.app.config import Settings
from flashscope.app.deps import SettingsDep
from flashscope.app.middleware.errors import describe, limit_error, value_error
from flashscope.app.middleware.ratelimit import Bucket, Rate
from flashscope.app.rooms.service import (
    CODE_PATTERN,
    SAFE_INT,
    Follower,
    Rooms,
    RoomsFull,
    RoomState,
    check_room_state,
    state_message,
    token_matches,
)
from flashscope.app.rooms.store import RoomFull, RoomGone, RoomRecord, RoomsUnavailable, StaleState

router = APIRouter(tags=["rooms"])

JOIN_TIMEOUT_S = 10.0
Code = Annotated[str, Path(pattern=CODE_PATTERN, description="The room's join code.")]


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


@router.post(
    "/api/rooms",
    status_code=201,
    response_model=RoomCreated,
    responses={
        429: {"model": Problem, "description": "Too many rooms, or too many requests."},
        503: {"model": Problem, "description": "The shared room store does not answer."},
    },
)
async def create_room(request: Request, settings: SettingsDep) -> Any:
    """Make a room: a join code for attendees and a drive token for the lecturer (secret)."""
    try:
        code, token = await _rooms(request).create()
    except RoomsUnavailable as exc:
        return _unavailable(exc)
    except RoomsFull:
        retry = 60
        return JSONResponse(
            status_code=429,
            headers={"Retry-After": str(retry)},
            content={
                "detail": [
                    limit_error(
                        "rooms",
                        f"this server already has {settings.rooms_max} rooms open (the limit); "
                        "idle rooms close on their own",
                        None,
                        settings.rooms_max,
                        "server",
                    )
                    | {"field": "rooms", "limit": settings.rooms_max}
                ]
            },
        )
    return RoomCreated(
        code=code,
        drive_token=token,
        join_path=f"/?room={code}",
        drive_path=f"/#room={code}&drive={token}",
    )


@router.get(
    "/api/rooms/{code}",
    response_model=RoomInfo,
    responses={
        404: {"model": Problem, "description": "No room has this code."},
        503: {"model": Problem, "description": "The shared room store does not answer."},
    },
)
async def room_info(code: Code, request: Request) -> Any:
    """Who is in a room and what it shows now (the drive token is never returned)."""
    try:
        record = await _rooms(request).get(code)
    except RoomsUnavailable as exc:
        return _unavailable(exc)
    if record is None:
        raise HTTPException(status_code=404, detail=f"no room {code.upper()!r}")
    state = json.loads(record.state) if record.state else None
    return {"code": record.code, "clients": record.clients, "seq": record.seq, "state": state}


def _no_nan(token: str) -> float:
    raise ValueError(f"{token} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is too large for a number")
    return value


async def _receive(ws: WebSocket, limit: int) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The next message as a dict, or errors to send back. Closes (and raises) when too large."""
    message = await ws.receive()
    if message["type"] == "websocket.disconnect":
        raise WebSocketDisconnect(message.get("code", 1000))
    raw = message.get("text")
    size = len(message.get("bytes") or b"") if raw is None else len(raw.encode())
    if size > limit:
        await ws.close(code=1009, reason=f"message over the limit of {limit} bytes")
        raise WebSocketDisconnect(1009)
    if raw is None:
        return None, [value_error("type", "send JSON text messages", None, "message")]
    try:
        msg = json.loads(raw, parse_constant=_no_nan, parse_float=_finite)
    except ValueError as exc:
        return None, [value_error("message", f"not JSON: {exc}", raw[:80], "message")]
    if not isinstance(msg, dict) or not isinstance(msg.get("type"), str):
        return None, [value_error("type", 'a message is an object with a "type"', None, "message")]
    return msg, []


def _errors(errors: list[dict[str, Any]]) -> str:
    return json.dumps({"type": "error", "errors": describe(errors)}, default=str)


@router.websocket("/ws/rooms/{code}")
async def room_stream(ws: WebSocket, code: str, settings: SettingsDep) -> None:
    rooms = _rooms(ws)
    await ws.accept()
    if not re.fullmatch(CODE_PATTERN, code):
        await ws.close(code=4400, reason="a room code is 4 to 12 letters or digits")
        return
    code = code.upper()
    try:
        joined = await _join(ws, rooms, settings, code)
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
                "limits": {
                    "message_bytes": settings.room_max_message_bytes,
                    "states_per_s": settings.room_states_per_s,
                },
                "state": json.loads(record.state) if record.state else None,
            }
            follower.send(json.dumps(welcome))
            follower.ready(record.seq)
            await _serve(ws, rooms, settings, code, role, follower)
        finally:
            await rooms.leave(code, follower.member)
    except WebSocketDisconnect:
        return
    except RoomsUnavailable as exc:
        with contextlib.suppress(RuntimeError):
            await ws.close(code=1011, reason=f"rooms are unavailable: {exc}"[:120])


async def _join(
    ws: WebSocket, rooms: Rooms, settings: Settings, code: str
) -> tuple[str, Follower, RoomRecord] | None:
    """Read the join message and admit the client, or close with the reason and return None."""
    try:
        msg, errs = await asyncio.wait_for(
            _receive(ws, settings.room_max_message_bytes), JOIN_TIMEOUT_S
        )
    except TimeoutError:
        await ws.close(code=4408, reason="send a join message first")
        return None
    if errs or msg is None or msg.get("type") != "join":
        await ws.close(code=4400, reason='the first message must be {"type": "join"}')
        return None
    token = msg.get("token")
    if token is not None and (not isinstance(token, str) or len(token) > 128):
        await ws.close(code=4403, reason="drive token does not match this room")
        return None
    record = await rooms.get(code)
    if record is None:
        await ws.close(code=4404, reason=f"no room {code}")
        return None
    if token is not None and not token_matches(token, record):
        await ws.close(code=4403, reason="drive token does not match this room")
        return None
    try:
        follower, record = await rooms.admit(code, secrets.token_hex(8))
    except RoomFull:
        reason = f"room {code} is full ({settings.room_max_clients} clients)"
        await ws.close(code=4409, reason=reason)
        return None
    except RoomGone:
        await ws.close(code=4404, reason=f"no room {code}")
        return None
    return ("driver" if token is not None else "attendee"), follower, record


def _unavailable(exc: RoomsUnavailable) -> JSONResponse:
    return JSONResponse(
        status_code=503,
        content={
            "detail": [
                {
                    "type": "unavailable",
                    "loc": ["server"],
                    "field": None,
                    "limit": None,
                    "msg": f"rooms are unavailable: {exc}",
                }
            ]
        },
    )


async def _serve(
    ws: WebSocket, rooms: Rooms, settings: Settings, code: str, role: str, follower: Follower
) -> None:
    """Run the reader and the writer of one connection until either ends."""
    reader = asyncio.create_task(_read(ws, rooms, settings, code, role, follower))
    writer = asyncio.create_task(_write(ws, follower))
    done, pending = await asyncio.wait({reader, writer}, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    for task in (*done, *pending):
        with contextlib.suppress(asyncio.CancelledError, WebSocketDisconnect, RuntimeError):
            await task


async def _write(ws: WebSocket, follower: Follower) -> None:
    while True:
        text = await follower.queue.get()
        await ws.send_text(text)
        if follower.too_slow:
            await ws.close(code=1013, reason="too slow to keep up with the room; join again")
            return


async def _read(
    ws: WebSocket, rooms: Rooms, settings: Settings, code: str, role: str, follower: Follower
) -> None:
    bucket = Bucket(Rate(settings.room_states_per_s, settings.room_states_burst))
    while True:
        msg, errs = await _receive(ws, settings.room_max_message_bytes)
        kind = msg.get("type") if msg else None
        if errs:
            follower.send(_errors(errs))
        elif kind == "state" and msg is not None:
            try:
                outcome = await _drive(rooms, settings, code, role, follower.member, bucket, msg)
            except RoomGone:
                await ws.close(code=4410, reason=f"room {code} has closed")
                return
            if isinstance(outcome, StaleState):
                follower.send(f'{{"type":"stale","seq":{outcome.seq}}}')
            elif isinstance(outcome, int):
                follower.send(f'{{"type":"ack","seq":{outcome}}}')
            else:
                follower.send(_errors(outcome))
        elif kind == "detach":
            follower.following = False
            follower.send('{"type":"detached"}')
        elif kind == "attach":
            follower.following = True
            follower.hold()
            record = await rooms.get(code)
            seq = record.seq if record else 0
            if record and record.state:
                follower.send(state_message(seq, record.state))
            follower.send('{"type":"attached"}')
            follower.ready(seq)
        elif kind == "ping":
            follower.send('{"type":"pong"}')
        else:
            follower.send(
                _errors(
                    [
                        value_error(
                            "type",
                            "type must be one of state, detach, attach, ping",
                            kind,
                            "message",
                        )
                    ]
                )
            )


async def _drive(
    rooms: Rooms,
    settings: Settings,
    code: str,
    role: str,
    member: str,
    bucket: Bucket,
    msg: dict[str, Any],
) -> int | StaleState | list[dict[str, Any]]:
    """Publish a driver's state: its seq, StaleState, or errors for anything refused.

    RoomGone when the room has closed.
    """
    if role != "driver":
        return [
            value_error(
                "type",
                "only the lecturer (holder of the drive token) can change the room's state; "
                "detach to explore on your own",
                "state",
                "message",
            )
        ]
    wait = bucket.take()
    if wait > 0:
        return [
            limit_error(
                "state",
                f"at most {settings.room_states_per_s:g} states per second "
                f"(burst {settings.room_states_burst}); this one was dropped",
                None,
                settings.room_states_per_s,
                "message",
            )
        ]
    extra = set(msg) - {"type", "state", "base"}
    base = msg.get("base")
    if base is not None and (
        not isinstance(base, int) or isinstance(base, bool) or not 0 <= base <= SAFE_INT
    ):
        why = "base must be a whole number from 0 to 2**53: the newest seq this driver has seen"
        return [value_error("base", why, None, "message")]
    try:
        if extra:
            raise ValueError(f"unknown fields {sorted(extra)}")
        state = RoomState.model_validate(msg.get("state"))
    except ValidationError as exc:
        return [dict(e, loc=["state", *e["loc"]]) for e in exc.errors(include_url=False)]
    except ValueError as exc:
        return [value_error("message", str(exc), None, "message")]
    if errs := check_room_state(state, settings):
        return errs
    try:
        return await rooms.publish(code, member, state, base)
    except StaleState as stale:
        return stale
