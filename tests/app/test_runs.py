"""The run queue behind /api/runs, with a stand-in executor (no kernels involved)."""

from __future__ import annotations

import json
import time

import pytest
from fastapi.testclient import TestClient

from flashscope.app.config import Settings
from flashscope.app.main import create_app


@pytest.fixture
def runs_client():
    settings = Settings(
        runs_executor="tests.app.fake_jobs:execute",
        runs_devices=["cpu"],
        runs_timeout_s=4,
        runs_max_queued=2,
    )
    with TestClient(create_app(settings)) as c:
        yield c


def _wait(client, run_id, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        body = client.get(f"/api/runs/{run_id}").json()
        if body["state"] in ("done", "failed", "timeout"):
            return body
        time.sleep(0.05)
    raise AssertionError(f"run {run_id} did not finish: {body}")


def test_run_completes_and_identical_requests_share_it(runs_client):
    r = runs_client.post("/api/runs", json={"seq": 64, "seed": 5})
    assert r.status_code == 202, r.text
    first = r.json()
    assert first["cached"] is False and first["state"] in ("queued", "running")
    done = _wait(runs_client, first["id"])
    assert done["state"] == "done"
    assert done["result"]["echo"]["seq"] == 64
    assert done["messages"] == ["compiling", "running"]
    again = runs_client.post("/api/runs", json={"seq": 64, "seed": 5}).json()
    assert again["id"] == first["id"] and again["cached"] is True
    other = runs_client.post("/api/runs", json={"seq": 64, "seed": 6}).json()
    assert other["id"] != first["id"]


def test_progress_streams_as_server_sent_events(runs_client):
    run_id = runs_client.post("/api/runs", json={"seq": 32, "seed": 9}).json()["id"]
    events = []
    with runs_client.stream("GET", f"/api/runs/{run_id}/events") as stream:
        name = None
        for line in stream.iter_lines():
            if line.startswith("event:"):
                name = line.split(":", 1)[1].strip()
            elif line.startswith("data:"):
                events.append((name, json.loads(line.split(":", 1)[1])))
                if name == "end":
                    break
    assert events[-1][0] == "end" and events[-1][1]["state"] == "done"
    messages = [m for name, data in events if name == "progress" for m in data["messages"]]
    assert messages == ["compiling", "running"]


def test_failures_and_timeouts_end_the_run_not_the_worker(runs_client):
    failed = _wait(runs_client, runs_client.post("/api/runs", json={"seed": 2}).json()["id"])
    assert failed["state"] == "failed"
    assert "refused this problem" in failed["error"]
    died = _wait(runs_client, runs_client.post("/api/runs", json={"seed": 3}).json()["id"])
    assert died["state"] == "failed" and "died" in died["error"]
    slow = _wait(runs_client, runs_client.post("/api/runs", json={"seed": 1}).json()["id"])
    assert slow["state"] == "timeout"
    assert "longer than 4 s" in slow["error"]
    ok = _wait(runs_client, runs_client.post("/api/runs", json={"seed": 11}).json()["id"])
    assert ok["state"] == "done"


def test_full_queue_answers_429_with_retry_after(runs_client):
    blocker = runs_client.post("/api/runs", json={"seed": 1}).json()["id"]
    deadline = time.monotonic() + 20
    while runs_client.get(f"/api/runs/{blocker}").json()["state"] != "running":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    codes = [runs_client.post("/api/runs", json={"seed": 100 + i}).status_code for i in range(3)]
    assert codes == [202, 202, 429]
    r = runs_client.post("/api/runs", json={"seed": 200})
    assert r.status_code == 429
    assert int(r.headers["Retry-After"]) >= 1
    assert r.json()["detail"][0]["limit"] == 2


@pytest.mark.parametrize(
    ("body", "field", "limit"),
    [
        ({"block_m": 48}, "block_m", None),
        ({"seq": 4096}, "seq", 256),
        ({"head_dim": 60}, "head_dim", None),
        ({"head_dim": 512}, "head_dim", 256),
        ({"heads": 6, "kv_heads": 4}, "kv_heads", None),
        ({"batch": 1000}, "batch", 64),
        ({"what": "everything"}, "what", None),
        ({"seq": float("nan")}, "seq", None),
        ({"seqq": 5}, "seqq", None),
        ({"maxnreg": 256}, "maxnreg", 248),
        ({"maxnreg": 100}, "maxnreg", 8),
    ],
)
def test_bad_run_requests_get_422(runs_client, body, field, limit):
    r = runs_client.post(
        "/api/runs", content=json.dumps(body), headers={"content-type": "application/json"}
    )
    assert r.status_code == 422, r.text
    hit = [e for e in r.json()["detail"] if e["field"] == field]
    assert hit, r.text
    if limit is not None:
        assert hit[0]["limit"] == limit


def test_unknown_run_is_404(runs_client):
    assert runs_client.get("/api/runs/abc123").status_code == 404
    assert runs_client.get("/api/runs/not-hex!").status_code == 422
