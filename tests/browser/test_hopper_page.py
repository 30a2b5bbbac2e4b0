"""/hopper in headless Chromium with the shipped H100 warpgroup data: the Gantt per warpgroup,
simulated above measured, the toggles in the URL and the picture, stepping with its narrative,
the colour key, a GPU without measurements, and a phone's width."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit

import pytest

from ..app.servers import flashscope_server
from .conftest import WAIT_MS, screenshot

pytestmark = pytest.mark.browser


def _ready(page) -> None:
    page.locator("body[data-step]").wait_for(state="attached", timeout=WAIT_MS)


def _rows(page, axis: str) -> list[str]:
    """The Gantt's rows drawn on subplot `axis` ("y": simulated, "y2": measured)."""
    return page.evaluate(
        """(axis) => {
          const div = document.getElementById('gantt');
          const mine = div.data.filter((t) => (t.yaxis || 'y') === axis);
          return [...new Set(mine.flatMap((t) => t.y))];
        }""",
        axis,
    )


def _params(page) -> dict[str, str]:
    return dict(parse_qsl(urlsplit(page.url).query))


def _reloaded(page, before: str) -> None:
    """The readout of the measured time differs from `before` (the new answer is drawn)."""
    page.wait_for_function(
        "(before) => document.getElementById('time-measured').textContent !== before",
        arg=before,
        timeout=WAIT_MS,
    )


def test_gantt_per_warpgroup_simulated_over_measured(page, live_server):
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(f"{live_server}/hopper")
    _ready(page)
    rows = ["consumer 0", "consumer 1", "loader"]
    assert sorted(_rows(page, "y")) == rows and sorted(_rows(page, "y2")) == rows
    key = page.locator("#phase-key li")
    assert key.count() == 10 and page.locator("#phase-key .chip").count() == 10
    assert "softmax" in page.locator("#phase-key").inner_text()
    assert "measured: variant 'pingpong'" in page.locator("#time-measured").inner_text()
    source = page.locator("#measured-source").inner_text()
    assert "NVIDIA H100 80GB HBM3" in source
    # how far the timeline shown is from the plain kernel, from the shipped figures
    rec = page.evaluate("async () => (await (await fetch('/api/hopper')).json()).measured.timeline")
    off = 100 * (rec["span_ms"] / rec["plain_ms"] - 1)
    sign = "+" if off >= 0 else "−"
    want = f"spans {rec['span_ms']:.3f} ms by the GPU's timer, {sign}{abs(off):.1f} % against"
    assert want in source, source
    # the narrative sits beside the Gantt, above the fold
    now = page.locator("#now-sim").bounding_box()
    gantt = page.locator("#gantt").bounding_box()
    assert now["x"] + now["width"] <= gantt["x"] and now["y"] + now["height"] < 900
    hover = page.evaluate("() => document.getElementById('gantt').data[0].customdata[0]")
    assert "µs" in hover and ("copy" in hover or "wait" in hover)
    for fig in ("busy", "versions", "explain", "fp8"):
        assert page.locator(f"#{fig} .main-svg").count() >= 1, fig
    assert page.locator("#variants tbody tr").count() >= 3
    assert page.locator("#variants tr.current").count() == 1
    screenshot(page, "hopper")
    assert page.log.console_errors == [] and page.log.page_errors == []
    assert page.log.external_requests == []


def test_stepping_moves_the_cursor_and_the_narrative(page, live_server):
    page.goto(f"{live_server}/hopper")
    _ready(page)
    k = int(page.evaluate("() => document.body.dataset.step"))
    assert k > 0  # opens in the steady state, not at the launch
    before = page.locator("#now-sim").inner_text()
    assert "consumer 1" in before and "softmax" in before
    page.keyboard.press("ArrowRight")
    page.locator(f"body[data-step='{k + 1}']").wait_for(state="attached", timeout=WAIT_MS)
    after = page.locator("#now-sim").inner_text()
    assert after != before and after.startswith("at ")
    assert _params(page)["step"] == str(k + 1)
    assert page.locator("#now-measured").inner_text().startswith("at ")
    cursor = page.evaluate("() => document.getElementById('gantt').layout.shapes.length")
    assert cursor == 2  # one on each timeline
    assert page.log.console_errors == [] and page.log.page_errors == []


def test_toggles_change_the_url_and_the_picture(page, live_server):
    page.goto(f"{live_server}/hopper")
    _ready(page)
    before = page.locator("#time-measured").inner_text()
    page.locator("input[name=pipeline]").uncheck()  # ping-pong goes off with it
    _reloaded(page, before)
    got = _params(page)
    assert got["pipeline"] == "0" and got["pingpong"] == "0"
    assert "variant 'plain'" in page.locator("#time-measured").inner_text()
    before = page.locator("#time-measured").inner_text()
    page.locator("select[name=head_dim]").select_option("64")
    _reloaded(page, before)
    before = page.locator("#time-measured").inner_text()
    page.locator("select[name=consumers]").select_option("3")
    _reloaded(page, before)
    assert _params(page)["consumers"] == "3" and _params(page)["head_dim"] == "64"
    assert sorted(_rows(page, "y")) == ["consumer 0", "consumer 1", "consumer 2", "loader"]
    assert sorted(_rows(page, "y2")) == ["consumer 0", "consumer 1", "consumer 2", "loader"]
    assert "variant 'plain'" in page.locator("#time-measured").inner_text()
    before = page.locator("#time-measured").inner_text()
    page.locator("select[name=gpu]").select_option("h200")
    _reloaded(page, before)
    assert _params(page)["gpu"] == "h200"  # the shipped H200 recording
    assert "No measurement for this GPU" not in page.locator("#now-measured").inner_text()
    assert sorted(_rows(page, "y2")) == ["consumer 0", "consumer 1", "consumer 2", "loader"]
    before = page.locator("#time-measured").inner_text()
    page.locator("select[name=gpu]").select_option("h100-pcie")
    _reloaded(page, before)
    assert _params(page)["gpu"] == "h100-pcie"
    assert "No measurement for this GPU" in page.locator("#now-measured").inner_text()
    assert _rows(page, "y2") == []
    assert page.log.console_errors == [] and page.log.page_errors == []


def test_one_consumer_turns_ping_pong_off_and_back(page, live_server):
    """One consumer has nobody to take turns with: choosing it unchecks ping-pong, and ticking
    ping-pong again brings a second consumer back; the Gantt has the rows of each."""
    page.goto(f"{live_server}/hopper")
    _ready(page)
    assert page.locator("input[name=pingpong]").is_checked()
    page.locator("select[name=consumers]").select_option("1")
    page.wait_for_function("() => new URL(location).searchParams.get('consumers') === '1'")
    page.wait_for_function(
        "() => document.getElementById('gantt').data?.every((t) => !t.y.includes('consumer 1'))"
    )
    got = _params(page)
    assert got["consumers"] == "1" and got["pingpong"] == "0" and got["pipeline"] == "1"
    assert sorted(_rows(page, "y")) == ["consumer 0", "loader"]
    page.locator("input[name=pingpong]").check()
    page.wait_for_function("() => new URL(location).searchParams.get('consumers') === '2'")
    got = _params(page)
    assert got["pingpong"] == "1" and got["pipeline"] == "1"
    page.wait_for_function(
        "() => document.getElementById('gantt').data?.some((t) => t.y.includes('consumer 1'))"
    )
    assert page.log.console_errors == [] and page.log.page_errors == []


def test_no_sideways_scroll_on_a_phone(browser, live_server):
    context = browser.new_context(viewport={"width": 390, "height": 844})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{live_server}/hopper?head_dim=64&consumers=3")
    _ready(page)
    page.wait_for_timeout(300)
    width = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
    assert width[0] <= width[1], width
    assert page.locator("#gantt").bounding_box()["width"] > 0.6 * 390
    assert errors == []
    context.close()


def test_record_on_this_gpu_is_disabled_on_a_cpu_server_with_the_reason(page, live_server):
    page.goto(f"{live_server}/hopper")
    _ready(page)
    button = page.locator("#record-live")
    why = "needs an H100 or H200: this server has no GPU"
    page.locator("#record-status").filter(has_text=why).wait_for(timeout=WAIT_MS)
    assert button.is_disabled() and button.inner_text() == "Record on this GPU"
    assert why in (button.get_attribute("title") or "")
    # a link to a live recording the server does not have: the shipped one, and why
    page.goto(f"{live_server}/hopper?run=abc123")
    _ready(page)
    status = page.locator("#record-status").inner_text()
    assert "no longer has this live recording" in status
    label = page.evaluate("() => document.getElementById('gantt').layout.annotations[1].text")
    assert "recorded on NVIDIA H100 80GB HBM3" in label and "live" not in label
    assert _params(page)["run"] == "abc123"
    # another configuration is not the recording's: the run leaves the URL
    page.locator("input[name=causal]").check()
    page.wait_for_function("() => !new URL(location.href).searchParams.has('run')")
    assert _params(page)["causal"] == "1"
    assert page.log.console_errors == [] and page.log.page_errors == []


def test_a_live_recording_replaces_the_shipped_one_and_stays_in_the_url(page):
    """On a server whose run queue has a GPU (its kernel call a stand-in,
    tests/app/fake_hopper_jobs.py): the button records the launch on screen and the measured
    Gantt becomes that recording, labelled with its device and cost."""
    env = {"FLASHSCOPE_RUNS_EXECUTOR": "tests.app.fake_hopper_jobs:execute",
           "FLASHSCOPE_RUNS_DEVICES": '["cuda:0"]'}  # fmt: skip
    query = "head_dim=64&seq=1024&consumers=1&pipeline=0&pingpong=0"
    with flashscope_server(env) as base:
        page.goto(f"{base}/hopper?{query}")
        _ready(page)
        button = page.locator("#record-live")
        assert button.is_enabled(), page.locator("#record-status").inner_text()
        button.click()
        page.wait_for_function("() => new URL(location.href).searchParams.has('run')",
                               timeout=WAIT_MS)  # fmt: skip
        run = _params(page)["run"]
        page.locator("#record-status").filter(has_text=f"run {run}").wait_for(timeout=WAIT_MS)
        device = "recorded live on NVIDIA H100 80GB HBM3"
        assert device in page.locator("#record-status").inner_text()
        label = page.evaluate("() => document.getElementById('gantt').layout.annotations[1].text")
        assert device in label
        assert "+10.0 % time with the recording on" in label
        source = page.locator("#measured-source").inner_text()
        # timed behind the gate the recording's launches waited for, and without it
        gated = "plain kernel 0.010 ms behind the recording's 260 µs gate (0.012 ms without it)"
        assert f"{gated}, recorded 0.011 ms (+10.0 %" in source
        assert "spans 0.003 ms by the GPU's timer, −66.0 % against the plain kernel" in source
        assert "measured live" in page.locator("#time-measured").inner_text()
        # the recording's loader and consumer rows, as the stand-in's stamps say
        assert sorted(_rows(page, "y2")) == ["consumer 0", "loader"]
        # the link reopens it
        page.goto(page.url)
        _ready(page)
        page.locator("#record-status").filter(has_text=f"run {run}").wait_for(timeout=WAIT_MS)
        assert page.log.console_errors == [] and page.log.page_errors == []
