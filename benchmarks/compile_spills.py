"""Registers and register-spill traffic of flashscope's Triton kernels, read from the compiler:
writes simulator/data/compiled-spills.json (and, with --oracle, the check against Nsight Compute).

No GPU: each kernel is compiled for sm_90a (an H100 or H200; `GPUTarget("cuda", 90, 32)`) on the
CPU with CPU tensors standing in for its arguments, exactly as its launcher would launch it
(host-made or in-kernel tensor descriptors, the integers Triton specializes on: lengths and head
counts divisible by 16 or equal to 1). From the cubin, `cuobjdump --dump-resource-usage` gives
the registers per thread and the spill stack, and the SASS (`nvdisasm`) the local loads (LDL) and
stores (STL) with their widths (.64: 8 bytes a thread, .128: 16). The SASS is cut into basic
blocks and natural loops (back edges to a dominating block); the loops that issue matrix products
are the kernel's loops over tiles (busy-waits on barriers are loops too, without products). Per
loop, the local bytes of its body are paid once per step; a block outside the loops that only
runs when a loop is entered (dominated or post-dominated by its header: the loop's set-up and
drain) is paid once per entry; every other block once per CTA. The dK/dV kernel's walk over the
query heads of a GQA group is an outer loop (folded away where the group is 1) whose own blocks
are paid once per head.

Each kernel's loops are matched to the source's (forward and dQ kernels: the unmasked key blocks,
then the masked ones; dK/dV: the masked query blocks, then the unmasked), and each CTA's trip
counts follow the kernels' loop bounds (`trips`), so a launch's local bytes are predicted
whole. `--oracle` compares them, launch by launch, with Nsight Compute's counts
(`l1tex__t_bytes_pipe_lsu_mem_local_op_ld` / `_st`) and registers in the measured datasets.

The table is written per key of the engine's compiled-kernel table
(`flashscope.simulator.timing.compiled.key`) in its units, from one binary per key (fp16, 8
heads, N = 4096, or 4001 for a length not divisible by 16, in groups of 4 for a grouped-query
key): bytes per thread per loop step (the unmasked loop's), per query head a dK/dV CTA walks
(its loops' entries and masked steps beyond an unmasked one) and per CTA (the rest), each a mean
over the CTAs of one (batch, head) row. Keys: every kernel of the users' sweep
(benchmarks/sweeps/users.json, as it ran) and of the protocol sweep
(benchmarks/sweeps/validation.json, both backward routes), and the candidate tiles of
kernels/config.py and the tuned defaults of kernels/tuned.json at the head dims they are chosen
for, each full and causal, with lengths divisible by 16 and not. Deterministic: no random input,
the configurations in a fixed order. It takes about an hour on two cores (Triton's cache makes
a second run quicker); the oracle needs the measured datasets named in `DATASETS`.

The measured kernels ran Triton 3.6.0; install it apart and put it first (the project pins
another version):

    pip install --no-deps --target /tmp/t36 triton==3.6.0
    python benchmarks/compile_spills.py --triton /tmp/t36 --jobs 2 \
        --oracle benchmarks/results/compiled-spills-oracle-2026-11-26.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

OUT = ROOT / "simulator" / "data" / "compiled-spills.json"
DATASETS = (
    "app/data/validation-h100-2026-11-21.json",
    "app/data/validation-h200-2026-11-21.json",
    "benchmarks/results/register-cap-h200-2026-11-21.json",
    "benchmarks/results/spills-h100-2026-11-21.json",
    "benchmarks/results/spills-causal-h100-2026-11-21.json",
    "benchmarks/results/validation-users-NVIDIA-H100-80GB-HBM3-2026-11-26.json",
)
SWEEPS = ("benchmarks/sweeps/users.json", "benchmarks/sweeps/validation.json")
NCU_NAMES = {"_attn_fwd": "fwd", "_attn_bwd_dq": "dq", "_attn_bwd_dkdv": "dkdv"}
LOCAL_LOAD = "l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum"
LOCAL_STORE = "l1tex__t_bytes_pipe_lsu_mem_local_op_st.sum"
REGISTERS = "launch__registers_per_thread"


# --- SASS: blocks, loops, local bytes ------------------------------------------------------

_INSN = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P(?:T|\d+)\s+)?([A-Z][A-Z0-9_.]*)\s*([^;]*);")
_LABEL = re.compile(r"^\s*(\.L_x_\d+):\s*$")
_TARGET = re.compile(r"`\(([^)]+)\)")
_ENDS = ("BRA", "EXIT", "RET", "BRX", "JMP", "JMX", "CALL")
_WIDTH = {"64": 8, "128": 16}
MMA = ("HGMMA", "HMMA")


@dataclass
class Insn:
    addr: int
    pred: str | None
    op: str
    args: str
    labels: list[str] = field(default_factory=list)

    @property
    def base(self) -> str:
        return self.op.split(".")[0]


def parse_sass(text: str, function: str) -> list[Insn]:
    """The instructions of `function` in nvdisasm's listing, with the labels before each."""
    out: list[Insn] = []
    pending: list[str] = []
    inside = False
    for line in text.splitlines():
        if line.startswith("//---") and ".text." in line:
            inside = line.rstrip("- ").endswith(".text." + function)
            continue
        if not inside:
            continue
        if m := _LABEL.match(line):
            pending.append(m.group(1))
        elif m := _INSN.search(line):
            pred = (m.group(2) or "").strip() or None
            out.append(Insn(int(m.group(1), 16), pred, m.group(3), m.group(4).strip(), pending))
            pending = []
    return out


def local_access(i: Insn) -> tuple[str, int] | None:
    """("load" | "store", bytes per thread) of a local-memory instruction (None otherwise).
    A warp's access of w bytes a thread covers 32·w contiguous bytes (local memory interleaves
    the threads' words), so Nsight Compute's sector bytes per thread equal w, at least 4."""
    if i.base not in ("LDL", "STL"):
        return None
    width = 4
    for part in i.op.split(".")[1:]:
        width = _WIDTH.get(part, width)
    return ("load" if i.base == "LDL" else "store"), width


@dataclass
class Graph:
    spans: list[tuple[int, int]]
    succ: list[set[int]]
    pred: list[set[int]]
    reach: set[int]


def graph(insns: list[Insn]) -> Graph:
    """Basic blocks and their successors (a predicated branch or exit also falls through)."""
    at = {lab: n for n, i in enumerate(insns) for lab in i.labels}
    leaders = {0} | {n for n, i in enumerate(insns) if i.labels}
    leaders |= {n + 1 for n, i in enumerate(insns) if i.base in _ENDS and n + 1 < len(insns)}
    starts = sorted(leaders)
    spans = [
        (s, starts[b + 1] if b + 1 < len(starts) else len(insns)) for b, s in enumerate(starts)
    ]
    block_of = {n: b for b, (s, e) in enumerate(spans) for n in range(s, e)}
    succ: list[set[int]] = [set() for _ in spans]
    for b, (_, e) in enumerate(spans):
        last = insns[e - 1]
        falls = True
        if last.base == "BRA":
            t = _TARGET.search(last.args)
            if t and t.group(1) in at:
                succ[b].add(block_of[at[t.group(1)]])
            falls = last.pred is not None
        elif last.base in ("EXIT", "RET", "JMP", "BRX", "JMX"):
            falls = last.pred is not None
        if falls and e < len(insns):
            succ[b].add(block_of[e])
    pred: list[set[int]] = [set() for _ in spans]
    for b, ss in enumerate(succ):
        for s in ss:
            pred[s].add(b)
    reach, stack = {0}, [0]
    while stack:
        for s in succ[stack.pop()]:
            if s not in reach:
                reach.add(s)
                stack.append(s)
    return Graph(spans, succ, pred, reach)


def _fixpoint(g: Graph, roots: set[int], edges: list[set[int]]) -> dict[int, set[int]]:
    """Dominator sets over `edges` (predecessors: dominators; successors: post-dominators)."""
    sets = {b: ({b} if b in roots else set(g.reach)) for b in g.reach}
    changed = True
    while changed:
        changed = False
        for b in sorted(g.reach):
            if b in roots:
                continue
            inputs = [sets[p] for p in edges[b] if p in g.reach]
            new = (set.intersection(*inputs) if inputs else set()) | {b}
            if new != sets[b]:
                sets[b], changed = new, True
    return sets


@dataclass
class Loop:
    """One loop over tiles: the local bytes per thread of one step, and of the blocks outside
    it that run once per entry (set-up and drain)."""

    head: int  # address of its header
    parent: int | None  # header address of the loop over tiles around it
    step_load: int = 0
    step_store: int = 0
    entry_load: int = 0
    entry_store: int = 0


@dataclass
class Structure:
    """A kernel's local bytes per thread: run once per CTA, and per tile loop."""

    cta_load: int
    cta_store: int
    loops: list[Loop]
    predicated: int  # local accesses under a predicate (counted as if they ran)

    def outer(self) -> list[Loop]:
        return [lp for lp in self.loops if lp.parent is None]

    def inner(self) -> list[Loop]:
        heads = {lp.parent for lp in self.loops}
        return [lp for lp in self.loops if lp.head not in heads]


def structure(insns: list[Insn]) -> Structure:
    """The local bytes of a kernel by where they run: once per CTA, per loop entry, per step."""
    g = graph(insns)
    dom = _fixpoint(g, {0}, g.pred)
    exits = {b for b in g.reach if not g.succ[b]}
    pdom = _fixpoint(g, exits, g.succ)
    bodies: dict[int, set[int]] = {}
    for b in g.reach:
        for s in g.succ[b]:
            if s in dom[b]:  # a back edge b → s: the natural loop of header s
                body, stack = bodies.setdefault(s, {s}), [b]
                while stack:
                    x = stack.pop()
                    if x not in body:
                        body.add(x)
                        stack.extend(p for p in g.pred[x] if p in g.reach)
    tiles = {h: body for h, body in bodies.items()
             if any(insns[n].base in MMA for b in body for n in range(*g.spans[b]))}  # fmt: skip
    heads = sorted(tiles, key=lambda h: g.spans[h][0])

    def parent(h: int) -> int | None:
        around = [x for x in heads if x != h and tiles[h] < tiles[x]]
        return min(around, key=lambda x: len(tiles[x])) if around else None

    parents = {h: parent(h) for h in heads}

    def own(h: int | None) -> set[int]:
        """Blocks at the level of loop h (None: outside every loop over tiles)."""
        inside = tiles[h] if h is not None else set(g.reach)
        nested = [tiles[x] for x in heads if parents[x] == h]
        return inside - set().union(*nested) if nested else set(inside)

    def tally(bs: Iterable[int]) -> tuple[int, int, int]:
        load = store = predicated = 0
        for b in bs:
            for n in range(*g.spans[b]):
                acc = local_access(insns[n])
                if acc:
                    predicated += insns[n].pred is not None
                    if acc[0] == "load":
                        load += acc[1]
                    else:
                        store += acc[1]
        return load, store, predicated

    loops = {h: Loop(insns[g.spans[h][0]].addr, None) for h in heads}
    level: dict[int | None, set[int]] = {None: own(None)} | {h: own(h) for h in heads}
    predicated = 0
    for h in heads:
        p = parents[h]
        loops[h].parent = None if p is None else insns[g.spans[p][0]].addr
        loops[h].step_load, loops[h].step_store, n = tally(level[h])
        predicated += n
    for lv, blocks in level.items():
        children = [h for h in heads if parents[h] == lv]
        left = set(blocks)
        for h in children:
            tied = {b for b in left if h in dom[b] or h in pdom[b]} - (
                {lv} if lv is not None else set()
            )
            left -= tied
            load, store, n = tally(tied)
            loops[h].entry_load, loops[h].entry_store = load, store
            predicated += n
        if lv is None:
            cta_load, cta_store, n = tally(left)
        else:  # the rest of an outer loop's body: once per step of it
            loops[lv].step_load, loops[lv].step_store, n = tally(left)
        predicated += n
    return Structure(cta_load, cta_store, [loops[h] for h in heads], predicated)


# --- the kernels' loop bounds ------------------------------------------------------------


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


def expected_loops(k: Kernel) -> int:
    return 2


# --- compiling on the CPU ----------------------------------------------------------------


def _use_triton(path: str | None) -> None:
    """Put a separately installed Triton first and keep its compiler (not the interpreter)."""
    if path:
        sys.path.insert(0, str(Path(path).resolve()))
    os.environ["TRITON_INTERPRET"] = "0"


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


_captured: list[tuple] = []


def _patch_launchers() -> None:
    """The launchers record their launch instead of running it, and take the tensor-memory
    path as on Hopper (where every stride allows it)."""
    import flashscope.kernels.backward as bw
    import flashscope.kernels.forward as fw
    from flashscope.kernels.inputs import tma_ready

    def record(fn: Any, grid: Any, args: Any, constexprs: Any, options: Any) -> None:
        _captured.append((fn, grid, tuple(args), dict(constexprs), dict(options)))

    def tma(tensors: list, override: bool | None = None) -> bool:
        return (True if override is None else override) and tma_ready(*tensors)

    for m in (fw, bw):
        m.launch = record  # type: ignore[attr-defined]
        m.use_tma_for = tma  # type: ignore[attr-defined]
        m.prepare_tma = lambda tma: None  # type: ignore[attr-defined]


def compile_kernel(k: Kernel) -> Any:
    """Triton's CompiledKernel for `k`, compiled for sm_90a with CPU tensors (batch 1: the
    batch is no argument of the kernels)."""
    import torch
    from triton.runtime import driver

    import flashscope.kernels.backward as bw
    import flashscope.kernels.forward as fw
    from flashscope.kernels.config import KernelConfig

    dt = {"fp16": torch.float16, "bf16": torch.bfloat16}[k.dtype]
    q = torch.empty(1, k.heads, k.seq_q, k.head_dim, dtype=dt)
    kk = torch.empty(1, k.kv_heads, k.seq_k, k.head_dim, dtype=dt)
    v = torch.empty_like(kk)
    cfg = KernelConfig(k.block_m, k.block_n, k.warps, k.stages, maxnreg=k.maxnreg)
    scale = 1.0 / math.sqrt(k.head_dim)
    _captured.clear()
    if k.kernel == "fwd":
        fw.launch_forward(q, kk, v, k.causal, scale, cfg)
    else:
        do = torch.empty_like(q)
        lse = torch.empty(1, k.heads, k.seq_q)
        if k.kernel == "dq":
            bw.run_dq(q, kk, v, do, lse, lse, k.causal, scale, cfg)
        else:
            acc = torch.empty(q.shape, dtype=torch.float32) if k.kernel == "dkdv-atomic" else None
            bw.run_dkdv(q, kk, v, do, lse, lse, k.causal, scale, cfg, dq_acc=acc)
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


def structure_of(d: dict[str, Any]) -> Structure:
    return Structure(d["cta_load"], d["cta_store"], [Loop(**lp) for lp in d["loops"]],
                     d["predicated"])  # fmt: skip


# --- which kernels ------------------------------------------------------------------------


def kernels_of(c: dict[str, Any], route: str | None) -> list[Kernel]:
    """The flashscope kernels a sweep configuration launches (a backward: both routes' dK/dV
    kernels where the route is not given, and the dQ kernel)."""
    n_q, n_k = c["seq"], c.get("seq_k") or c["seq"]
    h = c.get("heads", 1)
    hk = c.get("kv_heads") or h
    base = dict(head_dim=c["head_dim"], dtype=c.get("dtype", "fp16"), causal=bool(c["causal"]),
                seq_q=n_q, seq_k=n_k, heads=h, kv_heads=hk, maxnreg=c.get("maxnreg"))  # fmt: skip
    main = dict(block_m=c["block_m"], block_n=c["block_n"], warps=c["warps"], stages=c["stages"])
    if c.get("algo", "fa2") == "fa2":
        return [Kernel("fwd", **main, **base)]
    dq = {f: c.get(f"dq_{f}") or c[f] for f in ("block_m", "block_n", "warps", "stages")}
    routes = [route] if route else ["separate", "atomic"]
    out = [Kernel("dkdv" if r == "separate" else "dkdv-atomic", **main, **base) for r in routes]
    return out + ([Kernel("dq", **dq, **base)] if "separate" in routes else [])


# --- the oracle: predicted against measured launches ---------------------------------------


def _route(row: dict[str, Any]) -> str | None:
    return (row.get("measured") or {}).get("route") or row["config"].get("route")


def _ncu_kernels(row: dict[str, Any]) -> list[dict[str, Any]]:
    return ((row.get("measured") or {}).get("ncu") or {}).get("kernels") or []


def measured_launches(path: Path) -> list[dict[str, Any]]:
    """Every flashscope kernel launch Nsight Compute read in a dataset: its Kernel, batch, the
    subset of its row, its local bytes and registers."""
    doc = json.loads(path.read_text())
    out = []
    for r in doc["rows"]:
        c = r["config"]
        if c.get("impl") != "flashscope":
            continue
        route = _route(r)
        by_name = {k.kernel.removesuffix("-atomic"): k for k in kernels_of(c, route or "separate")}
        if route == "atomic":
            by_name = {k.kernel.removesuffix("-atomic"): k for k in kernels_of(c, "atomic")}
        for m in _ncu_kernels(r):
            name = NCU_NAMES.get(m.get("name", ""))
            if name is None or m.get(LOCAL_LOAD) is None or name not in by_name:
                continue
            out.append({"dataset": str(path.relative_to(ROOT)), "id": r.get("id"),
                        "subset": r.get("subset"), "batch": c.get("batch", 1),
                        "kernel": by_name[name], "load": float(m[LOCAL_LOAD]),
                        "store": float(m.get(LOCAL_STORE) or 0.0),
                        "registers": None if m.get(REGISTERS) is None
                        else int(m[REGISTERS])})  # fmt: skip
    return out


def predict_launch(s: Structure, k: Kernel, batch: int) -> tuple[float, float]:
    """(loaded, stored) local bytes of a whole launch as the SASS and the loop bounds say."""
    rows = batch * (k.kv_heads if k.kernel.startswith("dkdv") else k.heads)
    threads = 32 * k.warps
    ctas = per_cta(s, k)
    return (threads * rows * sum(c[0] for c in ctas), threads * rows * sum(c[1] for c in ctas))


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


# --- the configurations --------------------------------------------------------------------

HEAD_DIMS = (64, 128, 256)  # the candidates' and tuned entries' own (padded) head dims
TUNED_MODES = {"fwd": "fwd", "bwd": "dkdv", "bwd-atomic": "dkdv-atomic", "bwd-dq": "dq"}


def _pad(d: int) -> int:
    return max(16, 1 << (d - 1).bit_length())


def sweep_kernels(sweeps: list[str] | None = None) -> list[Kernel]:
    """The kernels of the sweeps' entries (as measured: their own lengths and heads; the users'
    backward on the separate route, which the H100 takes for all of them, the protocol's on
    both). `sweeps`: other users'-space sweep files instead (separate route)."""
    named = list(zip(SWEEPS, ("separate", None), strict=True))
    out = []
    for name, route in named if sweeps is None else [(s, "separate") for s in sweeps]:
        for e in json.loads((ROOT / name).read_text())["entries"]:
            out += kernels_of(e["config"], e["config"].get("route") or route)
    return out


def table_configs(
    sweeps: list[str] | None = None,
) -> list[tuple[str, int, int, int, int, int, int | None, bool, bool, bool]]:
    """(kernel, head_dim, block_m, block_n, warps, stages, maxnreg, causal, ragged, grouped) of
    every key the table is written for: the sweeps' kernels as they run (grouped query heads
    where they group them), and the candidate tiles and the
    tuned defaults at the head dims they are chosen for, full and causal, lengths divisible by
    16 and not. With `sweeps`, those sweeps' kernels alone."""
    from flashscope.kernels.config import CANDIDATES, KernelConfig

    seen: set[tuple] = set()
    for k in sweep_kernels(sweeps):
        ragged = bool(k.seq_q % 16 or k.seq_k % 16)
        seen.add((k.kernel, k.head_dim, k.block_m, k.block_n, k.warps, k.stages, k.maxnreg,
                  k.causal, ragged, k.group > 1))  # fmt: skip
    if sweeps is not None:
        return sorted(seen, key=str)
    tiles: set[tuple] = set()
    modes = {"fwd": ["fwd"], "bwd": ["dkdv", "dkdv-atomic"], "bwd-dq": ["dq"]}
    for mode, kinds in modes.items():
        for d in HEAD_DIMS:
            for c in CANDIDATES[mode][max(64, _pad(d))]:
                for kind in kinds:
                    tiles.add((kind, d, c.block_m, c.block_n, c.num_warps, c.num_stages, c.maxnreg))
    tuned = json.loads((ROOT / "kernels" / "tuned.json").read_text())["gpus"]
    for gpu in sorted(tuned):
        for key, entry in sorted(tuned[gpu].get("configs", {}).items()):
            mode, _, dpad, *_ = key.split("/")
            if mode not in TUNED_MODES:
                continue
            c = KernelConfig.from_list(entry)
            for d in HEAD_DIMS:
                if max(64, _pad(d)) == int(dpad[1:]):
                    tiles.add((TUNED_MODES[mode], d, c.block_m, c.block_n, c.num_warps,
                               c.num_stages, c.maxnreg))  # fmt: skip
    for t in tiles:
        for causal in (False, True):
            for ragged in (False, True):
                seen.add((*t, causal, ragged, False))
    return sorted(seen, key=str)


REPRESENTATIVE_HEADS = 8
REPRESENTATIVE_KV_HEADS = {False: 8, True: 2}  # no grouping; groups of 4
REPRESENTATIVE_SEQ = {False: 4096, True: 4001}  # whole tiles; a length Triton compiles apart


def representative(cfg: tuple) -> Kernel:
    """The binary a key stands for: fp16, 8 heads (in groups of 4 where grouped), N = 4096
    (ragged: 4001)."""
    kind, d, bm, bn, warps, stages, cap, causal, ragged, grouped = cfg
    n, h = REPRESENTATIVE_SEQ[ragged], REPRESENTATIVE_HEADS
    return Kernel(kind, d, "fp16", bm, bn, warps, stages, causal, n, n, h,
                  REPRESENTATIVE_KV_HEADS[grouped], cap)  # fmt: skip


def engine_key(k: Kernel) -> str:
    """The key of `k` in the engine's compiled-kernel table (`compiled.key`)."""
    from flashscope.simulator.core.problem import AttentionProblem, TileConfig
    from flashscope.simulator.timing import compiled

    p = AttentionProblem(seq_q=k.seq_q, seq_k=k.seq_k, head_dim=k.head_dim, batch=1,
                         heads=k.heads, kv_heads=k.kv_heads, causal=k.causal,
                         dtype=k.dtype)  # fmt: skip
    t = TileConfig(k.block_m, k.block_n, k.stages, k.warps, k.maxnreg)
    launch = {"fwd": "fa2", "dq": "bwd_dq", "dkdv": "bwd_dkdv", "dkdv-atomic": "bwd_dkdv"}[k.kernel]
    return compiled.key(launch, p, t, "atomic" if k.kernel == "dkdv-atomic" else "separate")


# --- running -------------------------------------------------------------------------------


def _work(k: Kernel) -> tuple[Kernel, dict[str, Any] | str]:
    try:
        return k, read_binary(compile_kernel(k))
    except Exception as exc:  # a configuration that does not compile: say so, go on
        return k, f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"


def compile_all(kernels: list[Kernel], jobs: int) -> dict[Kernel, dict[str, Any] | str]:
    todo = list(dict.fromkeys(kernels))
    done: dict[Kernel, dict[str, Any] | str] = {}
    if jobs > 1:
        import multiprocessing as mp

        with mp.get_context("fork").Pool(jobs) as pool:
            for n, (k, r) in enumerate(pool.imap_unordered(_work, todo, chunksize=4)):
                done[k] = r
                if n % 50 == 0:
                    print(f"  {n + 1}/{len(todo)} compiled", flush=True)
    else:
        for k in todo:
            done[k] = _work(k)[1]
    return done


def _miss(got: float, want: float) -> float:
    """Relative miss, 0 where both are 0 (bytes below one sector per launch count as 0)."""
    if want < 32 and got < 32:
        return 0.0
    return abs(got - want) / max(want, 32.0)


def table_prediction(entry: dict[str, float] | None, k: Kernel, batch: int) -> tuple[float, float]:
    """A launch's local bytes as the engine computes them from a key's entry."""
    if entry is None:
        return 0.0, 0.0
    rows = batch * (k.kv_heads if k.kernel.startswith("dkdv") else k.heads)
    threads = 32 * k.warps
    trips = (key_block_trips if k.kernel.startswith("dkdv") else query_block_trips)(
        k.seq_q, k.seq_k, k.block_m, k.block_n, k.causal
    )
    reps = k.group if k.kernel.startswith("dkdv") else 1
    out = []
    for name in ("load", "store"):
        step, cta, head = (entry.get(f"{name}_{f}", 0.0) for f in ("step", "cta", "head"))
        out.append(threads * rows * sum(max(step * reps * sum(t) + cta + head * reps, 0.0)
                                        for t in trips))  # fmt: skip
    return out[0], out[1]


def summarize(rows: list[dict[str, Any]], field: str) -> dict[str, Any]:
    """Agreement of one prediction with Nsight Compute over launches."""
    rows = [r for r in rows if r[field] is not None]
    spilled = [r for r in rows if r["measured"]["load"] or r["measured"]["store"]]
    misses = [max(r[field]["load_miss"], r[field]["store_miss"]) for r in rows]
    out = {
        "launches": len(rows),
        "launches_with_local_bytes": len(spilled),
        "exact_pct": 100.0 * sum(m < 1e-9 for m in misses) / max(len(rows), 1),
        "within_1pct": 100.0 * sum(m <= 0.01 for m in misses) / max(len(rows), 1),
        "within_10pct": 100.0 * sum(m <= 0.10 for m in misses) / max(len(rows), 1),
        "worst_miss_pct": 100.0 * max(misses, default=0.0),
        "local_bytes_measured": sum(r["measured"]["load"] + r["measured"]["store"] for r in rows),
        "local_bytes_predicted": sum(r[field]["load"] + r[field]["store"] for r in rows),
    }
    if field == "compiler":
        regs = [r for r in rows if r["measured"]["registers"] is not None]
        out["registers_equal_pct"] = (
            100.0
            * sum(r["measured"]["registers"] == r["compiler"]["registers"] for r in regs)
            / max(len(regs), 1)
        )
    return out


def compare_entry(
    measured: dict[str, Any], derived: dict[str, Any], reg_measured: int | None, reg: int | None
) -> dict[str, Any]:
    """A measured table entry beside the compiler's for the same key, in the measured table's
    units (its per-CTA term holds the per-head one: the protocol's kernels walk one head)."""
    out: dict[str, Any] = {"measured": {}, "compiler": {}, "registers": [reg_measured, reg]}
    for name in ("load", "store"):
        for f in ("step", "cta"):
            out["measured"][f"{name}_{f}"] = measured[f"{name}_{f}"]
        out["compiler"][f"{name}_step"] = derived.get(f"{name}_step", 0.0)
        cta = derived.get(f"{name}_cta", 0.0) + derived.get(f"{name}_head", 0.0)
        out["compiler"][f"{name}_cta"] = cta
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--triton", help="a directory holding the Triton to compile with, put first")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument(
        "--oracle", type=Path, help="also compare with the measured datasets; write here"
    )
    ap.add_argument("--exact", nargs="*", default=list(DATASETS),
                    help="datasets whose launches are compiled each as its own binary")  # fmt: skip
    ap.add_argument("--sweeps", nargs="+", help="a table of these sweeps' kernels alone (not the "
                    "shipped one: write it with --out elsewhere)")  # fmt: skip
    args = ap.parse_args(argv)
    _use_triton(args.triton)
    import triton

    _patch_launchers()
    from flashscope.simulator.timing import compiled

    configs = table_configs(args.sweeps)
    reps = [representative(c) for c in configs]
    launches: list[dict[str, Any]] = []
    if args.oracle:
        for name in DATASETS:
            launches += measured_launches(ROOT / name)
    print(f"Triton {triton.__version__}: {len(set(reps))} keys, {len(launches)} measured launches")
    exact = [L["kernel"] for L in launches if L["dataset"] in args.exact]
    done = compile_all(reps + exact, args.jobs)
    failed = {k: r for k, r in done.items() if isinstance(r, str)}
    for k, r in failed.items():
        print(f"  not compiled: {k}: {r}")

    registers: dict[str, int] = {}
    shared: dict[str, int] = {}
    kernels: dict[str, dict[str, Any]] = {}
    for k in sorted(set(reps), key=str):
        b = done[k]
        if isinstance(b, str):
            continue
        key = engine_key(k)
        s = structure_of(b["structure"])
        registers[key] = b["registers"]
        shared[key] = b["shared"]
        form = engine_form(s, k)
        if any(form[f] for f in form):
            kernels[key] = form | {"stack": b["stack"], "binary": b["binary"]}
    doc = {
        "format": compiled.FORMAT,
        "what": "flashscope's Triton kernels as the compiler builds them for sm_90a: registers "
        "per thread of every key (cuobjdump's resource usage), its dynamic shared memory per "
        "CTA (the compiled kernel's metadata) and, for kernels that spill, "
        "local-memory bytes per thread per loop step and per CTA, loads and stores, read from "
        "the SASS (benchmarks/compile_spills.py)",
        "method": "LDL/STL widths summed per loop over tiles (natural loops of the SASS holding "
        "matrix products), per entry of a loop and per CTA; the step is the unmasked loop's, "
        "the per-head term (dK/dV) what walking one more query head adds beyond its steps, "
        "the per-CTA term the rest, each the mean over the CTAs of one (batch, head) row of "
        f"the key's binary (fp16, {REPRESENTATIVE_HEADS} heads, in groups of "
        f"{REPRESENTATIVE_HEADS // REPRESENTATIVE_KV_HEADS[True]} for a /gqa key, N = "
        f"{REPRESENTATIVE_SEQ[False]} or, ragged, {REPRESENTATIVE_SEQ[True]})",
        "compiler": {"triton": triton.__version__, "arch": "sm_90a"},
        "registers": registers,
        "shared": shared,
        "kernels": kernels,
    }
    args.out.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(f"{len(registers)} keys, {len(kernels)} that spill -> {args.out}")
    if not args.oracle:
        return 0

    rows = []
    for L in launches:
        k, b = L["kernel"], done.get(L["kernel"])
        if isinstance(b, str):
            continue
        key = engine_key(k)
        load, store = predict_launch(structure_of(b["structure"]), k, L["batch"]) if b else (0, 0)
        t_load, t_store = table_prediction(kernels.get(key), k, L["batch"])
        rows.append({
            "dataset": L["dataset"], "id": L["id"], "subset": L["subset"], "key": key,
            "group": k.group, "heads": k.heads, "dtype": k.dtype, "seq_q": k.seq_q,
            "seq_k": k.seq_k,
            "measured": {"load": L["load"], "store": L["store"], "registers": L["registers"]},
            "compiler": None if b is None else {
                "load": load, "store": store, "registers": b["registers"], "binary": b["binary"],
                "load_miss": _miss(load, L["load"]), "store_miss": _miss(store, L["store"])},
            "table": {"load": t_load, "store": t_store, "registers": registers.get(key),
                      "load_miss": _miss(t_load, L["load"]),
                      "store_miss": _miss(t_store, L["store"])},
        })  # fmt: skip
    by_ds = {}
    for name in DATASETS:
        sub = [r for r in rows if r["dataset"] == name]
        by_ds[name] = {"compiler": summarize(sub, "compiler"), "table": summarize(sub, "table")}
    measured_table = json.loads(compiled.TABLE_PATH.read_text())
    entries = {key: compare_entry(m, kernels.get(key, {}), measured_table["registers"].get(key),
                                  registers.get(key))
               for key, m in sorted(measured_table["kernels"].items())}  # fmt: skip
    regs_known = {k: (v, registers.get(k)) for k, v in measured_table["registers"].items()}
    report = {
        "what": "flashscope's kernels' local-memory bytes and registers as the SASS of their "
        "sm_90a binaries says (benchmarks/compile_spills.py), against Nsight Compute's counts "
        "in the measured datasets, launch by launch: 'compiler' from each launch's own binary "
        "(its lengths, heads, group and dtype) and loop bounds, 'table' from the key's entry "
        "of simulator/data/compiled-spills.json in the engine's units",
        "compiler": {"triton": triton.__version__, "arch": "sm_90a"},
        "summary": {
            "all": {"compiler": summarize(rows, "compiler"), "table": summarize(rows, "table")},
            **by_ds,
        },
        "measured_table": {
            "kernels": entries,
            "registers_equal": sum(a == b for a, b in regs_known.values()),
            "registers_keys": len(regs_known),
        },
        "failed": {str(k): r for k, r in failed.items()},
        "launches": rows,
    }
    args.oracle.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report["summary"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
