"""Helpers for export and playback tests: downloads, and waiting for a moving step."""

from __future__ import annotations

import json
import time
from pathlib import Path

from .conftest import WAIT_MS


def download(page, selector: str, timeout: float = WAIT_MS) -> tuple[str, bytes]:
    """Click `selector`, wait for the download, return (suggested file name, bytes)."""
    with page.expect_download(timeout=timeout) as info:
        page.locator(selector).click()
    dl = info.value
    return dl.suggested_filename, Path(dl.path()).read_bytes()


def download_json(page, selector: str) -> tuple[str, dict]:
    name, data = download(page, selector)
    return name, json.loads(data)


def assert_png(page, selector: str, stem: str) -> None:
    name, data = download(page, selector)
    assert name == f"{stem}.png", name
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 2000, (name, len(data))


def wait_past(page, step: int, timeout_s: float = 15.0) -> int:
    """Wait until the view has drawn step `step` or a later one (playback may skip past it)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        shown = page.evaluate("() => Number(document.body.dataset.step)")
        if shown >= step:
            return shown
        page.wait_for_timeout(30)
    raise AssertionError(f"step {step} not reached in {timeout_s} s")
