"""What flashscope's compiled kernels do that the engine cannot derive: their registers and
their spill traffic.

A kernel whose live values outgrow the 255 registers a thread may hold spills: the compiler
stores some of them to local memory and reloads them, in every loop step or once per CTA. How
much is the compiler's choice, not a function of the tile sizes: among the measured kernels the
same register estimate (255, capped) spilled nothing in one kernel and 84–104 bytes of reloads
per thread and step in another, and a kernel spills more with the causal mask than without. So
the engine takes these bytes from Nsight Compute's counts of the compiled kernels
(`l1tex__t_bytes_pipe_lsu_mem_local_op_ld` / `_st`) in the validation datasets, per kernel and
tile configuration, as bytes per thread per loop step plus bytes per thread per CTA (`derive`:
least squares over rows of different sequence lengths, fitted on the datasets' fit subset
only). The table (`data/compiled-kernels.json`) holds for the kernels as Triton 3.6 compiles
them for sm_90 (the H100 and the H200 run the same binaries: their counts agree to the byte)
at the sizes measured.

A kernel or tile configuration Nsight Compute never measured takes the compiler's own figures
(`compiler_table`, `compiler_registers`: data/compiled-spills.json, written without a GPU by
benchmarks/compile_spills.py): each configuration compiled for sm_90a by the Triton the
measurements ran, its registers from the cubin and its local loads and stores from the SASS,
per loop step, per query head a dK/dV CTA walks and per CTA. Launch by launch those figures
are Nsight Compute's counts: every launch of the measured datasets compiled as it ran has its
local bytes to the byte and its registers exactly
(benchmarks/results/compiled-spills-oracle-2026-11-26.json). A key stands for one binary of
its configuration (fp16, 8 heads, one length), so the table misses what the kernels' other
specializations change (bf16, a single head, a length that fills no tile); the oracle file
says how often that matters. Any kernel on a GPU preset of another architecture
(`ARCH_PRESETS`), or a configuration neither table holds, takes an estimate from its tiles
(`estimate`): the registers its live tiles ask for (`occupancy.register_demand`) beyond the
255 a thread may hold are stored and reloaded in every loop step, at a fitted number of bytes
per excess register. The estimate is the compiler's behaviour in the mean only: Nsight
Compute's counts of the users' sweep's unlisted kernels lie within a factor of 2 of it for
about half of them, and a few 2-warp kernels far beyond the cap compile to 32 registers and
keep nearly everything in local memory, 2–4 times more than estimated.

Where the bytes go is the engine's part: every spill store reaches L2 (L1 writes through) and a
reload only when it misses L1, a fitted share `Efficiency.spill_l1_miss` (more where the
resident threads' slots outgrow the L1 that shared memory leaves: `engine.spill_l1`). Some
spilled lines also leave L2 dirty and reach DRAM: a spilling kernel writes more to DRAM than the
same problem's kernels that do not spill (on the H100, 14–29 bytes per thread per CTA for the
d = 128 64×64 dK/dV kernel without the mask, growing with its steps, 49–53 for the causal
d = 128 dQ kernel whatever the length; less on the H200's larger L2). The table keeps that
write-back per GPU (`writeback`: bytes per thread per step and per CTA, least squares over the
fit rows' excess of each spilling kernel's DRAM writes over the mean of its non-spilling siblings').

A configuration neither table holds can be compiled on this machine, with no GPU, by the
installed Triton (`ondemand`): where a local cache is in use (`local_cache`: the server's
simulations, `flashscope simulate --compile`, `flashscope validate --compile`), its entries come
after the measured table and the compiler's exact keys, and before the compiler's nearest key
(a grouped-query key's binary without grouping) and the estimate. `source` says which of these
a key's figures come from.

The table also keeps every measured kernel's registers per thread (Nsight Compute's
`launch__registers_per_thread`: one count per key in every dataset, whatever the length, batch
or GPU), which decide how many CTAs share an SM. The engine's estimate from the tiles
(`occupancy.footprint`) is one occupancy step off for some tiles (the d = 64 dK/dV kernel's
32×64 tile compiles to 128 registers without the causal mask, four CTAs, where the estimate's
144 fit three; its 32×32 tile to 195–204, two, not three); a key the table has takes its
compiled count, any other the estimate.
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.timing.occupancy import MAX_REGS, pad_head_dim

TABLE_PATH = Path(__file__).resolve().parents[1] / "data" / "compiled-kernels.json"
# What the compiler says of every kernel configuration, measured or not (benchmarks/
# compile_spills.py): registers and spills read from the sm_90a binaries' SASS, with no GPU
COMPILER_PATH = Path(__file__).resolve().parents[1] / "data" / "compiled-spills.json"
FORMAT = 1
LOCAL_LOAD = "l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum"
LOCAL_STORE = "l1tex__t_bytes_pipe_lsu_mem_local_op_st.sum"
DRAM_WRITE = "dram__bytes_write.sum"  # the spills' write-back is an excess of this
REGISTERS = "launch__registers_per_thread"
# Nsight Compute's duration of one kernel launch, in ns
NCU_DURATION = "gpu__time_duration.sum"
# Nsight Compute's kernel names → the engine's launch names (kernelplan)
KERNEL_LAUNCH = {"_attn_fwd": "fa2", "_attn_bwd_dq": "bwd_dq", "_attn_bwd_dkdv": "bwd_dkdv"}
LAUNCH_KERNEL = {"fa2": "fwd", "bwd_dq": "dq", "bwd_dkdv": "dkdv"}
# Triton specializes integer arguments on divisibility by 16: another binary, other spills
INT_DIVISOR = 16
# The GPU presets that run the table's binaries (sm_90); another architecture compiles other
# code (no tensor-memory copies, other register files), for which nothing was measured.
ARCH_PRESETS = ("h100-sxm", "h100-pcie", "h200")


class PerThread(NamedTuple):
    """Bytes one thread moves: per loop step and per CTA (its set-up and epilogue)."""

    step: float
    cta: float

    def bytes(self, iters: np.ndarray, threads: int) -> np.ndarray:
        """Bytes of every CTA of a launch with `iters` loop steps each (never below 0: a
        negative per-CTA term is a fit's, for masked steps that spill less)."""
        it = np.asarray(iters, dtype=np.float64)
        return np.maximum(threads * (self.step * it + self.cta), 0.0)

    def total(self, steps: float, ctas: int, threads: int) -> float:
        """Bytes of a launch of `ctas` CTAs running `steps` loop steps in all."""
        return float(self.bytes(np.array([steps / ctas]), threads)[0]) * ctas


@dataclass(frozen=True)
class LocalTraffic:
    """Local-memory bytes of one thread: per loop step, per CTA (its set-up and epilogue) and,
    for the dK/dV kernel, per query head its CTA walks (each head's loop entries and masked
    steps: `load_head`, `store_head`; in compiler-derived entries only, `compiler_table`, where
    walking the heads of a group of 4 is what the binaries of grouped-query keys were read at)."""

    load_step: float
    load_cta: float
    store_step: float
    store_cta: float
    load_head: float = 0.0
    store_head: float = 0.0
    stack: float = 0.0  # the binary's spill stack, bytes per thread (compiler entries; 0: unknown)

    @classmethod
    def from_entry(cls, entry: dict[str, Any]) -> LocalTraffic:
        """From one of the table files' (or `derive`'s) entries."""
        fields = ("load_step", "load_cta", "store_step", "store_cta")
        extra = (float(entry.get(f, 0.0)) for f in ("load_head", "store_head", "stack"))
        return cls(*(float(entry[f]) for f in fields), *extra)

    def frame(self, heads: int = 1) -> float:
        """Local bytes one thread keeps: the binary's spill stack where the compiler's entry
        gives it, else what it stores in a loop step and once per CTA (each slot once)."""
        if self.stack > 0:
            return self.stack
        st = self.stores(heads)
        return max(0.0, st.step) + max(0.0, st.cta)

    @property
    def load(self) -> PerThread:
        """Loads of a CTA that walks one head."""
        return self.loads(1)

    @property
    def store(self) -> PerThread:
        """Stores of a CTA that walks one head."""
        return self.stores(1)

    def loads(self, heads: int) -> PerThread:
        return PerThread(self.load_step, self.load_cta + heads * self.load_head)

    def stores(self, heads: int) -> PerThread:
        return PerThread(self.store_step, self.store_cta + heads * self.store_head)

    def totals(self, steps: float, ctas: int, threads: int, heads: int = 1) -> tuple[float, float]:
        """(loaded, stored) bytes of a launch of `ctas` CTAs running `steps` loop steps in all."""
        load, store = self.loads(heads), self.stores(heads)
        return load.total(steps, ctas, threads), store.total(steps, ctas, threads)

    def bytes(
        self, iters: np.ndarray, threads: int, heads: int = 1
    ) -> tuple[np.ndarray, np.ndarray]:
        """(loaded, stored) bytes of every CTA of a launch with `iters` loop steps each, each
        CTA walking `heads` query heads (dK/dV: the group)."""
        return self.loads(heads).bytes(iters, threads), self.stores(heads).bytes(iters, threads)


# Spills of a kernel the table has no entry for, estimated from its tiles (`estimate`): local
# bytes per thread per loop step for each register its tiles ask for beyond the cap, fitted
# through the origin on Nsight Compute's counts of the users' sweep's fit half, before the
# tables held its kernels (benchmarks/results/validation-users-*-2026-11-26.json): the forward,
# dQ and dK/dV kernels that spill reload 12–14 bytes per excess register per step at the median
# (half of them 6–60), and store a little less. The compiler's table agrees for 4-warp kernels
# (median 14 loaded, 7 stored) but not for 8-warp ones (76 and 16) or 2-warp ones past about
# 320 registers asked, which compile to 32 registers in 15 of 33 cases (docs/validation.md).
SPILL_LOAD_PER_REG = 12.0
SPILL_STORE_PER_REG = 11.0


def excess_registers(demand: int, maxnreg: int | None, overhead: int) -> int:
    """Registers per thread beyond what the compiler may hold: past 255, or past a `maxnreg`
    cap once the fixed overhead (addresses, loop state: recomputed first) is given up, as
    `occupancy.footprint` flags spills."""
    if maxnreg is not None and maxnreg < MAX_REGS:
        return max(0, demand - overhead - maxnreg)
    return max(0, demand - MAX_REGS)


def estimate(
    demand: int,
    maxnreg: int | None,
    overhead: int,
    load_per_reg: float | None = None,
    store_per_reg: float | None = None,
) -> LocalTraffic | None:
    """Local-memory bytes per thread of a kernel whose tiles ask for `demand` registers per
    thread (`occupancy.register_demand`), for a key the table has no entry for: every register
    beyond the cap is stored and reloaded in each loop step, at the fitted bytes per register
    (None: nothing beyond the cap)."""
    excess = excess_registers(demand, maxnreg, overhead)
    if excess <= 0:
        return None
    load = SPILL_LOAD_PER_REG if load_per_reg is None else load_per_reg
    store = SPILL_STORE_PER_REG if store_per_reg is None else store_per_reg
    return LocalTraffic(load * excess, 0.0, store * excess, 0.0)


def key(launch: str, p: AttentionProblem, t: TileConfig, route: str | None = None) -> str:
    """The table's key of the kernel behind engine launch `launch` run with tiles `t`: which
    kernel and every constexpr that changes its code ("dkdv-atomic/d64/32x128/w4/s3/full",
    "fwd/d64/128x128/w8/s2/causal/r128")."""
    atomic = launch == "bwd_dkdv" and route == "atomic"
    kernel = LAUNCH_KERNEL[launch] + ("-atomic" if atomic else "")
    # the head dim and its padded width are both compile-time constants: d = 80 is its own
    # binary (d80p128), not d = 128's
    d, pad = p.head_dim, pad_head_dim(p.head_dim)
    dims = f"d{d}" if d == pad else f"d{d}p{pad}"
    out = f"{kernel}/{dims}/{t.block_m}x{t.block_n}/w{t.warps}/s{t.stages}"
    out += "/causal" if p.causal else "/full"
    if p.seq_q % INT_DIVISOR or (p.seq_k or p.seq_q) % INT_DIVISOR:
        out += "/ragged"  # Triton compiles lengths not divisible by 16 apart
    if p.group > 1:
        out += "/gqa"  # a group of 1 is a constant to Triton: grouped heads are another binary
    return out + (f"/r{t.maxnreg}" if t.maxnreg else "")


@functools.cache
def _document(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    doc: dict[str, Any] = json.loads(path.read_text())
    if doc.get("format") != FORMAT:
        raise ValueError(f"{path}: format {doc.get('format')!r}, expected {FORMAT}")
    return doc


@functools.cache
def table(path: Path = TABLE_PATH) -> dict[str, LocalTraffic]:
    """The shipped table's spill entries: key → LocalTraffic (an absent file: no entries)."""
    return {k: LocalTraffic.from_entry(e) for k, e in _document(path).get("kernels", {}).items()}


@functools.cache
def register_table(path: Path = TABLE_PATH) -> dict[str, int]:
    """The shipped table's compiled register counts: key → registers per thread."""
    return {k: int(v) for k, v in _document(path).get("registers", {}).items()}


@functools.cache
def compiler_table(path: Path = COMPILER_PATH) -> dict[str, LocalTraffic]:
    """The compiler-derived spill entries (`COMPILER_PATH`): key → LocalTraffic.

    Read from the SASS of each kernel configuration compiled for sm_90a with the Triton the
    measurements ran (benchmarks/compile_spills.py): LDL/STL widths per loop step, per loop
    entry and per CTA. Checked launch by launch against Nsight Compute's local bytes and
    registers (benchmarks/results/compiled-spills-oracle-2026-11-26.json, docs/timing-model.md
    "Register spills")."""
    return {k: LocalTraffic.from_entry(e) for k, e in _document(path).get("kernels", {}).items()}


@functools.cache
def compiler_registers(path: Path = COMPILER_PATH) -> dict[str, int]:
    """The compiler-derived register counts (cuobjdump's resource usage of each binary), the
    same count Nsight Compute reports for every measured key."""
    return {k: int(v) for k, v in _document(path).get("registers", {}).items()}


@functools.cache
def compiler_shared(path: Path = COMPILER_PATH) -> dict[str, int]:
    """The compiler-derived dynamic shared memory per CTA of each binary (the compiled kernel's
    metadata), the bytes Nsight Compute reports as launch__shared_mem_per_block_dynamic."""
    return {k: int(v) for k, v in _document(path).get("shared", {}).items()}


def on_sm90(gpu_key: str) -> bool:
    """Whether GPU preset `gpu_key` (a custom GPU counts as its base) runs the tables' sm_90
    binaries."""
    return gpu_key.removesuffix("+custom") in ARCH_PRESETS


def measured(k: str) -> bool:
    """Whether Nsight Compute measured key `k` (its registers; its spills where it spills)."""
    return k in register_table() or k in table()


def compiler_key(k: str) -> str:
    """The compiler table's key for `k`: itself, or where the table lacks a grouped-query
    binary, the same tiles without grouping (the nearest binary it holds)."""
    return k if k in compiler_registers() else k.replace("/gqa", "")


# --- kernels compiled on this machine (`ondemand`) ---------------------------------------------

# Where kernels compiled on this machine are kept unless told otherwise (the server's
# FLASHSCOPE_COMPILE_CACHE_DIR, `flashscope validate --compile-cache`)
DEFAULT_CACHE = Path.home() / ".cache" / "flashscope" / "kernels"
_local_root: Path | None = None  # the cache in use (None: none)
_local_read: dict[Path, dict[str, Any]] = {}  # cache files read, kept: an entry never changes


@functools.cache
def triton_version() -> str:
    """The installed Triton's version ("none" where it is not installed)."""
    try:
        return metadata.version("triton")
    except metadata.PackageNotFoundError:
        return "none"


def cache_file(root: Path, k: str) -> Path:
    """The file of key `k` in the cache under `root`: one folder per Triton version (another
    version compiles other code)."""
    return Path(root) / f"triton-{triton_version()}-sm90a" / (k.replace("/", "_") + ".json")


@contextlib.contextmanager
def local_cache(root: Path | None) -> Iterator[None]:
    """Read the kernels compiled on this machine from the cache under `root` while inside (None:
    none, as outside)."""
    global _local_root
    saved, _local_root = _local_root, None if root is None else Path(root)
    try:
        yield
    finally:
        _local_root = saved


def _local_doc(k: str, root: Path | None) -> dict[str, Any] | None:
    if root is None:
        return None
    path = cache_file(root, k)
    doc = _local_read.get(path)
    if doc is None:
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):  # not compiled (yet), or being written by another process
            return None
        if doc.get("format") != FORMAT or doc.get("key") != k:
            return None
        _local_read[path] = doc
    return doc


def local_state(k: str, root: Path | None = None) -> str | None:
    """ "done" or "failed" for a key in the cache under `root` (default: the one in use), None
    where it has not been compiled."""
    doc = _local_doc(k, _local_root if root is None else root)
    return None if doc is None else ("failed" if "error" in doc else "done")


def local_entry(k: str) -> dict[str, Any] | None:
    """Key `k` as compiled on this machine (kernels/sm90.py, `entry_of`), from the cache in use
    (None: no cache, not compiled, or the compiler refused it)."""
    doc = _local_doc(k, _local_root)
    return None if doc is None or "error" in doc else doc


SOURCES = ("measured", "compiler", "local", "compiler-nearest", "estimate")


def source(k: str, gpu_key: str = "h100-sxm") -> str:
    """Where key `k`'s registers, shared memory and spills come from on `gpu_key` (`SOURCES`):
    Nsight Compute's counts, the compiler's table (its own key, or the nearest binary), this
    machine's compile, or the estimate from the tiles (every preset of another architecture)."""
    if not on_sm90(gpu_key):
        return "estimate"
    if measured(k):
        return "measured"
    if k in compiler_registers():
        return "compiler"
    if local_entry(k) is not None:
        return "local"
    return "compiler-nearest" if compiler_key(k) in compiler_registers() else "estimate"


def wants_compile(k: str, gpu_key: str = "h100-sxm") -> bool:
    """Whether compiling key `k` on this machine would give `gpu_key` figures it lacks: nothing
    but the estimate knows it, or only the nearest binary (sm_90 presets alone)."""
    return on_sm90(gpu_key) and source(k, gpu_key) in ("estimate", "compiler-nearest")


class Known(NamedTuple):
    """What is known of one compiled kernel on one GPU preset, and from where (`SOURCES`)."""

    source: str
    registers: int | None  # per thread (None: nothing knows the key)
    shared: int | None  # dynamic shared memory per CTA (None: not in the compiler's table)
    traffic: LocalTraffic | None  # its spills (None: it does not spill, or nothing knows it)


def known(k: str, gpu_key: str = "h100-sxm") -> Known:
    """Key `k` on GPU preset `gpu_key` (a custom GPU counts as its base), each figure from the
    first `source` that knows the key: registers measured, else the compiler's; shared memory
    the compiler's; spills measured where measured."""
    src = source(k, gpu_key)
    if src == "estimate":
        return Known(src, None, None, None)
    if src == "local":
        entry = local_entry(k) or {}
        spills = entry.get("kernel")
        traffic = None if spills is None else LocalTraffic.from_entry(spills)
        return Known(src, int(entry["registers"]), int(entry["shared"]), traffic)
    near = compiler_key(k)
    regs = register_table().get(k) if src == "measured" else None
    return Known(
        src,
        regs if regs is not None else compiler_registers().get(near),
        compiler_shared().get(near),
        table().get(k) if src == "measured" else compiler_table().get(near),
    )


def lookup(k: str, gpu_key: str = "h100-sxm") -> LocalTraffic | None:
    """The spill entry for key `k` on GPU preset `gpu_key` (`known`; None: it does not spill,
    or nothing is known of it: `registers` says which)."""
    return known(k, gpu_key).traffic


@functools.cache
def writeback_table(path: Path = TABLE_PATH) -> dict[str, dict[str, PerThread]]:
    """The shipped table's spill write-backs: GPU preset → key → bytes per thread."""
    doc = _document(path).get("writeback", {})
    return {g: {k: per_thread(e) for k, e in v.items()} for g, v in doc.items()}


def per_thread(entry: dict[str, Any]) -> PerThread:
    """A write-back entry of the table file (or of `derive_writeback`)."""
    return PerThread(float(entry["step"]), float(entry["cta"]))


def writeback(k: str, gpu_key: str = "h100-sxm") -> PerThread | None:
    """DRAM bytes per thread that key `k`'s spills write back on `gpu_key` (a custom GPU
    counts as its base; None: not measured on that GPU)."""
    return writeback_table().get(gpu_key.removesuffix("+custom"), {}).get(k)


def registers(k: str, gpu_key: str = "h100-sxm") -> int | None:
    """The compiled register count for key `k` on `gpu_key`: measured, else the compiler's or
    this machine's compile (`known`; None: nothing knows the key, or another architecture)."""
    return known(k, gpu_key).registers


def shared(k: str, gpu_key: str = "h100-sxm") -> int | None:
    """The compiled kernel's dynamic shared memory per CTA for key `k` on `gpu_key` (`known`;
    None: the compiler's table does not hold the key, or another architecture)."""
    return known(k, gpu_key).shared


@dataclass(frozen=True)
class Observation:
    """One compiled kernel measured once: its key, its loop steps and CTAs, its local bytes."""

    key: str
    steps: float  # loop steps of all its CTAs
    ctas: int
    threads: int  # per CTA
    load: float
    store: float
    regs: int | None = None
    gpu: str = ""  # the GPU preset it ran on
    writeback: float | None = None  # DRAM writes beyond its non-spilling siblings' (None: none)


def derive(observations: list[Observation]) -> dict[str, dict[str, Any]]:
    """Per key with any local traffic: bytes per thread per step and per CTA (least squares
    over its observations, loads and stores apart), how many observations and the largest
    relative miss of the fit on them. The per-CTA term may come out negative: the causal
    kernels' masked steps (a fixed number per CTA) spill less than the others."""
    by_key: dict[str, list[Observation]] = {}
    for o in observations:
        by_key.setdefault(o.key, []).append(o)
    out = {}
    for k, obs in sorted(by_key.items()):
        if not any(o.load or o.store for o in obs):
            continue
        x = _design(obs)
        fitted = {}
        worst = 0.0
        for name, y in (("load", [o.load for o in obs]), ("store", [o.store for o in obs])):
            y_arr = np.asarray(y, dtype=np.float64)
            c = _fit_per_thread(obs, y)
            fitted[f"{name}_step"], fitted[f"{name}_cta"] = c
            pred = x @ np.array(c)
            miss = np.abs(pred - y_arr) / np.maximum(y_arr, 1.0)
            worst = max(worst, float(miss[y_arr > 0].max(initial=0.0)))
        regs = sorted({o.regs for o in obs if o.regs is not None})
        out[k] = {**fitted, "observations": len(obs), "worst_fit_pct": 100 * worst,
                  "registers": regs}  # fmt: skip
    return out


def _design(obs: list[Observation]) -> np.ndarray:
    """The per-thread fits' regressors: threads × loop steps and threads × CTAs."""
    return np.array([[o.threads * o.steps, o.threads * o.ctas] for o in obs], dtype=np.float64)


def _fit_per_thread(obs: list[Observation], y: list[float]) -> tuple[float, float]:
    """Least squares of y against threads × steps and threads × CTAs: (per step, per CTA)."""
    c, *_ = np.linalg.lstsq(_design(obs), np.asarray(y, dtype=np.float64), rcond=None)
    # whole numbers where the fit is exact (0.0, never −0.0)
    return round(float(c[0]), 4) + 0.0, round(float(c[1]), 4) + 0.0


def derive_writeback(observations: list[Observation]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per GPU and key: the DRAM bytes a spilling kernel's spills write back, per thread per
    step and per CTA (least squares over its observations with a measured `writeback`)."""
    by: dict[tuple[str, str], list[Observation]] = {}
    written: dict[tuple[str, str], list[float]] = {}
    for o in observations:
        if o.writeback is not None and o.gpu:
            by.setdefault((o.gpu, o.key), []).append(o)
            written.setdefault((o.gpu, o.key), []).append(o.writeback)
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for (gpu, k), obs in sorted(by.items()):
        step, cta = _fit_per_thread(obs, written[gpu, k])
        out.setdefault(gpu, {})[k] = {"step": step, "cta": cta, "observations": len(obs)}
    return out


def derive_registers(observations: list[Observation]) -> dict[str, int]:
    """Per key, the registers per thread its kernel compiled to. ValueError where the
    observations of one key disagree (two binaries under one key: the key misses a constexpr)."""
    seen: dict[str, set[int]] = {}
    for o in observations:
        if o.regs is not None:
            seen.setdefault(o.key, set()).add(o.regs)
    split = {k: sorted(v) for k, v in seen.items() if len(v) > 1}
    if split:
        raise ValueError(f"one key, several register counts: {split}")
    return {k: v.pop() for k, v in sorted(seen.items())}
