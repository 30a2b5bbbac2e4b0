"""/tiles draws the current tile and the error readout the server sends, step by step."""

from __future__ import annotations

import json
import random
import urllib.request

import pytest

from .conftest import wait_offscreen, wait_step

pytestmark = pytest.mark.browser


def _get(base: str, path: str) -> dict:
    with urllib.request.urlopen(base + path, timeout=30) as r:
        return json.loads(r.read())


def _fig(page, fig: str, expr: str):
    return page.evaluate(f"() => document.getElementById('{fig}').{expr}")


def _hover(page, fig: str, x: float, y: float) -> str | None:
    """The hover label of figure `fig` at data point (x, y) of its first panel."""
    return page.evaluate(
        """([fig, x, y]) => {
          const gd = document.getElementById(fig);
          Plotly.Fx.hover(gd, { xval: x, yval: y }, 'xy');
          const label = gd.querySelector('.hoverlayer .hovertext');
          return label ? label.textContent : null;
        }""",
        [fig, x, y],
    )


def test_s_p_tiles_and_the_error_readout_change_with_the_step(page, live_server):
    seed = random.SystemRandom().randrange(10_000)
    query = f"n=40&nk=37&d=8&bm=8&bn=8&causal=1&dtype=fp16&seed={seed}"
    served = _get(live_server, f"/api/trace?{query}&start=0&count=40")
    meta, events = served["meta"], served["events"]
    opening = meta["opening_step"]

    page.goto(f"{live_server}/tiles?{query}")  # no step: the page picks where to open
    wait_step(page, opening)
    prompt = page.locator("#step-prompt")
    assert prompt.is_visible() and "Press → or Play" in prompt.inner_text()
    assert events[opening]["phase"] == "softmax" and events[opening]["kv_block"] == 1

    seen_tiles, seen_readouts = set(), set()
    for k in range(opening, opening + 10):
        if k > opening:
            page.keyboard.press("ArrowRight")
            wait_step(page, k)
        wait_offscreen(page)  # the error, m/ℓ and accumulator figures are below the fold
        st = events[k]["state"]
        readout = page.locator("#err-readout").inner_text()
        history = _fig(page, "err", "data[0].y")
        assert history == [v if v > 0 else None for v in st["err_history"]], f"seed={seed} {k}"
        assert "floor" in readout and "fp16" in readout
        seen_readouts.add(readout)
        if st["s"] is None:
            assert page.locator("#tile-note").is_visible(), k  # a sentence says what comes next
            assert page.locator("#tile").evaluate("e => getComputedStyle(e).visibility") == "hidden"
            continue
        assert page.locator("#tile-note").is_hidden(), k
        assert _fig(page, "tile", "data[0].z") == st["s"], f"seed={seed} step {k}"
        seen_tiles.add(json.dumps(st["s"]))
        if st["p"] is not None:
            assert _fig(page, "tile-p", "data[0].z") == st["p"]
            assert page.locator("#tile-p-note").is_hidden()
            assert _fig(page, "ml", "data[3].y") == st["l_rescaled"]  # α·ℓ, then rowsum P
            assert _fig(page, "ml", "data[4].y") == st["p_sum"]
        else:
            assert "P comes at the next step" in page.locator("#tile-p-note").inner_text()
        # Small tiles print their numbers; every cell's hover names its query row and key.
        r0, c0 = st["rows"][0], st["cols"][0]
        hover = _hover(page, "tile", c0 + 1, r0 + 2)
        assert hover and hover.startswith(f"S[i={r0 + 2}, j={c0 + 1}] = "), hover
        value = st["s"][2][1]
        assert ("masked" in hover) if value is None else ("masked" not in hover), hover
        assert len(_fig(page, "tile", "data[0].text")) == len(st["s"])
        if events[k]["phase"] == "pv":
            assert _fig(page, "acc", "data[1].z") == st["pv"]
            assert _fig(page, "acc", "data[0].z") == st["o_rescaled"]
    assert not prompt.is_visible()  # gone once the reader stepped on
    assert len(seen_tiles) >= 2 and len(seen_readouts) >= 3, f"seed={seed}"
    assert page.log.console_errors == [] and page.log.page_errors == []


def test_step_zero_says_what_is_about_to_happen_and_the_last_step_is_exact(page, live_server):
    query = "n=64&d=16&bm=32&bn=16&dtype=bf16&seed=2"
    page.goto(f"{live_server}/tiles?{query}&step=0")
    wait_step(page, 0)
    wait_offscreen(page)
    note = page.locator("#tile-note").inner_text()
    assert "no key seen yet" in note and "K₀" in note
    assert _fig(page, "ml", "layout.yaxis3.range") == [0, 1]  # ℓ = 0: an axis from 0 to 1
    notes = json.dumps(_fig(page, "ml", "layout.annotations"), ensure_ascii=False)
    assert "m = −∞ for every row" in notes
    assert "Press → or Play" in page.locator("#step-prompt").inner_text()

    served = _get(live_server, f"/api/trace?{query}&start=0&count=1")
    last = served["meta"]["n_events"] - 1
    page.keyboard.press("End")
    wait_step(page, last)
    state = _get(live_server, f"/api/trace?{query}&start={last}&count=1")["events"][0]["state"]
    assert state["final"]
    readout = page.locator("#err-readout").inner_text()
    assert readout.startswith("After the output as written")
    assert "as exact as bf16 allows" in readout
    assert page.log.console_errors == [] and page.log.page_errors == []
