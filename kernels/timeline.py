"""When and where each program of the forward kernel ran: a measured schedule (GPU only).

The TIMELINE variant of the forward kernel (kernels/forward.py) reads the GPU's global timer
(ns) when a program starts and after it stores its output, and the SM it ran on. `forward_timeline`
runs it once warm and returns, per program in launch order, its start and end (from the
launch's first start), its SM, and which (batch·head, query block) it computed: the measured
counterpart of the timing engine's per-CTA schedule (`KernelResult.start/end/sm`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from flashscope.kernels.config import KernelConfig
from flashscope.kernels.device import interpreting
from flashscope.kernels.forward import launch_forward
from flashscope.kernels.inputs import check_attention, last_dim_contiguous
from flashscope.kernels.launch import cdiv


@dataclass(frozen=True)
class Timeline:
    """Per program, in launch order: start and end (s, from the first start), SM, row, block."""

    start: np.ndarray
    end: np.ndarray
    sm: np.ndarray
    row: np.ndarray  # batch·head
    block: np.ndarray  # query block

    @property
    def span(self) -> float:
        return float(self.end.max())


def forward_timeline(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    sm_scale: float | None = None,
    *,
    config: KernelConfig,
    band: int = 1,
    warmup: int = 3,
) -> Timeline:
    """Run the TIMELINE forward `warmup` times, then once more, recorded."""
    shapes = check_attention(q, k, v, causal, sm_scale)
    if interpreting() or not q.is_cuda:
        raise ValueError("a timeline needs a CUDA GPU: the interpreter has no global timer")
    q, k, v = (last_dim_contiguous(x) for x in (q, k, v))
    n_mb = cdiv(shapes.seq_q, config.block_m)
    programs = n_mb * shapes.batch * shapes.heads
    buf = torch.full((programs, 4), -1, dtype=torch.int64, device=q.device)
    for _ in range(warmup + 1):
        buf.fill_(-1)
        launch_forward(q, k, v, causal, shapes.scale, config, band=band, timeline=buf)
    torch.cuda.synchronize()
    raw = buf.cpu().numpy()
    if (raw[:, 0] < 0).any():
        raise RuntimeError("some programs left no timeline entry")
    t0 = raw[:, 0].min()
    return Timeline(
        start=(raw[:, 0] - t0) * 1e-9,
        end=(raw[:, 1] - t0) * 1e-9,
        sm=raw[:, 2].astype(np.int32),
        row=(raw[:, 3] // n_mb).astype(np.int32),
        block=(raw[:, 3] % n_mb).astype(np.int32),
    )
