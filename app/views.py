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
    View(
        "/memory-wall",
        "Memory wall",
        "Naive attention against FlashAttention, one tile at a time: the N×N scores bounce "
        "through HBM for one, stay on chip for the other. With the access table over N.",
        "/api/memory-wall",
    ),
    View(
        "/online-softmax",
        "Online softmax",
        "Type a vector, pick a block size and watch the running max, the running sum and the "
        "rescale factor turn a one-pass sweep into the exact softmax.",
        "/api/online-softmax",
    ),
    View(
        "/memory-scaling",
        "Memory scaling",
        "Peak GPU memory of naive and flash attention as the sequence grows, and the length at "
        "which naive attention no longer fits on the chosen GPU.",
        "/api/memory-scaling",
    ),
)


def view_at(path: str) -> View:
    """The registered view served at `path`."""
    return next(v for v in VIEWS if v.path == path)
