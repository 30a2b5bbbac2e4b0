"""The run service on app.state: starts the run queue on first use, one worker per device."""

from __future__ import annotations

import asyncio
import threading

from flashscope.app.config import Settings
from flashscope.app.runs.queue import Run, RunQueue


def detect_devices() -> tuple[str, list[str]]:
    """("cuda", ["cuda:0", …]) with GPUs, else ("cpu", ["cpu"]) for the interpreter."""
    from flashscope.kernels.device import has_cuda

    if has_cuda():
        import torch

        return "cuda", [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    return "cpu", ["cpu"]


class RunService:
    """Owns the RunQueue; nothing starts (and torch is not imported) until a run is asked for."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._queue: RunQueue | None = None
        self._backend: tuple[str, list[str]] | None = None
        self._lock = threading.Lock()

    def backend(self) -> str:
        return self._devices()[0]

    def _devices(self) -> tuple[str, list[str]]:
        if self._backend is None:
            forced = self.settings.runs_devices
            self._backend = (
                ("cuda" if forced[0].startswith("cuda") else "cpu", forced)
                if forced
                else detect_devices()
            )
        return self._backend

    def get(self) -> RunQueue:
        with self._lock:
            if self._queue is None:
                s = self.settings
                queue = RunQueue(
                    s.runs_executor,
                    self._devices()[1],
                    max_queued=s.runs_max_queued,
                    timeout_s=s.runs_timeout_s,
                    cache_size=s.runs_cache_size,
                )
                queue.start(asyncio.get_running_loop())
                self._queue = queue
            return self._queue

    def find(self, run_id: str) -> Run | None:
        """A known run, without starting the queue (None before any run was asked for)."""
        with self._lock:
            queue = self._queue
        return queue.get(run_id) if queue is not None else None

    def close(self) -> None:
        if self._queue is not None:
            self._queue.close()
            self._queue = None
