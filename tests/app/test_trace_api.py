"""GET /api/trace and the /ws/trace stream."""

from __future__ import annotations

import json

import numpy as np
import pytest
from starlette.websockets import WebSocketDisconnect

from flashscope.simulator.core.problem import AttentionProblem
from flashscope.simulator.teach.numerics import naive_attention
from flashscope.simulator.teach.tracing import random_inputs


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


ALGO_PARAMS = [
    {"algo": "naive", "n": 40, "nk": 56, "causal": True, "dtype": "fp16"},
    {"algo": "fa1", "n": 56, "nk": 40, "causal": True, "dtype": "bf16"},
    {"algo": "fa2", "n": 70, "nk": 33, "causal": True},
    {"algo": "fa2-bwd", "n": 33, "nk": 48, "causal": True, "dtype": "fp16"},
    {"algo": "decode", "n": 2, "nk": 200, "group": 4, "splits": 3},
]


@pytest.mark.parametrize("params", ALGO_PARAMS, ids=lambda p: p["algo"])
def test_every_algorithm_pages_through_validated_events(client, params):
    """Every event of every algorithm passes the response schema (a 500 otherwise)."""
    base = {"d": 16, "bm": 16, "bn": 16, "seed": 3, **params}
    first = client.get("/api/trace", params={**base, "count": 0})
    assert first.status_code == 200, first.text
    meta = first.json()["meta"]
    assert meta["algo"] == params["algo"]
    assert meta["grid"]["order"] in ("rows", "q-outer", "kv-outer", "splits")
    n = meta["n_events"]
    events = []
    for start in range(0, n, 256):
        r = client.get("/api/trace", params={**base, "start": start, "count": 256})
        assert r.status_code == 200, r.text
        events += r.json()["events"]
    assert [e["step"] for e in events] == list(range(n))
    totals = events[-1]["totals"]
    elements = meta["traffic"]["algo"]["elements"]
    assert totals["hbm_read"] == elements["hbm_read"]
    assert totals["acc_write"] == elements["acc_write"]
    assert events[-1]["state"]["final"]


def test_websocket_steps_a_decode_trace(client):
    with client.websocket_connect("/ws/trace") as ws:
        ws.send_json(
            {"type": "open", "params": {"algo": "decode", "n": 1, "nk": 64, "d": 8, "bn": 16}}
        )
        meta = ws.receive_json()["meta"]
        assert meta["grid"]["splits"] == 4  # one K/V head: as many splits as key blocks
        ws.send_json({"type": "step", "step": meta["n_events"] - 2})
        ev = ws.receive_json()["event"]
        assert ev["phase"] == "reduce" and ev["state"]["split"] == 3


@pytest.mark.parametrize(
    ("params", "field", "limit"),
    [
        ({"algo": "fa3"}, "algo", None),
        ({"dtype": "fp8"}, "dtype", None),
        ({"algo": "decode", "causal": True, "n": 1}, "causal", None),
        ({"algo": "decode", "n": 300}, "n", 256),
        ({"algo": "decode", "n": 1, "group": 17}, "group", 16),
        ({"algo": "decode", "n": 1, "splits": 2000}, "splits", 1024),
        ({"algo": "fa2-bwd", "n": 1024, "bm": 16, "bn": 16}, "bn", 20000),
    ],
)
def test_bad_algorithm_parameters_get_422(client, params, field, limit):
    r = client.get("/api/trace", params=params)
    assert r.status_code == 422, r.text
    hit = [e for e in r.json()["detail"] if e["field"] == field]
    assert hit and hit[0]["limit"] == limit and hit[0]["msg"], r.json()


def test_state_model_checks_shapes():
    from pydantic import ValidationError

    from flashscope.app.schemas.trace import TileStateModel

    ok = {"col_stride": 1, "final": False, "rows": [0, 2], "m": [0.0, None]}
    TileStateModel.model_validate(ok)
    for bad in (
        {**ok, "m": [0.0]},  # one entry for two rows
        {**ok, "rows": [3, 1]},
        {**ok, "dk": [[0.0]]},  # dk needs cols
        {"col_stride": 1, "final": False, "rows": [0, 2], "o": [[0.0], [0.0, 1.0]]},
        {**ok, "bogus": 1},
        {**ok, "col_stride": 0},
    ):
        with pytest.raises(ValidationError):
            TileStateModel.model_validate(bad)


def test_trace_responses_are_bounded_in_bytes(client, settings):
    # Wide states (64 rows × 64 columns, twice) make each event far larger than a small one.
    params = {"n": 1024, "d": 64, "bm": 64, "bn": 16, "start": 0}
    r = client.get("/api/trace", params={**params, "count": settings.max_events_per_request})
    assert r.status_code == 422, r.text
    err = next(e for e in r.json()["detail"] if e["field"] == "count")
    assert 1 <= err["limit"] < settings.max_events_per_request
    ok = client.get("/api/trace", params={**params, "count": err["limit"]})
    assert ok.status_code == 200
    assert len(ok.content) <= settings.max_trace_response_bytes * 1.1


def test_a_window_known_to_be_too_large_is_refused_before_any_worker(client, settings):
    params = {"n": 1024, "d": 64, "bm": 64, "bn": 16, "start": 0}
    count = settings.max_events_per_request
    first = client.get("/api/trace", params={**params, "seed": 1, "count": count})
    assert first.status_code == 422, first.text
    fits = next(e for e in first.json()["detail"] if e["field"] == "count")["limit"]
    pool = client.app.state.pool
    tasks: list[str] = []
    run = pool.run

    async def counting(name, *args, **kwargs):
        tasks.append(name)
        return await run(name, *args, **kwargs)

    pool.run = counting
    # another seed of the same shape: refused at once, its trace never built
    again = client.get("/api/trace", params={**params, "seed": 2, "count": count})
    assert again.status_code == 422 and tasks == []
    err = next(e for e in again.json()["detail"] if e["field"] == "count")
    assert 1 <= err["limit"] <= fits
    ok = client.get("/api/trace", params={**params, "seed": 2, "count": fits})  # what fits
    assert ok.status_code == 200 and tasks == ["trace.window"]
    other = client.get("/api/trace", params={**params, "bn": 32, "seed": 2, "count": count})
    assert other.status_code == 422 and tasks[-1] == "trace.window"  # a new shape: a worker
