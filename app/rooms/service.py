"""Instructor-synced rooms: the service on app.state that creates rooms and fans states out.

A lecturer creates a room and receives a short join code (to write on the board) and a secret
drive token (kept by the lecturer's browsers). Everyone in the room holds a WebSocket; the holder
of the drive token sends the view state {path, params, step}, and every other connection in the
room receives it, numbered by `seq`. The store (memory or Redis) keeps the latest state, so a
late joiner catches up at once.

Here live the room codes and tokens, the validated shape of a state, and the per-connection
outbox (`Follower`): a bounded queue of messages that a single writer task sends in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import math
import re
import secrets
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from flashscope.app.config import Settings
from flashscope.app.middleware.errors import limit_error, value_error
from flashscope.app.rooms.store import MemoryRoomStore, RoomGone, RoomRecord, RoomStore

CODE_ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"  # no I, L, O, 0, 1: easy to read aloud
CODE_LEN = 6
CODE_PATTERN = r"^[A-Za-z0-9]{4,12}$"
HEARTBEAT_S = 10.0
SAFE_INT = 2**53  # integers beyond this do not survive JavaScript's numbers


class RoomsFull(Exception):
    """The server already has as many rooms open as it allows."""


def new_code() -> str:
    return "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LEN))


def new_token() -> str:
    return secrets.token_urlsafe(32)


def digest(token: str) -> str:
    """Stores keep only this digest of a drive token, never the token."""
    return hashlib.sha256(token.encode()).hexdigest()


def token_matches(token: str, record: RoomRecord) -> bool:
    return hmac.compare_digest(digest(token), record.token_digest)


# --- the state a lecturer sends ----------------------------------------------------------------

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


# --- connections -------------------------------------------------------------------------------


class Follower:
    """One connection's outbox. States wait in a bounded queue; a full queue marks it too slow.

    Until `ready(seq)` the follower buffers what arrives (it is between registering and reading
    the room's latest state); after that, states numbered ≤ seq are dropped as already seen.
    """

    def __init__(self, member: str, queue_len: int) -> None:
        self.member = member
        self.following = True
        self.too_slow = False
        self.queue: asyncio.Queue[str] = asyncio.Queue(maxsize=queue_len + 8)
        self._state_room = queue_len
        self._floor: int | None = None
        self._early: list[tuple[int, str]] = []

    def hold(self) -> None:
        """Buffer states until the next `ready` (while the room's latest state is read)."""
        self._floor = None

    def ready(self, seq: int) -> None:
        self._floor = seq
        early, self._early = self._early, []
        for s, text in early:
            self.offer(s, text)

    def skip(self, seq: int) -> None:
        """A state this connection sent itself: it already shows it."""
        if self._floor is not None and seq > self._floor:
            self._floor = seq

    def send(self, text: str) -> None:
        """Queue a control message (welcome, ack, error, pong)."""
        try:
            self.queue.put_nowait(text)
        except asyncio.QueueFull:
            self.too_slow = True

    def offer(self, seq: int, text: str) -> None:
        if self._floor is None:
            self._early.append((seq, text))
            return
        if seq <= self._floor:
            return
        self._floor = seq
        if not self.following:
            return
        if self.queue.qsize() >= self._state_room:
            self.too_slow = True
            return
        self.send(text)


class Rooms:
    """Creates rooms, admits connections and hands each published state to local followers."""

    def __init__(self, settings: Settings, store: RoomStore | None = None) -> None:
        self.settings = settings
        if store is None:
            if settings.redis_url:
                from flashscope.app.rooms.redisstore import RedisRoomStore

                store = RedisRoomStore(settings.redis_url, settings.room_idle_ttl_s)
            else:
                store = MemoryRoomStore(settings.room_idle_ttl_s)
        self.store: RoomStore = store
        self.local: dict[str, dict[str, Follower]] = {}
        self._started = False
        self._lock = asyncio.Lock()
        self._heartbeat: asyncio.Task[None] | None = None

    async def ready(self) -> RoomStore:
        """The store, started on first use (in the server's event loop)."""
        if not self._started:
            async with self._lock:
                if not self._started:
                    await self.store.start(self._deliver)
                    self._heartbeat = asyncio.create_task(self._beat())
                    self._started = True
        return self.store

    async def close(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeat
        if self._started:
            await self.store.close()
            self._started = False

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            members = {code: list(fs) for code, fs in self.local.items()}
            with contextlib.suppress(Exception):
                await self.store.heartbeat(members)

    def _deliver(self, code: str, seq: int, origin: str, state_json: str) -> None:
        followers = self.local.get(code)
        if not followers:
            return
        text = state_message(seq, state_json)
        for f in followers.values():
            if f.member == origin:
                f.skip(seq)
            else:
                f.offer(seq, text)

    async def create(self) -> tuple[str, str]:
        """A new room: (join code, drive token)."""
        store = await self.ready()
        token = new_token()
        for _ in range(16):
            code = new_code()
            outcome = await store.create(code, digest(token), self.settings.rooms_max)
            if outcome == "ok":
                return code, token
            if outcome == "full":
                raise RoomsFull
        raise RuntimeError("could not draw an unused room code")

    async def get(self, code: str) -> RoomRecord | None:
        return await (await self.ready()).get(code.upper())

    async def admit(self, code: str, member: str) -> tuple[Follower, RoomRecord]:
        """Join the room (RoomGone, RoomFull) and start buffering its states.

        The caller queues its welcome (carrying `record`), then calls `follower.ready(record.seq)`
        so that only states newer than the welcome follow it.
        """
        store = await self.ready()
        await store.join(code, member, self.settings.room_max_clients)
        follower = Follower(member, self.settings.room_queue_len)
        self.local.setdefault(code, {})[member] = follower
        record = await store.get(code)
        if record is None:
            await self.leave(code, member)
            raise RoomGone(code)
        return follower, record

    async def leave(self, code: str, member: str) -> None:
        followers = self.local.get(code, {})
        followers.pop(member, None)
        if not followers:
            self.local.pop(code, None)
        with contextlib.suppress(Exception):
            await self.store.leave(code, member)

    async def publish(
        self, code: str, member: str, state: RoomState, base: int | None = None
    ) -> int:
        """The new state's seq; StaleState when another driver moved the room past `base`."""
        text = json.dumps(state.model_dump(), separators=(",", ":"), allow_nan=False)
        return await (await self.ready()).publish(code, member, text, base)
