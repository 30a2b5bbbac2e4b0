"""JSON twins of the teaching views: /api/memory-wall, /api/online-softmax, /api/memory-scaling."""

from __future__ import annotations

import math
import re
import sys

import numpy as np
import pytest

from flashscope.app.views import VIEWS

SEED_NAIVE = [327_680, 1_179_648, 4_456_448, 17_301_504, 68_157_440]
SEED_FLASH = [98_304, 327_680, 1_179_648, 4_456_448, 17_301_504]


def _errors(r) -> dict[str, dict]:
    assert r.status_code == 422, r.text
    return {e["field"]: e for e in r.json()["detail"]}


def test_new_pages_load_only_local_assets(client):
    for path in ("/memory-wall", "/online-softmax", "/memory-scaling"):
        r = client.get(path)
        assert r.status_code == 200, path
        refs = re.findall(r'(?:src|href)="([^"]+)"', r.text)
        assert all(ref.startswith(("/", "#")) for ref in refs), refs
        assert f'src="/static/js/{path[1:].replace("-", "_")}.js"' in r.text
        assert path in {v.path for v in VIEWS}


# --- memory wall -------------------------------------------------------------------------------


def test_memory_wall_default_is_the_seed_table(client):
    body = client.get("/api/memory-wall").json()
    assert [r["n"] for r in body["table"]] == [256, 512, 1024, 2048, 4096]
    assert [r["naive"] for r in body["table"]] == SEED_NAIVE
    assert [r["flash"] for r in body["table"]] == SEED_FLASH
    for name in ("naive", "flash"):
        w = body["walks"][name]
        total = w["closed_form"]["elements"]["hbm_total"]
        assert w["cum_read"][-1] + w["cum_write"][-1] == total
        assert sum(w["cum_by_matrix"][m][-1] for m in body["matrices"]) == total
        assert len(w["kind"]) == w["steps"] == len(w["cum_read"])
    assert body["grid"] == {"q_blocks": 8, "kv_blocks": 8}


def test_memory_wall_ragged_sizes_and_chrome(client):
    rng = np.random.default_rng()
    n, d = int(rng.integers(1, 500)), 8 * int(rng.integers(1, 13))  # d: what the kernels run
    r = client.get(f"/api/memory-wall?n={n}&d={d}&bm=32&bn=16&ns=17,97,200")
    assert r.status_code == 200, f"n={n} d={d}"
    body = r.json()
    naive = body["walks"]["naive"]
    assert naive["cum_read"][-1] + naive["cum_write"][-1] == 4 * n * d + 4 * n * n, f"n={n} d={d}"
    assert [row["n"] for row in body["table"]] == [17, 97, 200]
    chrome = client.get(f"/api/memory-wall?n={n}&d={d}&bm=32&bn=16&format=chrome").json()
    spans = [e for e in chrome["traceEvents"] if e["ph"] == "X"]
    assert len(spans) == naive["steps"] + body["walks"]["flash"]["steps"]


def test_memory_wall_refuses_sizes_beyond_the_limits(client, settings):
    errs = _errors(client.get("/api/memory-wall?n=100000&d=999&bm=48&bn=1024"))
    assert errs["n"]["limit"] == settings.memory_wall_max_seq
    assert errs["d"]["limit"] == settings.max_head_dim
    assert errs["bm"]["limit"] == [settings.min_block, settings.max_block]
    assert "power of two" in errs["bn"]["msg"]
    errs = _errors(client.get("/api/memory-wall?n=8192&bm=2&bn=2"))
    assert errs["bn"]["limit"] == settings.memory_wall_max_steps
    assert "steps" in errs["bn"]["msg"]
    r = client.get("/api/memory-wall?ns=256,abc,0")
    assert r.status_code == 422
    msgs = [e["msg"] for e in r.json()["detail"] if e["field"] == "ns"]
    assert msgs == [
        "ns[1] must be a positive integer: 'abc'",
        "ns[2] must be a positive integer: '0'",
    ]
    errs = _errors(client.get("/api/memory-wall?ns=" + ",".join(["64"] * 50)))
    assert errs["ns"]["limit"] == settings.memory_wall_table_max_rows
    errs = _errors(client.get("/api/memory-wall?ns=99999999"))
    assert errs["ns"]["limit"] == settings.memory_wall_table_max_seq
    assert "format" in _errors(client.get("/api/memory-wall?format=svg"))


# --- online softmax ----------------------------------------------------------------------------


def test_online_softmax_seed_example(client):
    body = client.get("/api/online-softmax?x=1,2,3,6,2,1&block=3").json()
    assert [b["m_after"] for b in body["blocks"]] == [3.0, 6.0]
    assert body["blocks"][0]["m_before"] is None  # −∞
    assert body["blocks"][1]["alpha"] == pytest.approx(math.exp(-3))
    assert body["online"] == pytest.approx(
        [0.006126, 0.016652, 0.045265, 0.909178, 0.016652, 0.006126], abs=5e-7
    )
    assert body["max_abs_diff"] < 1e-15


def test_online_softmax_accepts_minus_infinity_and_spaces(client):
    r = client.get("/api/online-softmax", params={"x": "[-inf  2 −inf, 1000; 0.5]", "block": 2})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["x"] == [None, 2.0, None, 1000.0, 0.5]
    assert body["online"][3] == pytest.approx(1.0)
    assert body["max_abs_diff"] == 0.0


def test_online_softmax_shows_the_largest_floats_as_numbers(client):
    """null means −∞ only: 1e300 is a number, not a masked entry, however it is rounded."""
    body = client.get("/api/online-softmax", params={"x": "1e300,1", "block": 3}).json()
    assert body["x"] == [1e300, 1.0]
    assert body["blocks"][0]["block_max"] == body["blocks"][0]["m_after"] == 1e300
    assert body["online"] == body["standard"] == [1.0, 0.0]
    body = client.get("/api/online-softmax", params={"x": "1.7e308,-1.7e308", "block": 1}).json()
    assert body["x"] == [1.7e308, -1.7e308]
    assert [b["m_after"] for b in body["blocks"]] == [1.7e308, 1.7e308]
    assert body["online"] == [1.0, 0.0] and body["max_abs_diff"] == 0.0


def test_online_softmax_refuses_a_number_beyond_float64_instead_of_masking_it(client):
    errs = _errors(client.get("/api/online-softmax", params={"x": "1,-1e309"}))
    assert errs["x"]["limit"] == sys.float_info.max
    assert "x[1] = -1e309 is beyond the largest float64" in errs["x"]["msg"]


def test_online_softmax_refuses_bad_input(client, settings):
    limit = settings.online_softmax_max_len
    errs = _errors(client.get("/api/online-softmax?x=1,abc,3"))
    assert "x[1] is not a number" in errs["x"]["msg"]
    for bad in ("inf", "nan", "1e400"):
        errs = _errors(client.get(f"/api/online-softmax?x=1,{bad}"))
        assert "x[1] must be a finite number or -inf" in errs["x"]["msg"], bad
    errs = _errors(client.get("/api/online-softmax?x=" + ",".join(["1"] * (limit + 1))))
    assert errs["x"]["limit"] == limit
    assert f"at most {limit}" in errs["x"]["msg"]
    errs = _errors(client.get("/api/online-softmax?x=1,2&block=0"))
    assert errs["block"]["limit"] == 1
    errs = _errors(client.get(f"/api/online-softmax?x=1,2&block={limit + 1}"))
    assert errs["block"]["limit"] == limit
    assert "x" in _errors(client.get("/api/online-softmax?x=,,"))


# --- memory scaling ----------------------------------------------------------------------------


def test_memory_scaling_default_matches_the_anchors(client):
    body = client.get("/api/memory-scaling").json()
    assert body["ns"] == [1024 * 2**i for i in range(8)]
    i32k = body["ns"].index(32768)
    assert body["naive"]["beyond_inputs"][i32k] == 65536 * 2**20
    assert body["naive_first_oom"] == 65536  # on an H200 (141 GB)
    assert all(body["flash"]["fits"])
    assert body["naive_max_n"] < 65536 < body["flash_max_n"]
    assert body["measured"]["device"] == "NVIDIA H200"
    assert body["gpu"]["key"] == "h200"
    h100 = client.get("/api/memory-scaling?gpu=H100").json()  # an alias of the SXM preset
    assert h100["gpu"]["key"] == "h100-sxm"
    assert h100["measured"]["device"] == "NVIDIA H100 80GB HBM3"
    assert {row["impl"] for row in body["measured"]["rows"]} == {"naive", "sdpa-flash"}


def test_memory_scaling_other_problem_has_no_measurements(client):
    body = client.get("/api/memory-scaling?gpu=rtx-4090&batch=4&heads=32&d=128&dtype=bf16").json()
    assert body["measured"] is None
    assert body["gpu"]["capacity_bytes"] == 24 * 10**9
    s = body["naive"]["parts"]["S"][0]
    assert s == 4 * 32 * 1024 * 1024 * 2
    assert body["ns"][-1] == 131072


def test_memory_scaling_refuses_bad_input(client, settings):
    errs = _errors(client.get("/api/memory-scaling?batch=99999&heads=99999&d=9999&n_max=99999999"))
    assert errs["batch"]["limit"] == settings.memory_scaling_max_batch
    assert errs["heads"]["limit"] == settings.memory_scaling_max_heads
    assert errs["d"]["limit"] == settings.max_head_dim
    assert errs["n_max"]["limit"] == settings.memory_scaling_max_seq
    assert "n_min" in _errors(client.get("/api/memory-scaling?n_min=4096&n_max=1024"))
    assert "unknown gpu" in _errors(client.get("/api/memory-scaling?gpu=Z80"))["gpu"]["msg"]
    assert "dtype" in _errors(client.get("/api/memory-scaling?dtype=int8"))
