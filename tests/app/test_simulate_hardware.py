"""Custom hardware on POST /api/simulate: every field has a range around its preset, and no value
of any field, in range or not, makes the engine fail (a 500) or answer a non-finite number."""

from __future__ import annotations

import json
import math

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flashscope.app.config import Settings
from flashscope.app.main import create_app
from flashscope.simulator.core import hardware

FACTOR = Settings().simulate_max_hardware_factor
FIELDS = hardware.GPU_FIELDS + hardware.EFFICIENCY_FIELDS
BODY = {"seq": 1024, "head_dim": 64, "block_m": 64, "block_n": 64, "warps": 4}


@pytest.fixture(scope="module")
def api():
    fast = Settings(rate_compute_per_s=1e6, rate_compute_burst=10**6)
    with TestClient(create_app(fast), raise_server_exceptions=False) as c:
        yield c


def _numbers(value) -> list[float]:
    if isinstance(value, dict):
        return [x for v in value.values() for x in _numbers(v)]
    if isinstance(value, list):
        return [x for v in value for x in _numbers(v)]
    return [value] if isinstance(value, float) else []


def _simulate(api, gpu: str, changes: dict) -> tuple[int, dict]:
    r = api.post("/api/simulate", json={**BODY, "gpu": gpu, "hardware": changes})
    assert r.status_code in (200, 422), (changes, r.status_code, r.text[:300])
    return r.status_code, r.json()


def test_every_field_has_one_range():
    scaled, bounded = set(hardware.SCALED_EFFICIENCIES), set(hardware.EFFICIENCY_BOUNDS)
    assert not scaled & bounded
    assert scaled | bounded == set(hardware.EFFICIENCY_FIELDS)
    for key in hardware.names():  # every preset (calibrated or not) sits inside its own ranges
        for calibrated in (True, False):
            gpu = hardware.from_name(key, calibrated=calibrated)
            for name in FIELDS:
                value = getattr(gpu.efficiency if name in bounded | scaled else gpu, name)
                assert hardware.check_change(gpu, name, value, FACTOR) is None, (key, name)


@pytest.mark.parametrize(
    "changes",
    [
        {"power_tflops": 1e-308},
        {"power_exp": 0.9999999},
        {"tensor": 1e-308},
        {"launch_us": 1e308},
        {"l2_reuse_exponent": 1e-308},
        {"warps_to_saturate": 10**9},
        {"hbm_gbs": 5e-324},
    ],
)
def test_extreme_values_are_refused_naming_the_field_and_its_range(api, changes):
    status, body = _simulate(api, "h100", changes)
    assert status == 422
    (name,) = changes
    hit = [e for e in body["detail"] if e["field"] == name]
    lo, hi = hardware.change_bounds(hardware.from_name("h100"), name, FACTOR)
    assert hit and hit[0]["limit"] == [lo, hi], body


@st.composite
def changes_in_range(draw) -> tuple[str, dict]:
    """A preset and up to four fields, each set anywhere in its range (its ends included)."""
    key = draw(st.sampled_from(hardware.names()))
    gpu = hardware.from_name(key)
    names = draw(st.lists(st.sampled_from(FIELDS), min_size=1, max_size=4, unique=True))
    out: dict = {}
    for name in names:
        lo, hi = hardware.change_bounds(gpu, name, FACTOR)
        ints = name in hardware.GPU_FIELDS and isinstance(getattr(gpu, name), int)
        ints = ints or name in ("warps_to_saturate", "reg_overhead")
        if ints:
            out[name] = draw(st.integers(math.ceil(lo), math.floor(hi)))
        else:
            out[name] = draw(st.one_of(st.sampled_from([lo, hi]), st.floats(lo, hi)))
    return key, out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(changes_in_range())
def test_values_in_range_simulate_to_finite_numbers(api, case):
    key, changes = case
    status, body = _simulate(api, key, changes)
    if status == 422:  # only a rule between two fields (a CTA's shared memory within the SM's,
        # DRAM latency at least L2's) or tiles that no longer fit may refuse values in range
        text = json.dumps(body, ensure_ascii=False)
        assert any(w in text for w in ("exceed", "must be ≥", "shared memory", "registers")), text
        return
    numbers = _numbers(body)
    assert numbers and all(math.isfinite(x) for x in numbers), changes
    assert body["time_us"] > 0


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(FIELDS),
    st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.integers(-(2**70), 2**70)),
)
def test_any_value_of_any_field_is_a_result_or_a_422(api, name, value):
    _simulate(api, "h200", {name: value})
