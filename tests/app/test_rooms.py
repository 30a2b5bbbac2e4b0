"""Rooms in one process: a lecturer drives, attendees follow; every abuse is refused alone."""

from __future__ import annotations

import random
import time
from contextlib import ExitStack

import pytest
from fastapi.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from flashscope.app.config import Settings
from flashscope.app.main import create_app
from flashscope.app.rooms.follower import Follower
from flashscope.app.rooms.service import CODE_ALPHABET
from flashscope.app.rooms.store import MemoryRoomStore, RoomGone, Seats, member_id

from .aio import run
from .room_contract import stale_states_are_refused
from .servers import free_port

SEATS = Seats(limit=5, per_address=5)


def state(step: int, path: str = "/tiles", **params) -> dict:
    return {"path": path, "params": {"n": 64, "bm": 16, **params}, "step": step}


def make_room(client) -> tuple[str, str]:
    r = client.post("/api/rooms", json={})
    assert r.status_code == 201, r.text
    body = r.json()
    return body["code"], body["drive_token"]


def join(stack: ExitStack, client, code: str, token: str | None = None):
    """Connect and join; the stack closes the socket (before the client stops)."""
    ws = stack.enter_context(client.websocket_connect(f"/ws/rooms/{code}"))
    ws.send_json({"type": "join"} | ({"token": token} if token else {}))
    welcome = ws.receive_json()
    assert welcome["type"] == "welcome", welcome
    return ws, welcome


def closed_with(ws) -> tuple[int, str]:
    with pytest.raises(WebSocketDisconnect) as exc:
        ws.receive_json()
    return exc.value.code, exc.value.reason


def app_client(**overrides):
    return TestClient(create_app(Settings(**overrides)))


@pytest.fixture
def stack(client):
    with ExitStack() as s:
        yield s


def test_create_gives_a_short_code_and_a_secret_token(client):
    code, token = make_room(client)
    # letters and digits easy to read aloud (a code may be all digits: "345666")
    assert len(code) == 6 and set(code) <= set(CODE_ALPHABET)
    assert len(token) >= 40
    info = client.get(f"/api/rooms/{code.lower()}").json()
    assert info == {"code": code, "clients": 0, "seq": 0, "state": None}
    assert token not in client.get(f"/api/rooms/{code}").text
    other_code, other_token = make_room(client)
    assert (other_code, other_token) != (code, token)


def test_attendees_follow_every_state_in_order_and_late_joiners_catch_up(client, stack):
    code, token = make_room(client)
    driver, welcome = join(stack, client, code, token)
    assert welcome["role"] == "driver"
    a1, w1 = join(stack, client, code)
    a2, _ = join(stack, client, code)
    assert w1["role"] == "attendee" and w1["state"] is None
    steps = random.Random().sample(range(1000), 25)
    for k, step in enumerate(steps, start=1):
        driver.send_json({"type": "state", "state": state(step, seed=k)})
        assert driver.receive_json() == {"type": "ack", "seq": k}
    for ws in (a1, a2):
        got = [ws.receive_json() for _ in steps]
        assert [m["seq"] for m in got] == list(range(1, len(steps) + 1))
        assert [m["state"]["step"] for m in got] == steps
        assert got[-1]["state"]["params"] == {"n": 64, "bm": 16, "seed": len(steps)}
    _, w = join(stack, client, code)
    assert w["seq"] == len(steps) and w["state"]["step"] == steps[-1]
    assert client.get(f"/api/rooms/{code}").json()["clients"] == 4
    # The driver never hears its own states back: its next message answers its ping.
    driver.send_json({"type": "ping"})
    assert driver.receive_json() == {"type": "pong"}
    stack.close()
    assert client.get(f"/api/rooms/{code}").json()["clients"] == 0


def test_an_attendee_cannot_drive_and_nobody_notices(client, stack):
    code, token = make_room(client)
    driver, _ = join(stack, client, code, token)
    driver.send_json({"type": "state", "state": state(3)})
    driver.receive_json()
    rogue, _ = join(stack, client, code)
    other, _ = join(stack, client, code)
    rogue.send_json({"type": "state", "state": state(99, path="/")})
    err = rogue.receive_json()
    assert err["type"] == "error" and "drive token" in err["errors"][0]["msg"]
    assert client.get(f"/api/rooms/{code}").json()["state"]["step"] == 3
    driver.send_json({"type": "state", "state": state(4)})
    assert driver.receive_json()["type"] == "ack"
    for ws in (other, rogue):  # the next message anyone gets is the lecturer's next state
        assert ws.receive_json() == {"type": "state", "seq": 2, "state": state(4)}


@pytest.mark.parametrize("token", ["x" * 43, "", "x" * 129, 12345])
def test_a_forged_token_is_closed_and_the_room_goes_on(client, stack, token):
    code, real = make_room(client)
    driver, _ = join(stack, client, code, real)
    attendee, _ = join(stack, client, code)
    with client.websocket_connect(f"/ws/rooms/{code}") as forger:
        forger.send_json({"type": "join", "token": token})
        assert closed_with(forger) == (4403, "drive token does not match this room")
    assert client.get(f"/api/rooms/{code}").json()["clients"] == 2
    driver.send_json({"type": "state", "state": state(7)})
    assert attendee.receive_json()["state"]["step"] == 7


def test_a_flooded_room_refuses_past_its_limit_and_keeps_serving():
    with app_client(room_max_clients=3) as client, ExitStack() as stack:
        code, token = make_room(client)
        driver, _ = join(stack, client, code, token)
        leaving = ExitStack()
        members = [join(stack, client, code)[0], join(leaving, client, code)[0]]
        for _ in range(3):
            with client.websocket_connect(f"/ws/rooms/{code}") as extra:
                extra.send_json({"type": "join"})
                assert closed_with(extra) == (4409, f"room {code} is full (3 clients)")
        driver.send_json({"type": "state", "state": state(1)})
        for ws in members:
            assert ws.receive_json()["state"]["step"] == 1
        leaving.close()  # one leaves: one place frees up
        _, w = join(stack, client, code)
        assert w["state"]["step"] == 1


def test_a_message_over_the_size_limit_closes_only_its_sender():
    with app_client(room_max_message_bytes=512) as client, ExitStack() as stack:
        code, token = make_room(client)
        driver, _ = join(stack, client, code, token)
        calm, _ = join(stack, client, code)
        loud, _ = join(stack, client, code)
        loud.send_text('{"type": "ping", "pad": "' + "x" * 600 + '"}')
        assert closed_with(loud) == (1009, "message over the limit of 512 bytes")
        big = state(1, note="y" * 150, more="z" * 150, again="w" * 150)
        driver.send_json({"type": "state", "state": big})
        assert closed_with(driver)[0] == 1009
        assert client.get(f"/api/rooms/{code}").json()["seq"] == 0
        driver, _ = join(stack, client, code, token)
        driver.send_json({"type": "state", "state": state(2)})
        assert calm.receive_json()["state"]["step"] == 2


def test_detach_stops_the_states_and_attach_catches_up(client, stack):
    code, token = make_room(client)
    driver, _ = join(stack, client, code, token)
    free, _ = join(stack, client, code)
    free.send_json({"type": "detach"})
    assert free.receive_json() == {"type": "detached"}
    for step in range(5):
        driver.send_json({"type": "state", "state": state(step)})
        driver.receive_json()
    free.send_json({"type": "attach"})
    assert free.receive_json() == {"type": "state", "seq": 5, "state": state(4)}
    assert free.receive_json() == {"type": "attached"}
    driver.send_json({"type": "state", "state": state(5)})
    assert free.receive_json() == {"type": "state", "seq": 6, "state": state(5)}


@pytest.mark.parametrize(
    ("message", "field"),
    [
        ("not json", "message"),
        ('{"type": "state", "state": {"path": "/", "step": NaN}}', "message"),
        ('{"type": "state", "state": {"path": "/", "step": Infinity}}', "message"),
        ("[1, 2]", "type"),
        ('{"kind": "state"}', "type"),
        ('{"type": "fly"}', "type"),
        ('{"type": "state", "state": {"path": "//evil.example/x"}}', "path"),
        ('{"type": "state", "state": {"path": "https://evil.example/"}}', "path"),
        ('{"type": "state", "state": {"path": "/tiles", "step": -1}}', "step"),
        ('{"type": "state", "state": {"path": "/tiles", "step": 100000001}}', "step"),
        ('{"type": "state", "state": {"path": "/tiles", "step": "3"}}', "step"),
        ('{"type": "state", "state": {"path": "/tiles", "params": {"n": 1e400}}}', "message"),
        ('{"type": "state", "state": {"path": "/tiles", "params": {"n": 1' + "0" * 30 + "}}}", "n"),
        ('{"type": "state", "state": {"path": "/tiles", "params": {"n": {"a": 1}}}}', "n"),
        ('{"type": "state", "state": {"path": "/tiles", "params": {"bad key": 1}}}', "bad key"),
        ('{"type": "state", "state": {"path": "/tiles", "extra": 1}}', "extra"),
        ('{"type": "state", "state": "tiles"}', "state"),
        ('{"type": "state", "state": {"path": "/tiles"}, "sneaky": 1}', "message"),
        ('{"type": "ping", "x": ' + "[" * 1500 + "]" * 1500 + "}", "message"),  # too deep
    ],
)
def test_bad_messages_get_an_error_and_change_nothing(client, stack, message, field):
    code, token = make_room(client)
    driver, _ = join(stack, client, code, token)
    driver.send_text(message)
    reply = driver.receive_json()
    assert reply["type"] == "error", reply
    assert field in [e["field"] for e in reply["errors"]], reply
    assert all(e["msg"] for e in reply["errors"])
    assert client.get(f"/api/rooms/{code}").json()["seq"] == 0
    driver.send_json({"type": "state", "state": state(1)})
    assert driver.receive_json() == {"type": "ack", "seq": 1}


def test_too_many_params_name_the_limit():
    with app_client(room_max_params=4) as client, ExitStack() as stack:
        code, token = make_room(client)
        driver, _ = join(stack, client, code, token)
        driver.send_json({"type": "state", "state": state(1, a=1, b=2, c=3)})
        err = driver.receive_json()["errors"][0]
        assert (err["field"], err["limit"]) == ("params", 4)


def test_a_driver_sending_too_fast_is_told_and_dropped():
    with app_client(room_states_burst=3, room_states_per_s=0.01) as client, ExitStack() as stack:
        code, token = make_room(client)
        driver, _ = join(stack, client, code, token)
        replies = []
        for step in range(5):
            driver.send_json({"type": "state", "state": state(step)})
            replies.append(driver.receive_json())
        assert [r["type"] for r in replies] == ["ack"] * 3 + ["error"] * 2
        assert replies[-1]["errors"][0]["field"] == "state"
        assert client.get(f"/api/rooms/{code}").json()["seq"] == 3


@pytest.mark.parametrize(
    ("path", "first", "close"),
    [
        ("/ws/rooms/NOSUCH", {"type": "join"}, 4404),
        ("/ws/rooms/a-b", {"type": "join"}, 4400),
        ("/ws/rooms/" + "A" * 13, {"type": "join"}, 4400),
        (None, {"type": "state", "state": {"path": "/"}}, 4400),
        (None, ["join"], 4400),
    ],
)
def test_bad_joins_are_closed_with_a_reason(client, path, first, close):
    code, _ = make_room(client)
    with client.websocket_connect(path or f"/ws/rooms/{code}") as ws:
        if close != 4400 or path is None:
            ws.send_json(first)
        got, reason = closed_with(ws)
        assert got == close and reason


def test_a_silent_client_is_closed(client, monkeypatch):
    import flashscope.app.rooms.connection as connection

    monkeypatch.setattr(connection, "JOIN_TIMEOUT_S", 0.2)
    code, _ = make_room(client)
    with client.websocket_connect(f"/ws/rooms/{code}") as ws:
        assert closed_with(ws) == (4408, "send a join message first")


def test_room_count_and_creation_rate_are_limited():
    with app_client(rooms_max=2) as client:
        make_room(client)
        make_room(client)
        r = client.post("/api/rooms", json={})
        assert r.status_code == 429 and int(r.headers["Retry-After"]) > 0
        err = r.json()["detail"][0]
        assert (err["field"], err["limit"]) == ("rooms", 2)
    with app_client(rate_rooms_burst=2, rate_rooms_per_s=0.01) as client:
        make_room(client)
        make_room(client)
        r = client.post("/api/rooms", json={})
        assert r.status_code == 429 and int(r.headers["Retry-After"]) >= 1
        assert r.json()["detail"][0]["limit"] == {"per_s": 0.01, "burst": 2}


def test_room_info_refuses_bad_codes(client):
    assert client.get("/api/rooms/NOSUCH").status_code == 404
    r = client.get("/api/rooms/no-such!")
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "code"


def test_a_follower_buffers_while_held_and_drops_what_it_has_seen():
    f = Follower("m", queue_len=4)
    f.offer(1, "s1")
    f.offer(2, "s2")
    f.send("welcome")
    f.ready(1)  # the welcome carried state 1: only 2 follows it
    f.offer(2, "s2 again")
    f.offer(3, "s3")
    got = [f.queue.get_nowait() for _ in range(f.queue.qsize())]
    assert got == ["welcome", "s2", "s3"]
    f.following = False
    f.offer(4, "s4")
    assert f.queue.empty()
    f.skip(9)
    f.following = True
    f.offer(9, "s9")
    f.offer(10, "s10")
    assert [f.queue.get_nowait()] == ["s10"]


def test_a_follower_that_falls_behind_is_marked_too_slow():
    f = Follower("m", queue_len=3)
    f.ready(0)
    for seq in range(1, 4):
        f.offer(seq, f"s{seq}")
    assert not f.too_slow
    f.offer(4, "s4")
    assert f.too_slow and f.queue.qsize() == 3


def test_an_idle_empty_room_closes_and_frees_its_place():
    now = [0.0]
    store = MemoryRoomStore(idle_ttl_s=60, clock=lambda: now[0])

    async def scenario():
        await store.start(lambda *a: None)
        assert await store.create("AAAAAA", "d", max_rooms=2) == "ok"
        assert await store.create("AAAAAA", "d", max_rooms=2) == "exists"
        assert await store.create("BBBBBB", "d", max_rooms=2) == "ok"
        assert await store.create("CCCCCC", "d", max_rooms=2) == "full"
        await store.join("BBBBBB", member_id(False, "10.0.0.1"), SEATS)
        now[0] = 61.0  # A is idle and empty; B has a member
        assert await store.count() == 1
        assert await store.get("AAAAAA") is None
        assert await store.create("CCCCCC", "d", max_rooms=2) == "ok"
        with pytest.raises(RoomGone):
            await store.join("AAAAAA", member_id(False, "10.0.0.2"), SEATS)

    run(scenario())


def test_an_unreachable_redis_is_a_clear_503_and_close():
    with app_client(redis_url=f"redis://127.0.0.1:{free_port()}/0") as client:
        for r in (client.post("/api/rooms", json={}), client.get("/api/rooms/ABCDEF")):
            err = r.json()["detail"][0]
            assert r.status_code == 503 and "Redis does not answer" in err["msg"], r.text
        with client.websocket_connect("/ws/rooms/ABCDEF") as ws:
            ws.send_json({"type": "join"})
            code, reason = closed_with(ws)
            assert code == 1011 and reason.startswith("rooms are unavailable")


def test_the_memory_store_refuses_stale_states_of_a_second_driver():
    run(stale_states_are_refused(MemoryRoomStore(idle_ttl_s=60), "STALE1"))


def test_a_second_drivers_stale_echo_is_refused_and_nobody_moves_back(client, stack):
    """The lecturer's laptop and tablet both drive. The tablet, one state behind, re-sends what it
    last showed (a page settling after a remote state); the room must not step back."""
    code, token = make_room(client)
    laptop, _ = join(stack, client, code, token)
    tablet, _ = join(stack, client, code, token)
    attendee, _ = join(stack, client, code)
    laptop.send_json({"type": "state", "state": state(1), "base": 0})
    assert laptop.receive_json() == {"type": "ack", "seq": 1}
    assert tablet.receive_json() == {"type": "state", "seq": 1, "state": state(1)}
    laptop.send_json({"type": "state", "state": state(2), "base": 1})
    assert laptop.receive_json() == {"type": "ack", "seq": 2}
    # The tablet has seen only seq 1 when its echo of step 1 leaves.
    tablet.send_json({"type": "state", "state": state(1), "base": 1})
    assert tablet.receive_json() == {"type": "state", "seq": 2, "state": state(2)}
    assert tablet.receive_json() == {"type": "stale", "seq": 2}
    assert client.get(f"/api/rooms/{code}").json()["state"]["step"] == 2
    # Having seen 2, the tablet drives: the laptop and the attendee follow it.
    tablet.send_json({"type": "state", "state": state(3), "base": 2})
    assert tablet.receive_json() == {"type": "ack", "seq": 3}
    assert laptop.receive_json() == {"type": "state", "seq": 3, "state": state(3)}
    assert [attendee.receive_json()["state"]["step"] for _ in range(3)] == [1, 2, 3]


@pytest.mark.parametrize("base", [-1, 1.5, "2", True, 2**53 + 1])
def test_a_bad_base_is_named(client, stack, base):
    code, token = make_room(client)
    driver, _ = join(stack, client, code, token)
    driver.send_json({"type": "state", "state": state(1), "base": base})
    reply = driver.receive_json()
    assert reply["type"] == "error" and reply["errors"][0]["field"] == "base", reply
    assert client.get(f"/api/rooms/{code}").json()["seq"] == 0


def join_with_presence(stack: ExitStack, client, code: str, token: str | None = None):
    ws = stack.enter_context(client.websocket_connect(f"/ws/rooms/{code}"))
    ws.send_json({"type": "join", "presence": True} | ({"token": token} if token else {}))
    welcome = ws.receive_json()
    assert welcome["type"] == "welcome", welcome
    return ws, welcome


def test_presence_tells_the_driver_each_count_and_attendees_their_lecturer(client, stack):
    code, token = make_room(client)
    driver, welcome = join_with_presence(stack, client, code, token)
    assert (welcome["clients"], welcome["drivers"]) == (1, 1)
    started = time.monotonic()
    leaving = ExitStack()
    attendee, w = join_with_presence(leaving, client, code)
    assert (w["clients"], w["drivers"]) == (2, 1)
    assert driver.receive_json() == {"type": "presence", "clients": 2, "drivers": 1}
    assert time.monotonic() - started < 1.0
    quiet, _ = join(stack, client, code)  # an older client, which asked for nothing
    assert driver.receive_json() == {"type": "presence", "clients": 3, "drivers": 1}
    leaving.close()
    assert driver.receive_json() == {"type": "presence", "clients": 2, "drivers": 1}
    # An attendee hears of its lecturer leaving and coming back, not of other attendees.
    attendee, _ = join_with_presence(stack, client, code)
    assert driver.receive_json()["clients"] == 3
    lecturer = ExitStack()
    join_with_presence(lecturer, client, code, token)
    assert driver.receive_json() == {"type": "presence", "clients": 4, "drivers": 2}
    driver.close()
    lecturer.close()
    assert attendee.receive_json() == {"type": "presence", "clients": 2, "drivers": 0}
    again, w = join_with_presence(stack, client, code, token)
    assert w["drivers"] == 1
    assert attendee.receive_json() == {"type": "presence", "clients": 3, "drivers": 1}
    # The quiet attendee's next message is still the lecturer's next state.
    again.send_json({"type": "state", "state": state(1)})
    assert quiet.receive_json()["type"] == "state"
