"""What one careless or hostile trace client cannot do: work refused before it starts, steps
beyond a socket's rate, messages nested to break the parser."""

from __future__ import annotations

import json
import time

from fastapi.testclient import TestClient

from flashscope.app.config import Settings
from flashscope.app.main import create_app


def test_numerics_beyond_the_budget_are_refused_before_any_work(client, settings):
    t0 = time.monotonic()
    r = client.get("/api/trace?algo=decode&n=16&group=16&nk=32768&d=256&bm=256&bn=8&seed=3")
    assert time.monotonic() - t0 < 0.5
    assert r.status_code == 422
    (err,) = r.json()["detail"]
    assert err["field"] == "nk" and err["limit"] == settings.trace_max_macs
    assert "multiply-adds" in err["msg"]
    # the same request as a trace stream's open: refused with the same reason
    with client.websocket_connect("/ws/trace") as ws:
        big = {"algo": "decode", "n": 16, "group": 16, "nk": 32768, "d": 256, "bm": 256, "bn": 8}
        ws.send_json({"type": "open", "params": big})
        msg = ws.receive_json()
        assert msg["type"] == "error" and "multiply-adds" in msg["errors"][0]["msg"]


def test_a_window_past_the_end_is_refused_from_the_closed_form(client):
    t0 = time.monotonic()
    r = client.get("/api/trace?algo=fa2-bwd&n=1024&d=256&bm=2&bn=256&seed=1&start=50000&count=2")
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "step"
    assert time.monotonic() - t0 < 0.5  # no trace was built to find that out


def test_a_window_too_large_is_refused_after_its_first_event(client):
    r = client.get("/api/trace?algo=fa2-bwd&n=1024&d=256&bm=2&bn=256&seed=1&start=5000&count=256")
    assert r.status_code == 422
    (err,) = r.json()["detail"]
    assert err["field"] == "count" and 1 <= err["limit"] < 256


def test_step_messages_beyond_the_rate_are_refused_and_the_socket_lives():
    settings = Settings(ws_steps_per_s=1, ws_steps_burst=5)
    with TestClient(create_app(settings)) as c, c.websocket_connect("/ws/trace") as ws:
        ws.send_json({"type": "open", "params": {"n": 32, "d": 16, "bm": 16, "bn": 16}})
        assert ws.receive_json()["type"] == "meta"
        kinds = []
        for k in range(8):
            ws.send_json({"type": "step", "step": k % 3})
            msg = ws.receive_json()
            kinds.append(msg["type"])
            if msg["type"] == "error":
                assert "too many steps" in msg["errors"][0]["msg"]
        assert kinds[:5] == ["event"] * 5 and kinds[5:] == ["error"] * 3


def test_a_deeply_nested_message_gets_an_error_not_a_dropped_socket(client):
    with client.websocket_connect("/ws/trace") as ws:
        ws.send_text("[" * 1500 + "]" * 1500)
        msg = ws.receive_json()
        assert msg["type"] == "error" and "deeper" in msg["errors"][0]["msg"]
        ws.send_text(json.dumps({"type": "open", "params": {"n": 16, "d": 16, "bm": 16, "bn": 16}}))
        assert ws.receive_json()["type"] == "meta"


def test_a_trace_stream_from_another_origin_is_closed(client):
    from starlette.websockets import WebSocketDisconnect

    try:
        with client.websocket_connect("/ws/trace", headers={"origin": "http://evil.example"}) as ws:
            ws.receive_json()
    except WebSocketDisconnect as exc:
        assert exc.code == 4403
    else:
        raise AssertionError("the socket stayed open")
    with client.websocket_connect("/ws/trace", headers={"origin": "http://testserver"}) as ws:
        ws.send_json({"type": "open", "params": {"n": 16, "d": 16, "bm": 16, "bn": 16}})
        assert ws.receive_json()["type"] == "meta"
