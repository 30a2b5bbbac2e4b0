"""Run a coroutine to its end from a test, in a thread of its own.

A browser test earlier in the same pytest worker leaves Playwright's event loop marked as running
in the main thread (its sync API keeps that loop for the whole run), and `asyncio.run()` refuses
to start inside a running loop. A fresh thread has none.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()
