"""/memory-scaling in headless Chromium: where naive attention runs out of memory."""

from __future__ import annotations

import re

import pytest

from .conftest import screenshot, wait_step
from .downloads import assert_png, download_json

pytestmark = pytest.mark.browser


def test_h200_anchor_problem_with_shipped_measurements(page, live_server):
    page.goto(f"{live_server}/memory-scaling?gpu=H200&batch=1&heads=16&d=64&dtype=fp16&step=5")
    wait_step(page, 5)
    assert page.locator("#now").inner_text().startswith("N = 32,768: naive needs 64.2 GiB")
    assert "out of memory" not in page.locator("#now").inner_text()
    note = page.locator("#dataset-note")
    assert note.is_visible() and "NVIDIA H200" in note.inner_text()
    names = page.evaluate("() => document.getElementById('peaks').data.map(t => t.name)")
    assert "naive measured on NVIDIA H200 (shipped)" in names
    assert (
        "runs out of memory on the H200 SXM 141GB from N = 65,536"
        in page.locator("#edge").inner_text()
    )
    assert page.locator("select[name=gpu]").input_value() == "h200"  # the alias, resolved
    page.keyboard.press("ArrowRight")
    wait_step(page, 6)
    assert "N = 65,536" in page.locator("#now").inner_text()
    assert "out of memory" in page.locator("#now").inner_text()
    assert re.search(r"[?&]step=6\b", page.url)
    for fig in ("peaks", "parts"):
        assert page.locator(f"#{fig} .main-svg").count() >= 1, fig
    page.keyboard.press("ArrowLeft")
    wait_step(page, 5)
    screenshot(page, "memory-scaling")
    assert page.log.console_errors == [] and page.log.page_errors == []
    assert page.log.external_requests == []


def test_other_gpu_has_no_dataset_note_and_exports(page, live_server):
    page.goto(f"{live_server}/memory-scaling?gpu=rtx-4090&batch=2&step=2")
    wait_step(page, 2)
    assert page.locator("#dataset-note").is_hidden()
    assert page.locator("select[name=gpu]").input_value() == "rtx-4090"
    name, body = download_json(page, "#export-json")
    assert name == "memory-scaling-rtx-4090-b2-h16-d64-fp16.json" and body["measured"] is None
    assert_png(page, "button[data-png-target='peaks']", "memory-scaling-peaks")
    assert page.log.console_errors == [] and page.log.page_errors == []
    assert page.log.external_requests == []


def test_a_bare_link_opens_where_naive_attention_last_fits(page, live_server):
    page.goto(f"{live_server}/memory-scaling")  # no step: the page picks where to open
    wait_step(page, 5)  # N = 32,768: the next doubling runs out of the H200's memory
    prompt = page.locator("#step-prompt").inner_text()
    assert prompt.startswith("Point 5 of 7: at N = 32,768 naive attention needs 64.2 GiB"), prompt
    assert "% of it the scores S and P" in prompt and "Press → or Play" in prompt
    assert "no longer fits on the H200 SXM 141GB" in prompt
    page.keyboard.press("ArrowRight")
    wait_step(page, 6)
    assert page.locator("#step-prompt").is_hidden()
    assert page.log.console_errors == [] and page.log.page_errors == []
