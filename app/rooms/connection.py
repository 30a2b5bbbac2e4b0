"""One room connection: its join, then a reader, a writer, and the end of either.

The join is read first and paid for: without the room's drive token it is a look-up of the code,
which takes one from the client's look-up budget before the client learns whether the room
exists. A driver's connections are admitted beyond the attendees' limits (app/rooms/store.py).

The reader takes the client's messages (states from a driver, detach, attach, ping) and answers
through the connection's outbox (`Follower`); the writer sends the outbox in order. A connection
ends when the client leaves, when its outbox says so (too slow: 1013 at once; room closed: 4410
after what is queued), or when one send takes longer than `room_send_timeout_s`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from typing import Any

from fastapi import WebSocket, WebSocketDisconnect
from pydantic import ValidationError

from flashscope.app.config import Settings
from flashscope.app.middleware.errors import describe, limit_error, value_error
from flashscope.app.middleware.identity import address_key
from flashscope.app.middleware.ratelimit import Bucket, Rate
from flashscope.app.middleware.wsjson import BadMessage, loads
from flashscope.app.rooms.follower import TOO_SLOW, Follower
from flashscope.app.rooms.service import Rooms, token_matches
from flashscope.app.rooms.state import SAFE_INT, RoomState, check_room_state, state_message
from flashscope.app.rooms.store import (
    RoomFull,
    RoomGone,
    RoomRecord,
    RoomsUnavailable,
    StaleState,
    member_id,
)

CLOSE_WAIT_S = 1.0  # how long a close may wait on a client that does not read
JOIN_TIMEOUT_S = 10.0  # how long a new connection may take to send its join message


def close_reason(text: str) -> str:
    """A close reason within the protocol's 123 bytes."""
    data = text.encode()
    return text if len(data) <= 123 else data[:123].decode(errors="ignore")


def _nonfinite(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(_nonfinite(v) for v in value.values())
    if isinstance(value, list):
        return any(_nonfinite(v) for v in value)
    return False


async def receive(ws: WebSocket, limit: int) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
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
        msg = loads(raw)  # bounded nesting
    except BadMessage as exc:
        return None, [value_error("message", str(exc), raw[:80], "message")]
    if _nonfinite(msg):
        why = "numbers must be finite (no NaN, Infinity or overflowing values)"
        return None, [value_error("message", why, raw[:80], "message")]
    if not isinstance(msg, dict) or not isinstance(msg.get("type"), str):
        return None, [value_error("type", 'a message is an object with a "type"', None, "message")]
    return msg, []


def errors(errs: list[dict[str, Any]]) -> str:
    return json.dumps({"type": "error", "errors": describe(errs)}, default=str)


async def join(
    ws: WebSocket, rooms: Rooms, settings: Settings, code: str
) -> tuple[str, Follower, RoomRecord] | None:
    """Read the join message and admit the client, or close with the reason and return None."""
    try:
        msg, errs = await asyncio.wait_for(
            receive(ws, settings.room_max_message_bytes), JOIN_TIMEOUT_S
        )
    except TimeoutError:
        await ws.close(code=4408, reason="send a join message first")
        return None
    if errs or msg is None or msg.get("type") != "join":
        await ws.close(code=4400, reason='the first message must be {"type": "join"}')
        return None
    token = msg.get("token")
    if token is not None and (not isinstance(token, str) or len(token) > 128):
        token = ""  # matches no room: refused below, after the look-up is paid for
    record = None if token is None else await rooms.get(code)
    driver = token is not None and record is not None and token_matches(token, record)
    if not driver:
        # Without the room's drive token a join is a look-up of its code: paid for before the
        # client learns whether the code exists.
        wait = rooms.lookups.take_for(ws.scope, "lookup")
        if wait > 0:
            reason = f"too many room look-ups from this client; retry after {math.ceil(wait)} s"
            await ws.close(code=4429, reason=reason)
            return None
        if token is None:
            record = await rooms.get(code)
    if record is None:
        await ws.close(code=4404, reason=f"no room {code}")
        return None
    if token is not None and not driver:
        await ws.close(code=4403, reason="drive token does not match this room")
        return None
    try:
        follower, record = await rooms.admit(code, member_id(driver, address_key(ws.scope)))
    except RoomFull as full:
        if full.per == "address":
            n = rooms.seats.per_address
            reason = f"room {code} is full for your network ({n} attendees from one address)"
        else:
            reason = f"room {code} is full ({settings.room_max_clients} clients)"
        await ws.close(code=4409, reason=reason)
        return None
    except RoomGone:
        await ws.close(code=4404, reason=f"no room {code}")
        return None
    follower.wants_presence = msg.get("presence") is True
    follower.presence(record.clients, record.drivers, first=True)  # the welcome says it
    return ("driver" if driver else "attendee"), follower, record


async def serve(
    ws: WebSocket, rooms: Rooms, settings: Settings, code: str, role: str, follower: Follower
) -> None:
    """Run the reader and the writer of one connection until either ends, or its outbox does."""
    reader = asyncio.create_task(_read(ws, rooms, settings, code, role, follower))
    writer = asyncio.create_task(_write(ws, follower, settings.room_send_timeout_s))
    ended = asyncio.create_task(follower.ended.wait())
    done, pending = await asyncio.wait({reader, writer, ended}, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    for task in (*done, *pending):
        with contextlib.suppress(asyncio.CancelledError, WebSocketDisconnect, RuntimeError):
            await task
    if follower.close_code is not None:
        # A client that does not read may never take the close frame: do not wait for it.
        with contextlib.suppress(Exception):
            await asyncio.wait_for(
                ws.close(code=follower.close_code, reason=close_reason(follower.close_reason)),
                CLOSE_WAIT_S,
            )


async def _write(ws: WebSocket, follower: Follower, timeout: float) -> None:
    while True:
        text = await follower.queue.get()
        if text is None:  # the outbox ends here (the room has closed)
            return
        try:
            await asyncio.wait_for(ws.send_text(text), timeout)
        except TimeoutError:
            follower.end(TOO_SLOW, f"took over {timeout:g} s to take one message; join again")
            return


def _unavailable(exc: RoomsUnavailable, field: str) -> str:
    msg = f"rooms are unavailable: {exc}; the room resumes when its store is back"
    return errors([{"type": "unavailable", "loc": ["message", field], "msg": msg}])


async def _read(
    ws: WebSocket, rooms: Rooms, settings: Settings, code: str, role: str, follower: Follower
) -> None:
    bucket = Bucket(Rate(settings.room_states_per_s, settings.room_states_burst))
    while True:
        msg, errs = await receive(ws, settings.room_max_message_bytes)
        kind = msg.get("type") if msg else None
        if errs:
            follower.send(errors(errs))
        elif kind == "state" and msg is not None:
            try:
                outcome = await _drive(rooms, settings, code, role, follower.member, bucket, msg)
            except RoomGone:
                follower.gone(f"room {code} has closed")
                continue
            except RoomsUnavailable as exc:
                follower.send(_unavailable(exc, "state"))
                continue
            if isinstance(outcome, StaleState):
                follower.send(f'{{"type":"stale","seq":{outcome.seq}}}')
            elif isinstance(outcome, int):
                follower.send(f'{{"type":"ack","seq":{outcome}}}')
            else:
                follower.send(errors(outcome))
        elif kind == "detach":
            follower.following = False
            follower.send('{"type":"detached"}')
        elif kind == "attach":
            try:
                record = await rooms.get(code)
            except RoomsUnavailable as exc:
                follower.send(_unavailable(exc, "type"))
                continue
            follower.following = True
            follower.hold()
            seq = record.seq if record else 0
            if record and record.state:
                follower.send(state_message(seq, record.state))
            follower.send('{"type":"attached"}')
            follower.ready(seq)
        elif kind == "ping":
            follower.send('{"type":"pong"}')
        else:
            why = "type must be one of state, detach, attach, ping"
            follower.send(errors([value_error("type", why, kind, "message")]))


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

    RoomGone when the room has closed, RoomsUnavailable when its store does not answer.
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
