"""The compute pool: tasks off the event loop, bounded in time, memory and number (in all and
per client), cancelled with their client, and workers that die with the server."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

import pytest

from flashscope.app.compute.pool import Busy, Cancelled, TaskError, TooSlow, WorkerPool

from .servers import alive

FAKE = "tests.app.fake_tasks"


@pytest.fixture
def pool():
    p = WorkerPool(2, 512, 3.0, 4, module=FAKE)
    yield p
    p.close()


def test_tasks_run_in_other_processes_with_affinity_and_state(pool):
    async def go():
        pids = [await pool.run("pid", None, affinity=k) for k in (0, 1, 2, 3)]
        counts = [await pool.run("count", None, affinity=1) for _ in range(3)]
        return pids, counts

    pids, counts = asyncio.run(go())
    assert os.getpid() not in pids
    assert pids[0] == pids[2] != pids[1] == pids[3]  # the same affinity, the same worker
    assert counts == [1, 2, 3]


def test_a_slow_task_is_stopped_and_its_worker_replaced(pool):
    async def go():
        t0 = time.monotonic()
        with pytest.raises(TooSlow):
            await pool.run("sleep", 30, affinity=0)
        took = time.monotonic() - t0
        return took, await pool.run("sleep", 0.01, affinity=0)

    took, again = asyncio.run(go())
    assert took < 6 and again == "slept" and pool.restarts == 1


def test_a_workers_start_does_not_count_against_its_first_tasks_time(monkeypatch):
    monkeypatch.setenv("FAKE_TASKS_IMPORT_S", "1.0")  # the spawned worker inherits it
    p = WorkerPool(1, 512, 0.5, 4, module=FAKE)
    try:
        assert asyncio.run(p.run("sleep", 0.1)) == "slept"
    finally:
        p.close()


def test_a_task_whose_client_left_is_stopped_within_a_second(pool):
    async def go():
        left = time.monotonic() + 0.3

        async def gone() -> bool:
            return time.monotonic() > left

        with pytest.raises(Cancelled):
            await pool.run("sleep", 30, affinity=0, gone=gone)
        return time.monotonic() - left

    assert asyncio.run(go()) < 1.0


def test_the_memory_cap_holds_and_the_worker_lives_on(pool):
    async def go():
        with pytest.raises(TaskError) as err:
            await pool.run("allocate", 2048, affinity=0)
        return err.value.kind, await pool.run("allocate", 16, affinity=0)

    kind, ok = asyncio.run(go())
    assert kind == "MemoryError" and ok == 16 * 2**20


def test_input_errors_come_back_as_value_errors(pool):
    async def go():
        with pytest.raises(TaskError) as err:
            await pool.run("nonsense", None)
        return err.value

    err = asyncio.run(go())
    assert err.kind == "ValueError" and "bad input" in str(err)


def test_beyond_the_pending_bound_work_is_refused_at_once(pool):
    async def go():
        slow = [asyncio.ensure_future(pool.run("sleep", 0.5, affinity=k)) for k in range(4)]
        await asyncio.sleep(0.05)
        t0 = time.monotonic()
        with pytest.raises(Busy):
            await pool.run("pid", None)
        refused_in = time.monotonic() - t0
        await asyncio.gather(*slow)
        return refused_in

    assert asyncio.run(go()) < 0.05


def test_a_task_without_affinity_goes_to_a_worker_that_is_free(pool):
    async def go():
        pids = {await pool.run("pid", None, affinity=k) for k in (0, 1)}  # both started
        slow = asyncio.ensure_future(pool.run("sleep", 1.0))
        await asyncio.sleep(0.05)
        t0 = time.monotonic()
        other = await pool.run("pid", None)
        waited = time.monotonic() - t0
        await slow
        return pids, other, waited

    pids, other, waited = asyncio.run(go())
    assert other in pids and waited < 0.5  # it did not queue behind the sleeping worker


def test_one_client_beyond_its_share_is_refused_while_others_are_served():
    p = WorkerPool(2, 512, 3.0, 8, module=FAKE, max_per_client=1)

    async def go():
        first = asyncio.ensure_future(p.run("sleep", 0.5, client="a"))
        await asyncio.sleep(0.05)
        with pytest.raises(Busy) as busy:
            await p.run("pid", None, client="a")
        other = await p.run("pid", None, client="b")
        await first
        again = await p.run("pid", None, client="a")  # its task is done: its share is back
        return busy.value, other, again

    try:
        busy, other, again = asyncio.run(go())
    finally:
        p.close()
    assert busy.client and busy.retry_after >= 1
    assert isinstance(other, int) and isinstance(again, int)


def test_new_identities_from_one_address_share_its_cap():
    p = WorkerPool(2, 512, 3.0, 8, module=FAKE, max_per_client=4, max_per_address=2)

    async def go():
        held = [
            asyncio.ensure_future(p.run("sleep", 0.5, client=f"c{k}", address="ip:10.0.0.1"))
            for k in range(2)
        ]
        await asyncio.sleep(0.05)
        with pytest.raises(Busy) as busy:  # a third new identity from the same address
            await p.run("pid", None, client="c2", address="ip:10.0.0.1")
        other = await p.run("pid", None, client="c3", address="ip:10.0.0.2")
        await asyncio.gather(*held)
        again = await p.run("pid", None, client="c4", address="ip:10.0.0.1")
        return busy.value, other, again

    try:
        busy, other, again = asyncio.run(go())
    finally:
        p.close()
    assert busy.who == "address" and busy.client and busy.pending == 2
    assert "from this address" in str(busy)
    assert isinstance(other, int) and isinstance(again, int)


def test_a_task_whose_client_left_while_it_waited_never_runs():
    p = WorkerPool(1, 512, 3.0, 4, module=FAKE)

    async def go():
        busy = asyncio.ensure_future(p.run("sleep", 0.8))
        await asyncio.sleep(0.05)
        left = time.monotonic() + 0.2

        async def gone() -> bool:
            return time.monotonic() > left

        with pytest.raises(Cancelled):
            await p.run("count", None, gone=gone)
        noticed = time.monotonic() - left
        pending = p.pending
        await busy
        return noticed, pending, await p.run("count", None), p.restarts

    try:
        noticed, pending, count, restarts = asyncio.run(go())
    finally:
        p.close()
    assert noticed < 0.5 and pending == 1  # it left the queue at once, the running task stayed
    assert count == 1 and restarts == 0  # it never ran, and no worker was stopped for it


SERVER = f"""
import asyncio, sys
from flashscope.app.compute.pool import WorkerPool
p = WorkerPool(2, 0, 60, 4, module={FAKE!r})
async def go():
    pids = [await p.run("pid", None, affinity=k) for k in (0, 1)]
    print(*pids, flush=True)
    await asyncio.sleep(60)
asyncio.run(go())
"""


def test_workers_die_with_a_killed_server():
    proc = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE, text=True)
    pids = [int(x) for x in proc.stdout.readline().split()]
    assert len(pids) == 2 and all(alive(p) for p in pids)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.1)
    assert not any(alive(p) for p in pids)
