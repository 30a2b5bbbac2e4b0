"""Real server processes for tests: `flashscope serve` and `redis-server` on free loopback ports."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def alive(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie, dead but not yet reaped, counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(argv: list[str], log_path: Path | None = None, **kwargs) -> subprocess.Popen:
    """Start a server with its output in a file (`log_path`, else a temporary one): a pipe nobody
    reads would stop it once full (its `output` is read back where it fails to start)."""
    # closed by _stop, with the server
    log = log_path.open("w+b") if log_path else tempfile.TemporaryFile()  # noqa: SIM115
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, **kwargs)
    proc.log = log  # type: ignore[attr-defined]
    return proc


def output(proc: subprocess.Popen) -> str:
    """What a server started by `_start` has printed so far."""
    log = proc.log  # type: ignore[attr-defined]
    log.seek(0)
    return log.read().decode(errors="replace")


def _wait(
    proc: subprocess.Popen, ready, what: str, timeout: float = 60.0, poll_s: float = 0.1
) -> float:
    """Poll `ready()` every `poll_s` until it says yes: the monotonic time it first did."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited early:\n{output(proc)}")
        try:
            if ready():
                return time.monotonic()
        except OSError:
            pass
        time.sleep(poll_s)
    proc.kill()
    raise RuntimeError(f"{what} did not start within {timeout:.0f} s")


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    log = getattr(proc, "log", None)
    if log is not None:
        log.close()


class RedisProcess:
    """A throwaway redis-server (no persistence) on a fixed port, which a test may stop and start
    again: a Redis restart, as clients see it (same address, empty)."""

    def __init__(self) -> None:
        self.exe = shutil.which("redis-server") or "/usr/bin/redis-server"
        if not os.path.exists(self.exe):
            raise RuntimeError("redis-server not found: `make test` installs Debian's redis-server")
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen | None = None

    def answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def start(self, poll_s: float = 0.1) -> float:
        """Start it; the monotonic time at which it first answered (asked every `poll_s`)."""
        argv = ["--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        self.proc = _start([self.exe, *argv])
        return _wait(self.proc, self.answers, "redis-server", poll_s=poll_s)

    def stop(self) -> None:
        if self.proc is not None:
            _stop(self.proc)
            self.proc = None


@contextmanager
def redis_server() -> Iterator[str]:
    """A throwaway redis-server (no persistence); yields its URL."""
    with restartable_redis() as redis:
        yield redis.url


@contextmanager
def restartable_redis() -> Iterator[RedisProcess]:
    redis = RedisProcess()
    redis.start()
    try:
        yield redis
    finally:
        redis.stop()


@contextmanager
def flashscope_server(
    env: dict[str, str] | None = None,
    python: str = sys.executable,
    cwd: str | None = None,
    log_path: Path | None = None,
) -> Iterator[str]:
    """`flashscope serve` on a free port with extra FLASHSCOPE_* settings; yields its base URL.

    `python` is the interpreter whose flashscope serves (an installed wheel's, say), `cwd` where,
    `log_path` the file its output (its workers' too) goes to (default: a temporary one).
    """
    port = free_port()
    argv = [python, "-m", "flashscope.app.cli.main", "serve", "--port", str(port)]
    proc = _start(
        [*argv, "--log-level", "warning"], log_path, env={**os.environ, **(env or {})}, cwd=cwd
    )
    base = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        with urllib.request.urlopen(base + "/api/health", timeout=30) as r:
            return r.status == 200

    try:
        _wait(proc, ready, "flashscope serve")
        yield base
    finally:
        _stop(proc)
