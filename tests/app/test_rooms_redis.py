"""Rooms shared through Redis: two server processes, attendees on both, one room."""

from __future__ import annotations

import asyncio
import json
import random
import time
import urllib.request
from contextlib import ExitStack

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from flashscope.app.rooms.redisstore import RedisRoomStore
from flashscope.app.rooms.store import Seats, member_id

from .aio import run
from .room_contract import stale_states_are_refused
from .servers import flashscope_server, redis_server

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def redis_url():
    with redis_server() as url:
        yield url


@pytest.fixture(scope="module")
def two_servers(redis_url):
    """Two `flashscope serve` processes sharing one redis-server; rooms of at most 5 clients."""
    with ExitStack() as stack:
        env = {"FLASHSCOPE_REDIS_URL": redis_url, "FLASHSCOPE_ROOM_MAX_CLIENTS": "5"}
        a = stack.enter_context(flashscope_server(env))
        b = stack.enter_context(flashscope_server(env))
        yield a, b


def post(base: str, path: str) -> dict:
    req = urllib.request.Request(
        base + path, data=b"{}", method="POST", headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def get(base: str, path: str) -> dict:
    with urllib.request.urlopen(base + path, timeout=30) as r:
        return json.loads(r.read())


async def join(base: str, code: str, token: str | None = None):
    ws = await connect(base.replace("http", "ws") + f"/ws/rooms/{code}")
    await ws.send(json.dumps({"type": "join"} | ({"token": token} if token else {})))
    welcome = json.loads(await ws.recv())
    return ws, welcome


async def refused(base: str, code: str, token: str | None = None) -> tuple[int, str]:
    """The close code and reason a join gets instead of a welcome."""
    with pytest.raises(ConnectionClosed) as exc:
        await asyncio.wait_for(join(base, code, token), 10)
    return exc.value.rcvd.code, exc.value.rcvd.reason


def test_attendees_on_both_processes_follow_one_lecturer(two_servers):
    a, b = two_servers
    room = post(a, "/api/rooms")
    code, token = room["code"], room["drive_token"]
    steps = random.Random().sample(range(10_000), 30)

    async def scenario():
        driver, w = await join(b, code, token)  # the lecturer on B, the room made on A
        assert w["role"] == "driver"
        attendees = [(await join(srv, code))[0] for srv in (a, b, a)]
        for step in steps:
            await driver.send(
                json.dumps({"type": "state", "state": {"path": "/tiles", "step": step}})
            )
        acks = [json.loads(await driver.recv()) for _ in steps]
        assert [m["seq"] for m in acks] == list(range(1, len(steps) + 1))
        for ws in attendees:
            got = [json.loads(await asyncio.wait_for(ws.recv(), 10)) for _ in steps]
            assert [m["seq"] for m in got] == list(range(1, len(steps) + 1))
            assert [m["state"]["step"] for m in got] == steps
        # A late joiner on either process starts from the latest state.
        late, w = await join(a, code)
        assert (w["seq"], w["state"]["step"]) == (len(steps), steps[-1])
        assert get(b, f"/api/rooms/{code}")["clients"] == 5
        # The room is full across both processes; a forged token is refused on either.
        assert await refused(b, code) == (4409, f"room {code} is full (5 clients)")
        # An attendee cannot drive, wherever it is connected.
        await attendees[1].send(json.dumps({"type": "state", "state": {"path": "/", "step": 0}}))
        assert json.loads(await attendees[1].recv())["type"] == "error"
        await late.close()
        assert await refused(a, code, "forged-" + token[7:]) == (
            4403,
            "drive token does not match this room",
        )
        await driver.send(json.dumps({"type": "state", "state": {"path": "/", "step": 1}}))
        for ws in attendees:
            msg = json.loads(await asyncio.wait_for(ws.recv(), 10))
            assert (msg["seq"], msg["state"]) == (
                len(steps) + 1,
                {"path": "/", "params": {}, "step": 1},
            )
        for ws in (driver, *attendees):
            await ws.close()

    run(scenario())
    deadline = time.monotonic() + 10  # the servers see the closes a moment later
    while get(a, f"/api/rooms/{code}")["clients"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert get(a, f"/api/rooms/{code}")["clients"] == 0


def test_room_info_is_shared_across_processes(two_servers):
    a, b = two_servers
    room = post(b, "/api/rooms")
    info = get(a, f"/api/rooms/{room['code']}")
    assert info == {"code": room["code"], "clients": 0, "seq": 0, "state": None}
    with pytest.raises(urllib.error.HTTPError) as exc:
        get(a, "/api/rooms/ZZZZZZ")
    assert exc.value.code == 404


def test_a_burst_of_joins_waits_for_redis_connections_instead_of_failing(redis_url):
    """200 attendees arriving at once once exhausted the client's connection pool."""
    store = RedisRoomStore(redis_url, idle_ttl_s=60)
    got: list[int] = []
    seats = Seats(limit=500, per_address=500)

    async def scenario():
        await store.start(lambda code, seq, origin, state: got.append(seq))
        try:
            assert await store.create("BURST2", "digest", max_rooms=10) == "ok"
            counts = await asyncio.gather(
                *(
                    store.join("BURST2", member_id(False, f"10.0.{i // 100}.{i}"), seats)
                    for i in range(300)
                )
            )
            assert sorted(counts) == list(range(1, 301))
            assert await store.publish("BURST2", "m0", '{"path":"/"}') == 1
            for _ in range(100):
                if got:
                    break
                await asyncio.sleep(0.02)
            assert got == [1]
        finally:
            await store.close()

    run(scenario())


def test_the_redis_store_refuses_stale_states_of_a_second_driver(redis_url):
    run(stale_states_are_refused(RedisRoomStore(redis_url, idle_ttl_s=60), "STALE2"))


def test_presence_crosses_processes(two_servers):
    """The lecturer on A hears of an attendee joining and leaving on B within a second; the
    attendee on B hears of the lecturer leaving."""
    a, b = two_servers
    room = post(a, "/api/rooms")
    code, token = room["code"], room["drive_token"]

    async def present(base: str, token: str | None = None):
        ws = await connect(base.replace("http", "ws") + f"/ws/rooms/{code}")
        join = {"type": "join", "presence": True} | ({"token": token} if token else {})
        await ws.send(json.dumps(join))
        return ws, json.loads(await ws.recv())

    async def scenario():
        driver, w = await present(a, token)
        assert (w["clients"], w["drivers"]) == (1, 1)
        started = time.monotonic()
        attendee, w = await present(b)
        assert w["drivers"] == 1
        got = json.loads(await asyncio.wait_for(driver.recv(), 5))
        assert got == {"type": "presence", "clients": 2, "drivers": 1}
        assert time.monotonic() - started < 1.0
        other, _ = await present(b)
        assert json.loads(await asyncio.wait_for(driver.recv(), 5))["clients"] == 3
        started = time.monotonic()
        await other.close()
        got = json.loads(await asyncio.wait_for(driver.recv(), 5))
        assert got == {"type": "presence", "clients": 2, "drivers": 1}
        assert time.monotonic() - started < 1.0
        await driver.close()
        got = json.loads(await asyncio.wait_for(attendee.recv(), 5))
        assert got == {"type": "presence", "clients": 1, "drivers": 0}
        await attendee.close()

    run(scenario())
