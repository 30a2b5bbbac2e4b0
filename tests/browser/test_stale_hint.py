"""A field edited without Apply: the page says the figures still show the old values."""

from __future__ import annotations

import pytest

from .conftest import wait_attached, wait_step

pytestmark = pytest.mark.browser


def hint(page):
    return page.locator("#stale-hint")


def test_an_edited_field_says_the_picture_is_stale_until_applied(page, live_server):
    page.goto(f"{live_server}/tiles?n=32&d=8&bm=16&bn=16&step=3")
    wait_step(page, 3)
    assert hint(page).count() == 0 or hint(page).is_hidden()
    page.locator("#params input[name='n']").fill("64")
    text = hint(page).inner_text()
    assert hint(page).is_visible() and text.startswith("Not applied yet: N (queries) changed")
    assert "press Apply" in text
    page.locator("#params input[name='n']").fill("32")  # back to what is drawn: no hint
    assert hint(page).is_hidden()
    page.locator("#params select[name='dtype']").select_option("bf16")
    page.locator("#params input[name='seed']").fill("4")
    assert "dtype, seed changed" in hint(page).inner_text()
    page.locator("#params button[type=submit]").click()
    assert hint(page).is_hidden()
    page.locator("body[data-step]").wait_for(state="attached")
    page.wait_for_function("() => new URL(location.href).searchParams.get('seed') === '4'")
    page.keyboard.press("ArrowRight")  # stepping keeps it hidden: the fields match the picture
    page.wait_for_timeout(200)
    assert hint(page).is_hidden()
    assert page.log.console_errors == [] and page.log.page_errors == []


@pytest.mark.parametrize(
    ("path", "field", "value"),
    [
        ("/schedule?step=10", "input[name='seq']", "2048"),
        ("/memory-wall?step=3", "input[name='n']", "512"),
        ("/learn/online-softmax", "input[name='block']", "2"),
    ],
)
def test_every_form_says_so(page, live_server, path, field, value):
    page.goto(live_server + path)
    wait_attached(page, "body[data-step]", 30000)
    page.locator(f"#params {field}").fill(value)
    hint(page).wait_for(state="visible")
    assert "Not applied yet" in hint(page).inner_text()
    assert page.log.page_errors == []
