"""Rooms in headless Chromium: a lecturer drives, an attendee follows, explores alone and follows
again; the bars say when the lecturer has left or the room has closed."""

from __future__ import annotations

import re
import time

import pytest

from ..app.servers import flashscope_server, restartable_redis
from .conftest import WAIT_MS, PageLog, screenshot, wait_step

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
        assert attendee.locator("#room-status").inner_text() == "Exploring alone"
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
        at_step(lecturer, 9)  # a bare link opens once flash has finished query block 0
        lecturer.keyboard.press("ArrowRight")
        lecturer.keyboard.press("ArrowRight")
        at_step(lecturer, 11)
        at_step(attendee, 11)
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
            room_state(first, "closed")
            status = first.locator("#room-status").inner_text()
            assert status.startswith("Room closed"), status
            assert f"room {code} has been ended by its lecturer" in status
            first.reload()  # a reload still says so, until it is dismissed
            room_state(first, "closed")
            assert first.locator("#room-start").is_visible()
            first.locator("#room-leave", has_text="Dismiss").click()
            room_state(first, "none")
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


def status(page) -> str:
    return page.locator("#room-status").inner_text()


def test_a_follower_who_steps_alone_explores_alone_and_can_follow_again(browser, live_server):
    tabs = [open_tab(browser, live_server) for _ in range(2)]
    (_, lecturer), (_, attendee) = tabs
    try:
        code = start_room(lecturer, live_server)
        join_room(attendee, live_server, code)
        room_state(attendee, "following")
        assert status(attendee) == "Following"
        attendee.locator("h1").first.click()  # a touch that changes nothing: still following
        lecturer.keyboard.press("ArrowRight")
        at_step(attendee, 1)
        assert status(attendee) == "Following"
        attendee.keyboard.press("ArrowRight")  # the attendee's own step
        at_step(attendee, 2)
        room_state(attendee, "detached")
        assert status(attendee) == "Exploring alone"
        assert attendee.locator("#room-attach").is_visible()
        lecturer.keyboard.press("End")
        last = int(lecturer.locator("#step").get_attribute("max"))
        at_step(lecturer, last)
        attendee.wait_for_timeout(300)
        assert attendee.locator("body").get_attribute("data-step") == "2"
        attendee.locator("#room-attach", has_text="Follow again").click()
        room_state(attendee, "following")
        at_step(attendee, last)
        # A field edited and applied alone is exploring alone too.
        attendee.locator("#params input[name='seed']").fill("7")
        attendee.locator("#params button[type=submit]").click()
        room_state(attendee, "detached")
        attendee.locator("#room-attach").click()
        room_state(attendee, "following")
        # So is a link followed alone: the next page does not snap back to the lecturer's.
        attendee.locator("nav a[href='/memory-wall']").click()
        attendee.wait_for_url(re.compile(r"/memory-wall"))
        room_state(attendee, "detached")
        lecturer.keyboard.press("Home")
        at_step(lecturer, 0)
        attendee.wait_for_timeout(300)
        assert "/memory-wall" in attendee.url
        for _, pg in tabs:
            assert pg.log.page_errors == [], pg.log.page_errors
            assert pg.log.console_errors == [], pg.log.console_errors
    finally:
        for ctx, _ in tabs:
            ctx.close()


def count_text(page) -> str:
    return page.locator("#room-count").inner_text()


def wait_count(page, others: int, within_s: float) -> float:
    """Wait for the driver's bar to say `others` others are connected; the seconds it took."""
    want = f"{others} other{'' if others == 1 else 's'} connected"
    started = time.monotonic()
    page.locator("#room-count", has_text=want).wait_for(timeout=within_s * 1000 + 5000)
    took = time.monotonic() - started
    assert took <= within_s, f"{want!r} after {took:.2f} s"
    return took


def test_the_drivers_count_follows_joins_and_leaves_within_a_second(browser, live_server):
    tabs = [open_tab(browser, live_server) for _ in range(3)]
    (_, lecturer), (first_ctx, first), (_, second) = tabs
    try:
        code = start_room(lecturer, live_server)
        wait_count(lecturer, 0, 1.0)
        join_room(first, live_server, code)
        room_state(first, "following")  # joined: the count must follow within a second
        wait_count(lecturer, 1, 1.0)
        join_room(second, live_server, code)
        room_state(second, "following")
        wait_count(lecturer, 2, 1.0)
        first_ctx.close()  # the tab is closed: its socket ends
        wait_count(lecturer, 1, 1.0)
        second.locator("#room-leave").click()
        room_state(second, "none")
        wait_count(lecturer, 0, 1.0)
    finally:
        for ctx, _ in tabs:
            ctx.close()


def test_followers_see_the_driver_leave_and_the_room_close(browser, live_server):
    tabs = [open_tab(browser, live_server) for _ in range(2)]
    (_, lecturer), (_, attendee) = tabs
    try:
        code = start_room(lecturer, live_server)
        join_room(attendee, live_server, code)
        room_state(attendee, "following")
        # The lecturer changing pages is not leaving: the attendee follows throughout.
        lecturer.locator("nav a[href='/memory-wall']").click()
        attendee.wait_for_url(re.compile(r"/memory-wall"))
        room_state(attendee, "following")
        attendee.wait_for_timeout(3000)
        room_state(attendee, "following")
        # The lecturer leaves without ending the room: the attendee is told, also after a reload.
        link = lecturer.locator("#room-drive-link").input_value()
        lecturer.locator("#room-leave").click()
        room_state(lecturer, "none")
        room_state(attendee, "driver-left")
        assert status(attendee).startswith("Driver left")
        attendee.reload()
        room_state(attendee, "driver-left")
        # The lecturer comes back with the drive link: the attendee follows again.
        lecturer.goto(link)
        room_state(lecturer, "driving")
        room_state(attendee, "following")
        # The lecturer ends the room: the attendee's bar says it has closed, also after a reload.
        lecturer.locator("#room-end").click()
        room_state(lecturer, "none")
        room_state(attendee, "closed")
        assert status(attendee).startswith("Room closed")
        attendee.reload()
        room_state(attendee, "closed")
        assert code in attendee.locator("#room-code").inner_text()
        for _, pg in tabs:
            assert pg.log.page_errors == [], pg.log.page_errors
    finally:
        for ctx, _ in tabs:
            ctx.close()


def test_the_bar_explains_rooms_beside_start_a_room(page, live_server):
    page.goto(f"{live_server}/")
    help_ = page.locator("#room-help")
    assert help_.is_visible() and page.locator("#room-start").is_visible()
    help_.locator("summary").click()
    text = help_.locator(".room-help-panel").inner_text()
    assert "Start a room" in text and "Join" in text and "Follow again" in text
    assert page.log.page_errors == []
