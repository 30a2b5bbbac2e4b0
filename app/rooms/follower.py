"""One room connection's outbox: a bounded queue of messages that a single writer sends in order.

States wait in the queue; a member that lets `queue_len` of them pile up (it does not read, or
its network cannot keep up) is ended as too slow, at once, even while the writer is blocked in a
send that will never finish: the connection's handler waits on `ended` beside its reader and
writer, so a stuck socket never keeps a member in the room.
"""

from __future__ import annotations

import asyncio
import json

from flashscope.app.rooms.store import is_driver

TOO_SLOW = 1013


class Follower:
    """One connection's outbox. States wait in a bounded queue; a full queue ends it as too slow.

    Until `ready(seq)` the follower buffers what arrives (it is between registering and reading
    the room's latest state); after that, states numbered ≤ seq are dropped as already seen.
    """

    def __init__(self, member: str, queue_len: int) -> None:
        self.member = member
        self.driver = is_driver(member)
        self.following = True
        self.queue: asyncio.Queue[str | None] = asyncio.Queue(maxsize=queue_len + 8)
        self.ended = asyncio.Event()  # close now, whatever is queued
        self.close_code: int | None = None
        self.close_reason = ""
        self._state_room = queue_len
        self._floor: int | None = None
        self._early: list[tuple[int, str]] = []
        self.wants_presence = False  # the client asked for "presence" messages in its join
        self._presence: tuple[int, int] | None = None  # (clients, drivers) it last learnt

    @property
    def too_slow(self) -> bool:
        return self.close_code == TOO_SLOW

    def end(self, code: int, reason: str, flush: bool = False) -> None:
        """Close this connection with `code`: now, or once what is queued has been sent."""
        if self.close_code is not None:
            return
        self.close_code, self.close_reason = code, reason
        if flush:
            try:
                self.queue.put_nowait(None)  # the writer closes when it reaches this
                return
            except asyncio.QueueFull:
                pass
        self.ended.set()

    def hold(self) -> None:
        """Buffer states until the next `ready` (while the room's latest state is read)."""
        self._floor = None

    def ready(self, seq: int) -> None:
        self._floor = seq
        early, self._early = self._early, []
        for s, text in early:
            self.offer(s, text)

    def skip(self, seq: int) -> None:
        """A state this connection sent itself: it already shows it."""
        if self._floor is not None and seq > self._floor:
            self._floor = seq

    def send(self, text: str) -> None:
        """Queue a control message (welcome, ack, error, pong, room-gone, room-back)."""
        if self.close_code is not None:
            return
        try:
            self.queue.put_nowait(text)
        except asyncio.QueueFull:
            self.end(TOO_SLOW, "too slow to keep up with the room; join again")

    def offer(self, seq: int, text: str) -> None:
        if self._floor is None:
            self._early.append((seq, text))
            return
        if seq <= self._floor:
            return
        self._floor = seq
        if not self.following:
            return
        if self.queue.qsize() >= self._state_room:
            self.end(TOO_SLOW, "too slow to keep up with the room; join again")
            return
        self.send(text)

    def presence(self, clients: int, drivers: int, first: bool = False) -> None:
        """Who is in the room now: a driver hears of every change in the count, an attendee
        only of its lecturer coming or going (drivers 0 or not). `first`: the welcome said it."""
        was, self._presence = self._presence, (clients, drivers)
        if first or not self.wants_presence or was is None:
            return
        if self.driver:
            if was == (clients, drivers):
                return
        elif (was[1] > 0) == (drivers > 0):
            return
        self.send(f'{{"type":"presence","clients":{clients},"drivers":{drivers}}}')

    def lost(self, reason: str) -> None:
        """The store lost the room or does not answer: this connection stays and waits."""
        self.send(json.dumps({"type": "room-gone", "final": False, "reason": reason}))

    def back(self, seq: int, state_json: str | None, clients: int) -> None:
        """The room is back (restored after Redis came back): its state, unless already seen."""
        fresh = self._floor is not None and seq > self._floor
        if fresh:
            self._floor = seq
        head = f'{{"type":"room-back","seq":{seq},"clients":{clients}'
        if fresh and self.following and state_json is not None:
            self.send(f'{head},"state":{state_json}}}')
        else:
            self.send(head + "}")

    def gone(self, reason: str) -> None:
        """The room has closed for good: say why, then close (4410)."""
        self.send(json.dumps({"type": "room-gone", "final": True, "reason": reason}))
        self.end(4410, reason[:120], flush=True)
