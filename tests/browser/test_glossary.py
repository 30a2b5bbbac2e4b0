"""The glossary in headless Chromium: /glossary defines every term, and the pages' first uses of
the jargon link to its entries with a tooltip on hover and on keyboard focus."""

from __future__ import annotations

import json
import urllib.request

import pytest

from .conftest import screenshot

pytestmark = pytest.mark.browser

# The pages whose prose marks its jargon, with terms each must mark at least.
MARKED = {
    "/": {"hbm", "sram", "tile", "online-softmax"},
    "/tiles": {"cta", "hbm", "sram", "lse", "tile", "blocks", "online-softmax", "causal"},
    "/backward": {"cta", "hbm", "lse", "tile", "blocks"},
    "/decode": {"kv-cache", "sm", "lse", "gqa", "cta", "split-kv", "occupancy", "hbm"},
    "/schedule": {"cta", "sm", "wave", "l2", "tflops", "occupancy", "roofline", "causal"},
    "/memory-wall": {"hbm", "lse", "tile", "cta", "sram", "online-softmax", "blocks"},
    "/online-softmax": {"online-softmax", "tile"},
    "/memory-scaling": {"lse"},
    "/compare": {"tile", "cta", "sm"},
    "/hopper": {"cta", "warpgroup", "tma", "mbarrier", "wgmma", "sfu", "pingpong"},
}


def _terms(live_server) -> list[dict]:
    with urllib.request.urlopen(f"{live_server}/api/glossary", timeout=30) as r:
        return json.load(r)


def test_the_glossary_defines_every_term_with_an_anchor(page, live_server):
    terms = _terms(live_server)
    ids = [t["id"] for t in terms]
    assert len(ids) == len(set(ids)) >= 20
    wanted = {"cta", "sm", "hbm", "sram", "l2", "lse", "wave", "occupancy", "tile", "blocks"}
    wanted |= {"online-softmax", "gqa", "split-kv", "warpgroup", "tflops"}
    assert wanted <= set(ids)
    page.goto(f"{live_server}/glossary")
    for t in terms:
        entry = page.locator(f"dt#{t['id']}")
        assert entry.is_visible(), t["id"]
        assert t["term"] in entry.inner_text()
        text = page.locator(f"dt#{t['id']} + dd").inner_text()
        assert t["text"][:40] in text
        assert t["tip"] and len(t["tip"]) < 200, t["id"]
        for path in t["see"]:  # each names views that exist
            assert page.locator(f"dt#{t['id']} + dd a[href='{path}']").count() == 1, (t["id"], path)
    page.goto(f"{live_server}/glossary#occupancy")
    assert page.evaluate("() => document.querySelector(':target').id") == "occupancy"
    screenshot(page, "glossary")
    assert page.log.console_errors == [] and page.log.external_requests == []


@pytest.mark.parametrize("path", list(MARKED))
def test_first_uses_link_to_the_glossary_with_a_tooltip(page, live_server, path):
    ids = {t["id"] for t in _terms(live_server)}
    page.goto(live_server + path)
    marks = page.evaluate(
        """() => [...document.querySelectorAll('.term')].map((el) => {
          const a = el.querySelector('a');
          const tip = document.getElementById(a.getAttribute('aria-describedby'));
          return { href: a.getAttribute('href'), tip: tip ? tip.textContent.trim() : '',
                   role: tip ? tip.getAttribute('role') : null };
        })"""
    )
    marked = [m["href"].removeprefix("/glossary#") for m in marks]
    assert all(m["href"].startswith("/glossary#") for m in marks), marks
    assert set(marked) <= ids, set(marked) - ids
    assert len(marked) == len(set(marked)), marked  # the first use only
    assert MARKED[path] <= set(marked), MARKED[path] - set(marked)
    assert all(m["tip"] and m["role"] == "tooltip" for m in marks), marks


def test_a_tooltip_shows_on_hover_and_on_keyboard_focus(page, live_server):
    page.goto(f"{live_server}/decode")
    link = page.locator(".term a[href='/glossary#kv-cache']")
    tip = page.locator("#tip-kv-cache")
    assert not tip.is_visible()
    link.focus()
    assert tip.is_visible()
    assert "KV cache" in tip.inner_text() or "keys and values" in tip.inner_text()
    page.keyboard.press("Tab")
    assert not tip.is_visible()
    link.hover()
    assert tip.is_visible()
    link.click()
    page.wait_for_url("**/glossary#kv-cache")
    assert page.locator("dt#kv-cache").is_visible()
