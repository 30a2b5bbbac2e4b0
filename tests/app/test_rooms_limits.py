"""Rooms against a hostile client: floods of rooms, foreign pages, seat grabs, code guessing and
clients that never read. Each case is refused on its own and the lecturer's room goes on."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
import urllib.request
from contextlib import ExitStack

import pytest
from fastapi.testclient import TestClient
from websockets.sync.client import connect

from flashscope.app.config import Settings
from flashscope.app.main import create_app
from flashscope.app.rooms.connection import CLOSE_WAIT_S, serve
from flashscope.app.rooms.service import Rooms
from flashscope.app.rooms.state import RoomState
from flashscope.app.rooms.store import member_id

from .aio import run
from .servers import flashscope_server
from .test_rooms import closed_with, join, make_room

PROXY = "127.0.0.1"  # the test client connects from here, a trusted proxy: X-Forwarded-For counts


def app_client(**overrides) -> TestClient:
    settings = Settings(trusted_proxies=[PROXY], **overrides)
    return TestClient(create_app(settings), client=(PROXY, 5000))


@pytest.fixture
def stack(client):
    with ExitStack() as s:
        yield s


def at(address: str) -> dict[str, str]:
    return {"X-Forwarded-For": address}


def only_error(r, status: int) -> dict:
    assert r.status_code == status, r.text
    (err,) = r.json()["detail"]
    assert err["msg"], err
    # Refusals go out through the app like any answer: with its security headers.
    assert "default-src 'self'" in r.headers["content-security-policy"]
    return err


def post_room(client, address: str | None = None, **kw):
    headers = {**(at(address) if address else {}), **kw.pop("headers", {})}
    return client.post("/api/rooms", json={}, headers=headers, **kw)


# --- who may make a room ---------------------------------------------------------------------


def test_a_cross_site_request_cannot_make_a_room():
    with app_client(rate_rooms_burst=100) as client:
        _cross_site(client)


def _cross_site(client) -> None:
    # A form or fetch from another site can send text/plain without asking first: refused.
    err = only_error(
        client.post("/api/rooms", content=b"{}", headers={"Content-Type": "text/plain"}), 415
    )
    assert (err["field"], err["limit"]) == ("Content-Type", "application/json")
    assert "text/plain" in err["msg"]
    assert only_error(client.post("/api/rooms"), 415)["field"] == "Content-Type"
    for origin in ("https://evil.example", "null", "http://testserver.evil.example"):
        err = only_error(client.post("/api/rooms", json={}, headers={"Origin": origin}), 403)
        assert err["field"] == "Origin" and origin in err["msg"]
    err = only_error(client.post("/api/rooms", json={"size": 1000}), 422)
    assert err["field"] == "body"
    # The server's own pages (Origin = the Host they were sent to) and programs (no Origin).
    assert client.post("/api/rooms", json={}, headers={"Origin": "http://testserver"}).is_success
    r = client.post("/api/rooms", content=b"", headers={"Content-Type": "application/json"})
    assert r.status_code == 201, r.text


def test_allowed_origins_admit_another_site_and_bad_entries_are_named():
    with app_client(allowed_origins=["https://slides.example"]) as client:
        r = post_room(client, headers={"Origin": "https://slides.example"})
        assert r.status_code == 201, r.text
        only_error(post_room(client, headers={"Origin": "https://slides.example:8443"}), 403)
    with pytest.raises(ValueError, match=r"slides\.example/talk"):
        Settings(allowed_origins=["https://slides.example/talk"])


def test_a_foreign_page_cannot_open_a_room_socket(client, stack):
    code, token = make_room(client)
    with client.websocket_connect(
        f"/ws/rooms/{code}", headers={"Origin": "https://evil.example"}
    ) as ws:
        got, reason = closed_with(ws)
        assert got == 4403 and "https://evil.example" in reason
    ws = stack.enter_context(
        client.websocket_connect(f"/ws/rooms/{code}", headers={"Origin": "http://testserver"})
    )
    ws.send_json({"type": "join", "token": token})
    assert ws.receive_json()["role"] == "driver"


def test_a_flood_of_rooms_from_many_addresses_leaves_room_for_the_lecturer():
    """100 rooms asked for by 21 addresses that drop their cookies: each address gets its
    share (4), the server stays below its limit, and the lecturer still starts a room."""
    with app_client() as client:
        made = refused = 0
        for k in range(100):
            client.cookies.clear()  # a new identity each time: only the address holds it back
            r = post_room(client, f"203.0.113.{k % 21}")
            if r.status_code == 201:
                made += 1
            else:
                err = only_error(r, 429)
                assert (err["field"], err["limit"]) == ("rooms_per_address", 4)
                assert int(r.headers["Retry-After"]) > 0
                refused += 1
        assert (made, refused) == (21 * 4, 100 - 21 * 4)
        client.cookies.clear()
        assert post_room(client, "198.51.100.7").status_code == 201


def test_one_browser_may_have_a_few_rooms_open_and_frees_one_by_ending_it():
    with app_client() as client:
        rooms = [make_room(client) for _ in range(2)]
        err = only_error(post_room(client), 429)
        assert (err["field"], err["limit"]) == ("rooms_per_client", 2)
        code, token = rooms[0]
        r = client.delete(f"/api/rooms/{code}", headers={"X-Drive-Token": token})
        assert r.status_code == 204, r.text
        assert client.get(f"/api/rooms/{code}").status_code == 404
        assert post_room(client).status_code == 201


def test_a_room_nobody_joined_closes_soon_one_with_attendees_stays():
    with app_client(room_unjoined_ttl_s=0.3) as client, ExitStack() as stack:
        idle, _ = make_room(client)
        lonely, token = make_room(client)
        join(stack, client, lonely, token)  # the lecturer alone keeps it
        time.sleep(0.5)
        assert client.get(f"/api/rooms/{idle}").status_code == 404
        assert client.get(f"/api/rooms/{lonely}").status_code == 200
        code, _ = make_room(client)  # the closed room freed this browser's place
        join(stack, client, code)  # an attendee: the long idle TTL applies from now on
        stack.close()
        time.sleep(0.5)
        assert client.get(f"/api/rooms/{code}").status_code == 200
        assert client.get(f"/api/rooms/{lonely}").status_code == 404


def test_ending_a_room_needs_its_token_and_an_own_origin(client, stack):
    code, token = make_room(client)
    attendee, _ = join(stack, client, code)
    err = only_error(client.delete(f"/api/rooms/{code}"), 422)
    assert err["field"] == "X-Drive-Token"
    err = only_error(client.delete(f"/api/rooms/{code}", headers={"X-Drive-Token": "x" * 43}), 403)
    assert err["field"] == "X-Drive-Token"
    headers = {"X-Drive-Token": token, "Origin": "https://evil.example"}
    assert (
        only_error(client.delete(f"/api/rooms/{code}", headers=headers), 403)["field"] == "Origin"
    )
    assert client.delete(f"/api/rooms/{code}", headers={"X-Drive-Token": token}).status_code == 204
    gone = attendee.receive_json()
    assert gone["type"] == "room-gone" and gone["final"] is True, gone
    assert closed_with(attendee)[0] == 4410
    with client.websocket_connect(f"/ws/rooms/{code}") as ws:
        ws.send_json({"type": "join", "token": token})
        assert closed_with(ws)[0] == 4404


# --- seats ---------------------------------------------------------------------------------


def test_one_address_cannot_take_a_rooms_seats_and_the_lecturer_always_gets_in():
    with app_client(room_max_clients=8, room_max_clients_per_address=3) as client, ExitStack() as s:
        code, token = make_room(client)

        def connect(address: str, token: str | None = None):
            ws = s.enter_context(client.websocket_connect(f"/ws/rooms/{code}", headers=at(address)))
            ws.send_json({"type": "join"} | ({"token": token} if token else {}))
            return ws

        grabbers = [connect("203.0.113.9") for _ in range(3)]
        for ws in grabbers:
            assert ws.receive_json()["type"] == "welcome"
        extra = connect("203.0.113.9")
        assert closed_with(extra) == (
            4409,
            f"room {code} is full for your network (3 attendees from one address)",
        )
        # Others still get seats, and the lecturer's devices are not counted per address.
        for address in ("198.51.100.1", "198.51.100.2", "203.0.113.9", "203.0.113.9"):
            ws = connect(address, token if address.startswith("203") else None)
            assert ws.receive_json()["type"] == "welcome"
        assert connect("198.51.100.3").receive_json()["type"] == "welcome"
        assert client.get(f"/api/rooms/{code}").json()["clients"] == 8
        assert closed_with(connect("198.51.100.5")) == (4409, f"room {code} is full (8 clients)")
        # A full room still admits its lecturer (up to room_driver_seats more).
        assert connect("192.0.2.1", token).receive_json()["role"] == "driver"


def test_the_seat_share_defaults_to_a_quarter_of_the_room_but_at_least_20():
    assert Settings().seats_per_address() == 75
    assert Settings(room_max_clients=40).seats_per_address() == 20
    assert Settings(room_max_clients=40, room_max_clients_per_address=40).seats_per_address() == 40


# --- look-ups --------------------------------------------------------------------------------


def test_room_codes_cannot_be_guessed_quickly_and_the_lecturer_is_exempt():
    with app_client(rate_lookup_burst=3, rate_lookup_per_s=0.01) as client:
        code, token = make_room(client)
        assert [client.get(f"/api/rooms/{c}").status_code for c in ("AAAAAA", "BBBBBB")] == [
            404,
            404,
        ]
        assert client.get(f"/api/rooms/{code}").status_code == 200
        # The budget is spent: known and unknown codes answer alike, so nothing is learnt.
        for c in ("CCCCCC", code):
            r = client.get(f"/api/rooms/{c}")
            err = only_error(r, 429)
            assert err["field"] == "lookup" and err["limit"] == {"per_s": 0.01, "burst": 3}
            assert int(r.headers["Retry-After"]) >= 1
        # The lecturer's page polls with its drive token: never counted, never refused.
        for _ in range(5):
            r = client.get(f"/api/rooms/{code}", headers={"X-Drive-Token": token})
            assert r.status_code == 200
        r = client.get(f"/api/rooms/{code}", headers={"X-Drive-Token": "forged"})
        assert r.status_code == 429


def test_joins_are_look_ups_too_unless_they_carry_the_drive_token():
    with app_client(rate_lookup_burst=2, rate_lookup_per_s=0.01) as client, ExitStack() as stack:
        code, token = make_room(client)
        with client.websocket_connect("/ws/rooms/ZZZZZZ") as ws:
            ws.send_json({"type": "join"})
            assert closed_with(ws)[0] == 4404
        join(stack, client, code)
        for c in ("YYYYYY", code):  # spent: the same answer whether the room exists or not
            with client.websocket_connect(f"/ws/rooms/{c}") as ws:
                ws.send_json({"type": "join"})
                got, reason = closed_with(ws)
                assert got == 4429 and "retry after" in reason
        _, welcome = join(stack, client, code, token)
        assert welcome["role"] == "driver"


# --- slow readers ----------------------------------------------------------------------------


class StuckSocket:
    """A client that never reads: every send (the close frame too) waits forever."""

    def __init__(self) -> None:
        self.closed: tuple[int, str] | None = None

    async def send_text(self, text: str) -> None:
        await asyncio.Event().wait()

    async def receive(self) -> dict:
        await asyncio.Event().wait()
        raise AssertionError

    async def close(self, code: int = 1000, reason: str = "") -> None:
        self.closed = (code, reason)
        await asyncio.Event().wait()


def test_a_client_that_never_reads_is_dropped_while_its_send_is_stuck():
    """At 25 states per second, queue_len states pile up in queue_len / 25 s: then it goes."""
    settings = Settings(room_queue_len=16)
    rooms = Rooms(settings)

    async def scenario() -> float:
        code, _ = await rooms.create("id:lecturer", "ip:192.0.2.1")
        follower, record = await rooms.admit(code, member_id(False, "203.0.113.1"))
        follower.ready(record.seq)
        ws = StuckSocket()
        t0 = time.monotonic()
        served = asyncio.create_task(serve(ws, rooms, settings, code, "attendee", follower))
        for step in range(200):
            if served.done():
                break
            await rooms.publish(code, "d.x.0", RoomState(path="/tiles", step=step))
            await asyncio.sleep(1 / 25)
        await asyncio.wait_for(served, CLOSE_WAIT_S + 1)
        assert ws.closed is not None and ws.closed[0] == 1013, ws.closed
        await rooms.close()
        return time.monotonic() - t0

    took = run(scenario())
    assert took < 16 / 25 + 1.0 + CLOSE_WAIT_S, took


def test_a_send_that_takes_too_long_drops_the_client_even_when_the_room_is_quiet():
    settings = Settings(room_send_timeout_s=0.2)
    rooms = Rooms(settings)

    async def scenario() -> None:
        code, _ = await rooms.create("id:lecturer", "ip:192.0.2.1")
        follower, record = await rooms.admit(code, member_id(False, "203.0.113.1"))
        follower.ready(record.seq)
        ws = StuckSocket()
        served = asyncio.create_task(serve(ws, rooms, settings, code, "attendee", follower))
        await rooms.publish(code, "d.x.0", RoomState(path="/tiles", step=1))  # one state only
        await asyncio.wait_for(served, 0.2 + CLOSE_WAIT_S + 1)
        assert ws.closed is not None and ws.closed[0] == 1013
        assert "took over 0.2 s" in ws.closed[1]
        await rooms.close()

    run(scenario())


def _raw_join(base: str, code: str) -> socket.socket:
    """A WebSocket client that joins, then never reads a byte (a tiny receive buffer)."""
    host, port = base.removeprefix("http://").split(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    sock.sendall(
        (
            f"GET /ws/rooms/{code} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
            "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            "Sec-WebSocket-Version: 13\r\n\r\n"
        ).encode()
    )
    reply = b""
    while b"\r\n\r\n" not in reply:
        reply += sock.recv(1)
    assert reply.startswith(b"HTTP/1.1 101"), reply
    payload = b'{"type":"join"}'
    mask = b"\x00\x00\x00\x00"
    sock.sendall(bytes([0x81, 0x80 | len(payload)]) + mask + payload)
    return sock


@pytest.mark.slow
def test_a_real_client_that_never_reads_leaves_the_room():
    """Over TCP, through uvicorn, at 25 states per second: the silent client's socket buffers
    fill (several MiB: large states make that quick), then its outbox, then it is gone, while
    an attendee that reads gets every state. It used to stay until the server restarted."""
    env = {
        "FLASHSCOPE_ROOM_QUEUE_LEN": "16",
        "FLASHSCOPE_ROOM_MAX_MESSAGE_BYTES": "65536",
        "FLASHSCOPE_ROOM_MAX_PARAMS": "128",
    }
    with flashscope_server(env) as base:
        req = urllib.request.Request(
            base + "/api/rooms", data=b"{}", headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=30) as r:
            room = json.loads(r.read())
        code = room["code"]

        def clients() -> int:
            with urllib.request.urlopen(f"{base}/api/rooms/{code}", timeout=30) as r:
                return int(json.loads(r.read())["clients"])

        url = base.replace("http", "ws") + f"/ws/rooms/{code}"
        with connect(url) as lecturer, connect(url) as reader:
            lecturer.send(json.dumps({"type": "join", "token": room["drive_token"]}))
            assert json.loads(lecturer.recv())["role"] == "driver"
            reader.send('{"type":"join"}')
            assert json.loads(reader.recv())["type"] == "welcome"
            stuck = _raw_join(base, code)
            deadline = time.monotonic() + 10
            while clients() < 3 and time.monotonic() < deadline:
                time.sleep(0.05)
            got: list[int] = []

            def read() -> None:
                while True:
                    msg = json.loads(reader.recv(timeout=30))
                    if msg["type"] == "state":
                        if msg["state"]["path"] == "/end":
                            return
                        got.append(msg["state"]["step"])

            def drain() -> None:
                with contextlib.suppress(Exception):
                    while True:
                        lecturer.recv(timeout=60)

            threads = [threading.Thread(target=read), threading.Thread(target=drain, daemon=True)]
            for t in threads:
                t.start()
            big = {f"p{i}": "x" * 195 for i in range(120)}  # ~25 KB a state
            t0 = time.monotonic()
            left_at, sent = None, 0
            while time.monotonic() - t0 < 35 and (left_at is None or sent < 10 + left_at * 25):
                msg = {"type": "state", "state": {"path": "/tiles", "params": big, "step": sent}}
                lecturer.send(json.dumps(msg))
                sent += 1
                time.sleep(max(0.0, t0 + sent / 25 - time.monotonic()))
                if left_at is None and sent % 10 == 0 and clients() == 2:
                    left_at = time.monotonic() - t0
            lecturer.send(json.dumps({"type": "state", "state": {"path": "/end"}}))
            threads[0].join(30)
            stuck.close()
        print(f"the client that never reads left after {left_at} s")
        assert left_at is not None and left_at < 30, left_at
        assert got == list(range(sent))
