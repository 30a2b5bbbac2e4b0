"""POST /api/traffic: the closed forms over HTTP, with limits named on refusal."""

from __future__ import annotations

import pytest

from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.teach.traffic import summary


def test_fa2_seed_figure_and_bytes(client):
    body = {"algo": "fa2", "seq": 4096, "head_dim": 64, "block_m": 128, "block_n": 128}
    r = client.post("/api/traffic", json=body)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["elements"]["hbm_total"] == 17_301_504
    assert out["bytes"]["hbm_total"] == 2 * 17_301_504  # fp16 by default
    assert out["bytes"]["stats_write"] == 4 * 4096


@pytest.mark.parametrize("algo", ["naive", "fa1", "fa2", "fa2-bwd", "decode"])
def test_every_algorithm_matches_the_simulator(client, algo):
    body = {
        "algo": algo,
        "seq": 1 if algo == "decode" else 1000,
        "seq_k": 3000,
        "head_dim": 128,
        "block_m": 64,
        "block_n": 128,
        "batch": 2,
        "heads": 16,
        "kv_heads": 4,
        "causal": algo != "decode",
        "dtype": "bf16",
    }
    r = client.post("/api/traffic", json=body)
    assert r.status_code == 200, r.text
    p = AttentionProblem(
        seq_q=body["seq"],
        seq_k=3000,
        head_dim=128,
        batch=2,
        heads=16,
        kv_heads=4,
        causal=body["causal"],
        dtype="bf16",
    )
    assert r.json() == summary(algo, p, TileConfig(64, 128))


@pytest.mark.parametrize(
    ("patch", "field", "limit"),
    [
        ({"seq": 0}, "seq", 1),
        ({"seq": 2**21}, "seq", 2**20),
        ({"block_m": 48}, "block_m", [2, 256]),
        ({"block_n": 1024}, "block_n", [2, 256]),
        ({"heads": 6, "kv_heads": 4}, "kv_heads", None),
        ({"algo": "decode", "causal": True}, "causal", None),
        ({"algo": "fa3"}, "algo", None),
        ({"splits": 4}, "splits", None),
        ({"batch": 5000}, "batch", 4096),
        ({"head_dim": 1000}, "head_dim", 256),
        ({"extra": 1}, "extra", None),
    ],
)
def test_bad_bodies_get_422_naming_field_and_limit(client, patch, field, limit):
    body = {"algo": "fa2", "seq": 256, "head_dim": 64, "block_m": 64, "block_n": 64, **patch}
    r = client.post("/api/traffic", json=body)
    assert r.status_code == 422, r.text
    hit = [e for e in r.json()["detail"] if e["field"] == field]
    assert hit, r.json()
    assert hit[0]["limit"] == limit and hit[0]["msg"]
