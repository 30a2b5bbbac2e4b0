"""Whether a request comes from one of this server's own pages: its Origin header.

Browsers send `Origin` on every WebSocket handshake and on cross-site (and most same-site)
requests that change state, and a page cannot forge it. A request without one comes from a
program, not from a page of another site, and passes. A request whose Origin is this server's
own (the Host header it was sent to, with the scheme the page used) or one listed in
`allowed_origins` passes; any other, "null" included, is refused by the caller.

The scheme is not compared with the server's: behind a proxy that ends TLS the server sees plain
HTTP while the page's Origin says https, and only the same host could have sent either.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol
from urllib.parse import urlsplit

from starlette.types import Scope

DEFAULT_PORTS = {"http": 80, "https": 443}


class Origins(Protocol):
    """What the check needs of the settings (app/config.py's Settings has it); config imports
    this module to check its entries, so this module does not import config."""

    @property
    def allowed_origins(self) -> list[str]: ...


def parse_origin(text: str) -> tuple[str, str, int]:
    """(scheme, host, port) of an origin `scheme://host[:port]`; ValueError says what is wrong."""
    try:
        parts = urlsplit(text.strip())
        port = parts.port
    except ValueError:
        raise ValueError(f"{text!r} is not an origin (scheme://host[:port])") from None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname:
        raise ValueError(f"{text!r} is not an origin: http:// or https:// then a host")
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
        raise ValueError(f"{text!r} is not an origin: no path, query or user part")
    return scheme, parts.hostname.lower(), port or DEFAULT_PORTS[scheme]


def header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key == name:
            return str(value.decode("latin-1"))
    return None


def _host(scope: Scope, scheme: str) -> tuple[str, int] | None:
    """The host and port the request was sent to (its Host header), in `scheme`'s defaults."""
    host = header(scope, b"host")
    if not host:
        return None
    try:
        _, name, port = parse_origin(f"{scheme}://{host}")
    except ValueError:
        return None
    return name, port


def allowed(origin: str, scope: Scope, extra: Iterable[str] = ()) -> bool:
    """Whether `origin` is the server's own (as the request addressed it) or one of `extra`."""
    try:
        scheme, host, port = parse_origin(origin)
    except ValueError:
        return False  # "null" (a sandboxed or file page) and anything malformed
    if _host(scope, scheme) == (host, port):
        return True
    for entry in extra:
        try:
            if parse_origin(entry) == (scheme, host, port):
                return True
        except ValueError:
            continue
    return False


def same_origin(scope: Scope, settings: Origins) -> bool:
    """True unless the request carries an Origin that is neither this server's nor allowed."""
    origin = header(scope, b"origin")
    return origin is None or allowed(origin, scope, settings.allowed_origins)


def refusal(scope: Scope) -> str:
    """Why a request's Origin is refused, in words a lecturer can act on."""
    origin = header(scope, b"origin")
    return (
        f"pages from {origin} may not use this server's rooms "
        "(set FLASHSCOPE_ALLOWED_ORIGINS to allow them)"
    )
