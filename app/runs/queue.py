"""The run queue: live kernel runs in worker processes, one per device, with limits and a cache.

Each worker is a spawned process (app/runs/worker.py) in a process group of its own, with a memory
cap, that dies with the server even when the server is SIGKILLed; it imports the executor once
(torch and triton load there, never in the server) and runs one job at a time. The server keeps
the runs in memory: their state, their progress messages and their result. A job past the
timeout has its worker's whole group killed and the worker replaced; the run ends as "timeout".
Identical requests share one run (the cache).

Fair shares: at most `max_queued` runs wait in all, at most `max_per_client` of them from one
client (its issued identity, app/middleware/identity.py) and `max_per_address` from one address
(a client that drops its cookie is a new client each time). A free worker takes the oldest run of
the next client in turn (round-robin), so one client's runs never hold another's back by more
than a round; `position` is a run's place in that order.

Watched runs: a run queued with `unwatched_s` (POST /api/runs) needs someone following it. It is
watched while a progress stream of it is open (`watch`), and a look at it (`touch`: GET of the
run, or a POST that finds it cached) counts as a watch that just ended. A queued or running run
nobody has watched for `unwatched_s` seconds (counted from its submission, or from the end of
its last watch) is cancelled: taken out of the queue, or its job stopped (CANCEL: the worker
lives on with torch and triton loaded; one that does not stop within CANCEL_WAIT_S has its group
killed; one still starting goes on starting, for the next run). So a page that closes stops its
work within about that time, and a script that queues runs without following them does not keep
the worker busy.

States: queued → running → done | failed | timeout | cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import multiprocessing as mp
import os
import threading
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from flashscope.app.runs.worker import CANCEL, kill_group, worker_main

Progress = Callable[[str], None]
CANCEL_WAIT_S = 0.5  # a worker that has not stopped a cancelled job by then is killed
SERVER = "server"  # the client whose turns runs the server plans itself take
FINAL = ("done", "failed", "timeout", "cancelled")


@dataclass
class Run:
    """One queued or finished run; `messages` grows as the worker reports progress."""

    id: str
    key: str
    request: dict[str, Any]
    client: str = ""  # whose turn it takes in the round-robin (never sent out)
    address: str = ""
    state: str = "queued"
    created: float = field(default_factory=time.time)
    started: float | None = None
    finished: float | None = None
    messages: list[str] = field(default_factory=list)
    result: dict[str, Any] | None = None
    error: str | None = None
    cause: str | None = None  # why it was cancelled, for programs: "unfollowed" (`_check`)
    unwatched_s: float | None = None  # cancelled after this long unwatched (None: never)
    watchers: int = 0  # progress streams open on it now
    unwatched_since: float = field(default_factory=time.monotonic)
    cancelling: bool = False  # its worker is being killed: the run ends as "cancelled"

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
            "cause": self.cause,
        }


class QueueFull(Exception):
    """Too many runs wait (in all, from this client or from this address: `who`); retry after
    `retry_after` seconds. `limit` is the bound that was reached."""

    def __init__(self, retry_after: int, limit: int, who: str = "queue") -> None:
        whose = {
            "queue": f"the run queue is full: {limit} runs wait",
            "client": f"this client has {limit} runs waiting, the most one client may queue",
            "address": f"{limit} runs from this address wait, the most one address may queue",
        }[who]
        super().__init__(f"{whose}; retry in {retry_after} s")
        self.retry_after = retry_after
        self.limit = limit
        self.who = who


class _Worker:
    """The parent's handle on one worker process and the thread that talks to it."""

    def __init__(self, queue: RunQueue, device: str) -> None:
        self.queue = queue
        self.device = device
        self.proc: Any = None
        self.conn: Any = None
        self.lifeline: Any = None  # the write end the worker watches; never written to
        self.current: Run | None = None  # the run it serves now
        self.ready = False  # it has imported the executor (said "ready")

    def start(self) -> None:
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        watch, self.lifeline = ctx.Pipe(duplex=False)
        args = (self.queue.executor, self.device, child, watch, os.getpid(), self.queue.memory_mib)
        self.proc = ctx.Process(target=worker_main, args=args, daemon=True)
        self.proc.start()
        child.close()
        watch.close()
        self.conn = parent
        self.ready = False

    def kill(self) -> None:
        """Kill the worker and everything in its process group, and forget it. A worker still
        being started (no pid yet) is left to its lifeline, which closes here: kill_group(None)
        would be the server's own group."""
        if self.proc is not None and self.proc.pid is not None:
            kill_group(self.proc.pid)  # the worker leads its group (os.setsid)
            with contextlib.suppress(OSError):
                self.proc.kill()  # in case it had not yet made its group
            self.proc.join(timeout=5)
        for end in (self.conn, self.lifeline):
            with contextlib.suppress(OSError, AttributeError):
                end.close()
        self.proc = self.conn = self.lifeline = None

    def interrupt(self) -> None:
        """Ask the worker to stop its job (from any thread): it answers "cancelled" and lives
        on; the thread serving it kills it when it has not within CANCEL_WAIT_S."""
        proc = self.proc
        if proc is not None and proc.pid is not None and self.ready:
            with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
                os.kill(proc.pid, CANCEL)

    def stop(self) -> None:
        if self.proc is not None and self.proc.is_alive():
            with contextlib.suppress(OSError):
                self.conn.send(None)
                self.proc.join(timeout=2)
        self.kill()

    def run(self, run: Run) -> tuple[str, Any]:
        """Run one job; blocks this thread until an outcome or the timeout."""
        died = "failed", "the worker process died (out of memory?)"
        if run.cancelling:  # cancelled between being taken and being sent
            return "cancelled", run.error
        if self.proc is None or not self.proc.is_alive():
            self.kill()
            self.start()
        deadline = time.monotonic() + self.queue.timeout_s
        while not self.ready:  # a new worker imports torch and triton first (seconds)
            if run.cancelling:  # it goes on starting, for the next run
                return "cancelled", run.error
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                return "timeout", f"the run took longer than {self.queue.timeout_s:g} s"
            try:
                if not self.conn.poll(min(left, 0.05)):
                    if not self.proc.is_alive():
                        self.kill()
                        return died
                    continue
                self.ready = self.conn.recv()[0] == "ready"
            except (EOFError, OSError):
                self.kill()
                return died
        try:
            self.conn.send({**run.request, **self.queue.job_extra})
        except OSError:
            self.kill()
            return died
        cancel_by: float | None = None
        while True:
            now = time.monotonic()
            left = deadline - now
            if left <= 0:
                self.kill()
                return "timeout", f"the run took longer than {self.queue.timeout_s:g} s"
            if run.cancelling:
                cancel_by = cancel_by or now + CANCEL_WAIT_S
                if now >= cancel_by:  # it did not stop: stop it and its group
                    self.kill()
                    return "cancelled", run.error
            try:
                if not self.conn.poll(min(left, 0.5 if cancel_by is None else 0.05)):
                    if not self.proc.is_alive():
                        self.kill()
                        return died
                    continue
                kind, *payload = self.conn.recv()
            except (EOFError, OSError):
                self.kill()
                return died
            if kind == "progress":
                self.queue._notify(run, message=payload[0])
            else:
                return kind, payload[0]


class RunQueue:
    """Runs served by one worker per device, in turn between clients; results cached by key."""

    def __init__(
        self,
        executor: str,
        devices: list[str],
        *,
        max_queued: int,
        timeout_s: float,
        cache_size: int,
        max_per_client: int | None = None,
        max_per_address: int | None = None,
        memory_mib: int = 0,
        seconds_per_run: float = 5.0,
        job_extra: dict[str, Any] | None = None,
    ) -> None:
        self.executor = executor
        self.job_extra = dict(job_extra or {})  # the server's own fields, added to every job
        self.devices = devices
        self.max_queued = max_queued
        self.max_per_client = max_queued if max_per_client is None else max_per_client
        self.max_per_address = max_queued if max_per_address is None else max_per_address
        self.timeout_s = timeout_s
        self.cache_size = cache_size
        self.memory_mib = memory_mib
        self.seconds_per_run = seconds_per_run  # a running mean of the runs' durations
        self.runs: OrderedDict[str, Run] = OrderedDict()
        self.by_key: dict[str, str] = {}
        # Waiting runs by client; the order of the clients is the order of their turns.
        self._pending: OrderedDict[str, deque[Run]] = OrderedDict()
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
        """Stop serving: runs in progress are killed (their workers' groups), not waited for."""
        with self._wake:
            self._closing = True
            self._wake.notify_all()
        for w in self._workers:
            pid = w.proc.pid if w.proc is not None else None
            if pid is not None:  # None: not started yet, and kill_group(None) is our own group
                kill_group(pid)  # the serving thread sees its pipe close and returns
        for t in self._threads:
            t.join(timeout=10)
        for w in self._workers:
            w.stop()

    # --- submitting and reading -----------------------------------------------------------

    def submit(
        self,
        key: str,
        request: dict[str, Any],
        client: str | None = None,
        address: str = "",
        unwatched_s: float | None = None,
    ) -> tuple[Run, bool]:
        """Queue a run, or return the live or finished run of the same request (cached=True).
        Raises QueueFull when the queue, the client or the address has its most runs waiting.

        `client` None: a run the server plans itself (a measure-now batch): it takes its turns
        as one client of its own and is held to the whole queue's limit only. `unwatched_s`: the
        run is cancelled once nobody has watched it for that long (see the module docstring)."""
        with self._wake:
            existing = self.by_key.get(key)
            if (
                existing is not None
                and existing in self.runs
                and self.runs[existing].state not in ("failed", "timeout", "cancelled")
            ):
                found = self.runs[existing]
                self._touch(found)
                return found, True
            waiting = self._order()
            if len(waiting) >= self.max_queued:
                raise QueueFull(self._retry_after(len(waiting)), self.max_queued, "queue")
            if client is not None:
                own = self._pending.get(client, deque())
                if len(own) >= self.max_per_client:
                    ahead = waiting.index(own[0])
                    raise QueueFull(self._retry_after(ahead), self.max_per_client, "client")
                same = [i for i, r in enumerate(waiting) if r.address == address]
                if len(same) >= self.max_per_address:
                    raise QueueFull(self._retry_after(same[0]), self.max_per_address, "address")
            client = SERVER if client is None else client
            run = Run(
                id=uuid.uuid4().hex[:12] + f"{next(self._ids):x}",
                key=key,
                request=request,
                client=client,
                address=address,
                unwatched_s=unwatched_s,
            )
            self.runs[run.id] = run
            self.by_key[key] = run.id
            self._pending.setdefault(client, deque()).append(run)
            self._trim()
            self._wake.notify()
        self._check_later(run)
        return run, False

    def position(self, run: Run) -> int | None:
        """How many runs start before this one (None once it is no longer waiting)."""
        with self._lock:
            if run.state != "queued":
                return None
            order = self._order()
            return order.index(run) if run in order else None

    def waiting(self) -> int:
        with self._lock:
            return sum(len(q) for q in self._pending.values())

    def get(self, run_id: str) -> Run | None:
        return self.runs.get(run_id)

    async def wait_change(self, run: Run, timeout: float) -> None:
        """Wait until the run changes (a message or a new state), or `timeout` seconds."""
        event = self._changed.setdefault(run.id, asyncio.Event())
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except TimeoutError:
            return
        finally:
            event.clear()

    # --- watching and cancelling -----------------------------------------------------------

    def watch(self, run: Run) -> None:
        """A progress stream of `run` opens (call `unwatch` when it closes)."""
        run.watchers += 1

    def unwatch(self, run: Run) -> None:
        run.watchers = max(0, run.watchers - 1)
        self._touch(run)

    def touch(self, run: Run) -> None:
        """Someone looked at `run` (a GET of it): a watch that just ended."""
        self._touch(run)

    def _touch(self, run: Run) -> None:
        run.unwatched_since = time.monotonic()
        if run.watchers == 0:
            self._check_later(run)

    def _check_later(self, run: Run) -> None:
        """Check `run` once its unwatched time could have run out (on the event loop)."""
        loop = self._loop
        if run.unwatched_s is None or loop is None or loop.is_closed():
            return
        delay = max(0.0, run.unwatched_since + run.unwatched_s - time.monotonic())
        loop.call_soon_threadsafe(loop.call_later, delay + 0.01, self._check, run)

    def _check(self, run: Run) -> None:
        if run.unwatched_s is None or run.watchers > 0 or run.state not in ("queued", "running"):
            return
        if time.monotonic() - run.unwatched_since >= run.unwatched_s:
            # static/js/live.js queues the run again for this cause
            reason = f"nobody followed the run for {run.unwatched_s:g} s"
            self.cancel(run, reason, cause="unfollowed")

    def cancel(self, run: Run, reason: str, cause: str | None = None) -> None:
        """Stop `run`: out of the queue when it waits, its worker killed when it runs (`reason`
        for people, `cause` a word for programs)."""
        with self._lock:
            if run.state == "queued":
                waiting = self._pending.get(run.client)
                if waiting is not None and run in waiting:
                    waiting.remove(run)
                    if not waiting:
                        del self._pending[run.client]
                run.state, run.error, run.finished = "cancelled", reason, time.time()
                run.cause = cause
                self._trim()
            elif run.state == "running" and not run.cancelling:
                run.cancelling = True
                run.error, run.cause = reason, cause
                for worker in self._workers:
                    if worker.current is run:
                        worker.interrupt()
            else:
                return
        self._notify(run)

    # --- internals ------------------------------------------------------------------------

    def _order(self) -> list[Run]:
        """The waiting runs in the order they will start: each client's oldest in turn, then
        each one's second oldest, … (what `_next` does one run at a time)."""
        queues = list(self._pending.values())
        depth = max((len(q) for q in queues), default=0)
        return [q[i] for i in range(depth) for q in queues if len(q) > i]

    def _next(self) -> Run:
        """The next client's oldest run; that client's turn moves to the end."""
        client, queue = next(iter(self._pending.items()))
        run = queue.popleft()
        if queue:
            self._pending.move_to_end(client)
        else:
            del self._pending[client]
        return run

    def _retry_after(self, ahead: int) -> int:
        """Seconds until `ahead` waiting runs (and those running) are likely done."""
        busy = ahead + len(self.devices)
        return max(1, round(busy * self.seconds_per_run / len(self.devices)))

    def _trim(self) -> None:
        finished = [r for r in self.runs.values() if r.state in FINAL]
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
                run = self._next()
                run.state = "running"
                run.started = time.time()
                worker.current = run
            self._notify(run)
            outcome, payload = worker.run(run)
            with self._lock:
                worker.current = None
                if run.cancelling:
                    outcome, payload = "cancelled", run.error
                run.state = outcome
                run.finished = time.time()
                if outcome == "done":
                    run.result = payload
                else:
                    run.error = payload
                if outcome != "cancelled":
                    took = run.finished - run.started
                    self.seconds_per_run = 0.7 * self.seconds_per_run + 0.3 * took
                self._trim()
            self._notify(run)
