"""Per-client rate limits on the costly endpoints: token buckets kept on app.state.

A bucket holds up to `burst` tokens and refills at `rate` tokens per second; each request takes
one. A request that finds the bucket empty is refused with HTTP 429 and a Retry-After header (the
seconds until a token is back). Every request draws on two buckets: its client's (the identity
the server issued, app/middleware/identity.py, or its address where it has none) and its
address's, which is `address_factor` times larger, so a classroom behind one address works while
a script that drops its cookie stays bounded. The least recently used buckets are forgotten
beyond `max_clients` keys, so memory stays bounded whoever calls.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

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
    ("POST", "/api/runs", "runs"),
    ("POST", "/api/schedule/measure", "runs"),  # queues a run like POST /api/runs
    ("POST", "/api/compare/measure", "runs"),  # queues the runs of a problem's tiles
    ("POST", "/api/compare/dataset", "compute"),  # simulates the finished runs
    ("POST", "/api/rooms", "rooms"),
)


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


class RateLimitMiddleware:
    """ASGI middleware that applies the limiter on app.state to the COSTLY routes."""

    def __init__(self, app: ASGIApp, limiter: RateLimiter) -> None:
        self.app = app
        self.limiter = limiter

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            group = group_of(scope["method"], scope["path"])
            if group is not None:
                wait = self.limiter.take_for(scope, group)
                if wait > 0:
                    await too_many(wait, group, self.limiter.rates[group])(scope, receive, send)
                    return
        await self.app(scope, receive, send)
