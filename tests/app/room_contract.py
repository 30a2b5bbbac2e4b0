"""What every room store must do with several drivers, run against each store in its own test."""

from __future__ import annotations

import asyncio

import pytest

from flashscope.app.rooms.store import RoomStore, Seats, StaleState


async def stale_states_are_refused(store: RoomStore, code: str) -> None:
    """Two drivers A and B: a state built on an older seq than the other's newest is refused.

    The store's deliveries are checked too: a refused state reaches nobody.
    """
    got: list[tuple[int, str, str]] = []
    await store.start(lambda c, seq, origin, state: c == code and got.append((seq, origin, state)))
    try:
        assert await store.create(code, "digest", max_rooms=100) == "ok"
        for m in ("A", "B", "C"):
            await store.join(code, f"d.{m}.0", Seats(limit=10, per_address=10))
        assert await store.publish(code, "A", '{"s":1}', base=0) == 1
        # B had seen nothing: its state answers a room that has moved on.
        with pytest.raises(StaleState) as exc:
            await store.publish(code, "B", '{"s":"echo"}', base=0)
        assert exc.value.seq == 1
        # A's own quick succession never counts against it (it has not had its ack yet).
        assert await store.publish(code, "A", '{"s":2}', base=0) == 2
        assert await store.publish(code, "A", '{"s":3}', base=1) == 3
        # B, having seen 3, takes over; then A's state built on 2 is stale, on 3 it is not.
        assert await store.publish(code, "B", '{"s":4}', base=3) == 4
        with pytest.raises(StaleState) as exc:
            await store.publish(code, "A", '{"s":"late"}', base=3)
        assert exc.value.seq == 4
        assert await store.publish(code, "A", '{"s":5}', base=4) == 5
        # Without a base (an older client) a state is taken as it comes.
        assert await store.publish(code, "B", '{"s":6}') == 6
        record = await store.get(code)
        assert record is not None and (record.seq, record.state) == (6, '{"s":6}')
        for _ in range(200):  # Redis delivers through pub/sub, a moment later
            if len(got) >= 6:
                break
            await asyncio.sleep(0.02)
        assert [(seq, origin) for seq, origin, _ in got] == [
            (1, "A"), (2, "A"), (3, "A"), (4, "B"), (5, "A"), (6, "B"),
        ]  # fmt: skip
        assert all("echo" not in s and "late" not in s for _, _, s in got)
    finally:
        await store.close()
