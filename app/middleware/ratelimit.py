"""Per-client rate limits on the costly endpoints: token buckets kept on app.state.

A bucket holds up to `burst` tokens and refills at `rate` tokens per second; each request takes
one. A request that finds the bucket empty is refused with HTTP 429 and a Retry-After header (the
seconds until a token is back). Every request draws on two buckets: its client's (the identity
the server issued, app/middleware/identity.py, or its address where it has none) and its
address's, which is `address_factor` times larger, so a classroom behind one address works while
a script that drops its cookie stays bounded. The least recently used buckets are forgotten
beyond `max_clients` keys, so memory stays bounded whoever calls.

A client that asks a group of costly endpoints (compute or runs: HELD) again before the
Retry-After of its last refusal there (429 or 503, from the buckets here, the compute pool or the
run queue) has not waited as told: its request is refused again without reaching the route, and
that answer is held back until the Retry-After has passed (at most `hold_s` seconds), so a script
that retries at once costs one timer a second, not one trip through routing, validation and the
pool a millisecond. A client that waits as told never meets the hold. Refusals are remembered by
identity, and those of requests that came without one by address: a script that drops its
cookie is a new client each time, but not a new address, while a browser has its cookie from its
first page on.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from flashscope.app.config import Settings
from flashscope.app.middleware.identity import address_key, client_key

# (HTTP method or "*", path prefix, group). WebSocket routes are limited inside the route.
COSTLY: tuple[tuple[str, str, str], ...] = (
    ("GET", "/api/trace", "compute"),
    ("*", "/api/traffic", "compute"),
    ("*", "/api/simulate", "compute"),
    ("GET", "/api/memory-wall", "compute"),
    ("GET", "/api/online-softmax", "compute"),
    ("GET", "/api/memory-scaling", "compute"),
    ("GET", "/api/compare", "compute"),
    ("GET", "/api/schedule", "compute"),  # its Chrome trace and measured figures too
    ("GET", "/api/hopper", "compute"),
    ("POST", "/api/runs", "runs"),
    ("POST", "/api/schedule/measure", "runs"),  # queues a run like POST /api/runs
    ("POST", "/api/compare/measure", "runs"),  # queues the runs of a problem's tiles
    ("POST", "/api/compare/dataset", "compute"),  # simulates the finished runs
    ("POST", "/api/rooms", "rooms"),
)


# The groups whose refusals are held (see the module docstring): their Retry-After is a matter of
# time. A room refused for the rooms its client has open is freed by the client itself.
HELD = ("compute", "runs")


@dataclass(frozen=True)
class Rate:
    per_s: float
    burst: int


def rates_from(settings: Settings) -> dict[str, Rate]:
    return {
        "compute": Rate(settings.rate_compute_per_s, settings.rate_compute_burst),
        "runs": Rate(settings.rate_runs_per_s, settings.rate_runs_burst),
        "rooms": Rate(settings.rate_rooms_per_s, settings.rate_rooms_burst),
    }


class Bucket:
    """One token bucket. `take` returns 0 when a token was taken, else the seconds to wait."""

    __slots__ = ("_clock", "_last", "_tokens", "rate")

    def __init__(self, rate: Rate, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self._clock = clock
        self._tokens = float(rate.burst)
        self._last = clock()

    def take(self) -> float:
        now = self._clock()
        self._tokens = min(
            float(self.rate.burst), self._tokens + (now - self._last) * self.rate.per_s
        )
        self._last = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return 0.0
        return (1.0 - self._tokens) / self.rate.per_s


class RateLimiter:
    """Token buckets by (client, group), the least recently used forgotten beyond a bound."""

    def __init__(
        self,
        rates: dict[str, Rate],
        max_clients: int,
        clock: Callable[[], float] = time.monotonic,
        address_factor: float = 1.0,
    ) -> None:
        self.rates = {**rates, **{f"{g}@address": r for g, r in rates.items()}}
        self.address_factor = address_factor
        self._max = max_clients
        self._clock = clock
        self._buckets: OrderedDict[tuple[str, str], Bucket] = OrderedDict()

    def take(self, client: str, group: str, factor: float = 1.0) -> float:
        """Take a token from `client`'s bucket of `group` (`factor` times the group's rate and
        burst); 0, or the seconds until one is back."""
        key = (client, group)
        bucket = self._buckets.pop(key, None)
        if bucket is None:
            rate = self.rates[group]
            scaled = Rate(rate.per_s * factor, max(1, round(rate.burst * factor)))
            bucket = Bucket(scaled, self._clock)
        self._buckets[key] = bucket
        while len(self._buckets) > self._max:
            self._buckets.popitem(last=False)
        return bucket.take()

    def take_for(self, scope: Scope, group: str) -> float:
        """A request's tokens: its client's and its address's (0, or the longer wait)."""
        own = self.take(client_key(scope), group)
        if own > 0:
            return own
        return self.take(address_key(scope), group + "@address", self.address_factor)


def group_of(method: str, path: str) -> str | None:
    for want, prefix, group in COSTLY:
        if (want in ("*", method)) and (path == prefix or path.startswith(prefix + "/")):
            return group
    return None


def too_many(wait: float, group: str, rate: Rate) -> JSONResponse:
    retry = max(1, math.ceil(wait))
    return JSONResponse(
        status_code=429,
        headers={"Retry-After": str(retry)},
        content={
            "detail": [
                {
                    "type": "rate_limit",
                    "loc": ["request"],
                    "field": None,
                    "msg": f"too many {group} requests from this client: at most {rate.burst} "
                    f"at once and {rate.per_s:g} per second; retry after {retry} s",
                    "limit": {"per_s": rate.per_s, "burst": rate.burst},
                }
            ]
        },
    )


@dataclass
class Refusal:
    """A refusal a client was sent: until `until` (monotonic) the client should not ask again."""

    until: float
    retry_s: int
    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes


class Holds:
    """The last refusal of each client (by identity, else address), the least recent forgotten
    beyond `max_clients`; see the module docstring."""

    def __init__(
        self, max_clients: int, hold_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.hold_s = hold_s
        self._max = max_clients
        self._clock = clock
        self._refusals: OrderedDict[str, Refusal] = OrderedDict()

    def note(
        self, client: str, status: int, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> None:
        """Remember a refusal sent to `client` (its Retry-After, in whole seconds, is in
        `headers`); answers without one are not remembered."""
        retry = next((v for k, v in headers if k.lower() == b"retry-after"), None)
        try:
            retry_s = int(retry) if retry is not None else 0
        except ValueError:
            retry_s = 0
        if retry_s <= 0 or self.hold_s <= 0:
            return
        kept = [(k, v) for k, v in headers if k.lower() not in (b"retry-after", b"content-length")]
        self._refusals.pop(client, None)
        self._refusals[client] = Refusal(self._clock() + retry_s, retry_s, status, kept, body)
        while len(self._refusals) > self._max:
            self._refusals.popitem(last=False)

    def pending(self, client: str) -> Refusal | None:
        """The refusal `client` has not yet waited out, if any."""
        refusal = self._refusals.get(client)
        if refusal is None:
            return None
        if refusal.until <= self._clock():
            del self._refusals[client]
            return None
        return refusal

    async def answer(self, client: str, refusal: Refusal, send: Send) -> None:
        """Refuse `client` again, once its Retry-After has passed (or `hold_s`): the answer
        repeats the refusal, and a client that kept asking waits a Retry-After more."""
        now = self._clock()
        await asyncio.sleep(max(0.0, min(refusal.until - now, self.hold_s)))
        now = self._clock()
        if refusal.until <= now:  # it waited the whole Retry-After here: count it from now
            refusal.until = now + refusal.retry_s
            self._refusals.pop(client, None)
            self._refusals[client] = refusal
        retry = max(1, math.ceil(refusal.until - now))
        headers = [
            *refusal.headers,
            (b"retry-after", str(retry).encode()),
            (b"content-length", str(len(refusal.body)).encode()),
        ]
        await send({"type": "http.response.start", "status": refusal.status, "headers": headers})
        await send({"type": "http.response.body", "body": refusal.body})


class RateLimitMiddleware:
    """ASGI middleware that applies the limiter on app.state to the COSTLY routes, and holds the
    repeated requests of clients that did not wait as told (`holds`; None: no holding)."""

    def __init__(self, app: ASGIApp, limiter: RateLimiter, holds: Holds | None = None) -> None:
        self.app = app
        self.limiter = limiter
        self.holds = holds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        group = group_of(scope["method"], scope["path"])
        if group is None:
            await self.app(scope, receive, send)
            return
        holds = self.holds if group in HELD else None
        issued = (scope.get("state") or {}).get("client_issued", False)
        client = "new:" + address_key(scope) if issued else client_key(scope)
        # a refusal is remembered for the identity issued now too: its next request carries it
        keys = tuple(f"{group} {k}" for k in ((client, client_key(scope)) if issued else (client,)))
        if holds is not None:
            refusal = holds.pending(keys[0])
            if refusal is not None:
                await holds.answer(keys[0], refusal, send)
                return
        sending = send if holds is None else self._noting(holds, keys, send)
        wait = self.limiter.take_for(scope, group)
        if wait > 0:
            await too_many(wait, group, self.limiter.rates[group])(scope, receive, sending)
            return
        await self.app(scope, receive, sending)

    @staticmethod
    def _noting(holds: Holds, keys: tuple[str, ...], send: Send) -> Send:
        """`send`, remembering a 429 or 503 refusal (its status, headers and body) for `keys`."""
        seen: dict[str, Any] = {}

        async def noting(message: Message) -> None:
            kind = message["type"]
            if kind == "http.response.start" and message["status"] in (429, 503):
                seen["start"] = message
                seen["body"] = b""
            elif kind == "http.response.body" and "start" in seen:
                seen["body"] += message.get("body", b"")
                if not message.get("more_body", False):
                    start = seen.pop("start")
                    headers = [(bytes(k), bytes(v)) for k, v in start.get("headers", [])]
                    for key in keys:
                        holds.note(key, start["status"], headers, seen["body"])
            await send(message)

        return noting
