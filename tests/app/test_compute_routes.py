"""The costly routes run in the compute pool: the server answers while the largest requests run,
a client that leaves has its task's worker killed, and a task past its time limit or beyond a
client's share of the pool is answered at once, naming the setting."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlencode

import pytest
import uvicorn
from fastapi import FastAPI
from fastapi.testclient import TestClient
from websockets.sync.client import connect

from flashscope.app.compute.pool import WorkerPool
from flashscope.app.config import Settings
from flashscope.app.main import create_app

from .servers import alive, flashscope_server, free_port

FAKE = "tests.app.fake_tasks"
SMALL = {"batch": 1, "heads": 4, "seq": 1000, "head_dim": 64, "block_m": 64, "block_n": 64}

# Each route that sends its work to the pool, with a small request.
ROUTES = [
    ("POST", "/api/simulate", {"json": SMALL}),
    ("GET", "/api/schedule", {"params": SMALL}),
    ("GET", "/api/schedule/chrome", {"params": SMALL}),
    ("GET", "/api/memory-wall", {"params": {"n": 256}}),
    ("GET", "/api/compare", {}),
]


def fake_app(**overrides: Any) -> FastAPI:
    """The app with a compute pool of stand-in tasks that never end by themselves."""
    settings = Settings(**overrides)
    app = create_app(settings)
    app.state.pool = WorkerPool(
        settings.compute_workers,
        512,
        settings.compute_timeout_s,
        settings.compute_max_pending,
        module=FAKE,
        max_per_client=settings.compute_max_pending_per_client,
        max_per_address=settings.compute_max_pending_per_address,
    )
    return app


def _until(check, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


@pytest.mark.parametrize(("method", "path", "kw"), ROUTES)
def test_a_task_past_its_time_limit_gets_504_naming_the_setting(method, path, kw):
    app = fake_app(compute_timeout_s=0.3)
    with TestClient(app) as client:
        t0 = time.monotonic()
        r = client.request(method, path, **kw)
        assert r.status_code == 504, r.text
        assert time.monotonic() - t0 < 5
        (err,) = r.json()["detail"]
        assert "FLASHSCOPE_COMPUTE_TIMEOUT_S" in err["msg"] and err["limit"] == 0.3
        assert app.state.pool.restarts == 1  # its worker was stopped


@pytest.mark.parametrize(
    ("overrides", "status", "setting", "new_identity"),
    [
        (
            {"compute_max_pending_per_client": 1},
            429,
            "FLASHSCOPE_COMPUTE_MAX_PENDING_PER_CLIENT",
            False,
        ),
        # a client that drops its cookie is new each time, but comes from the same address
        (
            {"compute_max_pending_per_address": 1},
            429,
            "FLASHSCOPE_COMPUTE_MAX_PENDING_PER_ADDRESS",
            True,
        ),
        ({"compute_max_pending": 1}, 503, "FLASHSCOPE_COMPUTE_MAX_PENDING", False),
    ],
)
def test_beyond_a_clients_share_or_the_pools_bound_work_is_refused_at_once(
    overrides, status, setting, new_identity
):
    app = fake_app(compute_timeout_s=1.0, **overrides)
    with TestClient(app) as client, ThreadPoolExecutor(1) as background:
        client.get("/api/health")  # the identity cookie: both requests come from one client
        first = background.submit(client.get, "/api/schedule", params=SMALL)
        _until(lambda: app.state.pool.pending == 1)
        if new_identity:
            client.cookies.clear()
        t0 = time.monotonic()
        r = client.post("/api/simulate", json=SMALL)
        assert time.monotonic() - t0 < 0.5
        assert r.status_code == status, r.text
        assert int(r.headers["Retry-After"]) >= 1
        (err,) = r.json()["detail"]
        assert err["type"] == "busy" and setting in err["msg"] and err["limit"] == 1
        assert first.result().status_code == 504  # the stand-in runs past its time limit


@contextmanager
def served(app: FastAPI) -> Iterator[int]:
    """`app` behind uvicorn on a free loopback port, in a thread; yields the port."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        _until(lambda: server.started)
        yield port
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.mark.parametrize(
    "request_text",
    [
        "GET /api/schedule?batch=1&heads=4&seq=1000 HTTP/1.1\r\nHost: t\r\n\r\n",
        "POST /api/simulate HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        'Content-Length: 12\r\n\r\n{"seq": 512}',
    ],
    ids=["schedule", "simulate"],
)
def test_a_client_that_disconnects_has_its_worker_killed_within_a_second(request_text):
    app = fake_app()
    pool: WorkerPool = app.state.pool
    with served(app) as port:
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(request_text.encode())
        _until(lambda: pool.pending == 1 and any(pool.pids()))
        (pid,) = [p for p in pool.pids() if p is not None]
        time.sleep(0.3)  # the task is running in the worker
        assert alive(pid)
        sock.shutdown(socket.SHUT_RDWR)
        sock.close()
        t0 = time.monotonic()
        _until(lambda: not alive(pid), timeout=5)
        assert time.monotonic() - t0 < 1.0
        _until(lambda: pool.pending == 0, timeout=1)
        assert pool.restarts == 1 and pid not in pool.pids()
        # its replacement is already running, before any other request asks for it
        (new,) = [p for p in pool.pids() if p is not None]
        assert alive(new)


def test_a_trace_stream_that_closes_has_its_worker_killed_within_a_second():
    app = fake_app()
    # the trace's parameters travel to the worker as a model: its imports need more room
    pool = app.state.traces.pool = app.state.pool = WorkerPool(2, 2048, 20.0, 8, module=FAKE)
    with served(app) as port, connect(f"ws://127.0.0.1:{port}/ws/trace") as ws:
        ws.send(json.dumps({"type": "open", "params": {"n": 64, "d": 16, "bm": 16, "bn": 16}}))
        _until(lambda: pool.pending == 1 and any(pool.pids()))
        (pid,) = [p for p in pool.pids() if p is not None]
        time.sleep(0.3)  # the trace is being built in the worker
        assert alive(pid)
        ws.close()
        t0 = time.monotonic()
        _until(lambda: not alive(pid), timeout=5)
        assert time.monotonic() - t0 < 1.0
        _until(lambda: pool.pending == 0, timeout=1)
        assert pool.restarts == 1


def test_a_request_queued_behind_another_leaves_when_its_client_does():
    app = fake_app(compute_workers=1, compute_timeout_s=5.0)
    pool: WorkerPool = app.state.pool
    with served(app) as port:
        first = socket.create_connection(("127.0.0.1", port))
        first.sendall(b"GET /api/schedule HTTP/1.1\r\nHost: t\r\n\r\n")
        _until(lambda: pool.pending == 1 and any(pool.pids()))
        queued = socket.create_connection(("127.0.0.1", port))
        queued.sendall(b"GET /api/compare HTTP/1.1\r\nHost: t\r\n\r\n")
        _until(lambda: pool.pending == 2)
        queued.close()
        _until(lambda: pool.pending == 1, timeout=1)  # gone without touching the busy worker
        assert pool.restarts == 0
        first.close()


# The largest requests the default settings take (524,288 CTAs each but the decode) and the
# slowest to compute: about 0.3 to 1 s each in a worker.
MAX_SCHEDULE = {"batch": 32, "heads": 128, "seq": 32768, "block_m": 256, "causal": "true"}
HEAVY = [
    ("GET", "/api/schedule?" + urlencode(MAX_SCHEDULE), None),
    ("GET", "/api/schedule?batch=1024&heads=256&seq=512&block_m=256&causal=true", None),
    ("GET", "/api/schedule/chrome?" + urlencode(MAX_SCHEDULE), None),
    ("POST", "/api/simulate", {"batch": 1024, "heads": 256, "seq": 256, "timeline": True}),
    ("POST", "/api/simulate", {**MAX_SCHEDULE, "causal": True, "timeline": True}),
    (
        "POST",
        "/api/simulate",
        {
            "algo": "decode",
            "batch": 1024,
            "heads": 256,
            "seq": 1,
            "seq_k": 1048576,
            "timeline": True,
        },
    ),
]


def _fetch(base: str, method: str, path: str, body: dict[str, Any] | None) -> int:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=300) as r:
        r.read()
        return r.status


def test_health_answers_promptly_while_the_largest_requests_run():
    took = []
    with (
        # the time limit is not under test: on a machine busy with other work the workers, which
        # run nicer than the server, may take many times their second
        flashscope_server(
            {"FLASHSCOPE_COMPUTE_WARM": "1", "FLASHSCOPE_COMPUTE_TIMEOUT_S": "300"}
        ) as base,
        ThreadPoolExecutor(len(HEAVY)) as load,
    ):
        heavy = [load.submit(_fetch, base, *h) for h in HEAVY]
        while not all(f.done() for f in heavy):
            t0 = time.perf_counter()
            assert _fetch(base, "GET", "/api/health", None) == 200
            took.append(time.perf_counter() - t0)
            time.sleep(0.02)
        assert [f.result() for f in heavy] == [200] * len(HEAVY)
    took.sort()
    assert len(took) >= 20, took  # the load lasted a second or more
    # The target (p95 ≤ 100 ms) is measured by benchmarks/chaos.py on a quiet machine; here, on
    # a runner whose other test worker competes for the cores, the bound only catches work done
    # on the event loop again (a largest schedule there holds it for about a second).
    p95 = took[int(0.95 * (len(took) - 1))]
    assert p95 < 0.25, f"p95 {p95 * 1000:.0f} ms over {len(took)} requests"
