"""/online-softmax in headless Chromium: block by block to the exact softmax."""

from __future__ import annotations

import re

import pytest

from .conftest import screenshot, wait_step
from .downloads import assert_png, download_json

pytestmark = pytest.mark.browser


def test_steps_through_the_seed_example(page, live_server):
    page.goto(f"{live_server}/online-softmax?x=1,2,3,6,2,1&block=3&step=1")
    wait_step(page, 1)
    now = page.locator("#now").inner_text()
    assert "m goes −∞ → 3" in now and "1.503" in now
    current = page.locator("#blocks tr.current")
    assert current.count() == 1 and current.locator("td").first.inner_text() == "0"
    colors = page.evaluate("() => document.getElementById('vector').data[0].marker.color")
    assert colors[:3] == ["#f59e0b"] * 3 and colors[3:] == ["#e5e7eb"] * 3
    page.keyboard.press("ArrowRight")
    wait_step(page, 2)
    assert "α = e^(m_old − m_new) = 0.04979" in page.locator("#now").inner_text()
    page.keyboard.press("End")
    wait_step(page, 3)
    assert "Largest difference from the two-pass softmax: 0" in page.locator("#now").inner_text()
    traces = page.evaluate("() => document.getElementById('weights').data.map(t => t.y)")
    assert len(traces) == 2 and [round(v, 6) for v in traces[0]] == [
        0.006126,
        0.016652,
        0.045265,
        0.909178,
        0.016652,
        0.006126,
    ]
    for fig in ("vector", "weights", "stats"):
        assert page.locator(f"#{fig} .main-svg").count() >= 1, fig
    assert re.search(r"[?&]step=3\b", page.url)
    page.keyboard.press("ArrowLeft")
    wait_step(page, 2)
    screenshot(page, "online-softmax")
    assert page.log.console_errors == [] and page.log.page_errors == []
    assert page.log.external_requests == []


def test_presets_masked_entries_and_exports(page, live_server):
    page.goto(f"{live_server}/online-softmax")
    wait_step(page, 2)  # no step: it opens where α first rescales ℓ
    prompt = page.locator("#step-prompt").inner_text()
    assert prompt.startswith("Step 2 of 3: block 1 brings a larger maximum (3 → 6)"), prompt
    assert "α = 0.04979" in prompt and "Press → or Play" in prompt
    page.locator("#preset").select_option(label="Masked entries (−∞)")
    page.wait_for_url(re.compile(r"x=-inf"))
    # The page showed step 0 before the preset too: wait for the new vector's step count.
    page.locator("#step-total", has_text="of 4").wait_for()
    wait_step(page, 0)
    page.keyboard.press("End")
    wait_step(page, 4)
    assert page.locator("#vector").evaluate("d => d.data.length") == 2  # bars and the −∞ marks
    name, body = download_json(page, "#export-json")
    assert name == "online-softmax-block3.json" and body["x"][0] is None
    assert_png(page, "button[data-png-target='weights']", "online-softmax-weights")
    assert page.log.console_errors == [] and page.log.page_errors == []
    assert page.log.external_requests == []


def test_bad_vector_shows_a_clear_message(page, live_server):
    page.goto(f"{live_server}/online-softmax?x=1,abc,3&block=2")
    errors = page.locator("#errors")
    errors.wait_for(state="visible")
    assert "x[1] is not a number" in errors.inner_text()
    assert page.log.page_errors == [] and page.log.external_requests == []
