"""The run queue: live kernel runs in worker processes, one per device, with limits and a cache.

Each worker is a spawned process that imports the executor once (torch and triton load there,
never in the server) and runs one job at a time. The server keeps the runs in memory: their
state, their progress messages and their result. A job past the timeout has its worker killed
and replaced; the run ends as "timeout". Identical requests share one run (the cache).

States: queued → running → done | failed | timeout.
"""

from __future__ import annotations

import asyncio
import importlib
import itertools
import multiprocessing as mp
import threading
import time
import traceback
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Progress = Callable[[str], None]


def _worker_main(executor_path: str, device: str, conn: Any) -> None:
    """Worker process: receive jobs, run them, send progress and the outcome back."""
    module_name, func_name = executor_path.split(":")
    execute = getattr(importlib.import_module(module_name), func_name)
    while True:
        job = conn.recv()
        if job is None:
            return

        def progress(message: str) -> None:
            conn.send(("progress", message))

        try:
            result = execute(job, device=device, progress=progress)
            conn.send(("done", result))
        except Exception as exc:  # the run fails; the worker lives on
            conn.send(("failed", f"{type(exc).__name__}: {exc}", traceback.format_exc(limit=3)))


@dataclass
class Run:
    """One queued or finished run; `messages` grows as the worker reports progress."""

    id: str
    key: str
    request: dict[str, Any]
    state: str = "queued"
    created: float = field(default_factory=time.time)
    started: float | None = None
    finished: float | None = None
    messages: list[str] = field(default_factory=list)
    result: dict[str, Any] | None = None
    error: str | None = None

    def public(self, position: int | None = None) -> dict[str, Any]:
        return {
            "id": self.id,
            "state": self.state,
            "request": self.request,
            "position": position,
            "created": self.created,
            "started": self.started,
            "finished": self.finished,
            "messages": self.messages,
            "result": self.result,
            "error": self.error,
        }


class QueueFull(Exception):
    """More runs are waiting than the queue takes; retry after `retry_after` seconds."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(f"the run queue is full; retry in {retry_after} s")
        self.retry_after = retry_after


class _Worker:
    """The parent's handle on one worker process and the thread that talks to it."""

    def __init__(self, queue: RunQueue, device: str) -> None:
        self.queue = queue
        self.device = device
        self.proc: Any = None
        self.conn: Any = None

    def start(self) -> None:
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        self.proc = ctx.Process(
            target=_worker_main, args=(self.queue.executor, self.device, child), daemon=True
        )
        self.proc.start()
        child.close()
        self.conn = parent

    def stop(self) -> None:
        if self.proc is not None and self.proc.is_alive():
            try:
                self.conn.send(None)
                self.proc.join(timeout=2)
            except (OSError, BrokenPipeError):
                pass
            if self.proc.is_alive():
                self.proc.kill()
                self.proc.join(timeout=2)

    def run(self, run: Run) -> tuple[str, Any]:
        """Run one job; blocks this thread until an outcome or the timeout."""
        if self.proc is None or not self.proc.is_alive():
            self.start()
        self.conn.send(run.request)
        deadline = time.monotonic() + self.queue.timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not self.conn.poll(min(left, 0.5)):
                if left <= 0:
                    self.proc.kill()
                    self.proc.join(timeout=5)
                    self.proc = None
                    return "timeout", f"the run took longer than {self.queue.timeout_s:g} s"
                if not self.proc.is_alive():
                    self.proc = None
                    return "failed", "the worker process died"
                continue
            try:
                kind, *payload = self.conn.recv()
            except EOFError:
                self.proc = None
                return "failed", "the worker process died"
            if kind == "progress":
                self.queue._notify(run, message=payload[0])
            else:
                return kind, payload[0]


class RunQueue:
    """FIFO of runs served by one worker per device; results cached by request key."""

    def __init__(
        self,
        executor: str,
        devices: list[str],
        *,
        max_queued: int,
        timeout_s: float,
        cache_size: int,
        seconds_per_run: float = 5.0,
    ) -> None:
        self.executor = executor
        self.devices = devices
        self.max_queued = max_queued
        self.timeout_s = timeout_s
        self.cache_size = cache_size
        self.seconds_per_run = seconds_per_run
        self.runs: OrderedDict[str, Run] = OrderedDict()
        self.by_key: dict[str, str] = {}
        self._pending: list[Run] = []
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._changed: dict[str, asyncio.Event] = {}
        self._threads: list[threading.Thread] = []
        self._workers: list[_Worker] = []
        self._closing = False
        self._ids = itertools.count()

    # --- lifecycle ------------------------------------------------------------------------

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        for device in self.devices:
            worker = _Worker(self, device)
            self._workers.append(worker)
            t = threading.Thread(
                target=self._serve, args=(worker,), daemon=True, name=f"runs-{device}"
            )
            t.start()
            self._threads.append(t)

    def close(self) -> None:
        with self._wake:
            self._closing = True
            self._wake.notify_all()
        for t in self._threads:
            t.join(timeout=self.timeout_s + 5)
        for w in self._workers:
            w.stop()

    # --- submitting and reading -----------------------------------------------------------

    def submit(self, key: str, request: dict[str, Any]) -> tuple[Run, bool]:
        """Queue a run, or return the live or finished run of the same request (cached=True)."""
        with self._wake:
            existing = self.by_key.get(key)
            if (
                existing is not None
                and existing in self.runs
                and self.runs[existing].state not in ("failed", "timeout")
            ):
                return self.runs[existing], True
            if len(self._pending) >= self.max_queued:
                busy = len(self._pending) + len(self.devices)
                retry = max(1, round(busy * self.seconds_per_run / len(self.devices)))
                raise QueueFull(retry)
            run = Run(id=uuid.uuid4().hex[:12] + f"{next(self._ids):x}", key=key, request=request)
            self.runs[run.id] = run
            self.by_key[key] = run.id
            self._pending.append(run)
            self._trim()
            self._wake.notify()
            return run, False

    def get(self, run_id: str) -> Run | None:
        return self.runs.get(run_id)

    def position(self, run: Run) -> int | None:
        with self._lock:
            return self._pending.index(run) if run in self._pending else None

    async def wait_change(self, run: Run, timeout: float) -> None:
        """Wait until the run changes (a message or a new state), or `timeout` seconds."""
        event = self._changed.setdefault(run.id, asyncio.Event())
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except TimeoutError:
            return
        finally:
            event.clear()

    # --- internals ------------------------------------------------------------------------

    def _trim(self) -> None:
        finished = [r for r in self.runs.values() if r.state in ("done", "failed", "timeout")]
        while len(finished) > self.cache_size:
            old = finished.pop(0)
            self.runs.pop(old.id, None)
            if self.by_key.get(old.key) == old.id:
                self.by_key.pop(old.key)
            self._changed.pop(old.id, None)

    def _notify(self, run: Run, message: str | None = None) -> None:
        if message is not None:
            run.messages.append(message)
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        loop.call_soon_threadsafe(self._set_changed, run.id)

    def _set_changed(self, run_id: str) -> None:
        self._changed.setdefault(run_id, asyncio.Event()).set()

    def _serve(self, worker: _Worker) -> None:
        while True:
            with self._wake:
                while not self._pending and not self._closing:
                    self._wake.wait()
                if self._closing:
                    return
                run = self._pending.pop(0)
                run.state = "running"
                run.started = time.time()
            self._notify(run)
            outcome, payload = worker.run(run)
            with self._lock:
                run.state = outcome
                run.finished = time.time()
                if outcome == "done":
                    run.result = payload
                else:
                    run.error = payload
                self._trim()
            self._notify(run)
