"""Instructor-synced rooms: the service on app.state that creates rooms and fans states out.

A lecturer creates a room and receives a short join code (to write on the board) and a secret
drive token (kept by the lecturer's browsers). Everyone in the room holds a WebSocket; the holder
of the drive token sends the view state {path, params, step}, and every other connection in the
room receives it, numbered by `seq`. The store (memory or Redis) keeps the latest state, so a
late joiner catches up at once.

Limits that keep one client from spoiling rooms for others live here: open rooms per client and
per address, a look-up budget per client (so room codes cannot be guessed quickly), and seats
per address in a room (the lecturer's connections are not counted).

Who is in a room is pushed, not polled: when a member joins or leaves, every process with
connections in the room reads its member count once (a burst of joins is read once per
`PRESENCE_EVERY_S`) and tells the connections that asked for it ("presence" in their join):
drivers of each change in the count, attendees of their lecturer leaving or coming back.

Each process also remembers, for every room one of its connections is in, the room's drive-token
digest and its newest state. When Redis restarts and comes back empty, the process puts those
rooms back (`restore`) and tells its connections: "room-gone" when the store was lost, then
"room-back" with the room's state. Sequence numbers carry on from the newest the process had
seen, so no follower steps back.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import secrets
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

from flashscope.app.config import Settings
from flashscope.app.middleware.ratelimit import Rate, RateLimiter
from flashscope.app.rooms.follower import Follower
from flashscope.app.rooms.state import RoomState
from flashscope.app.rooms.store import (
    MemoryRoomStore,
    Owners,
    RoomGone,
    RoomRecord,
    RoomStore,
    RoomsUnavailable,
    Seats,
)

CODE_ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"  # no I, L, O, 0, 1: easy to read aloud
CODE_LEN = 6
CODE_PATTERN = r"^[A-Za-z0-9]{4,12}$"
HEARTBEAT_S = 10.0
PING_TIMEOUT_S = 1.5  # how long /api/health waits for the room store
RECOVER_EVERY_S = 0.5  # while rooms are lost: how often to try putting them back
PRESENCE_EVERY_S = 0.2  # the most often a room's member count is read and pushed

log = logging.getLogger("flashscope.rooms")


class RoomsFull(Exception):
    """The server already has as many rooms open as it allows."""


class OwnerFull(Exception):
    """This client (`per` "client") or its address (`per` "address") has as many open rooms as
    it may create."""

    def __init__(self, per: str, limit: int) -> None:
        super().__init__(per, limit)
        self.per = per
        self.limit = limit


def new_code() -> str:
    return "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LEN))


def new_token() -> str:
    return secrets.token_urlsafe(32)


def digest(token: str) -> str:
    """Stores keep only this digest of a drive token, never the token."""
    return hashlib.sha256(token.encode()).hexdigest()


def token_matches(token: str, record: RoomRecord) -> bool:
    return hmac.compare_digest(digest(token), record.token_digest)


@dataclass
class LocalRoom:
    """What this process knows of a room some of its connections are in."""

    digest: str
    seq: int
    state: str | None
    followers: dict[str, Follower] = field(default_factory=dict)
    lost: str | None = None  # why, while the store has lost the room or does not answer


class Rooms:
    """Creates rooms, admits connections and hands each published state to local followers."""

    def __init__(self, settings: Settings, store: RoomStore | None = None) -> None:
        self.settings = settings
        if store is None:
            if settings.redis_url:
                from flashscope.app.rooms.redisstore import RedisRoomStore

                store = RedisRoomStore(
                    settings.redis_url, settings.room_idle_ttl_s, settings.room_unjoined_ttl_s
                )
            else:
                store = MemoryRoomStore(settings.room_idle_ttl_s, settings.room_unjoined_ttl_s)
        self.store: RoomStore = store
        self.local: dict[str, LocalRoom] = {}
        self.lookups = RateLimiter(
            {"lookup": Rate(settings.rate_lookup_per_s, settings.rate_lookup_burst)},
            settings.rate_max_clients,
            address_factor=settings.rate_per_address_factor,
        )
        self.seats = Seats(
            settings.room_max_clients, settings.seats_per_address(), settings.room_driver_seats
        )
        self._started = False
        self._lock = asyncio.Lock()
        self._recovering = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()
        self._heartbeat: asyncio.Task[None] | None = None
        self._recovery: asyncio.Task[None] | None = None
        self._presence_due: set[str] = set()  # rooms whose member count will be pushed soon

    async def ready(self) -> RoomStore:
        """The store, started on first use (in the server's event loop)."""
        if not self._started:
            async with self._lock:
                if not self._started:
                    await self.store.start(self._deliver, self._notify)
                    self._heartbeat = asyncio.create_task(self._beat())
                    self._started = True
        return self.store

    async def close(self) -> None:
        for task in [*self._tasks, *([self._heartbeat] if self._heartbeat else [])]:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._started:
            await self.store.close()
            self._started = False

    async def problems(self) -> list[str]:
        """Why rooms do not work fully now (for /api/health); empty when they do."""
        try:
            store = await asyncio.wait_for(self.ready(), PING_TIMEOUT_S)
            await asyncio.wait_for(store.ping(), PING_TIMEOUT_S)
        except RoomsUnavailable as exc:
            return [f"rooms: {exc}"]
        except TimeoutError:
            return [f"rooms: the room store did not answer within {PING_TIMEOUT_S:g} s"]
        lost = sorted(code for code, room in self.local.items() if room.lost)
        if lost:
            return [f"rooms: {len(lost)} room(s) lost with the room store, being restored"]
        return []

    # --- what the store reports --------------------------------------------------------------

    def _deliver(self, code: str, seq: int, origin: str, state_json: str) -> None:
        room = self.local.get(code)
        if room is None:
            return
        if seq > room.seq:
            room.seq, room.state = seq, state_json
        text = f'{{"type":"state","seq":{seq},"state":{state_json}}}'
        for f in room.followers.values():
            if f.member == origin:
                f.skip(seq)
            else:
                f.offer(seq, text)

    def _notify(self, event: str, detail: str) -> None:
        if event == "closed":
            self._end(detail, f"room {detail} has been ended by its lecturer")
        elif event == "members":
            if detail in self.local and detail not in self._presence_due:
                self._presence_due.add(detail)
                self._spawn(self._push_presence(detail))
        elif event == "lost":
            self._lose(list(self.local), detail)
        elif event == "back":
            self._spawn(self.recover())

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _push_presence(self, code: str) -> None:
        """After a moment (joins come in bursts), tell this process's connections in the room
        who is in it now."""
        try:
            await asyncio.sleep(PRESENCE_EVERY_S)
        finally:
            self._presence_due.discard(code)
        room = self.local.get(code)
        if room is None or room.lost or not any(f.wants_presence for f in room.followers.values()):
            return
        try:
            record = await self.store.get(code)
        except RoomsUnavailable:
            return  # the store's own fault handling tells the members
        if record is None:
            return
        for f in list(room.followers.values()):
            f.presence(record.clients, record.drivers)

    def _lose(self, codes: list[str], reason: str) -> None:
        """Tell the connections of these rooms that the store has lost them (once), and keep
        trying to put them back until it has."""
        for code in codes:
            room = self.local.get(code)
            if room is None or room.lost:
                continue
            room.lost = reason
            for f in room.followers.values():
                f.lost(reason)
        if any(r.lost for r in self.local.values()) and (
            self._recovery is None or self._recovery.done()
        ):
            self._recovery = asyncio.create_task(self._keep_recovering())
            self._tasks.add(self._recovery)
            self._recovery.add_done_callback(self._tasks.discard)

    async def _keep_recovering(self) -> None:
        """Put lost rooms back as soon as the store answers and delivers again. (A subscription
        that comes back says so at once, through "back"; this covers a store that failed a
        command while its subscription stayed up.)"""
        while any(r.lost for r in self.local.values()):
            await asyncio.sleep(RECOVER_EVERY_S)
            if self.store.listening:
                await self.recover()

    def _end(self, code: str, reason: str) -> None:
        room = self.local.pop(code, None)
        if room is not None:
            for f in room.followers.values():
                f.gone(reason)

    async def recover(self, codes: list[str] | None = None) -> None:
        """Put back the rooms the store lost (all this process knows, or `codes`).

        Also brings this process's connections up to date where states went out while its
        subscription was down: they get the newest (steps between are skipped, never reordered).
        """
        async with self._recovering:
            for code in list(self.local) if codes is None else codes:
                room = self.local.get(code)
                if room is None:
                    continue
                try:
                    record = await self.store.restore(
                        code, room.digest, room.seq, room.state, list(room.followers)
                    )
                except RoomsUnavailable as exc:
                    self._lose(list(self.local), str(exc))
                    return
                if record is None:
                    self._end(code, f"room {code} has closed")
                    continue
                was_lost = room.lost is not None
                room.lost = None
                missed = record.seq > room.seq
                if missed:
                    room.seq, room.state = record.seq, record.state
                if was_lost:
                    log.warning("room %s is back at seq %d", code, record.seq)
                    for f in room.followers.values():
                        f.back(record.seq, record.state, record.clients)
                elif missed and record.state is not None:
                    self._deliver(code, record.seq, "", record.state)

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            members = {code: list(r.followers) for code, r in self.local.items()}
            try:
                missing = await self.store.heartbeat(members)
            except RoomsUnavailable as exc:
                self._lose(list(self.local), str(exc))
                continue
            except Exception:
                log.exception("room heartbeat failed")
                continue
            self._lose(missing, "the room store no longer has this room")

    # --- rooms and members -------------------------------------------------------------------

    async def create(self, client: str, address: str) -> tuple[str, str]:
        """A new room: (join code, drive token). RoomsFull, or OwnerFull for this client."""
        store = await self.ready()
        s = self.settings
        owners = Owners(client, address, s.rooms_max_per_client, s.rooms_max_per_address)
        token = new_token()
        for _ in range(16):
            code = new_code()
            outcome = await store.create(code, digest(token), s.rooms_max, owners)
            if outcome == "ok":
                return code, token
            if outcome == "full":
                raise RoomsFull
            if outcome == "client":
                raise OwnerFull("client", s.rooms_max_per_client)
            if outcome == "address":
                raise OwnerFull("address", s.rooms_max_per_address)
        raise RuntimeError("could not draw an unused room code")

    async def get(self, code: str) -> RoomRecord | None:
        return await (await self.ready()).get(code.upper())

    async def delete(self, code: str, token: str) -> bool:
        """End a room for everyone in it, everywhere (its drive token's holder only)."""
        return await (await self.ready()).delete(code.upper(), digest(token))

    async def admit(self, code: str, member: str) -> tuple[Follower, RoomRecord]:
        """Join the room (RoomGone, RoomFull) and start buffering its states.

        The caller queues its welcome (carrying `record`), then calls `follower.ready(record.seq)`
        so that only states newer than the welcome follow it.
        """
        store = await self.ready()
        await store.join(code, member, self.seats)
        follower = Follower(member, self.settings.room_queue_len)
        record = await store.get(code)
        if record is None:
            with contextlib.suppress(Exception):
                await store.leave(code, member)
            raise RoomGone(code)
        room = self.local.get(code)
        if room is None:
            room = self.local[code] = LocalRoom(record.token_digest, record.seq, record.state)
        elif record.seq > room.seq:
            room.seq, room.state = record.seq, record.state
        room.followers[member] = follower
        return follower, record

    async def leave(self, code: str, member: str) -> None:
        room = self.local.get(code)
        if room is not None:
            room.followers.pop(member, None)
            if not room.followers:
                self.local.pop(code, None)
        with contextlib.suppress(Exception):
            await self.store.leave(code, member)

    async def publish(
        self, code: str, member: str, state: RoomState, base: int | None = None
    ) -> int:
        """The new state's seq; StaleState when another driver moved the room past `base`,
        RoomGone when it has closed, RoomsUnavailable when the store does not answer.

        A room the store has lost without this process noticing (its subscription never
        dropped) is put back first, from what this process knows of it.
        """
        text = json.dumps(state.model_dump(), separators=(",", ":"), allow_nan=False)
        store = await self.ready()
        room = self.local.get(code)
        if room is not None and room.lost:
            # Published now, it would reach only the processes already listening again: the
            # driver's page re-announces its state when the room is back.
            raise RoomsUnavailable(f"{room.lost}; the room is put back as soon as it answers")
        try:
            return await store.publish(code, member, text, base)
        except RoomGone:
            if code not in self.local:
                raise
            self._lose([code], "the room store no longer has this room")
            await self.recover([code])
            if code not in self.local:
                raise
            return await store.publish(code, member, text, base)
        except RoomsUnavailable as exc:
            self._lose(list(self.local), str(exc))
            raise
