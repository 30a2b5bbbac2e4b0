"""The trace store: builds tile traces off the event loop and keeps the recent ones (LRU)."""

from __future__ import annotations

import threading
from collections import OrderedDict

from starlette.concurrency import run_in_threadpool

from simulator.problem import AttentionProblem, TileConfig
from simulator.trace import Trace
from simulator.tracing import build_trace

from .schemas import TraceParams


class TraceStore:
    """Traces by request; one build per key even when many clients ask at once."""

    def __init__(self, size: int, o_col_limit: int) -> None:
        self._size = size
        self._o_col_limit = o_col_limit
        self._items: OrderedDict[tuple, Trace] = OrderedDict()
        self._lock = threading.Lock()
        self._building: dict[tuple, threading.Lock] = {}

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
            problem = AttentionProblem(seq_q=p.n, seq_k=p.nk, head_dim=p.d, dtype="fp32")
            tiles = TileConfig(block_m=p.bm, block_n=p.bn)
            trace = build_trace(p.algo, problem, tiles, p.seed, o_col_limit=self._o_col_limit)
            with self._lock:
                self._items[key] = trace
                self._building.pop(key, None)
                while len(self._items) > self._size:
                    self._items.popitem(last=False)
            return trace

    async def get(self, p: TraceParams) -> Trace:
        return await run_in_threadpool(self._build, p)
