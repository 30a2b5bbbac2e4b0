"""Rooms through Redis faults: a restart under two server processes, stale pooled connections,
an old snapshot, and /api/health while Redis is down."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from contextlib import ExitStack

import pytest
from websockets.asyncio.client import connect

from flashscope.app.rooms.redisstore import RedisRoomStore
from flashscope.app.rooms.store import RoomsUnavailable, Seats, member_id

from .aio import run
from .servers import flashscope_server, restartable_redis

pytestmark = pytest.mark.slow

FOLLOWERS = 20  # across two processes; benchmarks/room_load.py --restart-redis runs 200
BACK_WITHIN_S = 5.0


def http(base: str, path: str, method: str = "GET", body: bytes | None = None) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json"} if body is not None else {}
    req = urllib.request.Request(base + path, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def test_stale_pooled_connections_reconnect_after_a_restart():
    """Every pooled connection is stale after a restart: each used to fail one request."""

    async def scenario(redis) -> None:
        store = RedisRoomStore(redis.url, idle_ttl_s=60)
        await store.start(lambda *a: None)
        try:
            assert await store.create("STALE3", "digest", max_rooms=10) == "ok"
            await asyncio.gather(*(store.get("STALE3") for _ in range(100)))  # fill the pool
            redis.stop()
            redis.start()
            got = await asyncio.gather(
                *(store.get("STALE3") for _ in range(100)), return_exceptions=True
            )
            failed = [g for g in got if isinstance(g, BaseException)]
            assert failed == [] and got == [None] * 100  # the room went with the restart
        finally:
            await store.close()

    with restartable_redis() as redis:
        run(scenario(redis))


def test_an_ended_room_stays_ended_and_an_old_snapshot_does_not_step_back():
    async def scenario(url: str) -> None:
        store = RedisRoomStore(url, idle_ttl_s=60)
        await store.start(lambda *a: None)
        try:
            seats = Seats(limit=10, per_address=10)
            member = member_id(False, "203.0.113.1")
            assert await store.create("SNAP01", "digest", max_rooms=10) == "ok"
            await store.join("SNAP01", member, seats)
            for k in range(5):
                await store.publish("SNAP01", "d.x.0", f'{{"step":{k}}}')
            # Redis came back from a snapshot taken at seq 2: the room would restart from there.
            await store._redis.hset("flashscope:room:SNAP01", mapping={"seq": 2, "state": "{}"})
            record = await store.restore("SNAP01", "digest", 5, '{"step":4}', [member])
            assert record is not None and (record.seq, record.state) == (5, '{"step":4}')
            assert await store.publish("SNAP01", "d.x.0", '{"step":5}') == 6
            # Another room took the code: not ours to restore.
            assert await store.restore("SNAP01", "other", 9, None, [member]) is None
            # Ended by its driver: never restored, and its code not drawn again for a while.
            assert await store.delete("SNAP01", "wrong") is False
            assert await store.delete("SNAP01", "digest") is True
            assert await store.restore("SNAP01", "digest", 6, None, [member]) is None
            assert await store.get("SNAP01") is None
            assert await store.create("SNAP01", "digest", max_rooms=10) == "exists"
        finally:
            await store.close()

    with restartable_redis() as redis:
        run(scenario(redis.url))


async def _follow(url: str, log: list[tuple[float, dict]], joined: asyncio.Event) -> None:
    async with connect(url, ping_interval=None, max_queue=None) as ws:
        await ws.send('{"type":"join"}')
        async for raw in ws:
            msg = json.loads(raw)
            log.append((time.monotonic(), msg))
            if msg["type"] == "welcome":
                joined.set()
            if msg.get("state") and msg["state"]["path"] == "/end":
                return


def test_followers_are_told_the_room_is_gone_and_are_back_within_seconds_of_redis():
    """Redis restarts (empty) under two processes during a room: every follower hears
    "room-gone", then "room-back" within 5 s of Redis answering, and no step goes backwards."""
    with ExitStack() as stack:
        redis = stack.enter_context(restartable_redis())
        env = {"FLASHSCOPE_REDIS_URL": redis.url}
        a = stack.enter_context(flashscope_server(env))
        b = stack.enter_context(flashscope_server(env))
        status, room = http(a, "/api/rooms", "POST", b"{}")
        assert status == 201, room
        code = room["code"]
        logs: list[list[tuple[float, dict]]] = [[] for _ in range(FOLLOWERS)]

        async def scenario() -> dict:
            url = f"/ws/rooms/{code}"
            lecturer = await connect(a.replace("http", "ws") + url, ping_interval=None)
            await lecturer.send(json.dumps({"type": "join", "token": room["drive_token"]}))
            assert json.loads(await lecturer.recv())["role"] == "driver"
            replies: list[dict] = []

            async def read_lecturer() -> None:
                async for raw in lecturer:
                    replies.append(json.loads(raw))

            reading = asyncio.create_task(read_lecturer())
            joined = [asyncio.Event() for _ in range(FOLLOWERS)]
            tasks = [
                asyncio.create_task(
                    _follow((a, b)[i % 2].replace("http", "ws") + url, logs[i], joined[i])
                )
                for i in range(FOLLOWERS)
            ]
            await asyncio.wait_for(asyncio.gather(*(j.wait() for j in joined)), 30)

            async def send(step: int, path: str = "/tiles") -> None:
                state = {"path": path, "params": {"n": 64}, "step": step}
                await lecturer.send(json.dumps({"type": "state", "state": state}))
                await asyncio.sleep(0.05)

            for step in range(10):
                await send(step)
            await asyncio.sleep(0.5)
            redis.stop()
            await asyncio.sleep(1.0)
            health = http(b, "/api/health")
            for step in range(10, 13):  # refused while Redis is down, not disconnected
                await send(step)
            redis.start()
            t_back = time.monotonic()
            deadline = t_back + BACK_WITHIN_S + 5
            while time.monotonic() < deadline and not all(
                any(m["type"] == "room-back" for _, m in log) for log in logs
            ):
                await asyncio.sleep(0.05)
            for step in range(13, 23):
                await send(step)
            await send(0, "/end")
            await asyncio.wait_for(asyncio.gather(*tasks), 30)
            reading.cancel()
            await lecturer.close()
            return {"t_back": t_back, "health_down": health, "replies": replies}

        out = run(scenario())
        assert out["health_down"][0] == 200
        down = out["health_down"][1]
        assert down["status"] == "degraded" and "Redis" in " ".join(down["reasons"]), down
        # The lecturer stays connected: a state sent while Redis is down is refused with an
        # error, or (when Redis is back before its retries run out) re-announces the room.
        kinds = [r["type"] for r in out["replies"]]
        assert kinds.count("room-gone") == 1 and kinds.count("room-back") == 1, kinds
        assert kinds.count("ack") + kinds.count("error") == 24, kinds
        assert all(r["errors"][0]["type"] == "unavailable" for r in out["replies"] if "errors" in r)
        for log in logs:
            types = [m["type"] for _, m in log]
            assert types.count("room-gone") == 1 and types.count("room-back") == 1, types
            gone = types.index("room-gone")
            back = types.index("room-back")
            took = log[back][0] - out["t_back"]
            assert gone < back and took < BACK_WITHIN_S, (took, log[back])
            assert all(m["final"] is False for _, m in log if m["type"] == "room-gone")
            seqs = [
                m["seq"] for _, m in log if m["type"] in ("state", "room-back") and "state" in m
            ]
            steps = [m["state"]["step"] for _, m in log if m.get("state")]
            assert seqs == sorted(set(seqs)), seqs  # never reordered nor repeated
            assert steps[:10] == list(range(10)) and steps[-11:-1] == list(range(13, 23)), steps
        status, info = http(a, f"/api/rooms/{code}")
        assert status == 200 and info["state"]["path"] == "/end"
        assert http(a, "/api/health")[1]["status"] == "ok"


def test_health_says_degraded_with_the_reason_while_redis_is_down():
    with restartable_redis() as redis, flashscope_server({"FLASHSCOPE_REDIS_URL": redis.url}) as a:
        assert http(a, "/api/health")[1]["status"] == "ok"
        redis.stop()
        status, body = http(a, "/api/health")
        assert status == 200 and body["status"] == "degraded", body
        assert any("Redis does not answer" in r for r in body["reasons"]), body
        status, body = http(a, "/api/rooms", "POST", b"{}")
        assert status == 503 and "Redis does not answer" in body["detail"][0]["msg"]
        redis.start()
        assert http(a, "/api/health")[1] == http(a, "/api/health")[1]
        assert http(a, "/api/health")[1]["status"] == "ok"
        assert http(a, "/api/rooms", "POST", b"{}")[0] == 201


def test_an_unreachable_redis_is_unavailable_not_a_hang():
    """The store refuses at once when nothing listens (no retries piling up for seconds)."""
    with restartable_redis() as redis:
        url = redis.url
    store = RedisRoomStore(url, idle_ttl_s=60)
    t0 = time.monotonic()
    with pytest.raises(RoomsUnavailable, match="Redis does not answer"):
        run(store.start(lambda *a: None))
    assert time.monotonic() - t0 < 3.0
