"""The run service on app.state: finds the devices once, off the event loop, and starts the run
queue (one worker per device) on first use."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from flashscope.app.config import Settings
from flashscope.app.runs.queue import Run, RunQueue


def detect_devices() -> tuple[str, list[str]]:
    """("cuda", ["cuda:0", …]) with GPUs, else ("cpu", ["cpu"]) for the interpreter.

    Imports torch (seconds): call it in a thread, never on the event loop (`RunService.ready`).
    """
    from flashscope.kernels.device import has_cuda

    if has_cuda():
        import torch

        return "cuda", [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    return "cpu", ["cpu"]


class RunService:
    """Owns the RunQueue. The devices are found once, in a thread (the app's start-up begins it:
    `await ready()`); nothing runs until a run is asked for."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._queue: RunQueue | None = None
        self._backend: tuple[str, list[str]] | None = None
        self._lock = threading.Lock()
        self._detect = threading.Lock()

    async def ready(self) -> str:
        """The backend ("cuda" or "cpu"), found in a worker thread the first time."""
        if self._backend is None:
            await asyncio.to_thread(self._devices)
        return self.backend()

    def backend(self) -> str:
        """The backend; blocks while the devices are being found (use `ready` on the loop)."""
        return self._devices()[0]

    def _devices(self) -> tuple[str, list[str]]:
        with self._detect:  # one detection, however many threads ask at once
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
                    max_per_client=s.runs_max_queued_per_client,
                    max_per_address=s.runs_max_queued_per_address,
                    memory_mib=s.runs_worker_memory_mib,
                    timeout_s=s.runs_timeout_s,
                    cache_size=s.runs_cache_size,
                    job_extra={"compile": compile_options(s)},
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


def compile_options(s: Settings) -> dict[str, Any] | None:
    """What a timed run needs to compile the kernels no table holds before it simulates them
    (None: the server compiles nothing on demand)."""
    if not s.compile_on_demand:
        return None
    return {"cache": str(s.compile_cache_dir), "timeout_s": s.compile_timeout_s}
