"""A bounded pool of worker processes for the costly part of requests: nothing heavy runs on the
event loop, or in the server's own process, where one client's work would stall every other.

Each worker is a spawned process with an address-space cap (`RLIMIT_AS`), in its own process
group, that dies with the server (Linux: PR_SET_PDEATHSIG; elsewhere it notices its pipe close).
It runs one task at a time: `run(name, payload, state)` of its tasks module
(app/compute/tasks.py), its `state` (caches) private to the worker. A task goes to the worker its
`affinity` names (the same trace to the same worker, whose cache then serves it), or without one
to the worker with the fewest tasks. A task that outlives `timeout_s`, or whose client has gone
(`gone()`, asked every `POLL_S` while it waits or runs), has its worker killed and replaced (at
once where its client went away, else on the worker's next task), or never starts; the caller
gets `TooSlow` or `Cancelled`. At most `max_pending` tasks wait or run at once, and at most
`max_per_client` of one client's; beyond either, `Busy` is raised at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing as mp
import os
import signal
import sys
import threading
import traceback
from collections import Counter
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

PR_SET_PDEATHSIG = 1
# Workers run this much nicer than the server, so that the event loop (health, pages, room
# fan-out) wins the CPU from them on a small machine.
WORKER_NICE = 5
POLL_S = 0.25  # how often a waiting or running task asks whether its client has gone
START_TIMEOUT_S = 120.0  # a worker that has not imported its tasks by then is taken as lost


class Busy(Exception):
    """Too many tasks wait already (`who`: "pool" in all, "client" of this client's, "address"
    from this client's address); retry after `retry_after` seconds."""

    def __init__(self, pending: int, retry_after: int = 1, who: str = "pool") -> None:
        super().__init__(
            {
                "pool": f"the server is busy with {pending} costly requests",
                "client": f"this client has {pending} costly requests waiting or running",
                "address": f"{pending} costly requests from this address wait or run",
            }[who]
            + "; retry shortly"
        )
        self.pending = pending
        self.retry_after = retry_after
        self.who = who

    @property
    def client(self) -> bool:
        """Whether the limit reached is one client's (or one address's) share."""
        return self.who != "pool"


class TooSlow(Exception):
    """The task ran past its time limit: its worker was stopped."""


class Cancelled(Exception):
    """The task's client went away: its worker was stopped."""


class TaskError(Exception):
    """The task raised: `kind` is the exception's class name (ValueError: the caller's input)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def _die_with_parent() -> None:
    """Ask Linux to kill this process when its parent dies (no-op elsewhere)."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _worker_main(conn: Any, memory_mib: int, parent: int, module: str) -> None:
    """A worker: cap its memory, then run tasks until its pipe closes."""
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)
    with contextlib.suppress(OSError, AttributeError):
        os.nice(WORKER_NICE)
    _die_with_parent()
    if os.getppid() != parent:  # the server died before the guard was set
        return
    if memory_mib > 0:
        import resource

        limit = memory_mib * 2**20
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    import importlib

    tasks = importlib.import_module(module)
    conn.send(("ready", os.getpid()))  # a task's time limit starts after this, not at the spawn
    state: dict[str, Any] = {}
    while True:
        try:
            name, payload = conn.recv()
        except (EOFError, OSError):
            return
        try:
            conn.send(("ok", tasks.run(name, payload, state)))
        except MemoryError:
            state.clear()  # drop the caches too: the next task starts lean
            conn.send(("err", "MemoryError", "the request needs more memory than a worker has"))
        except Exception as exc:  # reported to the caller; the worker lives on
            detail = str(exc) if isinstance(exc, ValueError) else traceback.format_exc(limit=3)
            conn.send(("err", type(exc).__name__, detail))


@dataclass
class _Worker:
    process: Any = None
    conn: Any = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    load: int = 0  # tasks running on it or waiting for it
    ready: bool = False  # it has imported its tasks module (said "ready")


async def _acquire(lock: asyncio.Lock, gone: Callable[[], Awaitable[bool]] | None) -> bool:
    """Take `lock`; False (not taken) once `gone()` says the client left while it waited."""
    if gone is None:
        await lock.acquire()
        return True
    taking = asyncio.ensure_future(lock.acquire())
    try:
        while True:
            done, _ = await asyncio.wait({taking}, timeout=POLL_S)
            if done:
                return True
            if await gone():
                break
    except BaseException:
        taking.cancel()  # the caller was cancelled: leave the lock as it finds it
        if taking.done() and not taking.cancelled():
            lock.release()
        raise
    taking.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await taking
    if not taking.cancelled():  # it was taken in the meantime
        lock.release()
    return False


class WorkerPool:
    """`workers` processes serving tasks; see the module docstring."""

    def __init__(
        self,
        workers: int,
        memory_mib: int,
        timeout_s: float,
        max_pending: int,
        module: str = "flashscope.app.compute.tasks",
        max_per_client: int | None = None,
        max_per_address: int | None = None,
    ) -> None:
        self.module = module
        self.size = max(1, workers)
        self.memory_mib = memory_mib
        self.timeout_s = timeout_s
        self.max_pending = max_pending
        self.max_per_client = max_per_client
        self.max_per_address = max_per_address
        self.pending = 0
        self._held: Counter[str] = Counter()  # tasks waiting or running, by client and address
        self._ctx = mp.get_context("spawn")
        self._workers = [_Worker() for _ in range(self.size)]
        self._threads: ThreadPoolExecutor | None = None
        self._guard = threading.Lock()
        self.restarts = 0

    def _executor(self) -> ThreadPoolExecutor:
        """The threads that wait on the workers' pipes (made again after a close)."""
        with self._guard:
            if self._threads is None:
                self._threads = ThreadPoolExecutor(self.size, thread_name_prefix="pool")
            return self._threads

    def _spawn(self, w: _Worker) -> None:
        parent, child = self._ctx.Pipe()
        proc = self._ctx.Process(
            target=_worker_main,
            args=(child, self.memory_mib, os.getpid(), self.module),
            daemon=True,
        )
        proc.start()
        child.close()
        w.process, w.conn, w.ready = proc, parent, False

    def start(self) -> None:
        """Start every worker now (each imports NumPy and the simulator once)."""
        with self._guard:
            for w in self._workers:
                if w.process is None or not w.process.is_alive():
                    self._spawn(w)

    def _kill(self, w: _Worker) -> None:
        with self._guard:
            if w.process is not None:
                with contextlib.suppress(ProcessLookupError, OSError):
                    w.process.kill()
                w.process.join(timeout=5)
            with contextlib.suppress(OSError):
                if w.conn is not None:
                    w.conn.close()
            w.process = w.conn = None
            self.restarts += 1

    @staticmethod
    def _exchange(w: _Worker, message: tuple[str, Any], timeout: float) -> Any:
        if not w.ready:  # a new worker imports its tasks first (seconds on a busy machine)
            if not w.conn.poll(START_TIMEOUT_S):
                raise EOFError("the worker did not start")
            w.conn.recv()
            w.ready = True
        w.conn.send(message)
        if not w.conn.poll(timeout):
            raise TimeoutError
        return w.conn.recv()

    def pids(self) -> list[int | None]:
        """Each worker's process id (None: not started, or stopped and not yet replaced)."""
        return [w.process.pid if w.process is not None else None for w in self._workers]

    def _choose(self, affinity: int | None) -> _Worker:
        if affinity is not None:
            return self._workers[affinity % self.size]
        return min(self._workers, key=lambda w: w.load)  # the first of the least loaded

    async def run(
        self,
        name: str,
        payload: Any,
        *,
        affinity: int | None = None,
        gone: Callable[[], Awaitable[bool]] | None = None,
        client: str | None = None,
        address: str | None = None,
    ) -> Any:
        """The task's result; raises Busy, TooSlow, Cancelled or TaskError. `client` and
        `address` (None: not counted) each hold at most their share of the pending tasks: a
        script that drops its identity cookie is a new client each time, not a new address."""
        if self.pending >= self.max_pending:
            raise Busy(self.pending)
        shares = [
            (f"{who}:{name}", who, limit)
            for who, name, limit in (
                ("client", client, self.max_per_client),
                ("address", address, self.max_per_address),
            )
            if name is not None
        ]
        for key, who, limit in shares:
            if limit is not None and self._held[key] >= limit:
                raise Busy(self._held[key], who=who)
        counted = [key for key, _, _ in shares]
        self.pending += 1
        self._held.update(counted)
        w = self._choose(affinity)
        w.load += 1
        try:
            if not await _acquire(w.lock, gone):
                raise Cancelled("the client went away before its task started")
            try:
                if gone is not None and await gone():
                    raise Cancelled("the client went away before its task started")
                if w.process is None or not w.process.is_alive():
                    await asyncio.get_running_loop().run_in_executor(
                        self._executor(), self._spawn, w
                    )
                return await self._run_on(w, (name, payload), gone)
            finally:
                w.lock.release()
        finally:
            w.load -= 1
            self.pending -= 1
            self._held.subtract(counted)
            self._held += Counter()  # drops the keys whose count is back to 0

    async def _run_on(
        self, w: _Worker, message: tuple[str, Any], gone: Callable[[], Awaitable[bool]] | None
    ) -> Any:
        loop = asyncio.get_running_loop()
        job = loop.run_in_executor(self._executor(), self._exchange, w, message, self.timeout_s)
        try:
            while True:
                done, _ = await asyncio.wait({job}, timeout=POLL_S)
                if done:
                    break
                if gone is not None and await gone():
                    self._kill(w)
                    with contextlib.suppress(Exception):
                        await job
                    # its replacement starts now, so the client's next request (a reader who
                    # stepped on, or left for another page) does not wait for a worker's imports
                    await loop.run_in_executor(self._executor(), self._spawn, w)
                    raise Cancelled("the client went away")
        except asyncio.CancelledError:  # the request itself was cancelled: so is its task
            self._kill(w)
            raise
        try:
            reply = job.result()
        except TimeoutError:
            self._kill(w)
            raise TooSlow(f"the request took longer than {self.timeout_s:g} s") from None
        except (EOFError, OSError):
            self._kill(w)
            raise TaskError("WorkerLost", "the worker stopped (out of memory?)") from None
        if reply[0] == "ok":
            return reply[1]
        raise TaskError(reply[1], reply[2])

    def close(self) -> None:
        """Stop every worker (a later task starts them again)."""
        for w in self._workers:
            if w.process is not None:
                self._kill(w)
        with self._guard:
            threads, self._threads = self._threads, None
        if threads is not None:
            threads.shutdown(wait=False, cancel_futures=True)
