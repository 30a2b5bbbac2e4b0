"""Where rooms live: their drive-token digest, latest state, sequence number and members.

Two stores share one interface. `MemoryRoomStore` keeps rooms in this process (the default: one
laptop, one server). `RedisRoomStore` (app/rooms/redisstore.py) keeps them in Redis and fans each
new state out through pub/sub, so several server processes behind a load balancer share rooms.

A store calls `deliver(code, seq, origin, state_json)` once per published state in every process
(the origin is the member that sent it); the Rooms service passes it on to local connections.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

Deliver = Callable[[str, int, str, str], None]


class RoomGone(Exception):
    """No room has this code (never made, or closed after being idle)."""


class RoomsUnavailable(Exception):
    """The shared store (Redis) does not answer; the message says where it was looked for."""


class RedisNotInstalled(Exception):
    """FLASHSCOPE_REDIS_URL is set, but the redis package (flashscope's `redis` extra) is not."""


class RoomFull(Exception):
    """The room already holds as many clients as the limit allows."""


class StaleState(Exception):
    """A driver sent a state built on an older room state than another driver's newest one.

    `seq` is the room's newest sequence number: that state is already on its way to the sender,
    which shows it instead (two drivers acting at once: the first to arrive wins).
    """

    def __init__(self, seq: int) -> None:
        super().__init__(seq)
        self.seq = seq


@dataclass(frozen=True)
class RoomRecord:
    code: str
    token_digest: str
    seq: int  # states published so far
    state: str | None  # the latest state, as JSON text
    clients: int


class RoomStore(Protocol):
    async def start(self, deliver: Deliver) -> None: ...
    async def close(self) -> None: ...
    async def create(self, code: str, token_digest: str, max_rooms: int) -> str:
        """ "ok", "exists" (code taken: draw another) or "full" (too many rooms)."""
        ...

    async def get(self, code: str) -> RoomRecord | None: ...
    async def join(self, code: str, member: str, limit: int) -> int:
        """Add a member; returns the member count. Raises RoomGone or RoomFull."""
        ...

    async def leave(self, code: str, member: str) -> None: ...
    async def publish(
        self, code: str, origin: str, state_json: str, base: int | None = None
    ) -> int:
        """Store the room's latest state and deliver it everywhere; returns its seq.

        `base` is the newest seq the sender had seen. When another member published after it
        (seq > base and the latest state is not the sender's own), nothing changes and
        StaleState says so: the sender's state answers a room that has moved on.
        """
        ...

    async def heartbeat(self, members: dict[str, list[str]]) -> None:
        """Keep this process's members (and their rooms) alive."""
        ...

    async def count(self) -> int:
        """Rooms open now."""
        ...


@dataclass
class _Room:
    token_digest: str
    touched: float
    seq: int = 0
    state: str | None = None
    origin: str | None = None  # the member whose state is the latest
    members: set[str] = field(default_factory=set)


class MemoryRoomStore:
    """Rooms in a dict of this process; an idle room closes `idle_ttl_s` after its last use."""

    def __init__(self, idle_ttl_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._ttl = idle_ttl_s
        self._clock = clock
        self._rooms: dict[str, _Room] = {}
        self._deliver: Deliver | None = None

    async def start(self, deliver: Deliver) -> None:
        self._deliver = deliver

    async def close(self) -> None:
        self._rooms.clear()

    def _sweep(self) -> None:
        now = self._clock()
        for code in [
            c for c, r in self._rooms.items() if not r.members and now - r.touched > self._ttl
        ]:
            del self._rooms[code]

    def _room(self, code: str) -> _Room:
        self._sweep()
        room = self._rooms.get(code)
        if room is None:
            raise RoomGone(code)
        room.touched = self._clock()
        return room

    async def create(self, code: str, token_digest: str, max_rooms: int) -> str:
        self._sweep()
        if code in self._rooms:
            return "exists"
        if len(self._rooms) >= max_rooms:
            return "full"
        self._rooms[code] = _Room(token_digest, self._clock())
        return "ok"

    async def get(self, code: str) -> RoomRecord | None:
        try:
            r = self._room(code)
        except RoomGone:
            return None
        return RoomRecord(code, r.token_digest, r.seq, r.state, len(r.members))

    async def join(self, code: str, member: str, limit: int) -> int:
        room = self._room(code)
        if len(room.members) >= limit:
            raise RoomFull(code)
        room.members.add(member)
        return len(room.members)

    async def leave(self, code: str, member: str) -> None:
        room = self._rooms.get(code)
        if room is not None:
            room.members.discard(member)
            room.touched = self._clock()

    async def publish(
        self, code: str, origin: str, state_json: str, base: int | None = None
    ) -> int:
        room = self._room(code)
        if base is not None and base < room.seq and room.origin != origin:
            raise StaleState(room.seq)
        room.seq += 1
        room.state = state_json
        room.origin = origin
        if self._deliver is not None:
            self._deliver(code, room.seq, origin, state_json)
        return room.seq

    async def heartbeat(self, members: dict[str, list[str]]) -> None:
        now = self._clock()
        for code in members:
            if code in self._rooms:
                self._rooms[code].touched = now

    async def count(self) -> int:
        self._sweep()
        return len(self._rooms)
