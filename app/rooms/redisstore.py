"""Rooms in Redis, shared by several server processes (FLASHSCOPE_REDIS_URL).

Keys (all under `flashscope:`):
    room:<code>           hash  token (SHA-256 of the drive token), seq, state (JSON text),
                                origin (the member that sent the state), joined (an attendee
                                has joined: the long idle TTL applies)
    room:<code>:members   zset  member id → expiry time (members are kept alive by heartbeats)
    rooms                 zset  code → expiry time (to count open rooms without SCAN)
    owner:<key>           zset  codes of the rooms a client or an address made (per-owner caps)
    ended:<code>          string, a while after a driver ended the room: never restored
and three pub/sub channels: `flashscope:states` carrying "<code> <seq> <origin> <state JSON>",
`flashscope:closed` carrying the code of a room its driver ended, and `flashscope:members`
carrying the code of a room that a member joined or left (each process then reads who is in it).

redis-py is flashscope's `redis` extra, imported only here and only once a store is made: a
server without FLASHSCOPE_REDIS_URL needs no Redis client. A store made without the package
refuses at once (RedisNotInstalled), naming the extra, instead of at the first room.

Each change runs as one Lua script (app/rooms/redislua.py), so the limits (rooms, owners,
members, an address's seats) and the order of sequence numbers hold across processes. The
scripts build the keys of owned rooms themselves, so the store needs one Redis, not a cluster.

Faults. Commands retry with backoff on connection errors, so the pooled connections that a Redis
restart left stale reconnect instead of failing a request each. The subscription has its own
connection without retries: when it drops, the store says so at once (notify "lost"), and when
it is back (notify "back") the Rooms service restores the rooms its members are in, which a
restarted Redis no longer has.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
import logging
import math
import time
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

from flashscope.app.rooms import redislua as lua
from flashscope.app.rooms.store import (
    Created,
    Deliver,
    Notify,
    Owners,
    RedisNotInstalled,
    RoomFull,
    RoomGone,
    RoomRecord,
    RoomsUnavailable,
    Seats,
    StaleState,
    is_driver,
    same_address,
)

PREFIX = "flashscope:"
CHANNEL = PREFIX + "states"
CLOSED = PREFIX + "closed"
MEMBERS = PREFIX + "members"
MEMBER_TTL_S = 30.0  # a member whose process stopped heartbeating is dropped after this
POOL_SIZE = 32  # Redis connections per server process for commands
POOL_WAIT_S = 10.0  # how long a request waits for a free connection before giving up
CONNECT_TIMEOUT_S = 2.0  # a Redis that does not accept a connection in this long is down
RETRIES = 3  # a command's retries on a connection error, with exponential backoff and jitter
BACKOFF_BASE_S = 0.05
BACKOFF_CAP_S = 0.5
RESUBSCRIBE_S = (0.05, 0.5)  # first and longest wait between attempts to subscribe again

log = logging.getLogger("flashscope.rooms")

MISSING = (
    "FLASHSCOPE_REDIS_URL is set, but the redis package is not installed: "
    "pip install 'flashscope[redis]' (or unset FLASHSCOPE_REDIS_URL to keep rooms in this process)"
)

P = ParamSpec("P")
T = TypeVar("T")


def _unavailable(
    fn: Callable[P, Coroutine[Any, Any, T]],
) -> Callable[P, Coroutine[Any, Any, T]]:
    """Turn Redis connection failures into RoomsUnavailable, with the reason."""

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        from redis.exceptions import RedisError

        try:
            return await fn(*args, **kwargs)
        except (RedisError, OSError) as exc:
            raise RoomsUnavailable(f"Redis does not answer ({type(exc).__name__}: {exc})") from exc

    return wrapper


def _room(code: str) -> str:
    return f"{PREFIX}room:{code}"


def _members(code: str) -> str:
    return f"{PREFIX}room:{code}:members"


def _ended(code: str) -> str:
    return f"{PREFIX}ended:{code}"


class RedisRoomStore:
    """The RoomStore interface over redis-py's asyncio client."""

    def __init__(self, url: str, idle_ttl_s: float, unjoined_ttl_s: float | None = None) -> None:
        try:
            importlib.import_module("redis.asyncio")
        except ImportError:
            raise RedisNotInstalled(MISSING) from None
        self._url = url
        self._ttl = max(1, math.ceil(idle_ttl_s))
        unjoined = idle_ttl_s if unjoined_ttl_s is None else unjoined_ttl_s
        self._unjoined_ttl = max(1, math.ceil(unjoined))
        self._redis: Any = None
        self._listener: asyncio.Task[None] | None = None
        self._listening = False
        self._scripts: dict[str, Any] = {}

    @property
    def listening(self) -> bool:
        return self._listening

    def _args(self, code: str) -> list[Any]:
        """The arguments every script starts with."""
        return [PREFIX, self._ttl, self._unjoined_ttl, code]

    @_unavailable
    async def start(self, deliver: Deliver, notify: Notify | None = None) -> None:
        import redis.asyncio as aioredis
        from redis.asyncio.retry import Retry
        from redis.backoff import ExponentialWithJitterBackoff
        from redis.exceptions import ConnectionError, TimeoutError

        # A blocking pool: a burst of joins waits for a free connection instead of failing. A
        # command that meets a stale connection (Redis restarted) reconnects and runs again.
        pool = aioredis.BlockingConnectionPool.from_url(
            self._url,
            decode_responses=True,
            max_connections=POOL_SIZE,
            timeout=POOL_WAIT_S,
            socket_connect_timeout=CONNECT_TIMEOUT_S,
            retry=Retry(ExponentialWithJitterBackoff(BACKOFF_CAP_S, BACKOFF_BASE_S), RETRIES),
            retry_on_error=[ConnectionError, TimeoutError],
        )
        redis = aioredis.Redis(connection_pool=pool)
        try:
            await redis.ping()
            subscription = await self._subscribe()
        except BaseException:
            await redis.aclose(close_connection_pool=True)
            raise
        self._redis = redis
        for name, text in (
            ("create", lua.CREATE),
            ("join", lua.JOIN),
            ("publish", lua.PUBLISH),
            ("delete", lua.DELETE),
            ("restore", lua.RESTORE),
            ("heartbeat", lua.HEARTBEAT),
        ):
            self._scripts[name] = self._redis.register_script(text)
        self._listening = True
        self._listener = asyncio.create_task(self._listen(subscription, deliver, notify))

    async def _subscribe(self) -> tuple[Any, Any]:
        """A subscription on a connection of its own, which never retries: a drop surfaces."""
        import redis.asyncio as aioredis

        client = aioredis.Redis.from_url(
            self._url,
            decode_responses=True,
            socket_connect_timeout=CONNECT_TIMEOUT_S,
            max_connections=1,
        )
        pubsub = client.pubsub(ignore_subscribe_messages=True)
        try:
            await pubsub.subscribe(CHANNEL, CLOSED, MEMBERS)
        except BaseException:
            await self._drop((client, pubsub))
            raise
        return client, pubsub

    @staticmethod
    async def _drop(subscription: tuple[Any, Any]) -> None:
        client, pubsub = subscription
        with contextlib.suppress(Exception):
            await pubsub.aclose()
        with contextlib.suppress(Exception):
            await client.aclose(close_connection_pool=True)

    async def _listen(
        self, subscription: tuple[Any, Any], deliver: Deliver, notify: Notify | None
    ) -> None:
        try:
            while True:
                try:
                    async for message in subscription[1].listen():
                        if message.get("type") != "message":
                            continue
                        if message["channel"] in (CLOSED, MEMBERS):
                            if notify is not None:
                                event = "closed" if message["channel"] == CLOSED else "members"
                                notify(event, message["data"])
                            continue
                        code, seq, origin, state = message["data"].split(" ", 3)
                        deliver(code, int(seq), origin, state)
                    raise ConnectionError("the subscription ended")
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # Redis went away: say so, then subscribe again
                    reason = f"Redis does not answer ({type(exc).__name__}: {exc})"
                    log.warning("room states from Redis interrupted: %s", reason)
                    self._listening = False
                    if notify is not None:
                        notify("lost", reason)
                    await self._drop(subscription)
                    subscription = await self._resubscribe()
                    self._listening = True
                    log.warning("room states from Redis resumed")
                    if notify is not None:
                        notify("back", "")
        finally:
            await self._drop(subscription)

    async def _resubscribe(self) -> tuple[Any, Any]:
        wait, longest = RESUBSCRIBE_S
        while True:
            await asyncio.sleep(wait)
            try:
                return await self._subscribe()
            except Exception:
                wait = min(longest, wait * 2)

    async def close(self) -> None:
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._listener
        if self._redis is not None:
            await self._redis.aclose(close_connection_pool=True)

    @_unavailable
    async def ping(self) -> None:
        await self._redis.ping()

    @_unavailable
    async def create(
        self, code: str, token_digest: str, max_rooms: int, owners: Owners | None = None
    ) -> Created:
        keys = [PREFIX + "rooms", _room(code), _ended(code)]
        per = [0, 0]
        if owners is not None:
            keys += [f"{PREFIX}owner:{owners.client}", f"{PREFIX}owner:{owners.address}"]
            per = [owners.per_client, owners.per_address]
        result = await self._scripts["create"](
            keys=keys, args=[*self._args(code), token_digest, time.time(), max_rooms, *per]
        )
        outcomes: dict[int, Created] = {
            1: "ok",
            0: "exists",
            -1: "full",
            -2: "client",
            -3: "address",
        }
        return outcomes[int(result)]

    @_unavailable
    async def get(self, code: str) -> RoomRecord | None:
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hgetall(_room(code))
            pipe.zrangebyscore(_members(code), time.time(), "+inf")
            fields, members = await pipe.execute()
        if not fields:
            return None
        drivers = sum(is_driver(m) for m in members)
        return RoomRecord(
            code,
            fields["token"],
            int(fields.get("seq", 0)),
            fields.get("state"),
            len(members),
            drivers,
        )

    @_unavailable
    async def join(self, code: str, member: str, seats: Seats) -> int:
        now = time.time()
        result = int(
            await self._scripts["join"](
                keys=[_room(code), _members(code), PREFIX + "rooms"],
                args=[
                    *self._args(code),
                    member,
                    now,
                    now + MEMBER_TTL_S,
                    seats.limit,
                    seats.per_address,
                    seats.driver_extra,
                    same_address(member),
                ],
            )
        )
        if result == -2:
            raise RoomGone(code)
        if result == -1:
            raise RoomFull(code)
        if result == -3:
            raise RoomFull(code, "address")
        await self._redis.publish(MEMBERS, code)
        return result

    @_unavailable
    async def leave(self, code: str, member: str) -> None:
        if await self._redis.zrem(_members(code), member):
            await self._redis.publish(MEMBERS, code)

    @_unavailable
    async def publish(
        self, code: str, origin: str, state_json: str, base: int | None = None
    ) -> int:
        status, seq = await self._scripts["publish"](
            keys=[_room(code), PREFIX + "rooms"],
            args=[
                *self._args(code),
                origin,
                state_json,
                time.time(),
                CHANNEL,
                "" if base is None else base,
            ],
        )
        if int(status) < 0:
            raise RoomGone(code)
        if int(status) == 0:
            raise StaleState(int(seq))
        return int(seq)

    @_unavailable
    async def delete(self, code: str, token_digest: str) -> bool:
        done = await self._scripts["delete"](
            keys=[_room(code), _members(code), PREFIX + "rooms", _ended(code)],
            args=[*self._args(code), token_digest, CLOSED],
        )
        return int(done) == 1

    @_unavailable
    async def restore(
        self, code: str, token_digest: str, seq: int, state: str | None, members: list[str]
    ) -> RoomRecord | None:
        now = time.time()
        result = await self._scripts["restore"](
            keys=[_room(code), _members(code), PREFIX + "rooms", _ended(code)],
            args=[
                *self._args(code),
                token_digest,
                seq,
                state or "",
                "1" if state is not None else "0",
                now,
                now + MEMBER_TTL_S,
                *members,
            ],
        )
        if int(result[0]) != 1:
            return None
        _, now_seq, now_state, clients = result
        return RoomRecord(code, token_digest, int(now_seq), now_state or None, int(clients))

    @_unavailable
    async def heartbeat(self, members: dict[str, list[str]]) -> list[str]:
        if not members:
            return []
        now = time.time()
        keys: list[str] = []
        args: list[Any] = [PREFIX, self._ttl, self._unjoined_ttl, now, now + MEMBER_TTL_S]
        for code, ids in members.items():
            keys += [_room(code), _members(code)]
            args += [code, len(ids), *ids]
        missing = await self._scripts["heartbeat"](keys=[*keys, PREFIX + "rooms"], args=args)
        return [str(code) for code in missing]

    @_unavailable
    async def count(self) -> int:
        key = PREFIX + "rooms"
        await self._redis.zremrangebyscore(key, "-inf", time.time())
        return int(await self._redis.zcard(key))
