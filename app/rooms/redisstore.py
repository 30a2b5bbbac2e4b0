"""Rooms in Redis, shared by several server processes (FLASHSCOPE_REDIS_URL).

Keys (all under `flashscope:`):
    room:<code>           hash  token (SHA-256 of the drive token), seq, state (JSON text),
                                origin (the member that sent the state)
    room:<code>:members   zset  member id → expiry time (members are kept alive by heartbeats)
    rooms                 zset  code → expiry time (to count open rooms without SCAN)
and one pub/sub channel, `flashscope:states`, carrying "<code> <seq> <origin> <state JSON>".

redis-py is flashscope's `redis` extra, imported only here and only once a store is made: a
server without FLASHSCOPE_REDIS_URL needs no Redis client. A store made without the package
refuses at once (RedisNotInstalled), naming the extra, instead of at the first room.

Each change runs as one Lua script, so the member limit, the room limit and the order of
sequence numbers hold across processes. Every process subscribes to the channel once and hands
each message to `deliver`; a process with no connection in that room drops it.
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

from flashscope.app.rooms.store import (
    Deliver,
    RedisNotInstalled,
    RoomFull,
    RoomGone,
    RoomRecord,
    RoomsUnavailable,
    StaleState,
)

PREFIX = "flashscope:"
CHANNEL = PREFIX + "states"
MEMBER_TTL_S = 30.0  # a member whose process stopped heartbeating is dropped after this
POOL_SIZE = 32  # Redis connections per server process (one of them held by the subscription)
POOL_WAIT_S = 10.0  # how long a request waits for a free connection before giving up

log = logging.getLogger("flashscope.rooms")

MISSING = (
    "FLASHSCOPE_REDIS_URL is set, but the redis package is not installed: "
    "pip install 'flashscope[redis]' (or unset FLASHSCOPE_REDIS_URL to keep rooms in this process)"
)

_CREATE = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[3])
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[5]) then return -1 end
redis.call('HSET', KEYS[2], 'token', ARGV[2], 'seq', 0)
redis.call('EXPIRE', KEYS[2], ARGV[6])
redis.call('ZADD', KEYS[1], ARGV[4], ARGV[1])
return 1
"""

_JOIN = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -2 end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[2])
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[4]) then return -1 end
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[5])
redis.call('EXPIRE', KEYS[2], ARGV[5])
redis.call('ZADD', KEYS[3], ARGV[7], ARGV[6])
return redis.call('ZCARD', KEYS[2])
"""

_PUBLISH = """
if redis.call('EXISTS', KEYS[1]) == 0 then return {-1, 0} end
if ARGV[7] ~= '' then
  local now = tonumber(redis.call('HGET', KEYS[1], 'seq') or '0')
  if tonumber(ARGV[7]) < now and redis.call('HGET', KEYS[1], 'origin') ~= ARGV[2] then
    return {0, now}
  end
end
local seq = redis.call('HINCRBY', KEYS[1], 'seq', 1)
redis.call('HSET', KEYS[1], 'state', ARGV[3], 'origin', ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[4])
redis.call('ZADD', KEYS[2], ARGV[5], ARGV[1])
redis.call('PUBLISH', ARGV[6], ARGV[1] .. ' ' .. seq .. ' ' .. ARGV[2] .. ' ' .. ARGV[3])
return {1, seq}
"""


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


class RedisRoomStore:
    """The RoomStore interface over redis-py's asyncio client."""

    def __init__(self, url: str, idle_ttl_s: float) -> None:
        try:
            importlib.import_module("redis.asyncio")
        except ImportError:
            raise RedisNotInstalled(MISSING) from None
        self._url = url
        self._ttl = max(1, math.ceil(idle_ttl_s))
        self._redis: Any = None
        self._pubsub: Any = None
        self._listener: asyncio.Task[None] | None = None
        self._scripts: dict[str, Any] = {}

    @_unavailable
    async def start(self, deliver: Deliver) -> None:
        import redis.asyncio as aioredis

        # A blocking pool: a burst of joins waits for a free connection instead of failing.
        pool = aioredis.BlockingConnectionPool.from_url(
            self._url, decode_responses=True, max_connections=POOL_SIZE, timeout=POOL_WAIT_S
        )
        self._redis = aioredis.Redis(connection_pool=pool)
        await self._redis.ping()
        for name, text in (("create", _CREATE), ("join", _JOIN), ("publish", _PUBLISH)):
            self._scripts[name] = self._redis.register_script(text)
        self._pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
        await self._pubsub.subscribe(CHANNEL)
        self._listener = asyncio.create_task(self._listen(deliver))

    async def _listen(self, deliver: Deliver) -> None:
        while True:
            try:
                async for message in self._pubsub.listen():
                    if message.get("type") != "message":
                        continue
                    code, seq, origin, state = message["data"].split(" ", 3)
                    deliver(code, int(seq), origin, state)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis went away: say so and try again shortly
                log.warning("room states from Redis interrupted (%s); resubscribing", exc)
                await asyncio.sleep(1.0)
                with contextlib.suppress(Exception):
                    await self._pubsub.subscribe(CHANNEL)

    async def close(self) -> None:
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._listener
        if self._pubsub is not None:
            with contextlib.suppress(Exception):
                await self._pubsub.aclose()
        if self._redis is not None:
            await self._redis.aclose()

    def _expiry(self) -> float:
        return time.time() + self._ttl

    @_unavailable
    async def create(self, code: str, token_digest: str, max_rooms: int) -> str:
        now = time.time()
        result = await self._scripts["create"](
            keys=[PREFIX + "rooms", _room(code)],
            args=[code, token_digest, now, now + self._ttl, max_rooms, self._ttl],
        )
        return {1: "ok", 0: "exists", -1: "full"}[int(result)]

    @_unavailable
    async def get(self, code: str) -> RoomRecord | None:
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hgetall(_room(code))
            pipe.zcount(_members(code), time.time(), "+inf")
            fields, clients = await pipe.execute()
        if not fields:
            return None
        return RoomRecord(
            code, fields["token"], int(fields.get("seq", 0)), fields.get("state"), int(clients)
        )

    @_unavailable
    async def join(self, code: str, member: str, limit: int) -> int:
        now = time.time()
        result = int(
            await self._scripts["join"](
                keys=[_room(code), _members(code), PREFIX + "rooms"],
                args=[member, now, now + MEMBER_TTL_S, limit, self._ttl, code, now + self._ttl],
            )
        )
        if result == -2:
            raise RoomGone(code)
        if result == -1:
            raise RoomFull(code)
        return result

    @_unavailable
    async def leave(self, code: str, member: str) -> None:
        await self._redis.zrem(_members(code), member)

    @_unavailable
    async def publish(
        self, code: str, origin: str, state_json: str, base: int | None = None
    ) -> int:
        status, seq = await self._scripts["publish"](
            keys=[_room(code), PREFIX + "rooms"],
            args=[
                code,
                origin,
                state_json,
                self._ttl,
                self._expiry(),
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
    async def heartbeat(self, members: dict[str, list[str]]) -> None:
        if not members:
            return
        until = time.time() + MEMBER_TTL_S
        async with self._redis.pipeline(transaction=False) as pipe:
            for code, ids in members.items():
                if ids:
                    pipe.zadd(_members(code), dict.fromkeys(ids, until), xx=True)
                pipe.expire(_room(code), self._ttl)
                pipe.expire(_members(code), self._ttl)
                pipe.zadd(PREFIX + "rooms", {code: self._expiry()}, xx=True)
            await pipe.execute()

    @_unavailable
    async def count(self) -> int:
        key = PREFIX + "rooms"
        await self._redis.zremrangebyscore(key, "-inf", time.time())
        return int(await self._redis.zcard(key))
