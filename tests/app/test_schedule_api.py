"""GET /api/schedule and its Chrome trace; the trace API's on-chip contents and decode limits."""

from __future__ import annotations

import pytest

SMALL = {"batch": 1, "heads": 4, "seq": 1000, "head_dim": 64, "block_m": 64, "block_n": 64}


def _errors(r) -> dict[str, dict]:
    assert r.status_code == 422, r.text
    return {e["field"]: e for e in r.json()["detail"]}


def test_schedule_returns_the_figures_and_a_cursor(client):
    r = client.get("/api/schedule", params={**SMALL, "causal": True})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["algo"] == "fa2" and body["gpu"] == "h100-sxm" and body["edited"] == []
    assert set(body["figures"]) == {"gantt", "utilization", "imbalance", "limiter", "roofline"}
    c = body["cursor"]
    assert len(c["times_us"]) == 101 and c["done"][-1] == c["ctas"] == 4 * 16
    assert c["times_us"][-1] == pytest.approx(body["time_us"], abs=1e-3)
    bars = sum(len(t["y"]) for t in body["figures"]["gantt"]["data"])
    assert bars == c["ctas"]
    # 16 query blocks see 1 … 16 key blocks; the calibrated H100 also charges each CTA its
    # measured set-up (about 6 µs), which evens short CTAs out, so the last is < 16× the first
    assert body["imbalance"]["axis"] == "query block" and body["imbalance"]["ratio"] > 1.5
    occ = body["occupancy"][0]
    assert occ["ctas_per_sm"] == body["ctas_per_sm"] and occ["limiter"] == body["occupancy_limiter"]


def test_edited_specs_reach_the_engine(client):
    base = client.get("/api/schedule", params=SMALL).json()
    half = client.get("/api/schedule", params={**SMALL, "sms": 66, "clock_ghz": 0.915}).json()
    assert half["edited"] == ["clock_ghz", "sms"]
    assert half["gpu_specs"]["sms"] == 66 and half["gpu"] == "h100-sxm+custom"
    assert half["gpu_specs"]["tensor_tflops"] == pytest.approx(
        base["gpu_specs"]["tensor_tflops"] / 4
    )
    assert half["time_us"] > base["time_us"]
    sram = client.get("/api/schedule", params={**SMALL, "smem_per_sm_kib": 100}).json()
    assert sram["detail"][0]["field"] == "smem_per_block_kib"  # 227 KiB per CTA > 100 per SM


@pytest.mark.parametrize(
    ("params", "field", "limit"),
    [
        ({"sms": 10_000}, "sms", [132 / 64, 132 * 64]),
        ({"clock_ghz": 0}, "clock_ghz", 0),
        ({"hbm_gbs": -1}, "hbm_gbs", 0),
        ({"block_m": 48}, "block_m", [16, 256]),
        ({"gpu": "voodoo2"}, "gpu", None),
        ({"seq": 2_000_000}, "seq", 1_048_576),
        ({"algo": "decode", "causal": True}, "causal", None),
        ({"head_dim": 256, "block_m": 256, "block_n": 256, "dtype": "fp32"}, "block_m", None),
    ],
)
def test_bad_schedules_get_422_naming_the_field(client, params, field, limit):
    hit = _errors(client.get("/api/schedule", params={**SMALL, **params}))
    assert field in hit, hit
    if limit is not None:
        assert hit[field]["limit"] == limit
    assert hit[field]["msg"]


def test_schedule_chrome_trace_has_a_span_per_cta(client):
    r = client.get("/api/schedule/chrome", params={**SMALL, "algo": "fa2-bwd"})
    assert r.status_code == 200
    spans = [e for e in r.json()["traceEvents"] if e["ph"] == "X"]
    launches = [s for s in spans if s["cat"] == "launch"]
    assert [s["name"] for s in launches] == ["bwd_preprocess", "bwd_main", "bwd_postprocess"]
    assert len(spans) - 3 == 4 * (16 + 16 + 16)  # per head: 16 query blocks twice, 16 key blocks
    assert _errors(client.get("/api/schedule/chrome", params={"sms": 0}))["sms"]


def test_trace_events_carry_on_chip_contents_and_decode_allows_long_caches(client):
    r = client.get("/api/trace", params={"n": 64, "d": 16, "bm": 32, "bn": 32, "start": 1})
    ev = r.json()["events"][0]
    assert ev["phase"] == "load_kv"
    assert [b["name"] for b in ev["onchip"]["buffers"]][:3] == ["Qᵢ", "Kⱼ", "Vⱼ"]
    assert ev["onchip"]["smem_bytes"] == 3 * 32 * 16 * 4
    meta = r.json()["meta"]
    assert meta["exactness"]["outputs"][0]["name"] == "O" and meta["onchip_peak"]["smem_bytes"]
    decode = {"algo": "decode", "n": 1, "nk": 20000, "d": 16, "bn": 256, "group": 2}
    assert client.get("/api/trace", params=decode).status_code == 200
    assert _errors(client.get("/api/trace", params={**decode, "nk": 40000}))["nk"]["limit"] == 32768
    assert _errors(client.get("/api/trace", params={"nk": 2000}))["nk"]["limit"] == 1024


def test_new_pages_load_only_local_assets(client):
    import re

    for path in ("/backward", "/decode", "/schedule"):
        r = client.get(path)
        assert r.status_code == 200, path
        refs = re.findall(r'(?:src|href)="([^"]+)"', r.text)
        assert all(ref.startswith(("/", "#")) for ref in refs), refs
        assert f'src="/static/js/{path[1:]}.js"' in r.text
        assert f'href="{path}" aria-current="page"' in r.text
