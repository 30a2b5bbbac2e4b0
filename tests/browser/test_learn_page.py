"""The course in headless Chromium: every lesson's figure, every try-this link, the checks."""

from __future__ import annotations

import json
import re
import urllib.request
from urllib.parse import parse_qsl, urlsplit

import pytest

from .conftest import SCREENSHOTS, WAIT_MS, screenshot

pytestmark = pytest.mark.browser


def _lessons(base: str) -> list[dict]:
    with urllib.request.urlopen(base + "/api/learn", timeout=30) as r:
        return json.loads(r.read())["lessons"]


def screenshot_path(name: str):
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return SCREENSHOTS / f"{name}.png"


def figure_ready(page, lesson: dict) -> None:
    """The lesson's view is mounted and has drawn a step (or the lesson has no view)."""
    if lesson["view"] is None:
        return
    page.locator("#figure[data-loaded='1']").wait_for(state="attached", timeout=WAIT_MS)
    page.locator("body[data-step]").wait_for(state="attached", timeout=WAIT_MS)


def url_params(page) -> dict[str, str]:
    return dict(parse_qsl(urlsplit(page.url).query))


def test_walk_the_course_with_next_and_answer_each_check(page, live_server):
    lessons = _lessons(live_server)
    page.goto(live_server + "/")
    page.locator("a.start-button").click()
    seen = []
    for k, lesson in enumerate(lessons):
        page.wait_for_url(re.compile(rf"/learn/{lesson['id']}(\?|$)"))
        figure_ready(page, lesson)
        assert page.locator("#lesson-title").inner_text() == lesson["title"]
        for key, value in lesson["start"].items():  # the lesson opens its view in its state
            assert url_params(page).get(key) == str(value), (lesson["id"], key)
        if lesson["view"]:
            assert page.locator("#figure #params").count() == 1  # the view's own form
        if lesson["view"] == "/hopper":  # the Gantt of the warpgroups, simulated and measured
            rows = page.evaluate(
                "() => [...new Set(document.getElementById('gantt').data.flatMap((t) => t.y))]"
            )
            assert {"loader", "consumer 0", "consumer 1"} <= set(rows)
            assert page.locator("#figure #phase-key li").count() == 10
        # A wrong answer first, then the right one: feedback both times.
        choices = lesson["check"]["choices"]
        wrong = next(i for i, c in enumerate(choices) if not c["correct"])
        right = next(i for i, c in enumerate(choices) if c["correct"])
        page.locator(f"#lesson-check input[value='{wrong}']").check()
        page.locator("#lesson-check button[type=submit]").click()
        assert page.locator("#check-feedback").inner_text().startswith("Not quite")
        assert page.locator(f".why[data-choice='{wrong}']").is_visible()
        assert page.locator("#check-explanation").is_hidden()
        page.locator(f"#lesson-check input[value='{right}']").check()
        page.locator("#lesson-check button[type=submit]").click()
        assert page.locator("#check-feedback").inner_text() == "Correct."
        assert page.locator("#check-explanation").is_visible()
        assert page.locator(f".why[data-choice='{wrong}']").is_hidden()
        seen.append(lesson["id"])
        if k + 1 < len(lessons):
            page.locator("a[rel=next]").click()
    assert seen == [x["id"] for x in lessons] and seen[-1] == "hopper"  # the course ends there
    assert page.locator("a[rel=next]").get_attribute("href") == "/"  # the end leads home
    page.locator("a[rel=prev]").click()
    page.wait_for_url(re.compile(rf"/learn/{lessons[-2]['id']}"))
    figure_ready(page, lessons[-2])
    assert page.log.console_errors == [], page.log.console_errors
    assert page.log.page_errors == [] and page.log.external_requests == []


@pytest.mark.parametrize("half", [0, 1])
def test_every_try_this_link_sets_its_figure(page, live_server, half):
    lessons = _lessons(live_server)
    links = [(x, t) for x in lessons for t in x["try_this"]]
    for lesson, t in links[half::2]:
        page.goto(f"{live_server}/learn/{lesson['id']}")
        figure_ready(page, lesson)
        page.locator(".try-this a", has_text=t["label"]).first.click()
        page.wait_for_url(re.compile(re.escape(t["url"].split("?")[1][:20])))
        figure_ready(page, lesson)
        if "step" in t["params"]:
            step = t["params"]["step"]
            page.locator(f"body[data-step='{step}']").wait_for(state="attached", timeout=WAIT_MS)
        got = url_params(page)
        for key, value in t["params"].items():
            assert got.get(key) == str(value), (lesson["id"], t["label"], key, got)
        if lesson["view"] in ("/tiles", "/backward") and t["phase"]:
            now = page.locator("#now").inner_text().lower()
            assert t["phase"].replace("_", " ") in now, (t["label"], now)
    assert page.log.console_errors == [], page.log.console_errors
    assert page.log.page_errors == [] and page.log.external_requests == []


def test_course_screenshots(page, live_server):
    """The README's pictures of the course: its index, and a lesson beside its live figure."""
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(live_server + "/learn")
    page.locator("a.start-button").wait_for()
    screenshot(page, "learn")
    lesson = next(x for x in _lessons(live_server) if x["id"] == "tiles")
    page.goto(f"{live_server}/learn/tiles")
    figure_ready(page, lesson)
    page.wait_for_timeout(500)  # the figures a frame after the first
    assert page.locator("#step-prompt").is_visible()
    text = page.locator("article.lesson").bounding_box()
    figure = page.locator("#grid").bounding_box()
    assert text["x"] + text["width"] <= figure["x"] and figure["y"] < 900  # beside, above the fold
    page.screenshot(path=str(screenshot_path("learn-lesson")), full_page=False)
    assert page.log.console_errors == [] and page.log.page_errors == []
