"""/tiles with the shared controls: playback and the three exports."""

from __future__ import annotations

import pytest

from .conftest import wait_step
from .downloads import assert_png, download_json, wait_past

pytestmark = pytest.mark.browser


def test_play_pause_and_exports(page, live_server):
    page.goto(f"{live_server}/tiles?n=64&d=16&bm=32&bn=32&seed=1&step=0")
    wait_step(page, 0)
    page.locator("#speed").select_option("30")
    page.keyboard.press("Space")
    assert page.locator("#play").get_attribute("aria-pressed") == "true"
    wait_past(page, 4)
    page.keyboard.press("Space")
    assert page.locator("#play").inner_text() == "Play"

    name, ops = download_json(page, "#export-json")
    assert name == "trace-fa2-n64-d16-32x32-fp32-seed1.json"
    assert len(ops["columns"]["phase"]) == ops["meta"]["n_events"] == 2 * (2 + 4 * 2)
    name, chrome = download_json(page, "#export-chrome")
    assert name == "trace-fa2-n64-d16-32x32-fp32-seed1.trace.json"
    spans = [e for e in chrome["traceEvents"] if e["ph"] == "X"]
    assert [s["tid"] for s in spans] == [0] * 10 + [1] * 10
    assert_png(page, "button[data-png-target='grid']", "tiles-grid")
    assert page.log.console_errors == [] and page.log.page_errors == []
    assert page.log.external_requests == []
