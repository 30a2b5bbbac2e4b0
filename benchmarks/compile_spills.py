"""Registers and register-spill traffic of flashscope's Triton kernels, read from the compiler:
writes simulator/data/compiled-spills.json (and, with --oracle, the check against Nsight Compute).

No GPU: each kernel is compiled for sm_90a on the CPU and its registers, shared memory and
local loads and stores are read from the binary by flashscope.kernels.sm90 (the compiling),
flashscope.simulator.timing.ondemand (the kernels' loop bounds, the engine's units) and
flashscope.simulator.timing.sass
(blocks, loops and the local bytes of each, from the SASS); this script chooses the keys, writes
the table and, with `--oracle`, compares the predictions, launch by launch, with Nsight
Compute's counts (`l1tex__t_bytes_pipe_lsu_mem_local_op_ld` / `_st`) and registers in the
measured datasets.

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
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from flashscope.simulator.timing.ondemand import (
    REPRESENTATIVE_HEADS,
    REPRESENTATIVE_KV_HEADS,
    REPRESENTATIVE_SEQ,
    Kernel,
    engine_form,
    engine_key,
    key_block_trips,
    per_cta,
    query_block_trips,
    representative,
)
from flashscope.simulator.timing.sass import Structure, structure_of

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


# --- compiling on the CPU ----------------------------------------------------------------


def _use_triton(path: str | None) -> None:
    """Put a separately installed Triton first and keep its compiler (not the interpreter)."""
    if path:
        sys.path.insert(0, str(Path(path).resolve()))
    os.environ["TRITON_INTERPRET"] = "0"


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


# --- running -------------------------------------------------------------------------------


def _work(k: Kernel) -> tuple[Kernel, dict[str, Any] | str]:
    try:
        from flashscope.kernels import sm90  # after `--triton` has put its Triton first

        return k, sm90.read_binary(sm90.compile_kernel(k))
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

    from flashscope.kernels import sm90  # the kernels import Triton: only now

    sm90._patch_launchers()
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
