"""Rooms in headless Chromium: a lecturer drives, an attendee follows, detaches and re-attaches."""

from __future__ import annotations

import re

import pytest

from ..app.servers import flashscope_server, restartable_redis
from .conftest import PageLog, screenshot, wait_step

pytestmark = pytest.mark.browser


def open_tab(browser, live_server):
    """A page in its own context (its own sessionStorage), logging errors and outside requests."""
    context = browser.new_context(viewport={"width": 1280, "height": 720})
    pg = context.new_page()
    log = PageLog()
    pg.on("console", lambda m: m.type == "error" and log.console_errors.append(m.text))
    pg.on("pageerror", lambda e: log.page_errors.append(str(e)))
    pg.on(
        "request",
        lambda r: (
            r.url.startswith((live_server, live_server.replace("http", "ws"), "data:"))
            or log.external_requests.append(r.url)
        ),
    )
    pg.log = log  # type: ignore[attr-defined]
    return context, pg


# Generous waits: three browsers and a server share two busy cores.
WAIT_MS = 30000


def at_step(page, step: int) -> None:
    wait_step(page, step, timeout=WAIT_MS)


def room_state(page, state: str, timeout: float = WAIT_MS) -> None:
    page.locator(f"#room-bar[data-state='{state}']").wait_for(state="attached", timeout=timeout)


def field(page, name: str) -> str:
    return page.locator(f"#params input[name='{name}']").input_value()


def test_a_lecturer_drives_and_attendees_follow_detach_and_catch_up(browser, live_server):
    lecturer_ctx, lecturer = open_tab(browser, live_server)
    attendee_ctx, attendee = open_tab(browser, live_server)
    tablet_ctx, tablet = open_tab(browser, live_server)
    try:
        lecturer.goto(f"{live_server}/tiles?n=64&d=16&bm=16&bn=16&seed=5&step=0")
        at_step(lecturer, 0)
        lecturer.locator("#room-start").click()
        room_state(lecturer, "driving")
        code = lecturer.locator("#room-code").inner_text()
        assert re.fullmatch(r"[A-Z2-9]{6}", code), code
        assert lecturer.locator("#room-status").inner_text().startswith("Driving")

        # The attendee joins from the home page and is taken to the lecturer's view.
        attendee.goto(live_server + "/")
        attendee.locator("#room-code-input").fill(code.lower())
        attendee.locator("#room-join button").click()
        attendee.wait_for_url(re.compile(r"/tiles"))
        room_state(attendee, "following")
        at_step(attendee, 0)
        assert [field(attendee, f) for f in ("n", "d", "bm", "bn", "seed")] == [
            "64",
            "16",
            "16",
            "16",
            "5",
        ]

        # Every step of the lecturer reaches the attendee.
        for k in range(1, 4):
            lecturer.keyboard.press("ArrowRight")
            at_step(lecturer, k)
            at_step(attendee, k)

        # Detached, the attendee explores alone; re-attached, it catches up.
        attendee.locator("#room-detach").click()
        room_state(attendee, "detached")
        attendee.keyboard.press("End")
        last = int(attendee.locator("#step").get_attribute("max"))
        at_step(attendee, last)
        for k in (4, 5):
            lecturer.keyboard.press("ArrowRight")
            at_step(lecturer, k)
        attendee.wait_for_timeout(300)
        assert attendee.locator("body").get_attribute("data-step") == str(last)
        assert lecturer.locator("body").get_attribute("data-step") == "5"
        attendee.locator("#room-attach").click()
        room_state(attendee, "following")
        at_step(attendee, 5)

        # A drive link opened on another device adopts the room's view and drives it too.
        link = lecturer.locator("#room-drive-link").input_value()
        assert link.startswith(live_server + "/#room=" + code + "&drive=")
        tablet.goto(link)
        tablet.wait_for_url(re.compile(r"/tiles"))
        room_state(tablet, "driving")
        at_step(tablet, 5)
        assert "drive=" not in tablet.url
        tablet.keyboard.press("ArrowRight")
        at_step(attendee, 6)
        at_step(lecturer, 6)

        # A page switch by the lecturer takes everyone along, then back with new parameters.
        lecturer.locator("a.brand").click()
        lecturer.wait_for_url(live_server + "/")
        attendee.wait_for_url(live_server + "/")
        room_state(lecturer, "driving")
        lecturer.goto(f"{live_server}/tiles?n=32&d=8&bm=8&bn=16&seed=9&step=2")
        at_step(lecturer, 2)
        attendee.wait_for_url(re.compile(r"/tiles"))
        room_state(attendee, "following")
        at_step(attendee, 2)
        assert field(attendee, "n") == "32" and field(attendee, "bm") == "8"
        screenshot(attendee, "room-following")

        # Any view that registers with view.js follows the same way: the memory wall too.
        lecturer.locator("nav a[href='/memory-wall']").click()
        lecturer.wait_for_url(re.compile(r"/memory-wall"))
        attendee.wait_for_url(re.compile(r"/memory-wall"))
        at_step(lecturer, 0)
        lecturer.keyboard.press("ArrowRight")
        lecturer.keyboard.press("ArrowRight")
        at_step(lecturer, 2)
        at_step(attendee, 2)
        room_state(attendee, "following")

        for pg in (lecturer, attendee, tablet):
            assert pg.log.console_errors == [], pg.log.console_errors
            assert pg.log.page_errors == [], pg.log.page_errors
            assert pg.log.external_requests == [], pg.log.external_requests
    finally:
        for ctx in (lecturer_ctx, attendee_ctx, tablet_ctx):
            ctx.close()


def test_a_wrong_code_says_so_and_leaves_the_page_alone(page, live_server):
    page.goto(f"{live_server}/tiles?n=32&d=8&bm=16&bn=16&step=0")
    at_step(page, 0)
    page.locator("#room-code-input").fill("ZZZZZZ")
    page.locator("#room-join button").click()
    page.locator("#room-error").wait_for(state="visible")
    assert "no room ZZZZZZ" in page.locator("#room-error").inner_text()
    room_state(page, "none")
    page.locator("#room-code-input").fill("a!")
    page.locator("#room-join button").click()
    assert "4 to 12 letters" in page.locator("#room-error").inner_text()
    assert page.log.page_errors == []


def start_room(page, base: str) -> str:
    page.goto(f"{base}/tiles?n=32&d=8&bm=16&bn=16&step=0")
    at_step(page, 0)
    page.locator("#room-start").click()
    room_state(page, "driving")
    return page.locator("#room-code").inner_text()


def join_room(page, base: str, code: str) -> None:
    page.goto(f"{base}/tiles?n=32&d=8&bm=16&bn=16&step=0")
    at_step(page, 0)
    page.locator("#room-code-input").fill(code)
    page.locator("#room-join button").click()


def error_text(page) -> str:
    box = page.locator("#room-error")
    box.wait_for(state="visible", timeout=WAIT_MS)
    return box.inner_text()


def test_a_full_room_says_why_and_an_ended_room_says_so(browser):
    """With one seat per room: the second page is refused with the server's reason; the lecturer
    ends the room and a follower's bar says it has ended."""
    with flashscope_server({"FLASHSCOPE_ROOM_MAX_CLIENTS": "2"}) as base:
        tabs = [open_tab(browser, base) for _ in range(3)]
        (_, lecturer), (_, first), (_, second) = tabs
        try:
            code = start_room(lecturer, base)
            assert lecturer.locator("#room-end").is_visible()
            join_room(first, base, code)
            room_state(first, "following")
            assert first.locator("#room-end").is_hidden()
            join_room(second, base, code)
            assert f"room {code} is full (2 clients)" in error_text(second)
            room_state(second, "none")
            lecturer.locator("#room-end").click()
            room_state(lecturer, "none")
            assert f"room {code} has ended" in error_text(lecturer)
            room_state(first, "none")
            assert f"room {code} has been ended by its lecturer" in error_text(first)
            for _, pg in tabs:
                assert pg.log.page_errors == [], pg.log.page_errors
        finally:
            for ctx, _ in tabs:
                ctx.close()


@pytest.mark.slow
def test_the_bar_shows_a_room_lost_with_redis_and_its_return(browser):
    """Redis restarts under the room: the bars say "Room lost", then follow again, and the
    lecturer's next step reaches the attendee."""
    with (
        restartable_redis() as redis,
        flashscope_server({"FLASHSCOPE_REDIS_URL": redis.url}) as base,
    ):
        tabs = [open_tab(browser, base) for _ in range(2)]
        (_, lecturer), (_, attendee) = tabs
        try:
            code = start_room(lecturer, base)
            join_room(attendee, base, code)
            room_state(attendee, "following")
            lecturer.keyboard.press("ArrowRight")
            at_step(attendee, 1)
            redis.stop()
            room_state(attendee, "lost")
            room_state(lecturer, "lost")
            assert attendee.locator("#room-status").inner_text().startswith("Room lost")
            lecturer.keyboard.press("ArrowRight")  # shown here, sent once the room is back
            at_step(lecturer, 2)
            redis.start()
            room_state(attendee, "following")
            room_state(lecturer, "driving")
            at_step(attendee, 2)
            lecturer.keyboard.press("ArrowRight")
            at_step(attendee, 3)
            for _, pg in tabs:
                assert pg.log.page_errors == [], pg.log.page_errors
        finally:
            for ctx, _ in tabs:
                ctx.close()
