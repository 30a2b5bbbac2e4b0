"""flashscope's Triton kernels compiled for sm_90a (an H100 or H200) on any machine, with no
GPU, and read from the binary: the compiling half of the timing engine's kernels compiled on
demand (flashscope.simulator.timing.ondemand names the keys and starts this module as a process
of its own; benchmarks/compile_spills.py writes the shipped compiler table with it).

A key's binary (`ondemand.representative`) is launched as its launcher would launch it
(kernels/forward.py, kernels/backward.py: host-made or in-kernel tensor descriptors, the integers
Triton specializes on) with CPU tensors standing in for the arguments, the launch recorded
instead of run (`_patch_launchers`: so this runs in a process apart) and compiled through
Triton's JIT against a stand-in driver that names sm_90a. From the cubin, `cuobjdump
--dump-resource-usage` gives the registers per thread and the spill stack, the metadata the
dynamic shared memory, and the SASS (`nvdisasm`) the local loads and stores that
`sass.structure` places per loop step, loop entry and CTA.

    python -m flashscope.kernels.sm90 --cache DIR KEY [KEY …]

writes one JSON file per key into DIR's folder for the installed Triton (`compiled.cache_file`):
the binary's figures, or the reason it did not compile; one line per key on stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from flashscope.kernels.hopper_forward import warmup_sm90
from flashscope.simulator.timing import compiled
from flashscope.simulator.timing.ondemand import Kernel, engine_form, parse_key
from flashscope.simulator.timing.sass import parse_sass, structure, structure_of

NICE = 10  # the compiling process runs this much nicer than whoever started it

_captured: list[tuple[Any, ...]] = []


def _patch_launchers() -> None:
    """The launchers record their launch instead of running it, and take the tensor-memory
    path as on Hopper (where every stride allows it)."""
    import flashscope.kernels.backward as bw
    import flashscope.kernels.forward as fw
    from flashscope.kernels.inputs import tma_ready

    def record(fn: Any, grid: Any, args: Any, constexprs: Any, options: Any) -> None:
        _captured.append((fn, grid, tuple(args), dict(constexprs), dict(options)))

    def tma(tensors: list[Any], override: bool | None = None) -> bool:
        return (True if override is None else override) and tma_ready(*tensors)

    for m in (fw, bw):
        m.launch = record  # type: ignore[attr-defined]
        m.use_tma_for = tma  # type: ignore[attr-defined]
        m.prepare_tma = lambda tma: None  # type: ignore[attr-defined]


def run_launcher(k: Kernel, device: str = "cpu") -> None:
    """Call the launcher of `k`'s kernel on tensors of its shapes on `device`, as
    `flash_attention` would with its tiles (batch 1: the batch is no argument of the kernels;
    the values are left as allocated: only the binary matters)."""
    import torch

    import flashscope.kernels.backward as bw
    import flashscope.kernels.forward as fw
    from flashscope.kernels.config import KernelConfig

    dt = {"fp16": torch.float16, "bf16": torch.bfloat16}[k.dtype]
    q = torch.empty(1, k.heads, k.seq_q, k.head_dim, dtype=dt, device=device)
    kk = torch.empty(1, k.kv_heads, k.seq_k, k.head_dim, dtype=dt, device=device)
    v = torch.empty_like(kk)
    cfg = KernelConfig(k.block_m, k.block_n, k.warps, k.stages, maxnreg=k.maxnreg)
    scale = 1.0 / math.sqrt(k.head_dim)
    if k.kernel == "fwd":
        fw.launch_forward(q, kk, v, k.causal, scale, cfg)
        return
    do = torch.empty_like(q)
    lse = torch.zeros(1, k.heads, k.seq_q, device=device)
    if k.kernel == "dq":
        bw.run_dq(q, kk, v, do, lse, lse, k.causal, scale, cfg)
    else:
        acc = (torch.zeros(q.shape, dtype=torch.float32, device=device)
               if k.kernel == "dkdv-atomic" else None)  # fmt: skip
        bw.run_dkdv(q, kk, v, do, lse, lse, k.causal, scale, cfg, dq_acc=acc)


def compile_kernel(k: Kernel) -> Any:
    """Triton's CompiledKernel for `k`, compiled for sm_90a with CPU tensors (the launchers
    patched by `_patch_launchers`: the launch recorded, then compiled against a stand-in
    driver, `hopper_forward.warmup_sm90`)."""
    _captured.clear()
    run_launcher(k)
    fn, _grid, args, constexprs, options = _captured[-1]
    return warmup_sm90(fn, args, constexprs, options)


def _tool(name: str) -> Path:
    import triton

    return Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / name


def read_binary(kernel: Any) -> dict[str, Any]:
    """Registers, spill stack and the local-traffic structure of one compiled kernel."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(kernel.asm["cubin"])
        f.flush()
        usage = subprocess.run([_tool("cuobjdump"), "--dump-resource-usage", f.name],
                               capture_output=True, text=True, check=True).stdout  # fmt: skip
        sass = subprocess.run([_tool("nvdisasm"), "-c", f.name],
                              capture_output=True, text=True, check=True).stdout  # fmt: skip
    found = dict(re.findall(r"(REG|STACK|LOCAL):(\d+)", usage))
    s = structure(parse_sass(sass, kernel.metadata.name))
    return {"registers": int(found["REG"]), "stack": int(found["STACK"]),
            "shared": int(kernel.metadata.shared),
            "structure": asdict(s), "binary": kernel.metadata.hash[:16]}  # fmt: skip


def entry_of(key: str) -> dict[str, Any]:
    """Key `key` compiled and read: its registers, shared memory, spill stack, and its local
    traffic in the engine's units (None where it has none)."""
    k = parse_key(key)
    start = time.perf_counter()
    b = read_binary(compile_kernel(k))
    form = engine_form(structure_of(b["structure"]), k)
    spills = form | {"stack": b["stack"], "binary": b["binary"]} if any(form.values()) else None
    return {"format": compiled.FORMAT, "key": key, "registers": b["registers"],
            "shared": b["shared"], "stack": b["stack"], "binary": b["binary"], "kernel": spills,
            "triton": compiled.triton_version(), "arch": "sm_90a",
            "seconds": round(time.perf_counter() - start, 3)}  # fmt: skip


def _write(path: Path, doc: dict[str, Any]) -> None:
    """Write `doc` whole or not at all (readers in other processes never see half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    """Compile each key and write its cache file (a key that does not compile: the reason);
    one JSON line per key on stdout."""
    ap = argparse.ArgumentParser(description="compile flashscope's kernels for sm_90a, no GPU")
    ap.add_argument("--cache", type=Path, required=True, help="the cache's root folder")
    ap.add_argument("keys", nargs="+")
    args = ap.parse_args(argv)
    os.environ["TRITON_INTERPRET"] = "0"  # the compiler, not the interpreter
    with contextlib.suppress(OSError, AttributeError):  # (no nice on some systems)
        os.nice(NICE)  # the server and its simulations first
    _patch_launchers()
    for key in args.keys:
        path = compiled.cache_file(args.cache, key)
        try:
            doc = entry_of(key)
        except Exception as exc:  # a configuration that does not compile: kept as the reason
            first = str(exc).splitlines()[0][:300] if str(exc) else ""
            doc = {"format": compiled.FORMAT, "key": key, "error": f"{type(exc).__name__}: {first}",
                   "triton": compiled.triton_version()}  # fmt: skip
        _write(path, doc)
        print(json.dumps({"key": key, "ok": "error" not in doc, "seconds": doc.get("seconds")}),
              flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
