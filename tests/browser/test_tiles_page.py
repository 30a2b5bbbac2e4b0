"""The tile stepper in headless Chromium: loads, steps with →, keeps state in the URL."""

from __future__ import annotations

import json
import re
import urllib.request

import pytest

from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.teach.algorithms import ALGORITHMS

from .conftest import screenshot, wait_offscreen, wait_step
from .grid import grid_status

pytestmark = pytest.mark.browser


def _readout(page) -> dict[str, str]:
    wait_offscreen(page)  # the m, ℓ figure is below the fold: drawn once stepping pauses
    return {
        "now": page.locator("#now").inner_text(),
        "step": page.locator("#step").input_value(),
        "m": page.evaluate("() => document.getElementById('ml').data[0].y.join(',')"),
        "l": page.evaluate("() => document.getElementById('ml').data[1].y.join(',')"),
    }


def test_step_with_arrow_key_changes_m_l_and_step(page, live_server):
    page.goto(f"{live_server}/tiles?n=256&d=64&bm=64&bn=64&seed=3&step=0")
    wait_step(page, 0)
    first = _readout(page)
    assert first["step"] == "0"
    assert "load q" in first["now"]

    # Step to the first softmax update: m and ℓ change from their initial −∞ and 0.
    for _ in range(3):
        page.keyboard.press("ArrowRight")
    wait_step(page, 3)
    after = _readout(page)
    assert after["step"] == "3"
    assert "softmax" in after["now"]
    assert after["m"] != first["m"] and after["l"] != first["l"]
    assert re.search(r"[?&]step=3\b", page.url)

    # The pseudocode line of the online-softmax update is highlighted.
    assert "rowmax" in page.locator("#pseudocode li.current").inner_text()
    # Counters show the Q tile and one K/V tile read so far: (64 + 2·64)·64 elements.
    assert page.locator("#hbm-read").inner_text().startswith("12,288")

    # Shift+→ jumps to the next tile (loading K/V block 1); two more steps reach its softmax,
    # where m and ℓ have taken in the second block: the page shows the server's numbers.
    page.keyboard.press("Shift+ArrowRight")
    wait_step(page, 5)
    assert "load kv" in page.locator("#now").inner_text()
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    wait_step(page, 7)
    later = _readout(page)
    assert later["l"] != after["l"]
    url = f"{live_server}/api/trace?n=256&d=64&bm=64&bn=64&seed=3&start=7&count=1"
    with urllib.request.urlopen(url) as r:
        served = json.load(r)["events"][0]["state"]
    assert [float(x) for x in later["l"].split(",")] == served["l"]
    assert [float(x) for x in later["m"].split(",")] == served["m"]

    assert page.log.console_errors == []
    assert page.log.page_errors == []
    assert page.log.external_requests == []


def test_url_reproduces_view_and_final_state_is_exact(page, live_server):
    # 256×256 with 64×64 tiles: 4 query blocks × (2 + 4·4) = 72 steps; the last one stores.
    page.goto(f"{live_server}/tiles?n=256&d=64&bm=64&bn=64&seed=0&step=71")
    wait_step(page, 71)
    assert "store" in page.locator("#now").inner_text()
    assert grid_status(page)["z"] == [[2, 2, 2, 2]] * 4  # every tile done
    exact = page.locator("#exactness").inner_text()
    assert float(re.search(r"= ([0-9.e+-]+)", exact).group(1)) < 1e-5, exact
    # The Plotly figures rendered real SVG.
    assert page.locator("#grid .main-svg").count() >= 1
    assert page.locator("#out .main-svg").count() >= 1
    page.keyboard.press("ArrowLeft")
    wait_step(page, 70)
    screenshot(page, "tiles")
    assert page.log.console_errors == [] and page.log.page_errors == []
    assert page.log.external_requests == []


def test_bad_parameters_show_a_clear_message(page, live_server):
    page.goto(f"{live_server}/tiles?n=5000&bm=48")
    errors = page.locator("#errors")
    errors.wait_for(state="visible")
    text = errors.inner_text()
    assert "n must be ≤ 1024" in text
    assert "bm must be a power of two" in text
    assert page.log.page_errors == []
    assert page.log.external_requests == []


def test_home_page_links_views_without_external_requests(page, live_server):
    page.goto(live_server + "/")
    assert "FlashAttention" in page.locator("h1").inner_text()
    page.locator("a[href='/tiles']").first.click()
    page.wait_for_url(re.compile(r"/tiles"))
    wait_step(page, 7)  # a bare link opens on the first rescale (trace meta "opening_step")
    assert page.log.console_errors == [] and page.log.page_errors == []
    assert page.log.external_requests == []


@pytest.mark.parametrize("algo", ["naive", "fa1", "fa2-bwd", "decode"])
def test_other_algorithms_step_without_errors(page, live_server, algo):
    """The stepper is drawn for FA-2; other programs (whose views come later) must not break it."""
    n = 4 if algo == "decode" else 48
    page.goto(f"{live_server}/tiles?algo={algo}&n={n}&d=16&bm=16&bn=16&seed=1&step=0")
    wait_step(page, 0)
    for k in range(1, 4):
        page.keyboard.press("ArrowRight")
        wait_step(page, k)
    problem = AttentionProblem(seq_q=n, head_dim=16, dtype="fp32")
    last = ALGORITHMS[algo].n_events(problem, TileConfig(16, 16)) - 1
    page.keyboard.press("End")
    wait_step(page, last)
    assert page.locator("#now").inner_text().startswith(f"Step {last}:")
    assert page.log.console_errors == [] and page.log.page_errors == []
    assert page.log.external_requests == []


def _ops(live_server, query: str) -> dict:
    with urllib.request.urlopen(f"{live_server}/api/trace/ops?{query}") as r:
        return json.load(r)


def test_fa1_causal_ragged_fp16_fills_columns_and_shows_what_is_on_chip(page, live_server):
    query = "algo=fa1&n=100&nk=150&d=32&bm=32&bn=32&causal=1&dtype=fp16&seed=2"
    ops = _ops(live_server, query)
    cols = ops["columns"]
    # The store that ends the last query block's visit of key block 1: column 1 is done.
    step = max(
        k for k, ph in enumerate(cols["phase"]) if ph == "store" and cols["kv_block"][k] == 1
    )
    page.goto(f"{live_server}/tiles?{query}&step={step}")
    wait_step(page, step)
    assert page.locator("#algo-title").inner_text() == "FlashAttention-1 forward"
    assert page.locator("select[name=algo]").input_value() == "fa1"
    kinds = ops["meta"]["grid"]["kinds"]
    status = grid_status(page)
    z = status["z"]
    for i, row in enumerate(kinds):
        for j, kind in enumerate(row):
            if kind == 0:
                assert z[i][j] == 0, (i, j)  # skipped: drawn apart
            elif j <= 1:
                assert z[i][j] in (2, 3), (i, j)  # the first two columns, done
            else:
                assert z[i][j] == 1, (i, j)  # FA-1 has not reached column 2 in any row
    assert status["strokes"] == sum(row.count(1) for row in kinds)  # partial tiles, stroked
    # O went to HBM at the init and after each visit: three times for block 3 by now.
    strip = page.evaluate("() => document.getElementById('writes').data[0].z.map(r => r[0])")
    assert strip[3] == 3 and strip[0] == 3
    assert "store" in page.locator("#now").inner_text()
    assert "write Oᵢ" in page.locator("#pseudocode li.current").inner_text()
    exact = page.locator("#exactness").inner_text()
    assert "fp16" in exact and "× the" in exact
    table = page.locator("#onchip-body").inner_text()
    assert "Oᵢ" in table and "shared mem." in table and "Kⱼ" in table
    assert page.locator("#onchip-warning").is_hidden()
    assert "of 227 KiB of shared memory per CTA" in page.locator("#smem-text").inner_text()

    # The URL (GPU included) reproduces the view in a fresh page.
    page.locator("select[name=gpu]").select_option("a100-80gb")
    assert "of 163 KiB" in page.locator("#smem-text").inner_text()
    url, now = page.url, page.locator("#now").inner_text()
    assert "gpu=a100-80gb" in url and re.search(rf"[?&]step={step}\b", url)
    page.goto(url)
    wait_step(page, step)
    assert page.locator("#now").inner_text() == now
    assert page.locator("#onchip-body").inner_text() == table
    assert page.locator("select[name=gpu]").input_value() == "a100-80gb"

    # Tiles too large for a GPU's shared memory get a clear warning.
    page.goto(f"{live_server}/tiles?n=256&d=256&bm=256&bn=256&gpu=rtx-4090&step=2")
    wait_step(page, 2)
    warning = page.locator("#onchip-warning")
    warning.wait_for(state="visible")
    assert "Over capacity on the GeForce RTX 4090" in warning.inner_text()
    assert "768 KiB" in page.locator("#smem-text").inner_text()
    assert page.log.console_errors == [] and page.log.page_errors == []
    assert page.log.external_requests == []
