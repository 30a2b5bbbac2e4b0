"""Request guards: body size, rate limits, bad input of every kind, CSP and no CORS."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from flashscope.app.config import Settings
from flashscope.app.main import create_app
from flashscope.app.middleware.ratelimit import Rate, RateLimiter, group_of


def app_client(**overrides) -> TestClient:
    return TestClient(create_app(Settings(**overrides)))


def only_error(r, status: int) -> dict:
    assert r.status_code == status, r.text
    detail = r.json()["detail"]
    assert isinstance(detail, list) and detail and all(e["msg"] for e in detail), detail
    return detail[0]


def test_a_body_over_the_limit_gets_413_naming_the_limit():
    with app_client(max_body_bytes=2048) as client:
        body = json.dumps({"batch": 1, "pad": "x" * 4000})
        r = client.post("/api/runs", content=body, headers={"content-type": "application/json"})
        err = only_error(r, 413)
        assert (err["field"], err["limit"]) == ("body", 2048)
        assert "2048" in err["msg"]

        def chunks():  # no Content-Length: counted as it arrives
            for _ in range(8):
                yield b" " * 1000

        r = client.post("/api/runs", content=chunks(), headers={"content-type": "application/json"})
        assert only_error(r, 413)["limit"] == 2048
        assert client.get("/api/health").status_code == 200


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ("{not json", None),
        ('{"batch": NaN}', "batch"),
        ('{"batch": Infinity}', "batch"),
        ('{"batch": -1}', "batch"),
        ('{"batch": 100000000000000000000000000000}', "batch"),
        ('{"batch": "two"}', "batch"),
        ('{"head_dim": 12}', "head_dim"),
        ('{"dtype": "fp8"}', "dtype"),
        ('{"executor": "os:system"}', "executor"),
        ("[]", None),
        ('"runs"', None),
    ],
)
def test_bad_run_requests_get_422_never_500(client, body, field):
    r = client.post("/api/runs", content=body, headers={"content-type": "application/json"})
    err = only_error(r, 422)
    if field:
        assert field in [e["field"] for e in r.json()["detail"]]
    assert err["type"]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"algo": "fa9"}, "algo"),
        ({"n": "NaN"}, "n"),
        ({"n": "inf"}, "n"),
        ({"n": "1e3"}, "n"),
        ({"n": "-5"}, "n"),
        ({"d": "99999999999999999999999"}, "d"),
        ({"seed": "2.5"}, "seed"),
        ({"start": "-1"}, "start"),
    ],
)
def test_bad_trace_parameters_get_422(client, params, field):
    r = client.get("/api/trace", params=params)
    only_error(r, 422)
    assert field in [e["field"] for e in r.json()["detail"]]


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/api/simulate", '{"gpu": "h900-imaginary"}', "gpu"),
        ("/api/simulate", '{"gpu": ["h100-sxm"]}', "gpu"),
        ("/api/simulate", '{"algo": "fa9"}', "algo"),
        ("/api/simulate", '{"hardware": {"clock_ghz": NaN}}', "clock_ghz"),
        ("/api/simulate", '{"hardware": {"sms": -3}}', "sms"),
        ("/api/simulate", '{"seq": 1e400}', "seq"),
        ("/api/simulate", '{"seq": 100000000000000000000}', "seq"),
        ("/api/traffic", '{"algo": "fa9", "seq": 64, "head_dim": 16}', "algo"),
        ("/api/traffic", '{"algo": "fa2", "seq": -64, "head_dim": 16}', "seq"),
    ],
)
def test_unknown_gpus_algorithms_and_bad_numbers_get_422(client, path, body, field):
    r = client.post(path, content=body, headers={"content-type": "application/json"})
    only_error(r, 422)
    assert field in [e["field"] for e in r.json()["detail"]], r.text


def test_costly_endpoints_are_rate_limited_per_client():
    with app_client(rate_compute_burst=3, rate_compute_per_s=0.01) as client:
        params = {"n": 16, "d": 8, "bm": 16, "bn": 16}
        codes = [client.get("/api/trace", params=params).status_code for _ in range(4)]
        assert codes == [200, 200, 200, 429]
        r = client.get("/api/trace", params=params)
        err = only_error(r, 429)
        assert int(r.headers["Retry-After"]) >= 1
        assert err["limit"] == {"per_s": 0.01, "burst": 3}
        assert client.get("/api/health").status_code == 200  # cheap routes are not limited
        with client.websocket_connect("/ws/trace") as ws:  # nor can a socket open traces freely
            ws.send_json({"type": "open", "params": params})
            msg = ws.receive_json()
            assert msg["type"] == "error" and "retry after" in msg["errors"][0]["msg"]


def test_the_limiter_keeps_clients_apart_refills_and_forgets_the_oldest():
    now = [0.0]
    limiter = RateLimiter({"g": Rate(per_s=2.0, burst=2)}, max_clients=2, clock=lambda: now[0])
    assert [limiter.take("a", "g") for _ in range(2)] == [0.0, 0.0]
    assert limiter.take("a", "g") == pytest.approx(0.5)
    assert limiter.take("b", "g") == 0.0  # another client has its own bucket
    now[0] = 0.5
    assert limiter.take("a", "g") == 0.0  # one token back after 1 / rate seconds
    limiter.take("c", "g")  # a third client pushes the least recently used (b) out
    assert len(limiter._buckets) == 2 and ("b", "g") not in limiter._buckets


@pytest.mark.parametrize(
    ("method", "path", "group"),
    [
        ("GET", "/api/trace", "compute"),
        ("POST", "/api/simulate", "compute"),
        ("GET", "/api/traffic/naive", "compute"),
        ("GET", "/api/trace/chrome", "compute"),
        ("GET", "/api/memory-wall", "compute"),
        ("GET", "/api/schedule", "compute"),
        ("GET", "/api/schedule/chrome", "compute"),
        ("GET", "/api/schedule/measured/abc", "compute"),
        ("POST", "/api/schedule/measure", "runs"),
        ("POST", "/api/compare/measure", "runs"),
        ("POST", "/api/compare/dataset", "compute"),
        ("GET", "/api/compare", "compute"),
        ("GET", "/schedule", None),
        ("GET", "/api/hardware", None),
        ("POST", "/api/runs", "runs"),
        ("GET", "/api/runs/abc", None),
        ("POST", "/api/rooms", "rooms"),
        ("GET", "/api/rooms/ABCDEF", None),
        ("GET", "/api/tracer", None),
        ("GET", "/api/health", None),
    ],
)
def test_which_routes_are_costly(method, path, group):
    assert group_of(method, path) == group


def test_a_value_error_from_a_route_is_a_422_not_a_500():
    app = create_app(Settings())

    @app.get("/api/_explode")
    async def explode() -> None:
        raise ValueError("head_dim must be a multiple of 8, got 12")

    with TestClient(app) as client:
        err = only_error(client.get("/api/_explode"), 422)
        assert err["msg"] == "head_dim must be a multiple of 8, got 12"


def test_every_response_carries_a_strict_csp_and_no_cors(client):
    responses = [
        client.get("/"),
        client.get("/api/health", headers={"Origin": "https://elsewhere.example"}),
        client.options(
            "/api/rooms",
            headers={
                "Origin": "https://elsewhere.example",
                "Access-Control-Request-Method": "POST",
            },
        ),
        client.get("/nowhere"),
        client.post("/api/rooms", headers={"Origin": "https://elsewhere.example"}),
    ]
    for r in responses:
        assert "access-control-allow-origin" not in r.headers, r.request.url
        csp = r.headers["content-security-policy"]
        directives = dict(d.strip().split(" ", 1) for d in csp.split(";"))
        assert directives["default-src"] == "'self'"
        assert directives["script-src"] == "'self'"  # no inline script, no eval
        assert directives["connect-src"] == "'self'"  # same-origin fetch and WebSocket only
        assert "frame-ancestors" in directives


def test_a_server_error_carries_the_security_headers_too():
    """Starlette answers an unhandled exception outside every middleware a FastAPI app adds."""
    app = create_app(Settings())

    @app.get("/api/_fail")
    async def fail() -> None:
        raise RuntimeError("a bug, not bad input")

    with TestClient(app, raise_server_exceptions=False) as client:
        r = client.get("/api/_fail")
        too_big = client.post("/api/simulate", content=b"x" * (Settings().max_body_bytes + 1))
    assert r.status_code == 500 and too_big.status_code == 413
    for response in (r, too_big):
        assert "default-src 'self'" in response.headers["content-security-policy"]
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["referrer-policy"] == "no-referrer"


def test_no_request_names_code_to_run(client):
    """Nothing a client sends picks a module, a function or a program: the server decides."""
    schema = client.get("/openapi.json").json()
    suspicious = {"executor", "module", "function", "command", "script", "expr", "eval", "exec"}
    names = set()
    for ops in schema["paths"].values():
        for op in ops.values():
            names |= {p["name"] for p in op.get("parameters", [])}
    for model in schema.get("components", {}).get("schemas", {}).values():
        names |= set(model.get("properties", {}))
    assert not names & suspicious, names & suspicious


def test_every_setting_says_what_it_is():
    missing = [name for name, f in Settings.model_fields.items() if not f.description]
    assert not missing, f"settings without a description: {missing}"


def _refusing_app(**overrides):
    """An app with a costly-group route that always answers 503 with Retry-After: 1, and the
    number of times a request reached it."""
    from fastapi.responses import JSONResponse

    app = create_app(Settings(**overrides))
    reached = [0]

    @app.get("/api/simulate/_refuse")
    async def refuse_always() -> JSONResponse:
        reached[0] += 1
        detail = [{"type": "busy", "loc": ["request"], "field": None, "msg": "busy", "limit": 1}]
        return JSONResponse({"detail": detail}, status_code=503, headers={"Retry-After": "1"})

    return app, reached


def test_a_client_that_asks_again_before_retry_after_is_held_and_refused_before_the_route():
    import time

    app, reached = _refusing_app(refusal_hold_s=0.3)
    with TestClient(app) as client:
        client.get("/api/health")  # a browser: its identity cookie from its first page
        first = client.get("/api/simulate/_refuse")
        assert first.status_code == 503 and reached[0] == 1
        t0 = time.monotonic()
        again = client.get("/api/simulate/_refuse")
        held = time.monotonic() - t0
        assert reached[0] == 1  # answered before the route
        assert again.status_code == 503 and again.json() == first.json()
        assert int(again.headers["Retry-After"]) >= 1
        assert 0.25 <= held < 1.0  # held back, at most refusal_hold_s
        assert again.headers["x-content-type-options"] == "nosniff"
        assert "default-src 'self'" in again.headers["content-security-policy"]
        assert client.get("/api/health").status_code == 200  # cheap routes are never held
        client.cookies.clear()  # another browser (its cookie from a page) is not held for it
        client.get("/api/health")
        assert client.get("/api/simulate/_refuse").status_code == 503 and reached[0] == 2
        time.sleep(1.1)  # a client that waits as told reaches the route again
        assert client.get("/api/simulate/_refuse").status_code == 503 and reached[0] == 3


def test_a_client_that_keeps_asking_is_held_a_retry_after_each_time():
    import time

    app, reached = _refusing_app(refusal_hold_s=5)
    with TestClient(app) as client:
        client.get("/api/simulate/_refuse")
        took = []
        for _ in range(2):
            t0 = time.monotonic()
            assert client.get("/api/simulate/_refuse").status_code == 503
            took.append(time.monotonic() - t0)
        assert reached[0] == 1
        # the first waits out the Retry-After (1 s), the next a whole new one, never 5 s
        assert all(0.8 <= t < 2.0 for t in took), took


def test_holding_can_be_turned_off():
    app, reached = _refusing_app(refusal_hold_s=0)
    with TestClient(app) as client:
        codes = [client.get("/api/simulate/_refuse").status_code for _ in range(3)]
    assert codes == [503] * 3 and reached[0] == 3


def test_rate_limit_refusals_are_held_too():
    import time

    with app_client(rate_compute_burst=1, rate_compute_per_s=0.01, refusal_hold_s=0.3) as client:
        params = {"n": 16, "d": 8, "bm": 16, "bn": 16}
        assert client.get("/api/trace", params=params).status_code == 200
        assert client.get("/api/trace", params=params).status_code == 429
        t0 = time.monotonic()
        r = client.get("/api/trace", params=params)
        assert r.status_code == 429 and time.monotonic() - t0 >= 0.25
        assert only_error(r, 429)["limit"] == {"per_s": 0.01, "burst": 1}
        assert int(r.headers["Retry-After"]) >= 90  # the bucket's wait, not the hold's


def test_a_client_without_a_cookie_is_held_by_its_address():
    app, reached = _refusing_app(refusal_hold_s=0.3)
    with TestClient(app) as client:
        client.get("/api/health")  # a browser: its cookie from its first page on
        browser = dict(client.cookies)
        for _ in range(3):  # a script that drops its cookie: a new identity each time
            client.cookies.clear()
            assert client.get("/api/simulate/_refuse").status_code == 503
        assert reached[0] == 1  # held by its address after the first refusal
        client.cookies.update(browser)  # the browser behind the same address is not held
        assert client.get("/api/simulate/_refuse").status_code == 503 and reached[0] == 2


def test_a_refusal_holds_only_its_own_group():
    app, reached = _refusing_app(refusal_hold_s=0.3)
    with TestClient(app) as client:
        client.get("/api/health")
        assert client.get("/api/simulate/_refuse").status_code == 503 and reached[0] == 1
        r = client.post("/api/runs", json={"seq": 5000})  # runs: not held for a compute refusal
        assert r.status_code == 422


def test_a_failure_in_the_identity_or_rate_checks_gets_the_error_page_and_headers(monkeypatch):
    """They run first, yet inside Starlette's error page (and the security headers)."""
    from flashscope.app.middleware import identity

    def broken(self, token):
        raise RuntimeError("a bug in the identity check")

    monkeypatch.setattr(identity.Identities, "check", broken)
    with TestClient(create_app(Settings()), raise_server_exceptions=False) as client:
        r = client.get("/api/trace", params={"n": 16, "d": 8, "bm": 16, "bn": 16})
    assert r.status_code == 500
    assert r.headers["x-content-type-options"] == "nosniff"
    assert "default-src 'self'" in r.headers["content-security-policy"]
