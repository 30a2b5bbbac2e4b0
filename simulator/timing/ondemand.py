"""Kernel configurations compiled on demand for the timing engine: which binary an engine key
stands for, the kernels' loop bounds, the engine's units of a binary's local traffic, and the
processes that compile keys into a cache.

A configuration is named by its key in the engine's compiled-kernel table (`compiled.key`:
"fwd/d80p128/128x64/w4/s3/causal/ragged"). The key stands for one binary (`representative`):
fp16, 8 heads (in groups of 4 for a grouped-query key), N = 4096, or 4001 where the key is
ragged. kernels/sm90.py compiles it for sm_90a (an H100 or H200) on any machine, with no GPU,
and reads the binary: registers per thread, dynamic shared memory, and the local loads and stores
of its SASS per loop step, loop entry and CTA (`sass.structure`), which `engine_form` puts in the
engine's units (`compiled.LocalTraffic`) with the kernels' loop bounds (`query_block_trips`,
`key_block_trips`). Triton ships ptxas, cuobjdump and nvdisasm in its wheel, so this runs
wherever flashscope is installed.

How close this comes to the measured kernels: every launch of the measured datasets compiled as
it ran has Nsight Compute's local bytes to the byte and its registers exactly
(benchmarks/results/compiled-spills-oracle-2026-11-26.json, with the Triton the GPU ran); on a
GPU the binary compiled so is the one the GPU runs (tests/kernels/test_ondemand_gpu.py). On four
sweeps the engine had never seen, compiling their kernels took the time MAPE from 26-33% to
20-25% and the DRAM bytes MAPE from 42-167% to 9-25%
(benchmarks/results/compiled-on-demand-2026-11-27.json, docs/validation.md).

Compiling patches the launchers' module globals, so it runs in a process of its own (`COMPILER`,
started by `command`; `compile_keys` waits for it). Each key's result, or the reason it did not
compile, is a JSON file in the cache folder of the installed Triton's version
(`compiled.cache_file`), which `compiled.local_entry` reads.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flashscope.simulator.core.problem import AttentionProblem, TileConfig, cdiv
from flashscope.simulator.timing import compiled
from flashscope.simulator.timing.sass import Structure

# --- the kernels' loop bounds ---------------------------------------------------------------


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


# --- a key, and the processes that compile keys ------------------------------------------------

# The module that compiles, run as a process of its own (kernels/sm90.py: it launches the
# kernels' own launchers, which the simulator never imports)
COMPILER = "flashscope.kernels.sm90"
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


def command(root: Path, keys: list[str]) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of a process that compiles `keys` into the cache under
    `root` (`COMPILER`'s `main`)."""
    argv = [sys.executable, "-m", COMPILER, "--cache", str(root)]
    return [*argv, *keys], os.environ | {"TRITON_INTERPRET": "0"}


def compile_keys(keys: list[str], root: Path, timeout_s: float, jobs: int = 1) -> dict[str, str]:
    """Compile `keys` into the cache under `root` in `jobs` processes of their own side by side,
    all stopped after `timeout_s`: key → "done", "failed" (the compiler refused it: the reason
    is in its file) or "timeout" (nothing written; a later request tries again)."""
    jobs = max(1, jobs)
    shares = [keys[i::jobs] for i in range(jobs) if keys[i::jobs]]
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
