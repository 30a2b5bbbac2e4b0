"""One head_dim rule on every page, API and command: a multiple of 8 up to 256, what the kernels
run (simulator/core/problem.py), refused with the same reason wherever a problem is given."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from flashscope.app.cli.main import main
from flashscope.app.config import Settings
from flashscope.app.main import create_app
from flashscope.simulator.core.problem import MAX_HEAD_DIM, head_dim_refusal

REASON = "must be a multiple of 8 from 8 to 256 (the head dimensions the kernels run), got"


@pytest.fixture(scope="module")
def api():
    # One client sends every endpoint's request for each head_dim: more than the compute
    # bucket's burst in all, which is not under test here.
    settings = Settings(
        runs_executor="tests.app.fake_jobs:execute",
        runs_devices=["cpu"],
        rate_compute_burst=1000,
        rate_runs_burst=1000,
    )
    with TestClient(create_app(settings)) as c:
        yield c


def _requests(d: int) -> list[tuple[str, str, dict, str]]:
    """(method, path, parameters or body, the field's name) of every endpoint taking a problem."""
    problem = {"seq": 256, "head_dim": d, "block_m": 64, "block_n": 64}
    return [
        ("GET", "/api/trace", {"d": d}, "d"),
        ("GET", "/api/trace", {"algo": "decode", "n": 1, "nk": 128, "d": d}, "d"),
        ("GET", "/api/trace/ops", {"d": d}, "d"),
        ("GET", "/api/trace/chrome", {"d": d}, "d"),
        ("GET", "/api/memory-wall", {"d": d}, "d"),
        ("GET", "/api/memory-scaling", {"d": d}, "d"),
        ("GET", "/api/schedule", {"head_dim": d}, "head_dim"),
        ("GET", "/api/schedule/chrome", {"head_dim": d}, "head_dim"),
        ("POST", "/api/simulate", problem, "head_dim"),
        ("POST", "/api/traffic", {**problem, "algo": "fa2"}, "head_dim"),
        ("POST", "/api/runs", {**problem, "what": "trace"}, "head_dim"),
    ]


def _send(api, method: str, path: str, data: dict):
    if method == "GET":
        return api.get(path, params=data)
    return api.post(path, json=data)


@pytest.mark.parametrize(("d", "limit"), [(7, 8), (4, 8), (60, 8), (264, MAX_HEAD_DIM)])
def test_every_endpoint_refuses_a_head_dim_the_kernels_cannot_run(api, d, limit):
    for method, path, data, field in _requests(d):
        r = _send(api, method, path, data)
        assert r.status_code == 422, (path, r.text)
        hit = [e for e in r.json()["detail"] if e["field"] == field]
        assert hit, (path, r.text)
        assert f"{field} {REASON} {d}" == hit[0]["msg"], (path, hit[0])
        assert hit[0]["limit"] == limit, (path, hit[0])


def test_the_websocket_stream_refuses_it_too(api):
    with api.websocket_connect("/ws/trace") as ws:
        ws.send_json({"type": "open", "params": {"d": 7}})
        err = ws.receive_json()
    assert err["type"] == "error"
    assert err["errors"][0]["field"] == "d" and REASON in err["errors"][0]["msg"]


@pytest.mark.parametrize("d", [8, 16, 72, 256])
def test_every_endpoint_takes_a_head_dim_the_kernels_run(api, d):
    for method, path, data, _ in _requests(d):
        if path == "/api/memory-wall":
            data = {**data, "n": 256}
        r = _send(api, method, path, data)
        assert r.status_code in (200, 202), (path, d, r.text[:300])


@pytest.mark.parametrize("command", ["simulate", "traffic"])
@pytest.mark.parametrize("d", ["7", "300"])
def test_the_commands_refuse_it_in_one_line_with_exit_2(command, d, capsys):
    argv = [command, "--seq", "256", "--head-dim", d]
    if command == "traffic":
        argv += ["--algo", "fa2", "--block-m", "64", "--block-n", "64"]
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"argument --head-dim: head_dim {REASON} {d}" in err


def test_a_server_limit_below_the_kernels_lowers_the_bound():
    assert head_dim_refusal(128, limit=100) == (
        "head_dim must be a multiple of 8 from 8 to 96 (the head dimensions the kernels run), "
        "got 128",
        96,
    )
    assert head_dim_refusal(96, limit=100) is None


def test_the_rule_is_the_kernels_own():
    torch = pytest.importorskip("torch")
    from flashscope.kernels.device import device
    from flashscope.kernels.inputs import MAX_HEAD_DIM as KERNELS_MAX
    from flashscope.kernels.inputs import check_attention

    assert KERNELS_MAX == MAX_HEAD_DIM
    for d in range(1, MAX_HEAD_DIM + 9):
        q = torch.zeros(1, 1, 4, d, device=device())
        try:
            check_attention(q, q, q, False, None)
            kernels_take = True
        except ValueError:
            kernels_take = False
        assert kernels_take == (head_dim_refusal(d) is None), d
