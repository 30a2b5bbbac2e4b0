"""The steppers without animation frames: a tab in the background, or a headless browser whose
compositor draws no frames, never runs requestAnimationFrame callbacks. What waits on a paint
(the figures after a step's first, the step's URL) must still happen (static/js/plot.js
`afterPaint`)."""

from __future__ import annotations

import pytest

from .conftest import wait_step

pytestmark = pytest.mark.browser

NO_FRAMES = "window.requestAnimationFrame = () => 0;"


@pytest.mark.parametrize(("path", "step"), [("/tiles", 5), ("/backward", 7), ("/decode", 3)])
def test_a_stepper_draws_its_step_with_no_frames(page, live_server, path, step):
    page.add_init_script(NO_FRAMES)
    page.goto(f"{live_server}{path}?step={step}")
    wait_step(page, step)  # drawn, and the step written into the URL
    assert f"step={step}" in page.url
    page.keyboard.press("ArrowRight")
    wait_step(page, step + 1)
    assert f"step={step + 1}" in page.url
    assert not page.log.console_errors and not page.log.page_errors
