"""Every page's Plotly figures in headless Chromium: colour scales, hovers, modebar, legends.

Each heatmap must say what its colours mean (a colour bar, one shared with a heatmap of the same
scale in its figure, or, for categories, a legend of chips that its trace names in
`meta.legend`) and what a cell is (a hovertemplate). The modebar keeps zoom, pan and reset, sits
outside the drawing and never covers a legend.
"""

from __future__ import annotations

import pytest

from .conftest import WAIT_MS, wait_attached, wait_step

pytestmark = pytest.mark.browser

# Pages on steps that show every figure they have; how many heatmaps each shows at least.
PAGES = {
    "/tiles?n=256&bm=64&bn=64&step=3": 4,
    "/tiles?algo=fa1&n=128&bm=32&bn=32&causal=1&step=9": 4,
    "/backward?step=60": 7,
    "/decode?step=275": 3,
    "/memory-wall?step=20": 2,
    "/online-softmax": 0,
    "/memory-scaling": 0,
    "/schedule": 0,
    "/compare": 0,
}

# Runs in the page: one line per heatmap that misses a colour scale or a hover.
AUDIT = """() => {
  const problems = [];
  let heatmaps = 0;
  const same = (a, b) => JSON.stringify([a.zmin, a.zmax, a.colorscale]) ===
    JSON.stringify([b.zmin, b.zmax, b.colorscale]);
  for (const gd of document.querySelectorAll('.js-plotly-plot')) {
    const full = gd._fullData || [];
    full.forEach((t, k) => {
      if (t.type !== 'heatmap' || !t.visible || t.hoverinfo === 'skip') return;
      heatmaps += 1;
      const where = `#${gd.id} trace ${k}`;
      const legend = t.meta && t.meta.legend ? document.querySelector(t.meta.legend) : null;
      const chips = legend ? legend.querySelectorAll('.chip').length : 0;
      const shared = full.some((u) => u !== t && u.type === 'heatmap' && u.showscale && same(u, t));
      const chipsShown = chips >= 2 && legend.offsetParent !== null;
      const scale = t.showscale || t.coloraxis || shared || chipsShown;
      if (!scale) problems.push(`${where}: no colour scale and no legend`);
      const hover = gd.data[k].hovertemplate;
      if (!hover || (Array.isArray(hover) ? !hover.length : !String(hover).trim())) {
        problems.push(`${where}: no hovertemplate`);
      }
    });
  }
  return { heatmaps, problems };
}"""


def _open(page, url: str) -> None:
    page.goto(url)
    wait_attached(page, "body[data-step]", 30000)
    page.wait_for_timeout(300)  # a figure drawn after the step's (a measured strip, a timeline)


@pytest.mark.parametrize("path", list(PAGES))
def test_every_heatmap_has_a_colour_scale_and_a_hover(page, live_server, path):
    _open(page, live_server + path)
    got = page.evaluate(AUDIT)
    assert got["heatmaps"] >= PAGES[path], got
    assert got["problems"] == []
    assert page.log.console_errors == [] and page.log.page_errors == []


def test_a_probability_hovers_as_a_decimal_with_its_row_and_key(page, live_server):
    _open(page, f"{live_server}/backward?step=60")
    wait_step(page, 60)
    tile = page.locator("#tile")
    tile.scroll_into_view_if_needed()
    box = tile.locator(".nsewdrag").first.bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.5, box["y"] + box["height"] * 0.5)
    label = page.locator("#tile .hoverlayer .hovertext").first
    label.wait_for(timeout=WAIT_MS)
    text = label.text_content()
    assert text.startswith("P[i=") and ", j=" in text and "] = 0." in text, text
    assert "μ" not in text and "e-" not in text, text


def _modebars(page) -> list[dict]:
    """For each figure: its modebar's buttons and box, its drawing's box and its legend's box."""
    return page.evaluate(
        """() => [...document.querySelectorAll('.js-plotly-plot')].map((gd) => {
          const box = (el) => { if (!el) return null; const r = el.getBoundingClientRect();
            return { left: r.left, right: r.right, top: r.top, bottom: r.bottom }; };
          const bar = gd.querySelector('.modebar');
          return {
            id: gd.id,
            buttons: bar
              ? [...bar.querySelectorAll('.modebar-btn')].map((b) => b.dataset.title)
              : [],
            bar: box(bar),
            svg: box(gd.querySelector('.main-svg')),
            legend: box(gd.querySelector('.legend')),
          };
        })"""
    )


def _overlap(a: dict, b: dict) -> bool:
    return not (
        a["right"] <= b["left"]
        or b["right"] <= a["left"]
        or a["bottom"] <= b["top"]
        or b["bottom"] <= a["top"]
    )


@pytest.mark.parametrize(
    "path", ["/memory-scaling", "/online-softmax?step=3", "/backward?step=60", "/decode?step=275"]
)
def test_the_modebar_keeps_zoom_pan_reset_and_clears_every_legend(page, live_server, path):
    _open(page, live_server + path)
    figures = _modebars(page)
    assert figures
    legends = 0
    for fig in figures:
        extra = set(fig["buttons"]) - {"Zoom", "Pan", "Reset axes", "Download plot as a PNG"}
        assert not extra, (fig["id"], extra)
        if not fig["bar"]:
            continue  # a figure with nothing to zoom (the strip beside a tile grid)
        assert {"Zoom", "Pan", "Reset axes"} <= set(fig["buttons"]), fig
        assert fig["bar"]["left"] >= fig["svg"]["right"] - 1, fig  # beside the drawing
        if fig["legend"]:
            legends += 1
            assert not _overlap(fig["bar"], fig["legend"]), fig
    assert legends >= 1
    assert page.locator(".modebar-btn[data-title^='Share']").count() == 0
