"""/decode in headless Chromium: splits across SMs, the reduce by LSE weights, URL, exports."""

from __future__ import annotations

import json
import re
import urllib.request

import pytest

from .conftest import screenshot, wait_step
from .downloads import assert_png, download_json

pytestmark = pytest.mark.browser

QUERY = "n=1&nk=1000&d=16&bn=64&group=4&splits=4&dtype=fp16&seed=2"


def test_decode_splits_then_merges_by_lse(page, live_server):
    with urllib.request.urlopen(f"{live_server}/api/trace/ops?algo=decode&{QUERY}") as r:
        ops = json.load(r)
    phases = ops["columns"]["phase"]
    reduce = [k for k, ph in enumerate(phases) if ph == "reduce"]
    assert len(reduce) == 4  # 16 key blocks in 4 splits

    page.goto(f"{live_server}/decode?{QUERY}&step=5")
    wait_step(page, 5)
    assert "split 0 (CTA on SM 0)" in page.locator("#now").inner_text()
    labels = page.evaluate("() => document.getElementById('splits').layout.yaxis.ticktext")
    assert labels == [f"split {s} · SM {s}" for s in range(4)]
    assert "4 splits of 4 blocks" in page.locator("#plan").inner_text()
    z = page.evaluate("() => document.getElementById('splits').data[0].z")
    assert [sum(v > 0 for v in row) for row in z] == [4, 4, 4, 4]  # each split's own blocks

    page.locator("#step").fill(str(reduce[1]))
    page.locator("#step").press("Enter")
    page.evaluate("() => document.activeElement.blur()")  # arrow keys step, not the caret
    wait_step(page, reduce[1])
    now = page.locator("#now").inner_text()
    assert "merge split 1" in now and "O ← (1 − w)·O + w·Oₛ" in now
    bars = page.evaluate("() => document.getElementById('weights').data[0]")
    assert bars["marker"]["color"][:3] == ["#60a5fa", "#f59e0b", "#e5e7eb"]
    assert abs(sum(bars["y"]) - 1) < 1e-6
    merged = page.evaluate("() => document.getElementById('outputs').data[1].z")
    assert len(merged) == 4 and merged[0][0] is not None
    assert re.search(rf"[?&]step={reduce[1]}\b", page.url)
    screenshot(page, "decode")

    page.keyboard.press("End")
    wait_step(page, len(phases) - 1)
    assert "exact softmax attention" in page.locator("#now").inner_text()
    assert "fp16" in page.locator("#exactness").inner_text()
    for fig in ("splits", "stats", "weights", "outputs"):
        assert page.locator(f"#{fig} .main-svg").count() >= 1, fig
    name, body = download_json(page, "#export-json")
    assert name == "trace-decode-n1-nk1000-d16-bn64-g4-s4-fp16-seed2.json"
    assert body["meta"]["grid"]["splits"] == 4
    assert_png(page, "button[data-png-target='weights']", "decode-weights")

    # Splits left empty: the occupancy rule (one split per key block here), kept in the URL.
    page.locator("input[name=splits]").fill("")
    page.locator("input[name=nk]").fill("640")
    page.locator("#params button[type=submit]").click()
    wait_step(page, 0)
    page.locator("#plan").filter(has_text="occupancy rule").wait_for()
    assert "10 splits of 1 block" in page.locator("#plan").inner_text()
    assert "splits=auto" in page.url
    page.locator("input[name=group]").fill("300")
    page.locator("#params button[type=submit]").click()
    page.locator("#errors").wait_for(state="visible")
    assert "group must be ≤ 16" in page.locator("#errors").inner_text()
    assert page.log.console_errors == [] and page.log.page_errors == []
    assert page.log.external_requests == []


def _done_per_split(page) -> list[int]:
    z = page.evaluate("() => document.getElementById('splits').data[0].z")
    return [sum(v == 2 for v in row) for row in z]


def test_the_splits_fill_together(page, live_server):
    """The splits run at once: the steps go round them, a key block of each in turn."""
    with urllib.request.urlopen(f"{live_server}/api/trace?algo=decode&{QUERY}&count=1") as r:
        opening = json.load(r)["meta"]["opening_step"]
    page.goto(f"{live_server}/decode?{QUERY}&step={opening}")
    wait_step(page, opening)
    assert _done_per_split(page) == [1, 1, 1, 1]  # every split has its first block in
    for _ in range(4 * 4):  # one round: a key block of each of the 4 splits, 4 ops each
        page.keyboard.press("ArrowRight")
    wait_step(page, opening + 16)
    assert _done_per_split(page) == [2, 2, 2, 2]
    assert page.log.console_errors == [] and page.log.page_errors == []


def test_a_bare_link_opens_with_every_split_under_way_and_says_press(page, live_server):
    page.goto(f"{live_server}/decode?{QUERY}")  # no step: the page picks where to open
    with urllib.request.urlopen(f"{live_server}/api/trace?algo=decode&{QUERY}&count=1") as r:
        opening = json.load(r)["meta"]["opening_step"]
    wait_step(page, opening)
    prompt = page.locator("#step-prompt")
    assert prompt.is_visible() and "Press → or Play" in prompt.inner_text()
    assert "the splits run at once" in prompt.inner_text()
    assert _done_per_split(page) == [1, 1, 1, 1]
    page.keyboard.press("ArrowRight")
    wait_step(page, opening + 1)
    assert prompt.is_hidden()
    assert page.log.console_errors == [] and page.log.page_errors == []
