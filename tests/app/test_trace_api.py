"""GET /api/trace and the /ws/trace stream."""

from __future__ import annotations

import json

import numpy as np
import pytest
from starlette.websockets import WebSocketDisconnect

from simulator.numerics import naive_attention
from simulator.problem import AttentionProblem
from simulator.tracing import random_inputs


def test_trace_json_twin_pages_through_events(client):
    r = client.get(
        "/api/trace",
        params={"n": 96, "d": 16, "bm": 32, "bn": 32, "seed": 4, "start": 10, "count": 5},
    )
    assert r.status_code == 200
    body = r.json()
    meta = body["meta"]
    assert meta["trace_version"] == 2
    assert meta["n_events"] == 3 * (2 + 4 * 3)
    assert [e["step"] for e in body["events"]] == [10, 11, 12, 13, 14]
    assert meta["max_abs_err"] < 1e-5


@pytest.mark.parametrize(
    ("params", "field", "limit"),
    [
        ({"n": 0}, "n", 1),
        ({"n": 5000}, "n", 1024),
        ({"d": 257}, "d", 256),
        ({"bm": 48}, "bm", [2, 256]),
        ({"bn": 512}, "bn", [2, 256]),
        ({"n": 1024, "bm": 2, "bn": 2}, "bn", 20000),
        ({"count": 10_000}, "count", 256),
        ({"seed": -1}, "seed", 0),
        ({"n": "lots"}, "n", None),
    ],
)
def test_bad_parameters_get_422_naming_field_and_limit(client, params, field, limit):
    r = client.get("/api/trace", params=params)
    assert r.status_code == 422, r.text
    errors = r.json()["detail"]
    hit = [e for e in errors if e["field"] == field]
    assert hit, errors
    assert hit[0]["limit"] == limit
    assert hit[0]["msg"]


def test_start_beyond_the_trace_is_refused(client):
    r = client.get("/api/trace", params={"n": 16, "bm": 16, "bn": 16, "start": 999})
    assert r.status_code == 422
    assert r.json()["detail"][0]["field"] == "step"


def test_websocket_steps_through_a_trace(client):
    p = AttentionProblem(seq_q=64, head_dim=16, dtype="fp32")
    with client.websocket_connect("/ws/trace") as ws:
        ws.send_json({"type": "open", "params": {"n": 64, "d": 16, "bm": 32, "bn": 16, "seed": 11}})
        meta = ws.receive_json()
        assert meta["type"] == "meta"
        n = meta["meta"]["n_events"]
        assert n == 2 * (2 + 4 * 4)
        seen = []
        for k in range(n):
            ws.send_json({"type": "step", "step": k})
            msg = ws.receive_json()
            assert msg["type"] == "event"
            assert msg["event"]["step"] == k
            seen.append(msg["event"])
        # The last event of each query block holds the exact attention rows.
        q, k_, v = random_inputs(p, 11)
        o_ref = naive_attention(q, k_, v, p.scale)
        stores = [e for e in seen if e["phase"] == "store"]
        assert len(stores) == 2
        for e in stores:
            r0, r1 = e["state"]["rows"]
            np.testing.assert_allclose(e["state"]["o_hat"], o_ref[r0:r1], atol=1e-5)
        assert seen[-1]["totals"]["hbm_read"] == 64 * 16 + 2 * 2 * 64 * 16


def test_websocket_refuses_bad_messages_and_keeps_going(client):
    with client.websocket_connect("/ws/trace") as ws:
        ws.send_json({"type": "step", "step": 0})
        assert ws.receive_json()["type"] == "error"
        ws.send_text("not json")
        assert ws.receive_json()["type"] == "error"
        ws.send_json({"type": "open", "params": {"n": 0, "bm": 3}})
        err = ws.receive_json()
        assert err["type"] == "error"
        assert {e["field"] for e in err["errors"]} == {"n"}
        ws.send_json({"type": "open", "params": {"n": 32, "bm": 3}})
        err = ws.receive_json()
        assert [e["field"] for e in err["errors"]] == ["bm"]
        ws.send_json({"type": "open", "params": {"n": 32, "bogus": 1}})
        assert ws.receive_json()["errors"][0]["field"] == "bogus"
        ws.send_json({"type": "open", "params": {"n": 32, "bm": 16, "bn": 16}})
        assert ws.receive_json()["type"] == "meta"
        ws.send_json({"type": "step", "step": 10_000})
        err = ws.receive_json()
        assert err["errors"][0]["field"] == "step"
        ws.send_json({"type": "step", "step": "3"})
        assert ws.receive_json()["errors"][0]["field"] == "step"
        ws.send_json({"type": "step", "step": 3})
        assert ws.receive_json()["event"]["step"] == 3


def test_websocket_closes_on_oversized_message(client, settings):
    with client.websocket_connect("/ws/trace") as ws:
        ws.send_text(
            json.dumps(
                {"type": "open", "params": {}, "pad": "x" * (settings.ws_max_message_bytes + 1)}
            )
        )
        with pytest.raises(WebSocketDisconnect) as exc:
            ws.receive_json()
        assert exc.value.code == 1009
