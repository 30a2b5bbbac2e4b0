"""Kernels compiled on demand, in the background: a simulation of flashscope's kernels meets a
kernel configuration that no table holds (`compiled.source` "estimate", or the nearest binary of
a grouped-query key), answers with the estimate from its tiles at once, and asks for it here. One
process at a time (kernels/sm90.py, niced) compiles up to `compile_batch` waiting kernels for
sm_90a into the cache; the next simulation of them reads their registers, shared memory and
spills from it. GET /api/compiled says where each asked kernel stands.

A kernel that timed out (or whose process could not start) is not asked for again while the
server runs (its estimate stays); one the compiler refused has its reason in the cache and is
never asked for again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path

from flashscope.simulator.timing import compiled, ondemand

log = logging.getLogger("flashscope.compile")

STATES = ("done", "failed", "pending", "timeout", "queue-full", "unknown")


class KernelCompiler:
    """The queue of kernels to compile and the one process compiling them."""

    def __init__(self, root: Path, timeout_s: float, batch: int, max_pending: int) -> None:
        self.root = Path(root)
        self.timeout_s = timeout_s
        self.batch = batch
        self.max_pending = max_pending
        self.waiting: dict[str, None] = {}  # in the order asked
        self.running: list[str] = []
        self.timed_out: set[str] = set()
        self.full: set[str] = set()  # asked while the queue was full (not queued)
        self.compiled = 0
        self._task: asyncio.Task[None] | None = None
        self._proc: asyncio.subprocess.Process | None = None

    def state(self, key: str) -> str:
        """Where `key` stands (`STATES`)."""
        found = compiled.local_state(key, self.root)
        if found is not None:
            return found
        if key in self.waiting or key in self.running:
            return "pending"
        if key in self.timed_out:
            return "timeout"
        return "queue-full" if key in self.full else "unknown"

    def request(self, keys: list[str]) -> dict[str, str]:
        """Queue the keys not compiled yet (never twice); key → its state after asking."""
        for k in keys:
            if self.state(k) not in ("unknown", "queue-full"):
                continue
            if len(self.waiting) + len(self.running) >= self.max_pending:
                self.full.add(k)
                continue
            self.full.discard(k)
            self.waiting[k] = None
        if self.waiting and (self._task is None or self._task.done()):
            self._task = asyncio.get_running_loop().create_task(self._drain())
        return {k: self.state(k) for k in keys}

    async def _drain(self) -> None:
        while self.waiting:
            self.running = list(self.waiting)[: self.batch]
            for k in self.running:
                del self.waiting[k]
            try:
                await self._compile(self.running)
            finally:
                self.running = []

    async def _compile(self, keys: list[str]) -> None:
        argv, env = ondemand.command(self.root, keys)
        try:
            self._proc = await asyncio.create_subprocess_exec(
                *argv,
                env=env,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
            )
        except OSError as exc:  # no process to be had: these keep the estimate
            log.warning("cannot start the compiler: %s", exc)
            self.timed_out.update(keys)
            return
        try:
            await asyncio.wait_for(self._proc.wait(), self.timeout_s)
        except TimeoutError:
            self._proc.kill()
            await self._proc.wait()
        finally:
            self._proc = None
        for k in keys:
            found = compiled.local_state(k, self.root)
            if found is None:
                self.timed_out.add(k)
            self.compiled += int(found == "done")
        log.info("compiled %s", {k: self.state(k) for k in keys})

    async def close(self) -> None:
        """Stop compiling (the process is killed; what it finished stays in the cache)."""
        if self._proc is not None and self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
