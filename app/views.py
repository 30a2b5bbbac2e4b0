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
        "Step through the FlashAttention-1 or -2 forward one tile operation at a time: the loop "
        "order, causal masking, what sits in SRAM, and the running max, sum and output "
        "converging to exact attention in fp32, fp16 or bf16.",
        "/api/trace",
    ),
    View(
        "/backward",
        "Backward pass",
        "The FlashAttention-2 backward, tile by tile: P rebuilt from the saved log-sum-exp, "
        "D = rowsum(dO∘O), dS, and dQ, dK, dV accumulating, with the HBM traffic of the fp32 "
        "dQ accumulator and the gradients checked against float64.",
        "/api/trace?algo=fa2-bwd",
    ),
    View(
        "/decode",
        "Flash-Decoding",
        "One new token against a long KV cache: the cache split across SMs, each split's "
        "partial output and log-sum-exp, and the reduction by LSE weights that ends on the "
        "exact output.",
        "/api/trace?algo=decode",
    ),
    View(
        "/schedule",
        "GPU schedule",
        "The timing engine's view of a whole GPU: CTAs on SMs in waves, the causal imbalance, "
        "occupancy and its limiter, where the time goes, and the roofline; presets or your "
        "own specs.",
        "/api/schedule",
    ),
    View(
        "/hopper",
        "FlashAttention-3 on Hopper",
        "One CTA of the warp-specialized forward as a Gantt per warpgroup, the FA-3 model "
        "beside a timeline recorded on an H100: ping-pong, pipelining, two or three consumer "
        "warpgroups, why the exponentials bound the time at head_dim 64, FA-1 against FA-2 "
        "against FA-3, and FP8 as a what-if.",
        "/api/hopper",
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
    View(
        "/compare",
        "Measured vs simulated",
        "flashscope's kernels timed on H100 and H200 against the timing engine's prediction, "
        "configuration by configuration: where the model is right, where it is wrong, and why.",
        "/api/compare",
    ),
    View(
        "/learn",
        "Course",
        "An ordered path through the views, from the memory wall to the GPU schedule: each "
        "lesson a short text beside its live figure, links that set the figure up, and a check "
        "question.",
        "/api/learn",
    ),
    View(
        "/glossary",
        "Glossary",
        "The words the views use, from CTA, SM, HBM and SRAM to waves, occupancy, the "
        "log-sum-exp and split-KV: each in a few sentences, with the views that show it.",
        "/api/glossary",
    ),
)


def view_at(path: str) -> View:
    """The registered view served at `path`."""
    return next(v for v in VIEWS if v.path == path)
