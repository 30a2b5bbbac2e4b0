"""Health, pages and their JSON twins."""

from __future__ import annotations

import re

from flashscope.app import __version__


def test_health_reports_backend(client):
    r = client.get("/api/health")
    assert r.status_code == 200
    body = r.json()
    assert body["status"] == "ok"
    assert body["version"] == __version__
    assert body["backend"] in ("cpu", "cuda")
    assert (body["gpu"] is None) == (body["backend"] == "cpu")


def test_pages_load_only_local_assets(client):
    for path in ("/", "/tiles"):
        r = client.get(path)
        assert r.status_code == 200, path
        html = r.text
        # No script, stylesheet or image from anywhere but this server.
        refs = re.findall(r'(?:src|href)="([^"]+)"', html)
        assert refs, path
        assert all(ref.startswith(("/", "#")) for ref in refs), refs
        assert "Content-Security-Policy" in r.headers
        assert "default-src 'self'" in r.headers["Content-Security-Policy"]


def test_home_links_every_view_and_each_has_a_json_twin(client):
    views = client.get("/api/views").json()
    home = client.get("/").text
    assert views
    for v in views:
        assert f'href="{v["path"]}"' in home
        assert client.get(v["path"]).status_code == 200
        assert client.get(v["api"]).status_code == 200


def test_plotly_is_vendored(client):
    r = client.get("/static/vendor/plotly-4.1.1.min.js")
    assert r.status_code == 200
    assert "plotly.js v4.1.1" in r.text[:200]


def test_a_late_probe_keeps_what_was_stored_meanwhile(monkeypatch):
    """The start-up probe and a first request may probe at once: whichever answer is stored
    first stays (a test, or the first probe, set it while the other was still running)."""
    from types import SimpleNamespace

    from flashscope.app.routes import health
    from tests.app.aio import run

    state = SimpleNamespace(backend=None, capability=None)

    def slow_backend():
        state.backend = ("cuda", "NVIDIA A100-SXM4-80GB")  # stored while this probe ran
        return ("cpu", None)

    def slow_capability():
        state.capability = "8.0"
        return ""

    monkeypatch.setattr(health, "_probe", slow_backend)
    monkeypatch.setattr(health, "_capability", slow_capability)
    assert run(health.backend_of(state)) == ("cuda", "NVIDIA A100-SXM4-80GB")
    assert run(health.capability_of(state)) == "8.0"
    state.backend = state.capability = None  # nothing stored meanwhile: the probe's answer
    monkeypatch.setattr(health, "_probe", lambda: ("cpu", None))
    monkeypatch.setattr(health, "_capability", lambda: "")
    assert run(health.backend_of(state)) == ("cpu", None)
    assert run(health.capability_of(state)) is None
