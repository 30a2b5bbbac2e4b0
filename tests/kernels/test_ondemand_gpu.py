"""On a GPU: the binary that kernels/sm90.py compiles on the CPU for a key, with a
stand-in driver and CPU tensors, is the binary the GPU runs for the same launch: the same hash,
registers and shared memory.

Marked `gpu`: skipped where there is no CUDA device (`TRITON_INTERPRET=0 python -m pytest -m gpu
tests/kernels`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import flashscope.kernels.backward as bw
import flashscope.kernels.forward as fw
from flashscope.kernels.sm90 import run_launcher
from flashscope.simulator.timing import compiled, ondemand

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

# forward, dQ, dK/dV (both routes): padded head dims, ragged lengths, grouped heads, one that
# spills (d = 80 on 128×64 tiles keeps 72 bytes a thread in local memory)
KEYS = (
    "fwd/d80p128/128x64/w4/s3/causal/ragged",
    "fwd/d96p128/64x64/w4/s4/full/ragged/gqa",
    "dq/d80p128/64x128/w8/s2/full",
    "dkdv/d96p128/64x64/w4/s2/full/gqa",
    "dkdv-atomic/d64/64x64/w4/s2/causal/ragged",
)


def _on_gpu(key: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The CompiledKernel Triton made for `key`'s launch on this GPU (run once)."""
    got: list[Any] = []

    def launch(fn: Any, grid: Any, args: Any, constexprs: Any, options: Any) -> None:
        got.append(fn[grid](*args, **constexprs, **options))

    for m in (fw, bw):
        monkeypatch.setattr(m, "launch", launch)
    run_launcher(ondemand.parse_key(key), "cuda")
    torch.cuda.synchronize()
    return got[-1]


def test_the_cpu_compile_is_the_binary_the_gpu_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the tables' binaries are sm_90a (an H100 or H200)")
    states = ondemand.compile_keys(list(KEYS), tmp_path, timeout_s=600, jobs=2)
    assert set(states.values()) == {"done"}, states
    with compiled.local_cache(tmp_path):
        for key in KEYS:
            entry = compiled.local_entry(key)
            assert entry is not None
            kernel = _on_gpu(key, monkeypatch)
            assert kernel.metadata.hash[:16] == entry["binary"], key
            assert kernel.n_regs == entry["registers"], key
            assert kernel.metadata.shared == entry["shared"], key
            assert (kernel.n_spills > 0) == (entry["stack"] > 0), key
