"""/backward in headless Chromium: P rebuilt, dS, the accumulators, counters, URL, exports."""

from __future__ import annotations

import json
import re
import urllib.request

import pytest

from .conftest import screenshot, wait_step
from .downloads import assert_png, download, download_json

pytestmark = pytest.mark.browser

QUERY = "n=96&d=16&bm=32&bn=32&causal=1&dtype=bf16&seed=5"


def _get(live_server, path: str) -> dict:
    with urllib.request.urlopen(f"{live_server}{path}") as r:
        return json.load(r)


def _z(page, fig: str, k: int):
    return page.evaluate(f"() => document.getElementById('{fig}').data[{k}].z")


def test_backward_steps_through_a_tile_and_exports(page, live_server):
    ops = _get(live_server, f"/api/trace/ops?algo=fa2-bwd&{QUERY}")["columns"]
    # The second visit of key block 1 (tile (2, 1)): its CTA already holds dK, dV of tile (1, 1).
    first = next(
        k
        for k, ph in enumerate(ops["phase"])
        if ph == "recompute_p" and (ops["q_block"][k], ops["kv_block"][k]) == (2, 1)
    )
    opening = _get(live_server, f"/api/trace?algo=fa2-bwd&{QUERY}")["meta"]["opening_step"]
    page.goto(f"{live_server}/backward?{QUERY}")
    wait_step(page, opening)  # a bare link opens where dS has just formed, with a prompt
    assert "dS = P ∘ (dP − D)" in page.locator("#now").inner_text()
    assert "Press → or Play" in page.locator("#step-prompt").inner_text()
    page.locator("#step").fill(str(first))
    page.locator("#step").press("Enter")
    page.evaluate("() => document.activeElement.blur()")  # arrow keys step, not the caret
    wait_step(page, first)
    assert "rebuild P" in page.locator("#now").inner_text()
    assert "LSE" in page.locator("#pseudocode li.current").inner_text()
    served = _get(live_server, f"/api/trace?algo=fa2-bwd&{QUERY}&start={first}&count=6")
    events = served["events"]
    assert _z(page, "tile", 0) == events[0]["state"]["p"]
    assert _z(page, "tile", 1) == [[None]]  # dS not computed yet
    dv_before = _z(page, "acc", 1)
    acc_before = page.locator("#acc-rw").inner_text()

    for k in range(1, 6):  # dv, dp, ds, dq, dk
        page.keyboard.press("ArrowRight")
        wait_step(page, first + k)
        if events[k]["phase"] == "dv":
            assert _z(page, "acc", 1) != dv_before  # dV took in Pᵀ dO
            assert _z(page, "acc", 1) == events[k]["state"]["dv"]
    assert _z(page, "tile", 1) == events[5]["state"]["ds"]
    assert _z(page, "dq", 0) == events[5]["state"]["dq"]
    assert page.locator("#acc-rw").inner_text() != acc_before  # the fp32 dQ round trip
    assert "dK ← dK + dSᵀ Qᵢ" in page.locator("#pseudocode li.current").inner_text()
    assert re.search(rf"[?&]step={first + 5}\b", page.url)
    screenshot(page, "backward")

    url, now = page.url, page.locator("#now").inner_text()
    page.goto(url)
    wait_step(page, first + 5)
    assert page.locator("#now").inner_text() == now
    assert page.locator("input[name=causal]").is_checked()
    assert page.locator("select[name=dtype]").input_value() == "bf16"

    page.keyboard.press("End")
    last = served["meta"]["n_events"] - 1
    wait_step(page, last)
    assert "postprocess" in page.locator("#now").inner_text()
    exact = page.locator("#exactness").inner_text()
    assert all(name in exact for name in ("dQ", "dK", "dV", "bf16"))
    for fig in ("grid", "tile", "acc", "dq"):
        assert page.locator(f"#{fig} .main-svg").count() >= 1, fig

    name, body = download_json(page, "#export-json")
    assert name == "trace-fa2-bwd-n96-d16-32x32-causal-bf16-seed5.json"
    assert body["meta"]["algo"] == "fa2-bwd" and len(body["columns"]["phase"]) == last + 1
    name, data = download(page, "#export-chrome")
    assert name.endswith(".trace.json") and json.loads(data)["traceEvents"]
    assert_png(page, "button[data-png-target='tile']", "backward-p-ds")
    assert page.log.console_errors == [] and page.log.page_errors == []
    assert page.log.external_requests == []
