"""Browser fixtures: a live flashscope server and headless Debian Chromium driven by Playwright.

Every page opened through the `page` fixture records console errors, page errors and any request
that leaves the test server; tests assert on those lists.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ..app.servers import flashscope_server

CHROMIUM = os.environ.get("FLASHSCOPE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ROOT = Path(__file__).resolve().parents[2]
# Screenshots land in artifacts/ (ignored) so a test run leaves the tree clean; `make screenshots`
# runs the browser tests with FLASHSCOPE_SCREENSHOTS=docs/screenshots to refresh the README's.
SCREENSHOTS = ROOT / os.environ.get("FLASHSCOPE_SCREENSHOTS", "artifacts/screenshots")
# The longest a wait for the page or the server may take. A wait ends as soon as what it waits
# for is there, so only a failure waits this long; it is generous because `make test` runs two
# workers on two cores, beside each server's compute and run workers and Chromium, and a first
# trace on such a machine has taken over 15 s.
WAIT_MS = 60_000


# The server's output (its workers' too) goes to a file, never to a pipe nobody reads, which
# would stop the server once full; a wait that times out shows its last lines.
SERVER_LOG: list[Path] = []


def server_log_tail(chars: int = 1500) -> str:
    if not SERVER_LOG or not SERVER_LOG[0].exists():
        return ""
    return SERVER_LOG[0].read_text(errors="replace")[-chars:]


@pytest.fixture(scope="session")
def live_server(tmp_path_factory) -> Iterator[str]:
    """A flashscope server on a free loopback port, started as `flashscope serve` would be."""
    log_path = tmp_path_factory.mktemp("server") / "server.log"
    SERVER_LOG[:] = [log_path]
    with flashscope_server(log_path=log_path) as base:
        yield base


@pytest.fixture(scope="session")
def browser():
    if not shutil.which(CHROMIUM) and not Path(CHROMIUM).exists():
        pytest.fail(f"Chromium not found at {CHROMIUM}: `make test` installs Debian's chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


@dataclass
class PageLog:
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    external_requests: list[str] = field(default_factory=list)


@pytest.fixture
def page(browser, live_server):
    """A fresh 1280×720 page that logs errors and every request leaving the test server."""
    context = browser.new_context(viewport={"width": 1280, "height": 720})
    context.set_default_timeout(WAIT_MS)
    pg = context.new_page()
    log = PageLog()
    pg.on("console", lambda m: m.type == "error" and log.console_errors.append(m.text))
    pg.on("pageerror", lambda e: log.page_errors.append(str(e)))

    def watch(request) -> None:
        url = request.url
        if not (
            url.startswith(live_server)
            or url.startswith(live_server.replace("http", "ws"))
            or url.startswith(("data:", "blob:", "about:"))
        ):
            log.external_requests.append(url)

    pg.on("request", watch)
    pg.log = log  # type: ignore[attr-defined]
    yield pg
    context.close()


def screenshot(page, name: str) -> Path:
    """Save a full-page screenshot (see SCREENSHOTS; the README shows docs/screenshots/)."""
    wait_offscreen(page)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


# Runs in the page: what it shows of a wait that did not end (the alert box, the stepper's
# marks on <body>, the measured panel's state and status line).
PAGE_STATE = """() => {
  const text = (id) => (document.getElementById(id) || {}).innerText || null;
  return {
    errors: text('errors'), body: {...document.body.dataset},
    measured: (document.getElementById('measured') || {dataset: {}}).dataset.state || null,
    status: text('measured-status'),
  };
}"""


def wait_attached(page, selector: str, timeout: float = WAIT_MS) -> None:
    """Wait until `selector` is in the page; when it is not within `timeout` ms, fail with what
    the page shows instead (an error the server sent says why far better than a timeout)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.locator(selector).wait_for(state="attached", timeout=timeout)
    except PlaywrightTimeout:
        try:
            shown = page.evaluate(PAGE_STATE)
        except Exception as exc:  # the page itself is gone or hung: say so
            shown = f"(the page did not answer: {exc})"
        errors = getattr(getattr(page, "log", None), "page_errors", None) or getattr(
            page, "errors", None
        )
        raise AssertionError(
            f"{selector} not in {page.url} after {timeout / 1000:g} s; the page shows {shown}"
            f"; page errors {errors}; the server's last output: {server_log_tail() or '(none)'}"
        ) from None


def wait_step(page, step: int, timeout: float = WAIT_MS) -> None:
    """Wait until the view has drawn `step` (views set <body data-step> after drawing) and put
    it into the URL (/tiles writes the URL after the step is painted: <body data-url>)."""
    wait_attached(page, f"body[data-step='{step}']:not([data-url])", timeout)


def wait_offscreen(page, timeout: float = WAIT_MS) -> None:
    """Wait until figures below the fold show the step too (/tiles draws them once in view or
    once stepping pauses: <body data-offscreen="stale"> meanwhile)."""
    page.locator("body:not([data-offscreen='stale'])").wait_for(state="attached", timeout=timeout)
