"""/memory-wall in headless Chromium: steps, URL state, exports, playback."""

from __future__ import annotations

import re

import pytest

from .conftest import screenshot, wait_step
from .downloads import assert_png, download_json, wait_past

pytestmark = pytest.mark.browser

TODO, S_HBM, P_HBM, P_READ, NOW, ON_CHIP = range(6)


def _z(page, which: int) -> list[list[int]]:
    return page.evaluate(f"() => document.getElementById('grids').data[{which}].z")


def _clean(page) -> None:
    assert page.log.console_errors == [] and page.log.page_errors == []
    assert page.log.external_requests == []


def test_url_reproduces_the_step_and_keys_step(page, live_server):
    # N = 512 in 128×128 tiles: 4×4 tiles; kernel 1 of naive takes steps 0–19, so step 20 is
    # kernel 2's softmax of row block 0; flash's CTA 3 loads Q at 18 and is on tile (3, 1).
    page.goto(f"{live_server}/memory-wall?n=512&d=64&bm=128&bn=128&step=20")
    wait_step(page, 20)
    naive, flash = _z(page, 0), _z(page, 1)
    assert naive[0] == [NOW] * 4 and naive[1:] == [[S_HBM] * 4] * 3
    assert flash[3] == [ON_CHIP, NOW, TODO, TODO] and flash[0] == [ON_CHIP] * 4
    assert "kernel 2" in page.locator("#now-naive").inner_text()
    assert "tile (3, 1)" in page.locator("#now-flash").inner_text()
    for fig in ("traffic", "grids", "bars"):
        assert page.locator(f"#{fig} .main-svg").count() >= 1, fig
    rows = page.locator("#access-table tbody tr")
    assert rows.count() == 5
    assert "4,456,448" in rows.nth(2).inner_text() and "1,179,648" in rows.nth(2).inner_text()

    page.keyboard.press("ArrowRight")
    wait_step(page, 21)
    assert _z(page, 0)[1] == [NOW] * 4  # the softmax moved to row block 1
    assert re.search(r"[?&]step=21\b", page.url)
    page.keyboard.press("End")
    wait_step(page, 43)
    assert _z(page, 0) == [[P_READ] * 4] * 3 + [[P_READ] * 4]
    assert (
        page.locator("#naive-read")
        .inner_text()
        .startswith(f"{2 * 512 * 64 + 2 * 512 * 512 + 512 * 64:,}")
    )
    # Jump with the step box: kernel 3 half-way, P partly read back (the README's screenshot).
    page.locator("#step").fill("36")
    page.locator("#step").press("Enter")
    wait_step(page, 36)
    assert _z(page, 0)[1:4] == [[P_READ] * 4, [P_READ, P_READ, NOW, P_HBM], [P_HBM] * 4]
    screenshot(page, "memory-wall")
    _clean(page)


def test_exports_and_playback(page, live_server):
    page.goto(f"{live_server}/memory-wall?n=256&bm=64&bn=64")
    wait_step(page, 5)  # no step: it opens once flash has written query block 0's output
    prompt = page.locator("#step-prompt").inner_text()
    assert "Step 5 of 43: FlashAttention has finished query block 0" in prompt, prompt
    assert "written 4 tiles of scores S to HBM" in prompt and "Press → or Play" in prompt
    name, body = download_json(page, "#export-json")
    assert name == "memory-wall-n256-d64-64x64.json"
    assert body["walks"]["naive"]["steps"] == 2 * 16 + 12
    name, chrome = download_json(page, "#export-chrome")
    assert name.endswith(".trace.json")
    assert sum(e["ph"] == "X" for e in chrome["traceEvents"]) == 44 + 4 * 6
    assert_png(page, "button[data-png-target='traffic']", "memory-wall-traffic")

    page.locator("#speed").select_option("30")
    page.locator("#play").click()
    assert page.locator("#play").get_attribute("aria-pressed") == "true"
    wait_past(page, 5)
    page.locator("#play").click()
    assert page.locator("#play").get_attribute("aria-pressed") == "false"
    _clean(page)


def test_bad_parameters_show_the_limit(page, live_server):
    page.goto(f"{live_server}/memory-wall?n=99999&bm=3")
    errors = page.locator("#errors")
    errors.wait_for(state="visible")
    assert "n must be ≤ 8192" in errors.inner_text()
    assert "bm must be a power of two" in errors.inner_text()
    assert page.log.page_errors == [] and page.log.external_requests == []


def test_a_state_applied_before_the_first_load_keeps_its_step(page, live_server):
    """A room's state can reach a page that is still loading: its step, not the page's own
    opening step, is what the page shows."""
    page.goto(f"{live_server}/memory-wall?n=256&bm=64&bn=64", wait_until="commit")
    page.evaluate(
        """async () => {
          const r = await import('/static/js/registry.js');
          while (!r.currentView()) await new Promise((ok) => setTimeout(ok, 2));
          const v = r.currentView();
          v.applyState({ params: v.getState().params, step: 3 });
        }"""
    )
    wait_step(page, 3)
    page.wait_for_timeout(500)
    assert page.evaluate("() => document.body.dataset.step") == "3"
    assert page.log.page_errors == []
