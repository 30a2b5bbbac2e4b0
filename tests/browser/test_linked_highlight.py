"""/tiles links its pseudocode, its tile grid and its figures: the current line's figures are
marked, hovering a line outlines the figures it changes (and a figure, its lines), and a click on
a tile of the grid goes to that tile's first step."""

from __future__ import annotations

import json
import urllib.request

import pytest

from .conftest import wait_step

pytestmark = pytest.mark.browser

QUERY = "n=64&d=16&bm=16&bn=16&seed=3"


def figure_of(page, plot: str):
    return page.locator(f"figure:has(#{plot})")


def classes(page, plot: str) -> str:
    return figure_of(page, plot).get_attribute("class") or ""


def test_lines_figures_and_tiles_are_linked(page, live_server):
    with urllib.request.urlopen(f"{live_server}/api/trace?{QUERY}&start=0&count=40") as r:
        served = json.load(r)
    meta, events = served["meta"], served["events"]
    k = next(e["step"] for e in events if e["phase"] == "softmax")
    page.goto(f"{live_server}/tiles?{QUERY}&step={k}")
    wait_step(page, k)

    # The softmax line is current: the S/P tile and the m, α, ℓ figure are marked, not P·V's.
    assert "linked-now" in classes(page, "tile") and "linked-now" in classes(page, "ml")
    assert "linked-now" not in classes(page, "acc")
    page.keyboard.press("ArrowRight")  # P·V
    wait_step(page, k + 1)
    assert "linked-now" in classes(page, "acc") and "linked-now" not in classes(page, "ml")

    # Hovering the line of Õ ← α·Õ + P·Vⱼ outlines the accumulator; hovering m, α, ℓ marks the
    # softmax line.
    pv_line = meta["pseudocode"].index(next(t for t in meta["pseudocode"] if "Õ ← α·Õ" in t))
    page.locator(f"#pseudocode li[data-line='{pv_line}']").hover()
    assert "linked-hover" in classes(page, "acc")
    assert "linked-hover" not in classes(page, "tile")
    figure_of(page, "ml").locator("figcaption").hover()
    soft = page.locator("#pseudocode li.linked-hover")
    assert soft.count() == 1 and "rowmax S" in soft.inner_text()

    # A click on tile (2, 1) of the grid goes to its first step.
    page.locator("#grid").scroll_into_view_if_needed()
    box = page.locator("#grid .nsewdrag").first.bounding_box()
    nq, nk = meta["grid"]["q_blocks"], meta["grid"]["kv_blocks"]
    page.mouse.click(box["x"] + box["width"] * 1.5 / nk, box["y"] + box["height"] * 2.5 / nq)
    first = meta["grid"]["tile_first"][2][1]
    wait_step(page, first)
    assert "Q block 2" in page.locator("#now").inner_text()
    assert page.log.console_errors == [] and page.log.page_errors == []
