"""`flashscope validate`: measure flashscope's kernels over a sweep and compare with the engine.

    flashscope validate --sweep benchmarks/sweeps/validation.json --out RESULT.json

On a GPU: compiles the sweep's kernels, times every configuration (median of do_bench) with the
kernels at exactly its tile configuration, reads DRAM and L2 bytes with Nsight Compute for the
entries marked `ncu` where `ncu` is installed, simulates each configuration on the matching GPU
preset (calibrated), and writes {sweep, sweep_file, device, date, torch, triton, rows, summary}
(simulator/calibrate/validation.py says what the summary holds; `sweep` names the sweep, from
the file's "sweep" field or its name: validation*.json is "protocol", users.json "users").
`--measured DATASET` re-simulates the measurements of an existing dataset instead (no GPU
needed): after the engine or a calibration changes; the dataset keeps its sweep. `--compile`
first compiles, for sm_90a and without a GPU, the kernels of the sweep that no table holds
(simulator/timing/ondemand.py, `--jobs` processes, into `--compile-cache`) and simulates with
their registers and spills, as the server does for a configuration it has not seen. Without a
GPU and without --measured it prints one line and exits with code 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from flashscope.app.cli.simulate import gpu_name
from flashscope.app.cli.traffic import positive_int

MAX_REPEATS = 9


def add_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "validate",
        help="measure the kernels over a sweep and compare with the timing engine (GPU)",
        description="Measure flashscope's kernels over a sweep of configurations on this GPU, "
        "simulate each, and write measured against simulated with error statistics.",
    )
    p.add_argument("--sweep", type=Path, default=None, help="sweep file (see benchmarks/sweeps)")
    p.add_argument("--out", type=Path, required=True, help="dataset file to write")
    p.add_argument(
        "--gpu", type=gpu_name, default=None, help="preset to simulate (default: this GPU)"
    )
    p.add_argument(
        "--measured", type=Path, default=None, help="re-simulate this dataset's measurements"
    )
    p.add_argument("--only", default=None, help="comma-separated entry ids to run")
    p.add_argument(
        "--repeats",
        type=positive_int,
        default=1,
        help=f"timing passes over the sweep; a row's time is their median (at most {MAX_REPEATS})",
    )
    p.add_argument("--no-ncu", action="store_true", help="skip Nsight Compute")
    p.add_argument("--ncu-timeout", type=float, default=300.0, help="seconds for Nsight Compute")
    p.add_argument("--work", type=Path, default=None, help="folder for compile lists and ncu files")
    p.add_argument(
        "--compile",
        action="store_true",
        help="first compile (no GPU) the kernels no table holds, and simulate with their figures",
    )
    p.add_argument(
        "--compile-cache",
        type=Path,
        default=None,
        help="where --compile keeps them (default: the server's, ~/.cache/flashscope/kernels)",
    )
    p.add_argument(
        "--jobs", type=positive_int, default=2, help="--compile: processes compiling side by side"
    )
    p.set_defaults(func=run)


def _fail(flag: str, message: str) -> int:
    print(f"flashscope validate: error: {flag}: {message}", file=sys.stderr)
    return 2


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    from flashscope.simulator.calibrate.validation import (
        Entry,
        build_dataset,
        read_sweep,
        sweep_name,
    )
    from flashscope.simulator.core import hardware

    old = None
    if args.measured is not None:
        try:
            old = json.loads(args.measured.read_text())
            if not isinstance(old, dict) or not isinstance(old.get("rows"), list):
                raise ValueError("expected a dataset object with rows")
        except (OSError, ValueError) as exc:
            return _fail("--measured", f"{args.measured}: {exc}")
    if args.repeats > MAX_REPEATS:
        return _fail("--repeats", f"at most {MAX_REPEATS}, got {args.repeats}")
    sweep = sweep_file = None
    if args.sweep is not None:
        try:
            entries = read_sweep(args.sweep)
            sweep, sweep_file = sweep_name(args.sweep), str(args.sweep)
        except ValueError as exc:
            return _fail("--sweep", str(exc))
    elif old is not None:
        entries = [
            Entry(
                r["id"], r["subset"], r["config"], bool(r.get("ncu")), r.get("tiles", "candidate")
            )
            for r in old["rows"]
        ]
    else:
        return _fail("--sweep", "a sweep file is needed (or --measured DATASET)")
    if args.only:
        wanted = set(args.only.split(","))
        entries = [e for e in entries if e.id in wanted]
        if not entries:
            return _fail("--only", "no entry of the sweep has those ids")

    if old is not None:
        by_id = {r["id"]: r for r in old["rows"]}
        missing = [e.id for e in entries if e.id not in by_id]
        if missing:
            return _fail("--measured", f"no measurement for {len(missing)} entries: {missing[:3]}")
        measured = [{"id": e.id, **by_id[e.id].get("measured", {})} for e in entries]
        env = {k: old.get(k) for k in ("device", "sms", "l2_bytes", "date", "python", "torch",
                                        "triton", "cuda")}  # fmt: skip
        seconds = old.get("seconds") or {}
        env.update(compile_s=seconds.get("compile"), timing_s=seconds.get("timing"))
        env["timing_passes"] = old.get("timing_passes")
        ncu = old.get("ncu", {})
        if args.sweep is None:  # the measured dataset's sweep
            sweep, sweep_file = old.get("sweep"), old.get("sweep_file")
        key = args.gpu or old.get("gpu")
    else:
        from flashscope.kernels.device import has_cuda

        if not has_cuda():
            return _fail(
                "gpu",
                "no CUDA GPU here: measuring needs one (--measured DATASET re-simulates a "
                "dataset measured elsewhere)",
            )
        from flashscope.kernels.sweep import measure_sweep

        work = args.work or args.out.parent / f"{args.out.stem}-work"
        got = measure_sweep(
            entries,
            work,
            ncu_timeout_s=args.ncu_timeout,
            use_ncu=not args.no_ncu,
            repeats=args.repeats,
            progress=_say,
        )
        measured, env, ncu = got["rows"], got["env"], got["ncu"]
        key = args.gpu
        if key is None:
            try:
                key = hardware.resolve(env["device"])
            except ValueError as exc:
                return _fail("--gpu", f"{exc} (name the preset to simulate)")
    try:
        gpu = hardware.from_name(key)
    except ValueError as exc:
        return _fail("--gpu", str(exc))
    from flashscope.simulator.timing import compiled

    cache = None
    if args.compile:
        cache = args.compile_cache or compiled.DEFAULT_CACHE
        compiled_on_demand = compile_entries(entries, gpu, cache, args.jobs)
    with compiled.local_cache(cache):
        data = build_dataset(entries, measured, env, gpu, ncu, sweep, sweep_file)
    if cache is not None:
        data["compiled_on_demand"] = compiled_on_demand
    if old is not None:
        data["resimulated_from"] = str(args.measured)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    s = data["summary"]["all"]
    t = s["time"]
    _say(
        f"{len(data['rows'])} configurations on {data['device']}: time MAPE "
        f"{_pct(t['mape_pct'])}, worst {_pct(t['worst_pct'])} ({t['worst_id']}); "
        f"held out {_pct(data['summary']['holdout']['time']['mape_pct'])}; "
        f"DRAM bytes MAPE {_pct(s['dram_bytes']['mape_pct'])}, "
        f"L2 {_pct(s['l2_bytes']['mape_pct'])}; Spearman "
        f"{_num(s['ranking']['spearman_mean'])} → {args.out}"
    )
    return 0


def compile_entries(entries: list[Any], gpu: Any, root: Path, jobs: int) -> dict[str, Any]:
    """Compile, into the cache under `root`, the kernels of the entries that no table or cache
    holds; what was compiled, with which Triton, and in how long."""
    import time

    from flashscope.simulator.calibrate.validation import kernel_keys
    from flashscope.simulator.timing import compiled, ondemand

    keys = sorted({k for e in entries for k in kernel_keys(e.config, gpu)})
    _say(f"compiling for sm_90a with Triton {compiled.triton_version()} in {jobs} processes "
         "the kernels no table holds")  # fmt: skip
    start = time.perf_counter()
    states = ondemand.compile_missing(keys, gpu.key, root, timeout_s=3600.0, jobs=jobs)
    seconds = time.perf_counter() - start
    counts = {s: sum(v == s for v in states.values()) for s in sorted(set(states.values()))}
    _say(f"  {counts} in {seconds:.0f} s")
    return {"triton": compiled.triton_version(), "arch": "sm_90a", "cache": str(root),
            "kernels": len(keys), "compiled": len(states), "states": counts,
            "seconds": round(seconds, 1)}  # fmt: skip


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{x:.1f}%"


def _num(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}"


def main(argv: list[str] | None = None) -> int:
    """This command alone (`python -m flashscope.app.cli.validate`): needs no web-app dependency."""
    parser = argparse.ArgumentParser(prog="flashscope")
    add_command(parser.add_subparsers(required=True))
    args = parser.parse_args(["validate", *(sys.argv[1:] if argv is None else argv)])
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
