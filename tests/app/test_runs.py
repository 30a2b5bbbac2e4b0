"""The run queue behind /api/runs, with a stand-in executor (no kernels involved)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from fastapi.testclient import TestClient

from flashscope.app.config import Settings
from flashscope.app.main import create_app
from flashscope.app.middleware.identity import COOKIE

from .servers import alive


@pytest.fixture
def runs_client():
    settings = Settings(
        runs_executor="tests.app.fake_jobs:execute",
        runs_devices=["cpu"],
        runs_timeout_s=4,
        runs_max_queued=2,
        runs_unwatched_s=60,  # these tests look at one run at a time: none is cancelled
    )
    with TestClient(create_app(settings)) as c:
        yield c


def _wait(client, run_id, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        body = client.get(f"/api/runs/{run_id}").json()
        if body["state"] in ("done", "failed", "timeout", "cancelled"):
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


def _block(client) -> str:
    """Occupy the only worker with a run that sleeps until the timeout (4 s); its id."""
    blocker = client.post("/api/runs", json={"seed": 1}).json()["id"]
    deadline = time.monotonic() + 20
    while client.get(f"/api/runs/{blocker}").json()["state"] != "running":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return blocker


def _as(client, token: str | None) -> None:
    """Make the next requests come from the browser whose identity cookie is `token` (None: a
    browser without one, which the server gives a new identity)."""
    client.cookies.clear()
    if token is not None:
        client.cookies.set(COOKIE, token)


def _new_client(client) -> str:
    _as(client, None)
    client.get("/api/health")
    return client.cookies[COOKIE]


def test_full_queue_answers_429_with_retry_after(runs_client):
    _block(runs_client)
    codes = []
    for i in range(3):
        _new_client(runs_client)
        codes.append(runs_client.post("/api/runs", json={"seed": 100 + i}).status_code)
    assert codes == [202, 202, 429]
    r = runs_client.post("/api/runs", json={"seed": 200})
    assert r.status_code == 429
    assert int(r.headers["Retry-After"]) >= 1
    detail = r.json()["detail"][0]
    assert detail["limit"] == 2 and detail["setting"] == "FLASHSCOPE_RUNS_MAX_QUEUED"


@pytest.fixture
def fair_client():
    settings = Settings(
        runs_executor="tests.app.fake_jobs:execute",
        runs_devices=["cpu"],
        runs_timeout_s=3,
        runs_max_queued=8,
        runs_max_queued_per_client=3,
        runs_max_queued_per_address=7,
        rate_runs_burst=100,
        runs_unwatched_s=60,
    )
    with TestClient(create_app(settings)) as c:
        yield c


def test_one_client_cannot_fill_the_queue(fair_client):
    _block(fair_client)
    greedy = _new_client(fair_client)
    codes = [fair_client.post("/api/runs", json={"seed": 10 + i}).status_code for i in range(4)]
    assert codes == [202, 202, 202, 429]
    r = fair_client.post("/api/runs", json={"seed": 20})
    detail = r.json()["detail"][0]
    assert r.status_code == 429 and int(r.headers["Retry-After"]) >= 1
    assert detail["limit"] == 3 and detail["setting"] == "FLASHSCOPE_RUNS_MAX_QUEUED_PER_CLIENT"
    assert "this client has 3 runs waiting" in detail["msg"]
    _new_client(fair_client)  # someone else still gets in
    assert fair_client.post("/api/runs", json={"seed": 30}).status_code == 202
    _as(fair_client, greedy)
    assert fair_client.post("/api/runs", json={"seed": 21}).status_code == 429


def test_clients_without_a_cookie_share_their_address_limit(fair_client):
    _block(fair_client)
    codes = []
    for i in range(8):
        _as(fair_client, None)  # a script that drops the cookie: a new identity each time
        codes.append(fair_client.post("/api/runs", json={"seed": 40 + i}).status_code)
    assert codes == [202] * 7 + [429]
    _as(fair_client, None)
    detail = fair_client.post("/api/runs", json={"seed": 50}).json()["detail"][0]
    assert detail["setting"] == "FLASHSCOPE_RUNS_MAX_QUEUED_PER_ADDRESS" and detail["limit"] == 7


def test_clients_take_turns_and_positions_say_the_order(fair_client):
    _block(fair_client)
    a, b, c = (_new_client(fair_client) for _ in range(3))
    ids = {}
    for who, token, seeds in (("a", a, (61, 62, 63)), ("b", b, (71, 72)), ("c", c, (81,))):
        _as(fair_client, token)
        for i, seed in enumerate(seeds):
            r = fair_client.post("/api/runs", json={"seed": seed})
            assert r.status_code == 202, r.text
            ids[f"{who}{i + 1}"] = r.json()["id"]
    order = ["a1", "b1", "c1", "a2", "b2", "a3"]  # each client's oldest in turn
    positions = {k: fair_client.get(f"/api/runs/{v}").json()["position"] for k, v in ids.items()}
    assert positions == {k: i for i, k in enumerate(order)}
    done = {k: _wait(fair_client, v) for k, v in ids.items()}
    assert sorted(done, key=lambda k: done[k]["started"]) == order
    assert all(run["position"] is None for run in done.values())


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


def _gone(pids, timeout=10.0) -> bool:
    deadline = time.monotonic() + timeout
    while any(alive(p) for p in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_timeout_kills_the_worker_and_what_it_started(runs_client):
    run_id = runs_client.post("/api/runs", json={"seed": 4}).json()["id"]
    deadline = time.monotonic() + 20
    while len(messages := runs_client.get(f"/api/runs/{run_id}").json()["messages"]) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    worker, child = (int(m.split()[1]) for m in messages)
    assert alive(worker) and alive(child)
    assert os.getpgid(child) == os.getpgid(worker) == worker  # the worker leads its group
    assert _wait(runs_client, run_id)["state"] == "timeout"
    assert _gone([worker, child])
    ok = _wait(runs_client, runs_client.post("/api/runs", json={"seed": 12}).json()["id"])
    assert ok["state"] == "done" and ok["result"]["pid"] != worker


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS")
def test_a_run_past_the_memory_cap_fails_and_the_worker_lives_on():
    settings = Settings(
        runs_executor="tests.app.fake_jobs:execute",
        runs_devices=["cpu"],
        runs_timeout_s=20,
        runs_worker_memory_mib=1024,
    )
    with TestClient(create_app(settings)) as client:
        hog = _wait(client, client.post("/api/runs", json={"seed": 7}).json()["id"])
        assert hog["state"] == "failed" and "MemoryError" in hog["error"], hog
        assert "1024 MiB" in hog["error"]
        ok = _wait(client, client.post("/api/runs", json={"seed": 13}).json()["id"])
        assert ok["state"] == "done"
        assert ok["result"]["memory_cap"] == 1024 * 2**20
        assert ok["result"]["pgid"] == ok["result"]["pid"]
        assert ok["result"]["nice"] >= os.nice(0) + 10  # the server's loop gets the CPU first


SERVER = """
import sys, time
sys.path[:0] = {path!r}
from flashscope.app.runs.queue import RunQueue

async def main():
    import asyncio
    q = RunQueue("tests.app.fake_jobs:execute", ["cpu"], max_queued=2, timeout_s=600,
                 cache_size=4)
    q.start(asyncio.get_running_loop())
    run, _ = q.submit("k", {{"seed": 4}}, client="c")
    while len(run.messages) < 2:
        await asyncio.sleep(0.05)
    print(*(m.split()[1] for m in run.messages), flush=True)
    await asyncio.sleep(600)

import asyncio
asyncio.run(main())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_worker_and_what_it_started_die_with_a_killed_server():
    script = SERVER.format(path=sys.path)
    server = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=os.getcwd()
    )
    try:
        line = server.stdout.readline()
        worker, child = (int(p) for p in line.split())
        assert alive(worker) and alive(child)
        server.send_signal(signal.SIGKILL)
        server.wait(timeout=10)
        assert _gone([worker, child], timeout=5), "orphans outlived the server"
    finally:
        server.kill()


@pytest.mark.parametrize(
    ("devices", "body", "field", "limit"),
    [
        # the hostile CPU run: 16×16 tiles over three backward passes of one head
        (
            ["cpu"],
            {
                "mode": "bwd",
                "what": "trace",
                "batch": 64,
                "heads": 128,
                "seq": 256,
                "head_dim": 256,
                "block_m": 16,
                "block_n": 16,
                "dtype": "fp32",
            },
            "block_m",
            512,
        ),
        (
            ["cpu"],
            {"mode": "fwd", "what": "trace", "seq": 256, "block_m": 32, "block_n": 16},
            "block_n",
            100,
        ),
        (
            ["cuda:0"],
            {
                "mode": "fwd",
                "what": "time",
                "batch": 32,
                "heads": 64,
                "seq": 32768,
                "head_dim": 128,
            },
            "seq",
            50.0,
        ),
    ],
)
def test_runs_beyond_a_budget_are_refused_before_any_work(devices, body, field, limit):
    steps = limit if isinstance(limit, int) else 512
    settings = Settings(
        runs_executor="tests.app.fake_jobs:execute",
        runs_devices=devices,
        runs_max_interpreter_steps=steps,
    )
    with TestClient(create_app(settings)) as client:
        r = client.post("/api/runs", json=body)
        assert r.status_code == 422, r.text
        hit = [e for e in r.json()["detail"] if e["field"] == field]
        assert hit and hit[0]["limit"] == limit, r.text
        assert hit[0]["ctx"]["estimate"] > limit
        assert client.app.state.runs._queue is None  # nothing queued, no worker started


def test_runs_within_the_budgets_are_taken_on_both_backends():
    for devices in (["cpu"], ["cuda:0"]):
        settings = Settings(runs_executor="tests.app.fake_jobs:execute", runs_devices=devices)
        with TestClient(create_app(settings)) as client:
            body = {"mode": "fwd", "what": "trace", "seq": 128, "block_m": 16, "block_n": 16}
            r = client.post("/api/runs", json=body)
            assert r.status_code == 202, (devices, r.text)


@pytest.fixture
def watched_client():
    settings = Settings(
        runs_executor="tests.app.fake_jobs:execute",
        runs_devices=["cpu"],
        runs_timeout_s=30,
        runs_unwatched_s=0.5,
    )
    with TestClient(create_app(settings)) as c:
        yield c


def _state_after(client, run_id, seconds: float) -> str:
    """The run's state once `seconds` have passed, looked at only then (a GET is a watch)."""
    time.sleep(seconds)
    return client.get(f"/api/runs/{run_id}").json()["state"]


def _first_event(stream) -> dict:
    for line in stream.iter_lines():
        if line.startswith("data:"):
            return json.loads(line.split(":", 1)[1])
    raise AssertionError("the stream ended without an event")


def test_runs_nobody_follows_are_cancelled_and_the_worker_lives_on(watched_client):
    client = watched_client
    first = _wait(client, client.post("/api/runs", json={"seed": 5}).json()["id"])
    worker = first["result"]["pid"]
    blocker = client.post("/api/runs", json={"seed": 1}).json()["id"]  # sleeps for a minute
    with client.stream("GET", f"/api/runs/{blocker}/events") as stream:
        assert _first_event(stream)["state"] in ("queued", "running")
        queued = client.post("/api/runs", json={"seed": 11}).json()["id"]
        # waiting, and nobody followed it: cancelled; the one followed runs on
        assert _state_after(client, queued, 1.5) == "cancelled"
        assert client.get(f"/api/runs/{queued}").json()["cause"] == "unfollowed"
        running = client.get(f"/api/runs/{blocker}").json()
        assert running["state"] == "running" and running["cause"] is None
    # its stream closed: cancelled within the grace (0.5 s) and the worker's answer
    body = client.get(f"/api/runs/{blocker}").json()
    time.sleep(1.5)
    body = client.get(f"/api/runs/{blocker}").json()
    assert body["state"] == "cancelled" and "nobody followed" in body["error"], body
    assert body["cause"] == "unfollowed", body
    again = _wait(client, client.post("/api/runs", json={"seed": 12}).json()["id"])
    assert again["state"] == "done" and again["result"]["pid"] == worker  # the same worker
    assert again["cause"] is None
    # a cancelled run is not served from the cache: the same request queues a new run
    fresh = client.post("/api/runs", json={"seed": 11}).json()
    assert fresh["id"] != queued and fresh["cached"] is False


def test_looking_at_a_run_keeps_it_going(watched_client):
    client = watched_client
    run_id = client.post("/api/runs", json={"seed": 1}).json()["id"]
    deadline = time.monotonic() + 1.5  # three times the grace, a GET every 0.1 s
    while time.monotonic() < deadline:
        assert client.get(f"/api/runs/{run_id}").json()["state"] in ("queued", "running")
        time.sleep(0.1)
    assert _state_after(client, run_id, 1.5) == "cancelled"


def test_the_unwatched_time_is_a_setting_with_a_default():
    assert Settings().runs_unwatched_s == 1.0
    with pytest.raises(ValueError):
        Settings(runs_unwatched_s=0)


def test_a_run_cancelled_while_its_worker_starts_leaves_the_worker_to_start():
    settings = Settings(
        runs_executor="tests.app.slow_start_jobs:execute",
        runs_devices=["cpu"],
        runs_timeout_s=30,
        runs_unwatched_s=0.3,
    )
    with TestClient(create_app(settings)) as client:
        first = client.post("/api/runs", json={"seed": 5}).json()["id"]
        assert _state_after(client, first, 1.0) == "cancelled"  # its worker still imports
        worker = client.app.state.runs.get()._workers[0]
        pid = worker.proc.pid
        assert worker.proc.is_alive()  # not killed: the next run finds it started
        second = client.post("/api/runs", json={"seed": 6}).json()["id"]
        # followed through its event stream, so that a slow poll on a loaded machine cannot
        # leave it unwatched for the 0.3 s that cancel it
        with client.stream("GET", f"/api/runs/{second}/events") as stream:
            assert _first_event(stream)["state"] in ("queued", "running")
            done = _wait(client, second)
        assert done["state"] == "done" and done["result"]["pid"] == pid
