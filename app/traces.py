"""The trace service on app.state: tile traces built and stepped in the compute pool's workers.

A trace is built once per request key inside the worker its key hashes to, and kept there
(an LRU of `trace_cache_size` per worker), so stepping it again costs the worker one event and
the server one message. Nothing of a trace is computed on the event loop or in the server's
own process (app/compute/pool.py says why and how the workers are bounded).

The service also remembers how large one event of each trace shape (the parameters but the seed)
has been, in bytes: a window that cannot fit the response limit is then refused before any worker
builds the trace, however many seeds a client tries (`too_large`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

from flashscope.app.compute.pool import WorkerPool
from flashscope.app.config import Settings
from flashscope.app.schemas.trace import TraceParams

Gone = Callable[[], Awaitable[bool]] | None
Who = tuple[str, str] | None  # (client, address) whose shares of the pool a task takes
SHAPES_KEPT = 1024  # trace shapes whose event size is remembered (least recent dropped)


class TraceService:
    """What the trace routes ask of a trace, each answered by a compute worker."""

    def __init__(self, pool: WorkerPool, settings: Settings) -> None:
        self.pool = pool
        self.options = {
            "o_col_limit": settings.o_col_limit,
            "state_bytes": settings.trace_state_bytes,
            "cache": max(2, settings.trace_cache_size // settings.compute_workers),
        }
        self._event_bytes: OrderedDict[tuple[Any, ...], int] = OrderedDict()

    @staticmethod
    def _shape(params: TraceParams) -> tuple[Any, ...]:
        return tuple(v for k, v in params.model_dump().items() if k != "seed")

    def learn(self, params: TraceParams, event_bytes: int) -> None:
        """One event of `params`'s trace takes about `event_bytes` (the largest figure seen for
        its shape is kept)."""
        key = self._shape(params)
        seen = self._event_bytes.pop(key, 0)
        self._event_bytes[key] = max(seen, event_bytes)
        while len(self._event_bytes) > SHAPES_KEPT:
            self._event_bytes.popitem(last=False)

    def too_large(self, params: TraceParams, events: int, limit: int) -> int | None:
        """How many events would fit, when `events` events of this shape are known to need more
        than twice `limit` bytes (the margin the workers refuse at, app/compute/tasks.py), else
        None (unknown, or it may fit: a worker decides)."""
        size = self._event_bytes.get(self._shape(params))
        if size is None or (size + 1) * events <= limit * 2:
            return None
        return max(1, limit // (size + 1))

    async def _run(self, task: str, params: TraceParams, *args: Any, gone: Gone, who: Who) -> Any:
        client, address = who or (None, None)
        return await self.pool.run(
            task,
            (params, self.options, *args),
            affinity=hash(params.cache_key()),
            gone=gone,
            client=client,
            address=address,
        )

    async def meta(self, params: TraceParams, gone: Gone = None, who: Who = None) -> dict[str, Any]:
        """The trace's metadata (its `n_events` among them)."""
        out: dict[str, Any] = await self._run("trace.meta", params, gone=gone, who=who)
        return out

    async def step(self, params: TraceParams, step: int, gone: Gone = None, who: Who = None) -> str:
        """Event `step` as JSON text."""
        out: str = await self._run("trace.step", params, step, gone=gone, who=who)
        return out

    async def window(
        self,
        params: TraceParams,
        start: int,
        count: int,
        limit: int,
        gone: Gone = None,
        who: Who = None,
    ) -> tuple[dict[str, Any], list[str]]:
        """(metadata, events start … start + count − 1 as JSON texts) within `limit` bytes."""
        out: tuple[dict[str, Any], list[str]] = await self._run(
            "trace.window", params, start, count, limit, gone=gone, who=who
        )
        return out

    async def export(
        self, task: str, params: TraceParams, gone: Gone = None, who: Who = None
    ) -> dict[str, Any]:
        """A whole-trace export: `trace.ops` or `trace.chrome`."""
        out: dict[str, Any] = await self._run(task, params, gone=gone, who=who)
        return out
