"""Who a request comes from: a client identity the server issues, and the address it came from.

A classroom sits behind one address (the school's NAT), so limits keyed by address alone lock
out a room of honest attendees when one of them is careless. The server therefore gives every
browser a random identity in a signed cookie (`fs_client`, HttpOnly, SameSite=Lax) on its first
request, and per-client limits are keyed by it. A client that drops its cookie gets a new
identity on every request, so each identity is also held to its address's budget, which is
several clients' worth (`rate_per_address_factor`).

The address is the TCP peer's. X-Forwarded-For is read only when that peer is one of the proxies
named in `trusted_proxies` (addresses or CIDR networks, none by default); the client address is
then the right-most hop that is not itself a trusted proxy.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
from collections.abc import Iterable
from http.cookies import SimpleCookie

from starlette.types import ASGIApp, Message, Receive, Scope, Send

COOKIE = "fs_client"
COOKIE_AGE_S = 30 * 24 * 3600
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def networks(entries: Iterable[str]) -> tuple[Network, ...]:
    """The trusted proxies as networks; ValueError names an entry that is neither."""
    out = []
    for entry in entries:
        try:
            out.append(ipaddress.ip_network(entry.strip(), strict=False))
        except ValueError:
            raise ValueError(f"trusted_proxies: {entry!r} is not an address or network") from None
    return tuple(out)


def _trusted(host: str, proxies: tuple[Network, ...]) -> bool:
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    return any(ip in net for net in proxies)


def address_of(scope: Scope, proxies: tuple[Network, ...]) -> str:
    """The client's address: the peer's, or through trusted proxies the first hop before them."""
    client = scope.get("client")
    peer = str(client[0]) if client else "unknown"
    if not proxies or not _trusted(peer, proxies):
        return peer
    forwarded: list[str] = [
        value.decode("latin-1")
        for name, value in scope.get("headers", [])
        if name == b"x-forwarded-for"
    ]
    hops = [h.strip() for line in forwarded for h in line.split(",") if h.strip()]
    for hop in reversed(hops):
        if not _trusted(hop, proxies):
            return hop
    return peer


class Identities:
    """Issues and checks identity tokens: `<id>.<hmac of id>` under this server's secret."""

    def __init__(self, secret: str | None) -> None:
        self._key = (secret or secrets.token_hex(32)).encode()

    def _sign(self, ident: str) -> str:
        return hmac.new(self._key, ident.encode(), hashlib.sha256).hexdigest()[:32]

    def issue(self) -> tuple[str, str]:
        """(identity, cookie value) of a new client."""
        ident = secrets.token_hex(12)
        return ident, f"{ident}.{self._sign(ident)}"

    def check(self, token: str | None) -> str | None:
        """The identity a cookie value carries, or None when it is missing or forged."""
        if not token or "." not in token:
            return None
        ident, _, mac = token.partition(".")
        if len(ident) != 24 or not hmac.compare_digest(mac, self._sign(ident)):
            return None
        return ident


def _cookie(scope: Scope) -> str | None:
    for name, value in scope.get("headers", []):
        if name == b"cookie":
            jar: SimpleCookie = SimpleCookie()
            try:
                jar.load(value.decode("latin-1"))
            except Exception:  # a malformed Cookie header is no identity, not an error
                return None
            if COOKIE in jar:
                return jar[COOKIE].value
    return None


def client_key(scope: Scope) -> str:
    """The key of per-client limits: the issued identity, else the address."""
    state = scope.get("state") or {}
    ident = state.get("client_id")
    return f"id:{ident}" if ident else f"ip:{state.get('client_addr') or address_of(scope, ())}"


def address_key(scope: Scope) -> str:
    state = scope.get("state") or {}
    return f"ip:{state.get('client_addr') or address_of(scope, ())}"


def shares(scope: Scope) -> tuple[str, str]:
    """(client, address): the keys whose shares of a bounded resource a request takes."""
    return client_key(scope), address_key(scope)


class IdentityMiddleware:
    """Puts `client_id` (verified cookie identity, or a new one, then `client_issued` too) and
    `client_addr` in the request's state, and sets the cookie on HTTP responses to clients that
    had none."""

    def __init__(self, app: ASGIApp, identities: Identities, proxies: tuple[Network, ...]) -> None:
        self.app = app
        self.identities = identities
        self.proxies = proxies

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        state = scope.setdefault("state", {})
        state["client_addr"] = address_of(scope, self.proxies)
        ident = self.identities.check(_cookie(scope))
        if ident is not None or scope["type"] == "websocket":
            state["client_id"] = ident
            await self.app(scope, receive, send)
            return
        ident, token = self.identities.issue()
        state["client_id"] = ident
        state["client_issued"] = True  # a new identity: this request came without one
        cookie = (
            f"{COOKIE}={token}; Path=/; Max-Age={COOKIE_AGE_S}; HttpOnly; SameSite=Lax"
        ).encode()

        async def with_cookie(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {
                    **message,
                    "headers": [*message.get("headers", []), (b"set-cookie", cookie)],
                }
            await send(message)

        await self.app(scope, receive, with_cookie)
