"""Every page on a 390×844 phone screen in headless Chromium: nothing scrolls sideways, figures
keep their width, and the stepping controls stay on screen beside the figure in view."""

from __future__ import annotations

import pytest

from flashscope.app.views import VIEWS

from .conftest import WAIT_MS, screenshot, wait_attached

pytestmark = pytest.mark.browser

PHONE = {"width": 390, "height": 844}
PAGES = ["/", "/docs", *(v.path for v in VIEWS if v.ready)]


@pytest.fixture
def phone(browser, live_server):
    context = browser.new_context(viewport=PHONE)
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.errors = errors  # type: ignore[attr-defined]
    yield pg
    context.close()


def _open(page, url: str) -> None:
    page.goto(url)
    if page.locator(".view .stepper").count():
        wait_attached(page, "body[data-step]", 30000)
    else:
        page.wait_for_load_state("networkidle")
    page.wait_for_timeout(300)


def _too_wide(page) -> dict:
    return page.evaluate(
        """() => {
          const w = window.innerWidth;
          const wide = [...document.querySelectorAll('body *')]
            .filter((el) => !el.closest('svg') && el.getBoundingClientRect().right > w + 0.5)
            .slice(0, 5).map((el) => `${el.tagName.toLowerCase()}#${el.id}.${el.className}`);
          return { scroll: document.documentElement.scrollWidth, width: w, wide };
        }"""
    )


@pytest.mark.parametrize("path", PAGES)
def test_no_page_scrolls_sideways_on_a_phone(phone, live_server, path):
    _open(phone, live_server + path)
    got = _too_wide(phone)
    assert got["scroll"] <= got["width"], got
    widths = phone.evaluate(
        "() => [...document.querySelectorAll('.plot.js-plotly-plot:not(.plot-strip)')]"
        ".map((d) => [d.id, d.getBoundingClientRect().width])"
    )
    narrow = [(i, w) for i, w in widths if w < 0.6 * PHONE["width"]]
    assert not narrow, narrow  # one figure per row, not two of 171 px
    assert phone.errors == []


def test_the_stepper_stays_beside_the_figure_it_drives(phone, live_server):
    _open(phone, f"{live_server}/tiles?step=5")
    phone.locator("#grid").scroll_into_view_if_needed()
    grid = phone.locator("#grid").bounding_box()
    play = phone.locator("#play").bounding_box()
    assert play["y"] >= 0 and play["y"] + play["height"] <= PHONE["height"], play
    assert grid["y"] < PHONE["height"]
    phone.locator("#next").click()
    phone.locator("body[data-step='6']").wait_for(state="attached", timeout=WAIT_MS)
    # The figures stay clear of the bar: the page ends with room for it.
    bar = phone.locator(".stepper").bounding_box()
    phone.evaluate("() => window.scrollTo(0, document.documentElement.scrollHeight)")
    footer = phone.locator(".site-footer").bounding_box()
    assert footer["y"] + footer["height"] <= bar["y"] + 1, (footer, bar)
    screenshot(phone, "tiles-phone")
    assert phone.errors == []


# Runs in the page: pairs of an axis title and another title or a tick label that overlap.
CLASHES = """(id) => {
  const gd = document.getElementById(id);
  const titles = [...gd.querySelectorAll(
    '[class^="g-x"][class$="title"] text, [class^="g-y"][class$="title"] text')];
  const ticks = [...gd.querySelectorAll('.xtick text, .ytick text, [class$="tick"] text')];
  const box = (e) => e.getBoundingClientRect();
  const hit = (a, b) => a.width > 0 && b.width > 0 && a.left < b.right - 1 && b.left < a.right - 1
    && a.top < b.bottom - 1 && b.top < a.bottom - 1;
  const out = [];
  titles.forEach((t, i) => {
    for (const o of [...titles.slice(i + 1), ...ticks]) {
      if (o !== t && hit(box(t), box(o))) out.push([t.textContent, o.textContent]);
    }
  });
  return out;
}"""


def test_the_tile_panels_stack_on_a_phone_and_no_title_runs_into_another(phone, live_server):
    _open(phone, f"{live_server}/tiles?n=256&bm=64&bn=64&step=40")  # 40: a P·V step
    s, p = (phone.locator(f"#{fig}").bounding_box() for fig in ("tile", "tile-p"))
    assert p["y"] >= s["y"] + s["height"] - 1, (s, p)  # the P tile below the S tile
    for fig in ("tile", "tile-p"):
        assert phone.evaluate(CLASHES, fig) == [], fig
    assert phone.evaluate(CLASHES, "acc") == []
    domains = phone.evaluate(
        "() => [document.getElementById('acc').layout.yaxis.domain,"
        " document.getElementById('acc').layout.yaxis2.domain]"
    )
    assert domains[0][0] >= domains[1][1], domains  # one panel above the other
    assert phone.errors == []


@pytest.mark.parametrize(
    ("path", "fig"), [("/backward?step=60", "acc"), ("/decode?step=275", "outputs")]
)
def test_paired_panels_stack_on_a_phone(phone, live_server, path, fig):
    _open(phone, live_server + path)
    assert phone.evaluate(CLASHES, fig) == [], fig
    domains = phone.evaluate(
        f"() => [document.getElementById('{fig}').layout.yaxis.domain,"
        f" document.getElementById('{fig}').layout.yaxis2.domain]"
    )
    assert domains[0][0] >= domains[1][1], domains  # one panel above the other
    assert phone.errors == []
