"""Test-wide setup: Triton's interpreter on CPU, before any kernel module is imported."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

# Apps made by the tests start their compute workers on their first trace, not at start-up:
# most tests never trace, and each worker costs an interpreter's start.
os.environ.setdefault("FLASHSCOPE_COMPUTE_WARM", "0")

# Nor do they compile the kernels their simulations meet (each compile takes seconds and writes
# to the user's cache): the tests of compiling on demand turn it on with a cache of their own.
os.environ.setdefault("FLASHSCOPE_COMPILE_ON_DEMAND", "0")


def pytest_collection_modifyitems(items) -> None:
    """The browser tests last: their Playwright, shared by the whole run, keeps an event loop
    running in the test process, after which `asyncio.run` fails (the compute pool's tests use
    it)."""
    items.sort(key=lambda item: item.get_closest_marker("browser") is not None)
