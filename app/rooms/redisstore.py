"""Rooms in Redis, shared by several server processes (FLASHSCOPE_REDIS_URL).

Keys (all under `flashscope:`):
    room:<code>           hash  token (SHA-256 of the drive token), seq, state (JSON text),
                                origin (the member that sent the state), joined (an attendee
                                has joined: the long idle TTL applies)
    room:<code>:members   zset  member id → expiry time (members are kept alive by heartbeats)
    rooms                 zset  code → expiry time (to count open rooms without SCAN)
    owner:<key>           zset  codes of the rooms a client or an address made (per-owner caps)
    ended:<code>          string, a while after a driver ended the room: never restored
and two pub/sub channels: `flashscope:states` carrying "<code> <seq> <origin> <state JSON>", and
`flashscope:closed` carrying the code of a room its driver ended.

redis-py is flashscope's `redis` extra, imported only here and only once a store is made: a
server without FLASHSCOPE_REDIS_URL needs no Redis client. A store made without the package
refuses at once (RedisNotInstalled), naming the extra, instead of at the first room.

Each change runs as one Lua script, so the limits (rooms, owners, members, an address's seats)
and the order of sequence numbers hold across processes. The scripts build the keys of owned
rooms themselves, so the store needs one Redis, not a cluster.

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
    same_address,
)

PREFIX = "flashscope:"
CHANNEL = PREFIX + "states"
CLOSED = PREFIX + "closed"
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

# The TTL a room gets on each use: long once an attendee has joined, short before.
_TTL = """
local function ttl(room)
  if redis.call('HEXISTS', room, 'joined') == 1 then return tonumber(ARGV[2]) end
  return tonumber(ARGV[3])
end
"""

# KEYS: rooms, room, ended, owner(client), owner(address)
# ARGV: prefix, idle ttl, unjoined ttl, code, digest, now, max rooms, per client, per address
_CREATE = (
    _TTL
    + """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[6])
if redis.call('EXISTS', KEYS[2]) == 1 or redis.call('EXISTS', KEYS[3]) == 1 then return 0 end
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[7]) then return -1 end
local function owned(key)
  local n = 0
  for _, c in ipairs(redis.call('ZRANGE', key, 0, -1)) do
    if redis.call('EXISTS', ARGV[1] .. 'room:' .. c) == 1 then n = n + 1
    else redis.call('ZREM', key, c) end
  end
  return n
end
if #KEYS > 3 then
  if owned(KEYS[4]) >= tonumber(ARGV[8]) then return -2 end
  if owned(KEYS[5]) >= tonumber(ARGV[9]) then return -3 end
end
redis.call('HSET', KEYS[2], 'token', ARGV[5], 'seq', 0)
local t = ttl(KEYS[2])
redis.call('EXPIRE', KEYS[2], t)
redis.call('ZADD', KEYS[1], tonumber(ARGV[6]) + t, ARGV[4])
for i = 4, #KEYS do
  redis.call('ZADD', KEYS[i], ARGV[6], ARGV[4])
  redis.call('EXPIRE', KEYS[i], ARGV[2])
end
return 1
"""
)

# KEYS: room, members, rooms
# ARGV: prefix, idle ttl, unjoined ttl, code, member, now, member expiry, limit, per address,
#       driver extra, the member's address prefix
_JOIN = (
    _TTL
    + """
if redis.call('EXISTS', KEYS[1]) == 0 then return -2 end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[6])
local total = redis.call('ZCARD', KEYS[2])
if string.sub(ARGV[5], 1, 2) == 'd.' then
  if total >= tonumber(ARGV[8]) + tonumber(ARGV[10]) then return -1 end
else
  if total >= tonumber(ARGV[8]) then return -1 end
  local same, n = 0, #ARGV[11]
  for _, m in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
    if string.sub(m, 1, n) == ARGV[11] then same = same + 1 end
  end
  if same >= tonumber(ARGV[9]) then return -3 end
  redis.call('HSET', KEYS[1], 'joined', 1)
end
redis.call('ZADD', KEYS[2], ARGV[7], ARGV[5])
local t = ttl(KEYS[1])
redis.call('EXPIRE', KEYS[1], t)
redis.call('EXPIRE', KEYS[2], t)
redis.call('ZADD', KEYS[3], tonumber(ARGV[6]) + t, ARGV[4])
return redis.call('ZCARD', KEYS[2])
"""
)

# KEYS: room, rooms
# ARGV: prefix, idle ttl, unjoined ttl, code, origin, state, now, channel, base or ''
_PUBLISH = (
    _TTL
    + """
if redis.call('EXISTS', KEYS[1]) == 0 then return {-1, 0} end
if ARGV[9] ~= '' then
  local now = tonumber(redis.call('HGET', KEYS[1], 'seq') or '0')
  if tonumber(ARGV[9]) < now and redis.call('HGET', KEYS[1], 'origin') ~= ARGV[5] then
    return {0, now}
  end
end
local seq = redis.call('HINCRBY', KEYS[1], 'seq', 1)
redis.call('HSET', KEYS[1], 'state', ARGV[6], 'origin', ARGV[5])
local t = ttl(KEYS[1])
redis.call('EXPIRE', KEYS[1], t)
redis.call('ZADD', KEYS[2], tonumber(ARGV[7]) + t, ARGV[4])
redis.call('PUBLISH', ARGV[8], ARGV[4] .. ' ' .. seq .. ' ' .. ARGV[5] .. ' ' .. ARGV[6])
return {1, seq}
"""
)

# KEYS: room, members, rooms, ended
# ARGV: prefix, idle ttl, unjoined ttl, code, digest, channel
_DELETE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[5] then return 0 end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('ZREM', KEYS[3], ARGV[4])
redis.call('SET', KEYS[4], 1, 'EX', ARGV[2])
redis.call('PUBLISH', ARGV[6], ARGV[4])
return 1
"""

# KEYS: room, members, rooms, ended
# ARGV: prefix, idle ttl, unjoined ttl, code, digest, seq, state or '', has state, now,
#       member expiry, members...
_RESTORE = """
if redis.call('EXISTS', KEYS[4]) == 1 then return {-1} end
if redis.call('EXISTS', KEYS[1]) == 1 then
  if redis.call('HGET', KEYS[1], 'token') ~= ARGV[5] then return {-2} end
  if tonumber(redis.call('HGET', KEYS[1], 'seq') or '0') < tonumber(ARGV[6]) then
    redis.call('HSET', KEYS[1], 'seq', ARGV[6])
    redis.call('HDEL', KEYS[1], 'origin')
    if ARGV[8] == '1' then redis.call('HSET', KEYS[1], 'state', ARGV[7])
    else redis.call('HDEL', KEYS[1], 'state') end
  end
else
  redis.call('HSET', KEYS[1], 'token', ARGV[5], 'seq', ARGV[6], 'joined', 1)
  if ARGV[8] == '1' then redis.call('HSET', KEYS[1], 'state', ARGV[7]) end
end
redis.call('HSET', KEYS[1], 'joined', 1)
for i = 11, #ARGV do redis.call('ZADD', KEYS[2], ARGV[10], ARGV[i]) end
redis.call('EXPIRE', KEYS[1], ARGV[2])
redis.call('EXPIRE', KEYS[2], ARGV[2])
redis.call('ZADD', KEYS[3], tonumber(ARGV[9]) + tonumber(ARGV[2]), ARGV[4])
local state = redis.call('HGET', KEYS[1], 'state')
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[9])
return {1, tonumber(redis.call('HGET', KEYS[1], 'seq')), state, redis.call('ZCARD', KEYS[2])}
"""

# KEYS: (room, members) per room, then rooms
# ARGV: prefix, idle ttl, unjoined ttl, now, member expiry, then per room: code, n, n members
_HEARTBEAT = (
    _TTL
    + """
local missing, k, i = {}, 1, 6
while i <= #ARGV do
  local code, n = ARGV[i], tonumber(ARGV[i + 1])
  local room, members = KEYS[k], KEYS[k + 1]
  if redis.call('EXISTS', room) == 0 then
    table.insert(missing, code)
  else
    for j = 1, n do redis.call('ZADD', members, 'XX', ARGV[5], ARGV[i + 1 + j]) end
    local t = ttl(room)
    redis.call('EXPIRE', room, t)
    redis.call('EXPIRE', members, t)
    redis.call('ZADD', KEYS[#KEYS], 'XX', tonumber(ARGV[4]) + t, code)
  end
  i, k = i + 2 + n, k + 2
end
return missing
"""
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
            ("create", _CREATE),
            ("join", _JOIN),
            ("publish", _PUBLISH),
            ("delete", _DELETE),
            ("restore", _RESTORE),
            ("heartbeat", _HEARTBEAT),
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
            await pubsub.subscribe(CHANNEL, CLOSED)
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
                        if message["channel"] == CLOSED:
                            if notify is not None:
                                notify("closed", message["data"])
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
            pipe.zcount(_members(code), time.time(), "+inf")
            fields, clients = await pipe.execute()
        if not fields:
            return None
        return RoomRecord(
            code, fields["token"], int(fields.get("seq", 0)), fields.get("state"), int(clients)
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
