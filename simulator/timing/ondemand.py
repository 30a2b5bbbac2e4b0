"""flashscope's Triton kernels compiled for sm_90a (an H100 or H200) on the CPU, for the timing
engine: registers, shared memory and register-spill traffic of a kernel configuration that no
table holds, read from the binary the compiler makes, with no GPU.

A configuration is named by its key in the engine's compiled-kernel table (`compiled.key`:
"fwd/d80p128/128x64/w4/s3/causal/ragged"). The key stands for one binary (`representative`):
fp16, 8 heads (in groups of 4 for a grouped-query key), N = 4096, or 4001 where the key is
ragged. It is launched as its launcher would launch it (kernels/forward.py, kernels/backward.py)
with CPU tensors standing in for the arguments, the launch recorded instead of run and compiled
through Triton's JIT against a stand-in driver that names sm_90a. From the cubin, `cuobjdump
--dump-resource-usage` gives the registers per thread and the spill stack, the metadata the
dynamic shared memory, and the SASS (`nvdisasm`, read by `sass.structure`) the local loads and
stores per loop step, per loop entry and per CTA; `engine_form` puts those in the engine's units
(`compiled.LocalTraffic`) with the kernels' loop bounds (`query_block_trips`,
`key_block_trips`). Triton ships ptxas, cuobjdump and nvdisasm in its wheel, so this runs
wherever flashscope is installed.

How close this comes to the measured kernels: every launch of the measured datasets compiled as
it ran has Nsight Compute's local bytes to the byte and its registers exactly
(benchmarks/results/compiled-spills-oracle-2026-11-26.json, with the Triton the GPU ran). On two
sweeps the engine had never seen, the compiler's figures for their 299 kernels took the time
MAPE from 26.2% and 33.1% to 20.8% and 24.5% and the DRAM bytes MAPE from 42% and 167% to 10.9%
and 8.7% (benchmarks/results/compiled-ablation-2026-11-27.json, docs/validation.md).

Compiling patches the launchers' module globals, so it runs in a process of its own: `main`
(`python -m flashscope.simulator.timing.ondemand --cache DIR KEY...`), driven by
`compile_keys`. Each key's result, or the reason it did not compile, is a JSON file in the cache
folder of the installed Triton's version (`cache_folder`), which `compiled.local_entry` reads.
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
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.timing import compiled
from flashscope.simulator.timing.sass import Structure, parse_sass, structure, structure_of

# --- the kernels' loop bounds ---------------------------------------------------------------


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _count(lo: int, hi: int, step: int) -> int:
    return max(0, cdiv(hi - lo, step))


def query_block_trips(n_q: int, n_k: int, bm: int, bn: int, causal: bool) -> list[tuple[int, int]]:
    """(unmasked, masked) key steps of each query-block program of the forward or dQ kernel
    (kernels/forward.py `_attn_fwd`, kernels/backward.py `_attn_bwd_dq`)."""
    off, out = n_k - n_q, []
    for pid in range(cdiv(n_q, bm)):
        m0 = pid * bm
        if causal:
            hi = max(min(n_k, min(m0 + bm, n_q) - 1 + off + 1), 0)
            full = min(max(m0 + off + 1, 0) // bn * bn, n_k // bn * bn, hi)
        else:
            hi, full = n_k, n_k // bn * bn
        out.append((_count(0, full, bn), _count(full, hi, bn)))
    return out


def key_block_trips(n_q: int, n_k: int, bm: int, bn: int, causal: bool) -> list[tuple[int, int]]:
    """(masked, unmasked) query steps, per query head, of each key-block program of the dK/dV
    kernel (kernels/backward.py `_attn_bwd_dkdv`)."""
    off, end, out = n_k - n_q, cdiv(n_q, bm) * bm, []
    for pid in range(cdiv(n_k, bn)):
        n0 = pid * bn
        if causal:
            lo = min(max(n0 - off, 0) // bm * bm, end)
            full = min(cdiv(max(n0 + bn - 1 - off, 0), bm) * bm, end)
        else:
            lo = full = 0
        if n0 + bn > n_k:
            full = end
        out.append((_count(lo, full, bm), _count(full, end, bm)))
    return out


@dataclass(frozen=True)
class Kernel:
    """One compiled binary's inputs: which kernel and everything its code depends on."""

    kernel: str  # fwd, dq, dkdv, dkdv-atomic
    head_dim: int
    dtype: str
    block_m: int
    block_n: int
    warps: int
    stages: int
    causal: bool
    seq_q: int
    seq_k: int
    heads: int
    kv_heads: int
    maxnreg: int | None = None

    @property
    def group(self) -> int:
        return self.heads // self.kv_heads


def per_cta(s: Structure, k: Kernel, heads: int | None = None) -> list[tuple[float, float, int]]:
    """(loaded, stored) bytes per thread and loop steps of each CTA of one (batch, head) row
    (`heads`: the query heads a dK/dV CTA walks, if not its group)."""
    inner = s.inner()
    if k.kernel == "dkdv" or k.kernel == "dkdv-atomic":
        trips = key_block_trips(k.seq_q, k.seq_k, k.block_m, k.block_n, k.causal)
        reps = k.group if heads is None else heads
    else:
        trips = query_block_trips(k.seq_q, k.seq_k, k.block_m, k.block_n, k.causal)
        reps = 1
    outer = [lp for lp in s.loops if lp not in inner]
    out = []
    for t in trips:
        load, store = float(s.cta_load), float(s.cta_store)
        for lp in outer:  # the walk over a group's heads: entered once, a step per head
            load += lp.entry_load + reps * lp.step_load
            store += lp.entry_store + reps * lp.step_store
        for lp, n in zip(inner, t, strict=True):
            entered = reps if n > 0 else 0
            load += entered * lp.entry_load + reps * n * lp.step_load
            store += entered * lp.entry_store + reps * n * lp.step_store
        out.append((load, store, reps * sum(t)))
    return out


def engine_form(s: Structure, k: Kernel) -> dict[str, float]:
    """The engine's units for one binary (`compiled.LocalTraffic`): bytes per thread per loop
    step (the unmasked loop's; the dK/dV kernel's second loop, the others' first), per query
    head a dK/dV CTA walks (each head's loop entries and masked steps beyond an unmasked one:
    the difference between walking two heads and one) and per CTA (the rest), each the mean
    over the CTAs of one (batch, head) row of `k`."""
    inner = s.inner()
    dkdv = k.kernel.startswith("dkdv")
    main = inner[1] if dkdv else inner[0]
    one, two = per_cta(s, k, 1), per_cta(s, k, 2)
    out = {"load_step": float(main.step_load), "store_step": float(main.step_store)}
    for name, col in (("load", 0), ("store", 1)):
        step = out[f"{name}_step"]
        head = [
            b[col] - a[col] - step * a[2] if dkdv else 0.0 for a, b in zip(one, two, strict=True)
        ]
        left = [a[col] - h - step * a[2] for a, h in zip(one, head, strict=True)]
        out[f"{name}_cta"] = round(sum(left) / len(left), 4) + 0.0
        out[f"{name}_head"] = round(sum(head) / len(head), 4) + 0.0
    return out


# --- which binary a key stands for -----------------------------------------------------------

REPRESENTATIVE_HEADS = 8
REPRESENTATIVE_KV_HEADS = {False: 8, True: 2}  # no grouping; groups of 4
REPRESENTATIVE_SEQ = {False: 4096, True: 4001}  # whole tiles; a length Triton compiles apart


def representative(cfg: tuple[Any, ...]) -> Kernel:
    """The binary a key stands for: fp16, 8 heads (in groups of 4 where grouped), N = 4096
    (ragged: 4001)."""
    kind, d, bm, bn, warps, stages, cap, causal, ragged, grouped = cfg
    n, h = REPRESENTATIVE_SEQ[ragged], REPRESENTATIVE_HEADS
    return Kernel(kind, d, "fp16", bm, bn, warps, stages, causal, n, n, h,
                  REPRESENTATIVE_KV_HEADS[grouped], cap)  # fmt: skip


def engine_key(k: Kernel) -> str:
    """The key of `k` in the engine's compiled-kernel table (`compiled.key`)."""
    p = AttentionProblem(seq_q=k.seq_q, seq_k=k.seq_k, head_dim=k.head_dim, batch=1,
                         heads=k.heads, kv_heads=k.kv_heads, causal=k.causal,
                         dtype=k.dtype)  # fmt: skip
    t = TileConfig(k.block_m, k.block_n, k.stages, k.warps, k.maxnreg)
    launch = {"fwd": "fa2", "dq": "bwd_dq", "dkdv": "bwd_dkdv", "dkdv-atomic": "bwd_dkdv"}[k.kernel]
    return compiled.key(launch, p, t, "atomic" if k.kernel == "dkdv-atomic" else "separate")


# --- compiling on the CPU --------------------------------------------------------------------


class _Sm90:
    """Just enough of Triton's driver for its JIT to compile for sm_90a with no GPU present."""

    def get_current_target(self) -> Any:
        from triton.backends.compiler import GPUTarget

        return GPUTarget("cuda", 90, 32)

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int | None = None) -> int:
        return 0

    def get_active_torch_device(self) -> Any:
        import torch

        return torch.device("cpu")

    def is_active(self) -> bool:
        return True


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
        bw.run_dq(q, kk, v, do, lse, lse, k.causal, scale, cfg)  # type: ignore[no-untyped-call]
    else:
        acc = (torch.zeros(q.shape, dtype=torch.float32, device=device)
               if k.kernel == "dkdv-atomic" else None)  # fmt: skip
        bw.run_dkdv(q, kk, v, do, lse, lse, k.causal, scale, cfg, dq_acc=acc)  # type: ignore[no-untyped-call]


def compile_kernel(k: Kernel) -> Any:
    """Triton's CompiledKernel for `k`, compiled for sm_90a with CPU tensors (the launchers
    patched by `_patch_launchers`: the launch recorded, then compiled against `_Sm90`)."""
    from triton.runtime import driver

    _captured.clear()
    run_launcher(k)
    fn, grid, args, constexprs, options = _captured[-1]
    saved = driver._active
    driver.set_active(_Sm90())
    try:
        return fn.warmup(*args, **constexprs, **options, grid=grid)
    finally:
        driver._active = saved


def _tool(name: str) -> Path:
    import triton

    return Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / name


def read_binary(compiled: Any) -> dict[str, Any]:
    """Registers, spill stack and the local-traffic structure of one compiled kernel."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(compiled.asm["cubin"])
        f.flush()
        usage = subprocess.run([_tool("cuobjdump"), "--dump-resource-usage", f.name],
                               capture_output=True, text=True, check=True).stdout  # fmt: skip
        sass = subprocess.run([_tool("nvdisasm"), "-c", f.name],
                              capture_output=True, text=True, check=True).stdout  # fmt: skip
    found = dict(re.findall(r"(REG|STACK|LOCAL):(\d+)", usage))
    s = structure(parse_sass(sass, compiled.metadata.name))
    return {"registers": int(found["REG"]), "stack": int(found["STACK"]),
            "shared": int(compiled.metadata.shared),
            "structure": asdict(s), "binary": compiled.metadata.hash[:16]}  # fmt: skip


# --- a key, compiled --------------------------------------------------------------------------

NICE = 10  # the compiling process runs this much nicer than whoever started it
_KEY = re.compile(
    r"(?P<kind>fwd|dq|dkdv|dkdv-atomic)/d(?P<d>\d+)(?:p(?P<pad>\d+))?/(?P<bm>\d+)x(?P<bn>\d+)"
    r"/w(?P<w>\d+)/s(?P<s>\d+)/(?P<mask>causal|full)(?P<ragged>/ragged)?(?P<gqa>/gqa)?"
    r"(?:/r(?P<cap>\d+))?"
)


def parse_key(key: str) -> Kernel:
    """The binary `key` stands for (`representative`); ValueError for a string that is no key
    of the engine's compiled-kernel table."""
    m = _KEY.fullmatch(key)
    if m is None:
        raise ValueError(f"not a compiled-kernel key: {key!r}")
    cap = m["cap"]
    cfg = (m["kind"], int(m["d"]), int(m["bm"]), int(m["bn"]), int(m["w"]), int(m["s"]),
           int(cap) if cap else None, m["mask"] == "causal", bool(m["ragged"]),
           bool(m["gqa"]))  # fmt: skip
    k = representative(cfg)
    if engine_key(k) != key:  # a padded width that is not the head dim's, say
        raise ValueError(f"not a compiled-kernel key: {key!r} (it reads as {engine_key(k)!r})")
    return k


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


def command(root: Path, keys: list[str]) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of a process that compiles `keys` into the cache under
    `root` (`main`)."""
    argv = [sys.executable, "-m", "flashscope.simulator.timing.ondemand", "--cache", str(root)]
    return [*argv, *keys], os.environ | {"TRITON_INTERPRET": "0"}


def compile_keys(keys: list[str], root: Path, timeout_s: float, jobs: int = 1) -> dict[str, str]:
    """Compile `keys` into the cache under `root` in `jobs` processes of their own side by side,
    all stopped after `timeout_s`: key → "done", "failed" (the compiler refused it: the reason
    is in its file) or "timeout" (nothing written; a later request tries again)."""
    shares = [keys[i::jobs] for i in range(max(1, jobs)) if keys[i::jobs]]
    procs = []
    for share in shares:
        argv, env = command(root, share)
        procs.append(subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL))  # fmt: skip
    deadline = time.monotonic() + timeout_s
    for proc in procs:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return {k: compiled.local_state(k, root) or "timeout" for k in keys}


def compile_missing(
    keys: list[str], gpu_key: str, root: Path, timeout_s: float, jobs: int = 1
) -> dict[str, str]:
    """Compile into the cache under `root` those of `keys` whose figures on `gpu_key` nothing
    but the estimate (or the nearest binary) gives (`compiled.wants_compile`); key → state of
    each compiled (empty: nothing to compile)."""
    with compiled.local_cache(root):
        missing = [k for k in dict.fromkeys(keys) if compiled.wants_compile(k, gpu_key)]
    return compile_keys(missing, root, timeout_s, jobs) if missing else {}


if __name__ == "__main__":
    sys.exit(main())
