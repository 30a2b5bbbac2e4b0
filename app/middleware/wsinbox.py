"""A WebSocket's incoming messages, read by a task of their own.

A handler that awaits costly work for one message (a trace built in the compute pool) does not
read the socket meanwhile, so it would learn that its client has gone only once the work is
done. `Inbox` keeps reading: `gone()` says at once that the client closed, and the pool stops
the work (app/compute/pool.py polls it). At most `limit` messages wait unread; beyond, the
reader stops reading and the client's sends back up (TCP), so a flood costs no memory here.
"""

from __future__ import annotations

import asyncio
import contextlib

from fastapi import WebSocket, WebSocketDisconnect


class Inbox:
    """The socket's text messages in order (binary ones decoded as UTF-8); see the module."""

    def __init__(self, ws: WebSocket, limit: int = 16) -> None:
        self._queue: asyncio.Queue[str] = asyncio.Queue(maxsize=limit)
        self._closed = asyncio.Event()
        self._reader = asyncio.create_task(self._read(ws))

    async def _read(self, ws: WebSocket) -> None:
        try:
            while True:
                message = await ws.receive()
                if message["type"] == "websocket.disconnect":
                    return
                text = message.get("text")
                if text is None:
                    text = (message.get("bytes") or b"").decode("utf-8", errors="replace")
                await self._queue.put(text)
        except (WebSocketDisconnect, RuntimeError):  # RuntimeError: the socket is closed
            return
        finally:
            self._closed.set()

    async def gone(self) -> bool:
        """Whether the client has closed the socket."""
        return self._closed.is_set()

    async def get(self) -> str:
        """The next message; WebSocketDisconnect once the client has gone and none is left."""
        while self._queue.empty():
            if self._closed.is_set():
                raise WebSocketDisconnect(1000)
            waiting = asyncio.ensure_future(self._closed.wait())
            taking = asyncio.ensure_future(self._queue.get())
            await asyncio.wait({waiting, taking}, return_when=asyncio.FIRST_COMPLETED)
            waiting.cancel()
            if taking.done():
                return taking.result()
            taking.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await taking
        return self._queue.get_nowait()

    def close(self) -> None:
        """Stop reading (the handler is done with the socket)."""
        self._reader.cancel()
