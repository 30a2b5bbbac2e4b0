"""Where rooms live: their drive-token digest, latest state, sequence number and members.

Two stores share one interface. `MemoryRoomStore` keeps rooms in this process (the default: one
laptop, one server). `RedisRoomStore` (app/rooms/redisstore.py) keeps them in Redis and fans each
new state out through pub/sub, so several server processes behind a load balancer share rooms.

A store calls `deliver(code, seq, origin, state_json)` once per published state in every process
(the origin is the member that sent it), and `notify(event, detail)` for what happens to rooms
as a whole: ("closed", code) when a driver ended a room, ("members", code) when a member joined
or left it, ("lost", reason) when the store stopped answering or delivering, ("back", "") when it
answers again. The Rooms service passes these on.

A member id is `<role>.<address tag>.<random>`: role `d` for a holder of the drive token, `a`
for an attendee; the tag (a digest of the client's address) lets a store count one address's
attendees in a room without keeping addresses.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol

Deliver = Callable[[str, int, str, str], None]
Notify = Callable[[str, str], None]
Created = Literal["ok", "exists", "full", "client", "address"]


class RoomGone(Exception):
    """No room has this code (never made, closed after being idle, or ended by its driver)."""


class RoomsUnavailable(Exception):
    """The shared store (Redis) does not answer; the message says where it was looked for."""


class RedisNotInstalled(Exception):
    """FLASHSCOPE_REDIS_URL is set, but the redis package (flashscope's `redis` extra) is not."""


class RoomFull(Exception):
    """The room holds as many clients as it allows (`per` "room"), or as many attendees from
    the client's address (`per` "address")."""

    def __init__(self, code: str, per: str = "room") -> None:
        super().__init__(code, per)
        self.per = per


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
    drivers: int = 0  # of the clients, those holding the drive token


@dataclass(frozen=True)
class Owners:
    """Who asks for a new room, and how many open rooms each of them may have made."""

    client: str
    address: str
    per_client: int
    per_address: int


@dataclass(frozen=True)
class Seats:
    """How many connections a room admits: `limit` in all (attendees are refused beyond it),
    `per_address` attendees from one address, and `driver_extra` more for drive-token holders."""

    limit: int
    per_address: int
    driver_extra: int = 0


def address_tag(address: str) -> str:
    return hashlib.sha256(address.encode()).hexdigest()[:12]


def member_id(driver: bool, address: str) -> str:
    return f"{'d' if driver else 'a'}.{address_tag(address)}.{secrets.token_hex(6)}"


def is_driver(member: str) -> bool:
    return member.startswith("d.")


def same_address(member: str) -> str:
    """The prefix that every attendee id from `member`'s address starts with."""
    return "a." + member.split(".", 2)[1] + "."


class RoomStore(Protocol):
    @property
    def listening(self) -> bool:
        """Whether this process receives the store's deliveries now."""
        ...

    async def start(self, deliver: Deliver, notify: Notify | None = None) -> None: ...
    async def close(self) -> None: ...
    async def create(
        self, code: str, token_digest: str, max_rooms: int, owners: Owners | None = None
    ) -> Created:
        """ "ok", "exists" (code taken: draw another), "full" (too many rooms), or "client" /
        "address" (that owner already has as many open rooms as it may)."""
        ...

    async def get(self, code: str) -> RoomRecord | None: ...
    async def join(self, code: str, member: str, seats: Seats) -> int:
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

    async def delete(self, code: str, token_digest: str) -> bool:
        """End a room for everyone (notify "closed" everywhere); False when there is none.

        An ended room is never restored, and its code is not drawn again for a while.
        """
        ...

    async def restore(
        self, code: str, token_digest: str, seq: int, state: str | None, members: list[str]
    ) -> RoomRecord | None:
        """Put back a room the store lost (Redis restarted), as this process last knew it.

        A room that is still there keeps its content, unless it is older than `seq` (Redis came
        back from an old snapshot), and gets `members` back. None when the room was ended or its
        code now belongs to another room.
        """
        ...

    async def heartbeat(self, members: dict[str, list[str]]) -> list[str]:
        """Keep this process's members (and their rooms) alive; returns the codes that the
        store no longer has."""
        ...

    async def count(self) -> int:
        """Rooms open now."""
        ...

    async def ping(self) -> None:
        """Return when the store answers; RoomsUnavailable when it does not."""
        ...


@dataclass
class _Room:
    token_digest: str
    touched: float
    owners: tuple[str, ...] = ()
    seq: int = 0
    state: str | None = None
    origin: str | None = None  # the member whose state is the latest
    joined: bool = False  # an attendee has joined: the long idle TTL applies
    members: set[str] = field(default_factory=set)


class MemoryRoomStore:
    """Rooms in a dict of this process. An idle room closes `idle_ttl_s` after its last use, one
    that no attendee has joined `unjoined_ttl_s` after."""

    def __init__(
        self,
        idle_ttl_s: float,
        unjoined_ttl_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ttl = idle_ttl_s
        self._unjoined_ttl = idle_ttl_s if unjoined_ttl_s is None else unjoined_ttl_s
        self._clock = clock
        self._rooms: dict[str, _Room] = {}
        self._ended: dict[str, float] = {}
        self._deliver: Deliver | None = None
        self._notify: Notify | None = None

    @property
    def listening(self) -> bool:
        return True

    async def start(self, deliver: Deliver, notify: Notify | None = None) -> None:
        self._deliver = deliver
        self._notify = notify

    async def close(self) -> None:
        self._rooms.clear()

    def _sweep(self) -> None:
        now = self._clock()
        for code in [
            c
            for c, r in self._rooms.items()
            if not r.members and now - r.touched > (self._ttl if r.joined else self._unjoined_ttl)
        ]:
            del self._rooms[code]
        for code in [c for c, t in self._ended.items() if now - t > self._ttl]:
            del self._ended[code]

    def _room(self, code: str) -> _Room:
        self._sweep()
        room = self._rooms.get(code)
        if room is None:
            raise RoomGone(code)
        room.touched = self._clock()
        return room

    def _owned(self, owner: str) -> int:
        return sum(owner in r.owners for r in self._rooms.values())

    async def create(
        self, code: str, token_digest: str, max_rooms: int, owners: Owners | None = None
    ) -> Created:
        self._sweep()
        if code in self._rooms or code in self._ended:
            return "exists"
        if len(self._rooms) >= max_rooms:
            return "full"
        keys: tuple[str, ...] = ()
        if owners is not None:
            if self._owned(owners.client) >= owners.per_client:
                return "client"
            if self._owned(owners.address) >= owners.per_address:
                return "address"
            keys = (owners.client, owners.address)
        self._rooms[code] = _Room(token_digest, self._clock(), keys)
        return "ok"

    async def get(self, code: str) -> RoomRecord | None:
        try:
            r = self._room(code)
        except RoomGone:
            return None
        drivers = sum(is_driver(m) for m in r.members)
        return RoomRecord(code, r.token_digest, r.seq, r.state, len(r.members), drivers)

    def _members_changed(self, code: str) -> None:
        if self._notify is not None:
            self._notify("members", code)

    async def join(self, code: str, member: str, seats: Seats) -> int:
        room = self._room(code)
        if is_driver(member):
            if len(room.members) >= seats.limit + seats.driver_extra:
                raise RoomFull(code)
        else:
            if len(room.members) >= seats.limit:
                raise RoomFull(code)
            prefix = same_address(member)
            if sum(m.startswith(prefix) for m in room.members) >= seats.per_address:
                raise RoomFull(code, "address")
            room.joined = True
        room.members.add(member)
        self._members_changed(code)
        return len(room.members)

    async def leave(self, code: str, member: str) -> None:
        room = self._rooms.get(code)
        if room is not None:
            present = member in room.members
            room.members.discard(member)
            room.touched = self._clock()
            if present:
                self._members_changed(code)

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

    async def delete(self, code: str, token_digest: str) -> bool:
        self._sweep()
        room = self._rooms.get(code)
        if room is None or room.token_digest != token_digest:
            return False
        del self._rooms[code]
        self._ended[code] = self._clock()
        if self._notify is not None:
            self._notify("closed", code)
        return True

    async def restore(
        self, code: str, token_digest: str, seq: int, state: str | None, members: list[str]
    ) -> RoomRecord | None:
        self._sweep()
        if code in self._ended:
            return None
        room = self._rooms.get(code)
        if room is None:
            room = self._rooms[code] = _Room(token_digest, self._clock(), joined=True)
        if room.token_digest != token_digest:
            return None
        if room.seq < seq:
            room.seq, room.state, room.origin = seq, state, None
        room.members.update(members)
        room.touched = self._clock()
        return RoomRecord(code, room.token_digest, room.seq, room.state, len(room.members))

    async def heartbeat(self, members: dict[str, list[str]]) -> list[str]:
        now = self._clock()
        for code in members:
            if code in self._rooms:
                self._rooms[code].touched = now
        return [code for code in members if code not in self._rooms]

    async def count(self) -> int:
        self._sweep()
        return len(self._rooms)

    async def ping(self) -> None:
        return None
