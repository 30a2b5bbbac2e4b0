"""The views of the app: path, title, one line of what it teaches, and its JSON twin."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class View:
    path: str
    title: str
    summary: str
    api: str
    ready: bool = True


VIEWS: tuple[View, ...] = (
    View(
        "/tiles",
        "Tile stepper",
        "Step through FlashAttention-2 one tile operation at a time and watch the running max, "
        "the running sum and the output accumulator converge to exact attention.",
        "/api/trace",
    ),
)
