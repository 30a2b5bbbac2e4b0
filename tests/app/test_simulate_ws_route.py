"""POST /api/simulate with the Gluon backward's route (`route: "ws"`)."""

from __future__ import annotations

import pytest

BODY = {
    "gpu": "h100-sxm",
    "algo": "fa2-bwd",
    "impl": "flashscope",
    "seq": 2048,
    "head_dim": 128,
    "heads": 16,
    "block_m": 64,
    "block_n": 64,
    "stages": 2,
    "warps": 4,
}


@pytest.mark.parametrize("head_dim", [128, 192, 256])
def test_route_ws_simulates(client, head_dim):
    r = client.post("/api/simulate", json={**BODY, "route": "ws", "head_dim": head_dim})
    assert r.status_code == 200, r.text
    names = [k["name"] for k in r.json()["kernels"]]
    assert names == ["bwd_preprocess", "bwd_ws", "dq_cast"]


@pytest.mark.parametrize(
    "body",
    [
        {"route": "ws", "head_dim": 32},
        {"route": "ws", "head_dim": 24},
        {"route": "ws", "dtype": "fp32"},
        {"route": "ws", "dq_block_m": 64},
        {"route": "wide"},
        {"route": "ws", "impl": "convention"},
    ],
)
def test_route_ws_outside_its_limits_gets_422(client, body):
    r = client.post("/api/simulate", json={**BODY, **body})
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["field"] == "route", r.text
