"""POST /api/simulate and GET /api/hardware: results, limits and 422s naming field and limit."""

from __future__ import annotations

import pytest

from flashscope.app.config import Settings


def test_simulate_returns_the_summary(client):
    body = {
        "gpu": "h200",
        "algo": "fa2",
        "batch": 2,
        "heads": 8,
        "kv_heads": 2,
        "seq": 3000,
        "head_dim": 128,
        "causal": True,
        "block_m": 128,
        "block_n": 64,
        "stages": 2,
        "warps": 8,
        "dtype": "bf16",
    }
    r = client.post("/api/simulate", json=body)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["gpu"] == "h200" and out["problem"]["kv_heads"] == 2
    assert out["time_us"] >= out["floor_us"] > 0
    assert sum(out["limiter"].values()) == pytest.approx(1.0)
    assert "timeline" not in out


def test_custom_hardware_and_timeline(client):
    body = {
        "seq": 4096,
        "head_dim": 128,
        "heads": 4,
        "block_m": 128,
        "block_n": 128,
        "stages": 3,
        "timeline": True,
    }
    tight = client.post("/api/simulate", json={**body, "gpu": "a100"})
    assert tight.status_code == 422 and tight.json()["detail"][0]["field"] == "block_m"
    roomy = client.post(
        "/api/simulate",
        json={
            **body,
            "gpu": "a100",
            "hardware": {"smem_per_sm_kib": 328, "smem_per_block_kib": 327},
        },
    )
    assert roomy.status_code == 200, roomy.text
    out = roomy.json()
    assert out["gpu"] == "a100-80gb+custom"
    bars = out["timeline"]["data"][0]
    assert len(bars["x"]) == out["kernels"][0]["ctas"]


@pytest.mark.parametrize(
    ("body", "field", "limit"),
    [
        (
            {"gpu": "v100"},
            "gpu",
            ["h100-sxm", "h100-pcie", "h200", "a100-80gb", "l40s", "rtx-4090"],
        ),
        ({"seq": 0}, "seq", 1),
        ({"seq": 10**8}, "seq", Settings().simulate_max_seq),
        ({"batch": 10**5}, "batch", Settings().simulate_max_batch),
        ({"head_dim": 4096}, "head_dim", Settings().simulate_max_head_dim),
        ({"block_m": 48}, "block_m", [16, 256]),
        ({"block_n": 8}, "block_n", [16, 256]),
        ({"heads": 6, "kv_heads": 4}, "kv_heads", None),
        ({"algo": "decode", "causal": True}, "causal", None),
        ({"hardware": {"sram": 2}}, "sram", None),
        ({"hardware": {"sms": -1}}, "sms", None),
        (
            {"batch": 1024, "heads": 256, "seq": 65536, "block_m": 16},
            "seq",
            Settings().simulate_max_ctas,
        ),
        ({"stages": 9}, "stages", 8),
        ({"maxnreg": 100}, "maxnreg", 8),
        ({"maxnreg": 256}, "maxnreg", 248),
        ({"unknown": 1}, "unknown", None),
    ],
)
def test_bad_requests_get_422_naming_field_and_limit(client, body, field, limit):
    r = client.post("/api/simulate", json={"seq": 1024, "head_dim": 64, **body})
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert detail[0]["field"] == field, detail
    if limit is not None:
        assert detail[0]["limit"] == limit, detail
    else:
        assert detail[0]["msg"]


def test_settings_bound_the_requests():
    from fastapi.testclient import TestClient

    from flashscope.app.main import create_app

    with TestClient(create_app(Settings(simulate_max_ctas=10))) as c:
        r = c.post("/api/simulate", json={"seq": 1024, "head_dim": 64, "block_m": 64})
        assert r.status_code == 422 and r.json()["detail"][0]["limit"] == 10


def test_hardware_lists_every_preset(client):
    r = client.get("/api/hardware")
    assert r.status_code == 200
    out = r.json()
    keys = [g["key"] for g in out["gpus"]]
    assert keys == ["h100-sxm", "h100-pcie", "h200", "a100-80gb", "l40s", "rtx-4090"]
    h100 = out["gpus"][0]
    assert h100["sms"] == 132 and "h100" in h100["aliases"]
    assert 0 < h100["efficiency"]["tensor"] <= 1
    assert "smem_per_sm_kib" in out["fields"]["hardware"]
    assert "tensor" in out["fields"]["efficiency"]


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"clock_ghz": 1e300}, "clock_ghz"),
        ({"hbm_gbs": 1e-9}, "hbm_gbs"),
        ({"sms": 132 * 65}, "sms"),
    ],
)
def test_custom_hardware_is_bounded(client, changes, field):
    r = client.post("/api/simulate", json={"gpu": "h100", "seq": 1024, "hardware": changes})
    assert r.status_code == 422, r.text
    hit = [e for e in r.json()["detail"] if e["field"] == field]
    assert hit and isinstance(hit[0]["limit"], list), r.text


def test_custom_hardware_within_bounds_simulates(client):
    r = client.post(
        "/api/simulate",
        json={"gpu": "h100", "seq": 1024, "hardware": {"smem_per_sm_kib": 456, "sms": 264}},
    )
    assert r.status_code == 200, r.text


def test_a_register_cap_fits_more_ctas_per_sm(client):
    body = {"gpu": "h200", "seq": 8192, "head_dim": 64, "batch": 2, "heads": 32,
            "block_m": 128, "block_n": 128, "stages": 2, "warps": 8}  # fmt: skip
    free = client.post("/api/simulate", json=body).json()
    capped = client.post("/api/simulate", json={**body, "maxnreg": 128}).json()
    assert (free["kernels"][0]["ctas_per_sm"], capped["kernels"][0]["ctas_per_sm"]) == (1, 2)
    assert capped["kernels"][0]["regs_per_thread"] == 128
