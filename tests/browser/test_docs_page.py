"""/docs in headless Chromium: the API reference renders from this server alone, under the CSP."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from .conftest import WAIT_MS, screenshot

pytestmark = pytest.mark.browser


def test_docs_renders_every_operation_offline(page, live_server):
    page.goto(f"{live_server}/docs")
    ops = page.locator(".opblock")
    ops.first.wait_for(timeout=WAIT_MS)
    with urllib.request.urlopen(f"{live_server}/openapi.json", timeout=30) as r:
        schema = json.load(r)
    wanted = sum(len(methods) for methods in schema["paths"].values())
    page.locator(f".opblock >> nth={wanted - 1}").wait_for(timeout=WAIT_MS)
    assert ops.count() == wanted
    paths = page.locator(".opblock-summary-path").all_inner_texts()
    assert any("/api/trace" in p for p in paths), paths
    # One operation opens and shows its parameters.
    page.locator(".opblock-summary", has_text="/api/online-softmax").first.click()
    page.locator(".opblock .parameters").first.wait_for(timeout=WAIT_MS)
    screenshot(page, "docs")
    assert page.log.console_errors == [] and page.log.page_errors == []
    assert page.log.external_requests == []


def test_fastapi_default_doc_pages_are_off(live_server):
    for path in ("/redoc", "/docs/oauth2-redirect"):
        try:
            urllib.request.urlopen(f"{live_server}{path}", timeout=30)
        except urllib.error.HTTPError as e:
            assert e.code == 404, path
        else:
            raise AssertionError(f"{path} is served")
