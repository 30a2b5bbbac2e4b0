"""The trace store: builds tile traces off the event loop and keeps the recent ones (LRU)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from starlette.concurrency import run_in_threadpool

from flashscope.app.schemas.trace import TraceParams
from flashscope.simulator.core.trace import Trace
from flashscope.simulator.teach.tracing import build_trace


class TraceStore:
    """Traces by request; one build per key even when many clients ask at once."""

    def __init__(self, size: int, o_col_limit: int, state_bytes: int = 64 * 2**20) -> None:
        self._size = size
        self._o_col_limit = o_col_limit
        self._state_bytes = state_bytes
        self._items: OrderedDict[tuple[Any, ...], Trace] = OrderedDict()
        self._lock = threading.Lock()
        self._building: dict[tuple[Any, ...], threading.Lock] = {}

    def _build(self, p: TraceParams) -> Trace:
        key = p.cache_key()
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
            gate = self._building.setdefault(key, threading.Lock())
        with gate:
            with self._lock:
                if key in self._items:
                    return self._items[key]
            problem, tiles, kw = p.problem()
            try:
                trace = build_trace(
                    p.algo,
                    problem,
                    tiles,
                    p.seed,
                    o_col_limit=self._o_col_limit,
                    budget_bytes=self._state_bytes,
                    **kw,
                )
            except ValueError:
                with self._lock:
                    self._building.pop(key, None)
                raise
            with self._lock:
                self._items[key] = trace
                self._building.pop(key, None)
                while len(self._items) > self._size:
                    self._items.popitem(last=False)
            return trace

    async def get(self, p: TraceParams) -> Trace:
        return await run_in_threadpool(self._build, p)
