"""Live runs from the pages, on a CPU: the backend badge, the measured source of the three
steppers through Triton's interpreter end to end, and the GPU-only buttons disabled with their
reason."""

from __future__ import annotations

import random
import time

import numpy as np
import pytest

from .conftest import WAIT_MS, screenshot, wait_attached, wait_step

pytestmark = pytest.mark.browser
RUN_TIMEOUT = 120_000  # ms: the interpreter runs the kernel on the test machine's CPU


def measured_done(page) -> None:
    """Wait until the run has ended, and fail at once with its status line if it did not end
    well (a failed run would otherwise only show as a timeout)."""
    wait_attached(page, "#measured:is([data-state='done'], [data-state='failed'])", RUN_TIMEOUT)
    state = page.locator("#measured").get_attribute("data-state")
    assert state == "done", page.locator("#measured-status").inner_text()


def test_every_page_says_what_the_server_runs_on(page, live_server):
    for path in ("/", "/tiles", "/compare"):
        page.goto(live_server + path)
        badge = page.locator("#backend-badge")
        badge.filter(has_text="CPU").wait_for(timeout=WAIT_MS)
        assert badge.inner_text() == "CPU: simulator and Triton interpreter"
        assert "interpreter" in badge.get_attribute("title")
    assert not page.log.console_errors and not page.log.page_errors


def test_tiles_measured_source_steps_through_the_kernels_own_state(page, live_server):
    seed = random.SystemRandom().randrange(1000)
    query = f"n=48&nk=40&d=16&bm=16&bn=16&dtype=fp16&causal=1&seed={seed}&source=measured"
    page.goto(f"{live_server}/tiles?{query}&step=9")
    wait_step(page, 9)
    measured_done(page)
    assert "interpreter" in page.locator("#measured-where").inner_text()
    status = page.locator("#measured-status").inner_text()
    assert "within the fp16 tolerance" in status, status
    # the stepper shows the kernel's own state: its m at step 9 is the run's, not the socket's
    page.locator("#now").filter(has_text="[the kernel's state]").wait_for(timeout=WAIT_MS)
    run_m = page.evaluate(
        """async (seed) => {
          const r = await fetch('/api/runs', {method: 'POST', headers: {'Content-Type':
            'application/json'}, body: JSON.stringify({mode: 'fwd', what: 'trace', seq: 48,
            seq_k: 40, head_dim: 16, causal: true, dtype: 'fp16', block_m: 16, block_n: 16,
            seed})});
          const run = await r.json();
          return run.result ? run.result.trace.events[9].state.m : null;
        }""",
        seed,
    )
    shown = page.evaluate("() => document.getElementById('ml').data[0].y")
    assert run_m is not None  # the identical request shares the page's finished run
    assert np.allclose(np.array(shown, dtype=float), np.array(run_m, dtype=float), equal_nan=True)
    # the diff panel: |Δm|, |Δℓ|, |ΔÕ| at this step, and the strip marks the step on screen
    rows = page.locator("#measured-step tbody tr")
    assert rows.count() == 4
    assert "|Δm|" in rows.nth(0).inner_text() and "|ΔÕ|" in rows.nth(2).inner_text()
    ratios = page.evaluate("() => document.getElementById('measured-strip').data[0].y")
    last = int(page.locator("#step-total").inner_text().split()[-1])  # "of 29": steps 0…29
    assert len(ratios) == last + 1
    assert page.evaluate("() => document.getElementById('measured-strip').layout.shapes[1].x0") == 9
    before = page.locator("#measured-step").inner_text()
    page.keyboard.press("ArrowRight")
    wait_step(page, 10)
    assert (
        page.evaluate("() => document.getElementById('measured-strip').layout.shapes[1].x0") == 10
    )
    assert page.locator("#measured-step").inner_text() != before
    screenshot(page, "tiles-measured")
    assert not page.log.console_errors and not page.log.page_errors
    assert not page.log.external_requests


def test_tiles_measured_source_refuses_what_the_kernel_cannot_run(page, live_server):
    page.goto(f"{live_server}/tiles?n=32&d=16&bm=8&bn=16&source=measured&step=0")
    wait_step(page, 0)
    page.locator("#measured[data-state='failed']").wait_for(state="attached", timeout=RUN_TIMEOUT)
    assert "block_m" in page.locator("#measured-status").inner_text()
    page.goto(f"{live_server}/tiles?algo=fa1&n=32&d=16&bm=16&bn=16&source=measured&step=0")
    wait_step(page, 0)
    page.locator("#measured[data-state='note']").wait_for(state="attached", timeout=WAIT_MS)
    assert "FA-2" in page.locator("#measured-status").inner_text()


def test_a_run_cancelled_before_its_page_followed_it_is_queued_again(page, live_server):
    # The page's first progress stream is held back past the server's grace for unfollowed runs
    # (FLASHSCOPE_RUNS_UNWATCHED_S, 1 s by default): the server cancels that run, as it would
    # for a page on a slow link, and the page queues the same request again.
    held: list[str] = []
    posts: list[str] = []

    def hold(route) -> None:
        if not held:
            held.append(route.request.url)
            time.sleep(3)
        route.continue_()

    page.route("**/api/runs/*/events", hold)
    page.on(
        "request",
        lambda r: r.method == "POST" and r.url.endswith("/api/runs") and posts.append(r.url),
    )
    seed = random.SystemRandom().randrange(1000, 2000)
    query = f"n=256&d=16&bm=16&bn=16&dtype=fp16&seed={seed}&source=measured"  # runs 4 s
    page.goto(f"{live_server}/tiles?{query}&step=3")
    wait_step(page, 3)
    measured_done(page)
    assert len(held) == 1 and len(posts) == 2, (held, posts)
    first = held[0].split("/api/runs/")[1].split("/")[0]
    body = page.evaluate("async (id) => (await fetch(`/api/runs/${id}`)).json()", first)
    assert body["state"] == "cancelled" and body["cause"] == "unfollowed", body
    assert "within the fp16 tolerance" in page.locator("#measured-status").inner_text()
    assert not page.log.console_errors and not page.log.page_errors


def test_backward_measured_source_checks_the_kernels_gradients(page, live_server):
    query = "n=40&d=16&bm=16&bn=16&dtype=bf16&causal=1&seed=4&source=measured"
    page.goto(f"{live_server}/backward?{query}&step=12")
    wait_step(page, 12)
    measured_done(page)
    rows = page.locator("#measured-body tbody tr")
    assert [rows.nth(i).inner_text().split()[0] for i in range(3)] == ["dQ", "dK", "dV"]
    assert "within the tolerance" in page.locator("#measured-status").inner_text()
    assert "no per-tile state" in page.locator("#measured-body").inner_text()
    assert not page.log.console_errors and not page.log.page_errors


def test_decode_measured_source_compares_each_split(page, live_server):
    query = "n=2&nk=700&d=16&bn=64&group=2&splits=3&dtype=fp16&seed=1&source=measured"
    page.goto(f"{live_server}/decode?{query}&step=3")
    wait_step(page, 3)
    measured_done(page)
    table = page.locator("#measured-splits tbody tr")
    assert table.count() == 3
    assert "all 3 splits within" in page.locator("#measured-status").inner_text()
    kernel = page.evaluate("() => document.getElementById('measured-lse').data[1].y")
    simulated = page.evaluate("() => document.getElementById('measured-lse').data[0].y")
    assert len(kernel) == 4 and np.allclose(kernel, simulated, atol=1e-4)
    assert "current" in (table.nth(0).get_attribute("class") or "")
    assert not page.log.console_errors and not page.log.page_errors


def test_gpu_only_buttons_are_disabled_with_their_reason(page, live_server):
    page.goto(f"{live_server}/compare")
    page.locator("#live-why").filter(has_text="GPU").wait_for(timeout=WAIT_MS)
    assert page.locator("#measure").is_disabled()
    assert "Timing needs a GPU" in page.locator("#live-why").inner_text()
    assert "shipped datasets" in page.locator("#live-why").inner_text()
    page.goto(f"{live_server}/schedule")
    page.locator("#schedule-measured-status").filter(has_text="GPU").wait_for(timeout=WAIT_MS)
    assert page.locator("#measure-schedule").is_disabled()
    assert not page.log.console_errors and not page.log.page_errors
