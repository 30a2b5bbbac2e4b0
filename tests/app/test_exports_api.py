"""Whole-trace exports of the tile stepper: op columns as JSON, Chrome trace."""

from __future__ import annotations

import numpy as np
import pytest


def test_ops_columns_sum_to_the_closed_form(client):
    n = int(np.random.default_rng().integers(1, 300))
    r = client.get(f"/api/trace/ops?n={n}&d=16&bm=32&bn=16")
    assert r.status_code == 200, f"n={n}"
    body = r.json()
    cols = body["columns"]
    assert len(cols["phase"]) == body["meta"]["n_events"], f"n={n}"
    flash = body["meta"]["traffic"]["algo"]["elements"]
    assert sum(cols["hbm_read"]) == flash["hbm_read"], f"n={n}"
    assert sum(cols["hbm_write"]) == flash["hbm_write"], f"n={n}"


def test_chrome_trace_of_the_tile_trace(client):
    body = client.get("/api/trace/chrome?n=128&d=16&bm=32&bn=32").json()
    spans = [e for e in body["traceEvents"] if e["ph"] == "X"]
    assert len(spans) == 4 * (2 + 4 * 4)
    assert {s["tid"] for s in spans} == {0, 1, 2, 3}
    assert body["otherData"]["meta"]["algo"] == "fa2"


@pytest.mark.parametrize("algo", ["naive", "fa1", "fa2-bwd", "decode"])
def test_every_algorithm_exports(client, algo):
    n = 4 if algo == "decode" else 40
    q = f"algo={algo}&n={n}&nk=40&d=16&bm=16&bn=16"
    ops = client.get(f"/api/trace/ops?{q}").json()
    chrome = client.get(f"/api/trace/chrome?{q}").json()
    spans = [e for e in chrome["traceEvents"] if e["ph"] == "X"]
    assert len(spans) == len(ops["columns"]["phase"]) == ops["meta"]["n_events"]
    assert [s["tid"] for s in spans] == ops["columns"]["cta"]
    assert [s["name"] for s in spans] == ops["columns"]["phase"]


def test_exports_refuse_like_the_trace(client, settings):
    for path in ("/api/trace/ops", "/api/trace/chrome"):
        r = client.get(f"{path}?n=99999&bm=3")
        assert r.status_code == 422
        fields = {e["field"]: e for e in r.json()["detail"]}
        assert fields["n"]["limit"] == settings.max_seq
        assert "bm" in fields
