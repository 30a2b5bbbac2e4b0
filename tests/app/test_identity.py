"""Client identity: the cookie the server issues, the address behind trusted proxies only, and
limits per client that a classroom behind one address does not share."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from flashscope.app.config import Settings
from flashscope.app.main import create_app
from flashscope.app.middleware.identity import COOKIE, Identities, address_of, networks


def test_a_new_client_gets_a_signed_identity_once():
    with TestClient(create_app(Settings())) as c:
        first = c.get("/api/views")
        assert COOKIE in first.cookies
        token = first.cookies[COOKIE]
        assert first.headers["set-cookie"].count("HttpOnly") == 1
        again = c.get("/api/views")  # the client sends it back: nothing new
        assert "set-cookie" not in again.headers
        c.cookies.set(COOKIE, token[:-1] + ("0" if token[-1] != "0" else "1"))
        forged = c.get("/api/views")
        assert COOKIE in forged.cookies and forged.cookies[COOKIE] != token


def test_identities_check_their_signature():
    mine, other = Identities("a secret"), Identities("another")
    ident, token = mine.issue()
    assert mine.check(token) == ident
    assert other.check(token) is None
    assert mine.check(None) is None and mine.check("nodot") is None
    assert mine.check(f"{ident}.{'0' * 32}") is None


def _scope(peer: str, forwarded: str | None = None) -> dict:
    headers = [(b"x-forwarded-for", forwarded.encode())] if forwarded else []
    return {"type": "http", "client": (peer, 5000), "headers": headers}


def test_forwarded_for_counts_only_from_trusted_proxies():
    spoofed = _scope("127.0.0.1", "6.6.6.6")
    assert address_of(spoofed, ()) == "127.0.0.1"  # nothing configured: the peer
    proxies = networks(["10.0.0.0/8", "127.0.0.1"])
    assert address_of(spoofed, proxies) == "6.6.6.6"
    # the right-most hop that is not a trusted proxy; a client's own header is not believed
    chain = _scope("10.1.2.3", "1.2.3.4, 203.0.113.9, 10.0.0.7")
    assert address_of(chain, proxies) == "203.0.113.9"
    assert address_of(_scope("198.51.100.1", "6.6.6.6"), proxies) == "198.51.100.1"


def test_a_bad_trusted_proxy_is_refused_by_name():
    with pytest.raises(ValueError, match="not-an-ip"):
        create_app(Settings(trusted_proxies=["10.0.0.0/8", "not-an-ip"]))


def test_a_classroom_behind_one_address_gets_a_budget_each():
    settings = Settings(rate_compute_per_s=0.001, rate_compute_burst=2, rate_per_address_factor=40)
    app = create_app(settings)
    url = "/api/memory-wall?n=256&d=64&bm=128&bn=128"
    attendees = [TestClient(app) for _ in range(15)]
    for c in attendees:
        c.get("/api/views")  # each browser receives its identity first
        assert [c.get(url).status_code for _ in range(2)] == [200, 200]
        assert c.get(url).status_code == 429  # its own burst is spent, not the room's
    # a script without cookies is one client per request, held to its address's budget:
    # 40 × 2 = 80 tokens, of which the attendees took 30
    script = TestClient(app, cookies=None)
    codes = []
    for _ in range(60):
        script.cookies.clear()
        codes.append(script.get(url).status_code)
    assert codes.count(200) == 50 and codes[-1] == 429
