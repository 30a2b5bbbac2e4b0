"""/schedule in headless Chromium: the Gantt chart, the time cursor, edited specs, exports."""

from __future__ import annotations

import json
import re

import pytest

from .conftest import screenshot, wait_step
from .downloads import assert_png, download, download_json

pytestmark = pytest.mark.browser


def _cursor_x(page, fig: str) -> float:
    return page.evaluate(f"() => document.getElementById('{fig}').layout.shapes[0].x0")


def test_schedule_cursor_specs_and_exports(page, live_server):
    page.goto(f"{live_server}/schedule?step=40")
    wait_step(page, 40)
    page.wait_for_timeout(300)  # let the presets fill the spec placeholders
    screenshot(page, "schedule")
    n_bars = page.evaluate(
        "() => document.getElementById('gantt').data.reduce((n, t) => n + t.y.length, 0)"
    )
    assert n_bars == 2 * 16 * 32  # batch 2 × 16 heads × 32 query blocks
    assert page.locator("input[name=sms]").get_attribute("placeholder") == "132"
    before = _cursor_x(page, "gantt")
    assert before == _cursor_x(page, "utilization") > 0
    assert "t = " in page.locator("#now").inner_text()
    page.keyboard.press("ArrowRight")
    wait_step(page, 41)
    assert _cursor_x(page, "gantt") > before
    assert re.search(r"[?&]step=41\b", page.url)
    assert "early blocks finish first" in page.locator("#imbalance-text").inner_text()
    assert "limited by" in page.locator("#occupancy").inner_text()
    # The explanation's waves are this run's: 1,024 CTAs on 132 slots, 7.76 waves.
    waves = page.locator("#waves-example").inner_text()
    assert "1,024 fa2 CTAs on 132 slots (132 SMs × 1 CTA) make 7.76 waves" in waves, waves
    assert "fills only 100 of the 132 slots" in waves, waves
    assert page.locator("#occupancy-body td.limit").count() == 1
    for fig in ("gantt", "utilization", "imbalance", "limiter-plot", "roofline"):
        assert page.locator(f"#{fig} .main-svg").count() >= 1, fig

    name, body = download_json(page, "#export-json")
    assert name == "schedule-fa2-h100-sxm-b2-h16-n4096-d128-causal.json"
    assert len(body["cursor"]["times_us"]) == 101
    name, data = download(page, "#export-chrome")
    spans = [e for e in json.loads(data)["traceEvents"] if e["ph"] == "X"]
    assert name.endswith(".trace.json") and len(spans) == n_bars + 1
    assert_png(page, "button[data-png-target='gantt']", "schedule-gantt")

    # Edited specs: refused beyond the limit with the field named, then simulated.
    page.locator("input[name=sms]").fill("10000")
    page.locator("#params button[type=submit]").click()
    page.locator("#errors").wait_for(state="visible")
    errors = page.locator("#errors").inner_text()
    assert "sms: sms must stay within 64× of the preset's 132" in errors
    page.locator("input[name=sms]").fill("66")
    page.locator("input[name=seq]").fill("1024")
    page.locator("#params button[type=submit]").click()
    page.locator("#time").filter(has_text="edited: sms").wait_for()
    page.locator("#step-prompt").filter(has_text="opens at").wait_for()
    opened = int(page.evaluate("() => document.body.dataset.step"))
    assert 0 < opened < 100  # a new run opens where CTAs are at work, not at its end
    assert page.locator("#errors").is_hidden()
    url = page.url
    assert "sms=66" in url and "seq=1024" in url and f"step={opened}" in url
    page.goto(url)
    wait_step(page, opened)
    assert "edited: sms" in page.locator("#time").inner_text()
    assert "on 66 slots (66 SMs" in page.locator("#waves-example").inner_text()
    assert page.locator("input[name=sms]").input_value() == "66"
    # The one console error is Chromium's own note on the refused request (HTTP 422).
    assert [e for e in page.log.console_errors if "status of 422" not in e] == []
    assert len(page.log.console_errors) <= 1 and page.log.page_errors == []
    assert page.log.external_requests == []
