"""The live-run worker process: fenced in before it imports anything heavy, then serves jobs.

    worker_main(executor, device, conn, lifeline, parent, memory_mib)

Before the executor (torch, triton) loads, the worker

- leads a process group of its own (`setsid`), so the server stops it and whatever it started
  (a compiler, say) with one signal to the group (`kill_group`);
- runs at a lower CPU priority than the server (`WORKER_NICE`): a live run in Triton's
  interpreter takes a core for seconds, and on a small machine the server's event loop (health,
  pages, room fan-out) must still get the CPU first;
- caps its memory at `memory_mib` (RLIMIT_AS on the CPU, where Triton's interpreter allocates
  host memory; RLIMIT_DATA on a GPU, where the CUDA driver reserves far more address space than
  it uses and an address-space cap would stop it starting): a job beyond it fails with a
  MemoryError, the worker lives on;
- dies with the server, and takes its group along, even when the server is SIGKILLed: a thread
  waits on `lifeline`, a pipe whose only writer is the server, and kills the group when it reads
  end-of-file (the server gone, on any system); on Linux the kernel also sends the worker SIGTERM
  when its parent dies (PR_SET_PDEATHSIG), whose handler kills the group too. (A SIGKILL there
  would end the worker before it could stop what it started.)

Then it imports the executor, calls the executor module's `prepare(device)` where it has one
(app/runs/jobs.py's imports torch, Triton and the kernels there: a cancel raises inside a job,
and must never land in the middle of those imports), says ("ready", pid) and runs one job at a
time: `execute(job, device=…, progress=…)` of
the executor, sending ("progress", message) while it runs and ("done", result) or ("failed",
error, traceback) after. SIGUSR1 (`CANCEL`) stops the job it runs, which then answers
("cancelled", reason): the worker lives on, with torch and triton still loaded, for the next
job.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import sys
import threading
import traceback
from typing import Any

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
CANCEL = signal.SIGUSR1  # stops the job in progress (the worker lives on)
WORKER_NICE = 10  # above the compute pool's 5: runs are long, and nobody waits on each step


class RunCancelled(BaseException):
    """Raised in the job by CANCEL (a BaseException: the executor's `except Exception` blocks
    do not swallow it)."""


class _Job:
    """Whether a job runs now (CANCEL raises only then, never inside a pipe write)."""

    running = False
    cancelled = False

    @classmethod
    def on_cancel(cls, *_: Any) -> None:
        cls.cancelled = True
        if cls.running:
            cls.running = False
            raise RunCancelled

    @classmethod
    def check(cls) -> None:
        if cls.cancelled:
            cls.running = False
            raise RunCancelled


def die_with_parent() -> None:
    """Kill this process's group on SIGTERM, and ask Linux to send SIGTERM when the thread that
    started this process ends (no-op elsewhere)."""
    signal.signal(signal.SIGTERM, lambda *_: kill_group())
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def cap_memory(memory_mib: int, device: str) -> None:
    """Cap this process's memory (see the module docstring); 0: no cap."""
    if memory_mib <= 0:
        return
    import resource

    kind = resource.RLIMIT_DATA if device.startswith("cuda") else resource.RLIMIT_AS
    limit = memory_mib * 2**20
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(kind, (limit, limit))


def kill_group(pid: int | None = None) -> None:
    """SIGKILL the process group that `pid` leads (default: this process's own group)."""
    with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
        os.killpg(os.getpgid(0) if pid is None else pid, signal.SIGKILL)


def _watch(lifeline: Any) -> None:
    """Block on the lifeline; end-of-file (or an error) means the server is gone."""
    with contextlib.suppress(EOFError, OSError):
        while True:
            lifeline.recv()
    kill_group()
    os._exit(1)  # where the group could not be killed


def worker_main(
    executor: str, device: str, conn: Any, lifeline: Any, parent: int, memory_mib: int
) -> None:
    """The worker process (see the module docstring)."""
    with contextlib.suppress(OSError):
        os.setsid()
    signal.signal(CANCEL, _Job.on_cancel)
    die_with_parent()
    if os.getppid() != parent:  # the server died before the guard was set
        return
    threading.Thread(target=_watch, args=(lifeline,), daemon=True, name="lifeline").start()
    with contextlib.suppress(OSError):
        os.nice(WORKER_NICE)
    cap_memory(memory_mib, device)
    module_name, func_name = executor.split(":")
    module = importlib.import_module(module_name)
    execute = getattr(module, func_name)
    prepare = getattr(module, "prepare", None)
    if prepare is not None:
        prepare(device)  # what its jobs import (torch, triton), before any cancel can come
    conn.send(("ready", os.getpid()))  # jobs are sent only now: a cancel never meets an import
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return
        if job is None:
            return

        def progress(message: str) -> None:
            _Job.running = False  # a cancel now waits until the message is written
            conn.send(("progress", message))
            _Job.running = True
            _Job.check()

        _Job.cancelled = False  # a cancel meant for a job already finished
        try:
            _Job.running = True
            result = execute(job, device=device, progress=progress)
            _Job.running = False
            conn.send(("done", result))
        except RunCancelled:
            conn.send(("cancelled", "cancelled while it ran"))
        except MemoryError:
            conn.send(("failed", f"MemoryError: the run needs more than {memory_mib} MiB", ""))
        except Exception as exc:  # the run fails; the worker lives on
            conn.send(("failed", f"{type(exc).__name__}: {exc}", traceback.format_exc(limit=3)))
        finally:
            _Job.running = False
