"""Build the FastAPI app: settings, templates, static files, routers, error shape, headers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.gzip import GZipMiddleware
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from flashscope.app import __version__
from flashscope.app.compute.compiling import KernelCompiler
from flashscope.app.compute.pool import WorkerPool
from flashscope.app.config import Settings, get_settings
from flashscope.app.datasets import Datasets, Timelines
from flashscope.app.middleware.bodylimit import BodyLimitMiddleware
from flashscope.app.middleware.errors import validation_handler, value_handler
from flashscope.app.middleware.identity import Identities, IdentityMiddleware, networks
from flashscope.app.middleware.ratelimit import (
    Holds,
    RateLimiter,
    RateLimitMiddleware,
    rates_from,
)
from flashscope.app.rooms.service import Rooms
from flashscope.app.routes import (
    compare,
    docs,
    exports,
    health,
    hopper,
    measure,
    memory_scaling,
    memory_wall,
    online_softmax,
    pages,
    rooms,
    runs,
    schedule,
    simulate,
    trace,
    traffic,
)
from flashscope.app.runs.service import RunService
from flashscope.app.traces import TraceService

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data: blob:; connect-src 'self'; font-src 'self'; object-src 'none'; "
    "base-uri 'none'; frame-ancestors 'none'; form-action 'self'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


class SecurityHeaders:
    """Puts the security headers on every HTTP response (those a route set are kept)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, with_headers)


class FlashScopeAPI(FastAPI):
    """FastAPI with SecurityHeaders around its whole stack: outside Starlette's
    ServerErrorMiddleware, so that its 500 pages carry the headers too."""

    def build_middleware_stack(self) -> ASGIApp:
        return SecurityHeaders(super().build_middleware_stack())


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Which backend the kernels have (torch loads in a thread): probed now, so neither the
        # first /api/health nor the pages' backend badge waits for it, and the run service's
        # devices likewise, so the first POST /api/runs finds them found.
        probe = asyncio.get_running_loop().create_task(health.backend_of(app.state))
        devices = asyncio.get_running_loop().create_task(app.state.runs.ready())
        if settings.compute_warm:
            await asyncio.get_running_loop().run_in_executor(None, app.state.pool.start)
        yield
        probe.cancel()
        devices.cancel()
        app.state.pool.close()
        app.state.runs.close()
        await app.state.compiler.close()
        await app.state.rooms.close()

    app = FlashScopeAPI(
        title="flashscope",
        version=__version__,
        description="FlashAttention, tile by tile: simulator, traces and kernels.",
        lifespan=lifespan,
        # FastAPI's pages load Swagger UI and ReDoc from a CDN, which the CSP refuses:
        # routes/docs.py serves Swagger UI from static/vendor/ instead.
        docs_url=None,
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.templates = Jinja2Templates(directory=settings.templates_dir)
    app.state.templates.env.globals["version"] = __version__
    app.state.pool = WorkerPool(
        settings.compute_workers,
        settings.compute_memory_mib,
        settings.compute_timeout_s,
        settings.compute_max_pending,
        max_per_client=settings.compute_max_pending_per_client,
        max_per_address=settings.compute_max_pending_per_address,
    )
    app.state.traces = TraceService(app.state.pool, settings)
    app.state.compiler = KernelCompiler(
        settings.compile_cache_dir,
        settings.compile_timeout_s,
        settings.compile_batch,
        settings.compile_max_pending,
    )
    app.state.backend = None
    app.state.runs = RunService(settings)
    app.state.rooms = Rooms(settings)
    app.state.datasets = Datasets(settings.datasets_dir)
    app.state.timelines = Timelines(settings.datasets_dir)
    app.state.rate_limiter = RateLimiter(
        rates_from(settings),
        settings.rate_max_clients,
        address_factor=settings.rate_per_address_factor,
    )
    app.mount("/static", StaticFiles(directory=settings.static_dir), name="static")
    app.add_exception_handler(RequestValidationError, validation_handler)  # type: ignore[arg-type]
    app.add_exception_handler(ValueError, value_handler)  # type: ignore[arg-type]
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    # Pages, modules, Plotly (1.5 MB, 0.5 MB gzipped) and JSON answers go out gzipped to clients
    # that accept it; level 6 costs a few ms per megabyte; WebSockets pass untouched.
    app.add_middleware(GZipMiddleware, minimum_size=1024, compresslevel=6)
    # Added last, so first to run (just inside Starlette's error page): who asks, then whether it
    # may. A client over its rate, or asking again before the Retry-After of its last refusal, is
    # answered here, before gzip, routing and validation.
    app.add_middleware(
        RateLimitMiddleware,
        limiter=app.state.rate_limiter,
        holds=Holds(settings.rate_max_clients, settings.refusal_hold_s),
    )
    app.add_middleware(
        IdentityMiddleware,
        identities=Identities(settings.client_secret),
        proxies=networks(settings.trusted_proxies),
    )
    for module in (health, pages, docs, trace, runs, traffic, simulate, rooms):
        app.include_router(module.router)
    for module in (exports, memory_wall, online_softmax, memory_scaling, schedule, hopper):
        app.include_router(module.router)
    app.include_router(compare.router)
    app.include_router(measure.router)

    return app
