"""`flashscope simulate`: predict an attention kernel's time on a GPU with the timing engine.

    flashscope simulate --gpu h100 --algo fa2 --batch 4 --heads 32 --seq 16384 --head-dim 128 \\
        --block-m 128 --block-n 128 --json

prints the engine's summary as one JSON object (or a table without --json). `--impl flashscope`
simulates flashscope's own kernels (simulator/timing/kernelplan.py) instead of the papers'
algorithm: the causal forward heaviest block first, the backward's route (`--route`, default the
kernels' choice on that GPU) and the dQ kernel's tiles (`--dq-block-m` …). `--set NAME=VALUE`
(repeatable) changes any hardware or efficiency field first, e.g. `--set smem_per_sm_kib=456`.
`--algo fa3` runs the FA-3 model of flashscope's Hopper forward (simulator/timing/fa3.py) with the
kernel's options (`--consumers`, `--no-pipeline`, `--pingpong`, `--persistent`, `--ctas`,
`--band`, `--block-n`, `--stages`; `--dtype fp8` as a simulated what-if); --json prints its
answer with the shown program's warpgroup timeline. `--compile` (flashscope's kernels on an
H100/H200 preset) first compiles, for sm_90a and without a GPU, the kernels that no table holds
(simulator/timing/ondemand.py), so that their registers and spills come from the binary; kernels
compiled before are read from the cache (FLASHSCOPE_COMPILE_CACHE_DIR) unless
FLASHSCOPE_COMPILE_ON_DEMAND=0. Bad
arguments print one line naming the argument and exit with code 2. The simulator (NumPy) is imported
when the command runs; torch, triton and FastAPI never are.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import replace
from typing import Any

from flashscope.app.cli.traffic import head_dim, positive_int, power_of_two

# The same as simulator.timing.workload.ALGOS plus fa3's (tested); kept here so the CLI starts
# fast.
ALGOS = ("naive", "fa1", "fa2", "fa2-bwd", "decode", "fa3")
FA3_FLAGS = {"consumers": "--consumers", "pipeline": "--no-pipeline", "pingpong": "--pingpong",
             "persistent": "--persistent", "ctas": "--ctas", "band": "--band",
             "program": "--program", "shown_tiles": "--shown-tiles"}  # fmt: skip
MAX_CTAS = 4_194_304  # beyond this a simulation takes seconds: refuse rather than hang
FLAGS = {
    "seq_q": "--seq",
    "seq_k": "--seq-k",
    "head_dim": "--head-dim",
    "batch": "--batch",
    "heads": "--heads",
    "kv_heads": "--kv-heads",
    "dtype": "--dtype",
    "causal": "--causal",
    "block_m": "--block-m",
    "block_n": "--block-n",
    "stages": "--stages",
    "warps": "--warps",
    "maxnreg": "--maxnreg",
    "splits": "--splits",
    "route": "--route",
    "impl": "--impl",
    **FA3_FLAGS,
}


TILE_NAMES = ("block_m", "block_n", "stages", "warps")  # the dQ kernel's own, if given


def gpu_name(text: str) -> str:
    from flashscope.simulator.core import hardware

    try:
        return hardware.resolve(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def hardware_change(text: str) -> tuple[str, int | float]:
    name, sep, raw = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    try:
        value: int | float = int(raw)
    except ValueError:
        try:
            value = float(raw)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name}: not a number: {raw!r}") from None
    return name.strip(), value


def add_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `simulate` on the CLI's subcommands."""
    p = sub.add_parser(
        "simulate",
        help="predict a kernel's time on a GPU (the timing engine)",
        description="Simulate an attention algorithm on a GPU: time, bytes per memory level, "
        "occupancy, waves and what limits it.",
    )
    p.add_argument("--gpu", type=gpu_name, default="h100-sxm", help="preset or alias (h100, …)")
    p.add_argument("--algo", choices=ALGOS, default="fa2")
    p.add_argument("--batch", type=positive_int, default=1)
    p.add_argument("--heads", type=positive_int, default=1)
    p.add_argument("--kv-heads", type=positive_int, default=None, help="default: --heads")
    p.add_argument("--seq", type=positive_int, required=True, help="query length N")
    p.add_argument("--seq-k", type=positive_int, default=None, help="key/value length (default N)")
    p.add_argument("--head-dim", type=head_dim, required=True, help="a multiple of 8 up to 256")
    p.add_argument("--causal", action="store_true")
    p.add_argument(
        "--dtype", choices=("fp16", "bf16", "fp32", "fp8"), default="fp16", help="fp8: fa3 only"
    )
    p.add_argument("--block-m", type=power_of_two, default=128)
    p.add_argument("--block-n", type=power_of_two, default=64)
    p.add_argument("--stages", type=positive_int, default=2)
    p.add_argument("--warps", type=power_of_two, default=8)
    p.add_argument(
        "--maxnreg",
        type=positive_int,
        default=None,
        help="cap on registers per thread (Triton's maxnreg, a multiple of 8 from 24 to 248)",
    )
    p.add_argument("--splits", type=positive_int, default=None, help="decode: KV splits")
    p.add_argument(
        "--impl",
        choices=("convention", "flashscope"),
        default="convention",
        help="the papers' algorithm (counting convention) or flashscope's own kernels",
    )
    p.add_argument(
        "--route",
        choices=("separate", "atomic", "ws"),
        default=None,
        help="flashscope fa2-bwd: the Triton backward's dQ route, or ws (the Gluon backward); "
        "default: the kernels' choice on this GPU",
    )
    for name in ("block-m", "block-n", "stages", "warps"):
        p.add_argument(
            f"--dq-{name}",
            type=positive_int,
            default=None,
            help=f"flashscope fa2-bwd, separate route: the dQ kernel's {name} (default: --{name})",
        )
    p.add_argument(
        "--set",
        type=hardware_change,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="change a hardware or efficiency field (repeatable)",
    )
    fa3 = p.add_argument_group("fa3 (the FA-3 model of the Hopper forward)")
    fa3.add_argument("--consumers", type=int, default=None, help="warpgroups of 64 rows: 1-3")
    fa3.add_argument("--no-pipeline", dest="pipeline", action="store_false", default=None,
                     help="issue S of the next block only after this one's P·V")  # fmt: skip
    fa3.add_argument("--pingpong", action="store_true", default=None,
                     help="the warpgroups take turns issuing their products")  # fmt: skip
    fa3.add_argument("--persistent", action="store_true", default=None,
                     help="one program per CTA slot looping over the tiles")  # fmt: skip
    fa3.add_argument("--ctas", type=int, default=None, help="CTAs per SM: 1 or 2")
    fa3.add_argument("--band", type=int, default=None, help="causal: heads per band of tiles")
    fa3.add_argument("--program", type=int, default=None, help="the program whose timeline shows")
    fa3.add_argument("--shown-tiles", type=int, default=None, help="its tiles the timeline shows")
    p.add_argument(
        "--compile",
        action="store_true",
        help="flashscope kernels on an H100/H200: first compile (no GPU, seconds) the kernels no "
        "table holds, for their registers and spills",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def _fail(flag: str, message: str) -> int:
    print(f"flashscope simulate: error: argument {flag}: {message}", file=sys.stderr)
    return 2


def _flag_for(message: str, default: str) -> str:
    """The CLI flag of the field a ValueError message starts with."""
    m = re.match(r"(\w+)", message)
    return FLAGS.get(m.group(1), default) if m else default


def run_fa3(args: argparse.Namespace, gpu: Any) -> int:
    """`--algo fa3`: the FA-3 model's answer (JSON with the timeline, or a few lines)."""
    from flashscope.simulator.core.problem import AttentionProblem
    from flashscope.simulator.timing.fa3 import Fa3Config, simulate_fa3

    given = {k: getattr(args, k) for k in FA3_FLAGS if getattr(args, k) is not None}
    try:
        problem = AttentionProblem(
            seq_q=args.seq, seq_k=args.seq_k, head_dim=args.head_dim, batch=args.batch,
            heads=args.heads, kv_heads=args.kv_heads, causal=args.causal,
            dtype="fp16" if args.dtype == "fp8" else args.dtype,
        )  # fmt: skip
        options = {k: v for k, v in given.items() if k not in ("program", "shown_tiles")}
        shown = given.get("shown_tiles", 2)
        if not 1 <= shown <= 4:
            raise ValueError(f"shown_tiles must be from 1 to 4, got {shown}")
        cfg = Fa3Config(block_n=args.block_n, stages=args.stages, **options)
    except ValueError as exc:
        return _fail(_flag_for(str(exc), "--seq"), str(exc))
    tiles = problem.batch * problem.heads * -(-problem.seq_q // cfg.tile_m)
    if tiles > MAX_CTAS:
        return _fail("--seq", f"{tiles} tiles to simulate; the limit is {MAX_CTAS}")
    try:
        result = simulate_fa3(
            problem, cfg, gpu, dtype=args.dtype, program=given.get("program", 0), shown_tiles=shown
        )
    except ValueError as exc:
        return _fail(_flag_for(str(exc), "--stages"), str(exc))
    out = result.as_dict()
    if args.json:
        print(json.dumps(out))
        return 0
    b = out["busy"]
    print(
        f"fa3 on {out['gpu_name']} ({out['dtype']}, simulated): {out['time_us']:,.1f} µs, "
        f"{out['tflops']:,.1f} TFLOP/s; {out['tiles']} tiles, {out['programs']} programs\n"
        f"  busy        tensor {b['tensor']:.0%} · SFU {b['sfu']:.0%} · loader {b['loader']:.0%}\n"
        f"  per block   {out['explanation']['text']}"
        + "".join(f"\n  note        {n}" for n in out["notes"])
    )
    return 0


def run(args: argparse.Namespace) -> int:
    from flashscope.app.config import Settings
    from flashscope.app.figures.report import summary
    from flashscope.simulator.core import hardware
    from flashscope.simulator.core.problem import AttentionProblem, TileConfig
    from flashscope.simulator.timing import compiled, kernelplan
    from flashscope.simulator.timing.engine import simulate_workload
    from flashscope.simulator.timing.workload import build, ctas_of

    try:
        problem = AttentionProblem(
            seq_q=args.seq,
            seq_k=args.seq_k,
            head_dim=args.head_dim,
            batch=args.batch,
            heads=args.heads,
            kv_heads=args.kv_heads,
            causal=args.causal,
            dtype="fp16" if args.dtype == "fp8" else args.dtype,  # fp8: fa3's what-if, below
        )
        tiles = TileConfig(args.block_m, args.block_n, args.stages, args.warps, args.maxnreg)
    except ValueError as exc:
        return _fail(_flag_for(str(exc), "--seq"), str(exc))
    try:
        gpu = hardware.from_name(args.gpu)
        changes = dict(args.set)
        factor = Settings().simulate_max_hardware_factor
        for name, value in changes.items():  # the ranges POST /api/simulate holds them to
            if (refused := hardware.check_change(gpu, name, value, factor)) is not None:
                raise ValueError(refused)
        if changes:
            gpu = hardware.custom(gpu, **changes)
    except ValueError as exc:
        return _fail("--set", str(exc))
    if args.algo == "fa3":
        if args.impl != "convention" or args.route or args.splits:
            return _fail("--algo", "fa3 takes neither --impl, --route nor --splits")
        if args.dtype == "fp32":
            return _fail("--dtype", "dtype must be fp16, bf16 or fp8 for fa3")
        return run_fa3(args, gpu)
    for name, flag in FA3_FLAGS.items():
        if getattr(args, name) is not None:
            return _fail(flag, f"{flag} applies to --algo fa3")
    if args.dtype == "fp8":
        return _fail("--dtype", "dtype fp8 is a what-if of --algo fa3")
    dq_fields = (args.dq_block_m, args.dq_block_n, args.dq_stages, args.dq_warps)
    try:
        dq_tiles = (
            replace(tiles, **{k: v for k, v in zip(TILE_NAMES, dq_fields, strict=True) if v})
            if any(dq_fields)
            else None
        )
    except ValueError as exc:
        return _fail("--dq-" + _flag_for(str(exc), "--block-m").lstrip("-"), str(exc))
    try:
        if args.impl == "flashscope":
            kw = {"gpu_key": gpu.key, "route": args.route, "dq_tiles": dq_tiles}
            ctas = kernelplan.ctas_of(args.algo, problem, tiles, **kw)
        else:
            if args.route or dq_tiles:
                raise ValueError("route and the dQ tiles need --impl flashscope")
            ctas = ctas_of(args.algo, problem, tiles, sms=gpu.sms, splits=args.splits)
    except ValueError as exc:
        return _fail(_flag_for(str(exc), "--algo"), str(exc))
    if ctas > MAX_CTAS:
        return _fail("--seq", f"{ctas} CTAs to simulate; the limit is {MAX_CTAS}")
    if args.compile and args.impl != "flashscope":
        return _fail("--compile", "--compile applies to --impl flashscope")
    settings = Settings()
    cache = settings.compile_cache_dir if settings.compile_on_demand or args.compile else None
    if args.compile:
        from flashscope.simulator.timing import ondemand

        root = settings.compile_cache_dir
        with compiled.local_cache(root):
            missing = [k for k in kernelplan.compiled_keys(args.algo, problem, tiles, **kw)
                       if compiled.wants_compile(k, gpu.key)]  # fmt: skip
        if missing:
            print(f"compiling for sm_90a with Triton {compiled.triton_version()} the "
                  "kernels no table holds …", file=sys.stderr, flush=True)  # fmt: skip
        states = ondemand.compile_keys(missing, root, settings.compile_timeout_s) if missing else {}
        for k, state in states.items():
            said = "compiled" if state == "done" else f"{state}: its figures stay the estimate's"
            print(f"  {k}: {said}", file=sys.stderr)
    try:
        with compiled.local_cache(cache):
            if args.impl == "flashscope":
                workload = kernelplan.build(args.algo, problem, tiles, **kw)
            else:
                workload = build(args.algo, problem, tiles, sms=gpu.sms, splits=args.splits)
            result = simulate_workload(workload, gpu)
    except ValueError as exc:
        return _fail(_flag_for(str(exc), "--block-m/--block-n/--stages"), str(exc))
    out = summary(result)
    if args.json:
        print(json.dumps(out))
    else:
        print(table(out))
    return 0


def _bytes(n: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:,.2f} {unit}"
    return f"{n:,.0f} B"


def table(s: dict[str, Any]) -> str:
    """The summary as a few aligned lines for a terminal."""
    p = s["problem"]
    lim = " · ".join(f"{k} {v:.1%}" for k, v in s["limiter"].items() if v and v >= 0.0005)
    lines = [
        f"{s['algo']} on {s['gpu_name']}: batch {p['batch']}, heads {p['heads']}/"
        f"{p['kv_heads']} kv, N {p['seq']}×{p['seq_k']}, d {p['head_dim']}, "
        f"{'causal, ' if p['causal'] else ''}{p['dtype']}",
        f"  time        {s['time_us']:,.1f} µs   (floor {s['floor_us']:,.1f} µs, "
        f"{s['floors']['bound']})",
        f"  throughput  {s['tflops']:,.1f} TFLOP/s useful, {s['tflops_executed']:,.1f} executed",
        f"  DRAM        read {_bytes(s['dram_read_bytes'])}, write {_bytes(s['dram_write_bytes'])}",
        f"  L2          {_bytes(s['l2_bytes'])} requested",
        f"  occupancy   {s['ctas_per_sm']} CTA/SM ({s['occupancy_limiter']}), "
        f"{s['waves']:,.2f} waves of {s['main_kernel']}",
        f"  limiters    {lim}",
        "  kernels",
    ]
    for k in s["kernels"]:
        lines.append(
            f"    {k['name']:<16} {k['ctas']:>8,} CTAs  {k['time_us']:>12,.1f} µs  "
            f"{k['ctas_per_sm']} CTA/SM  smem {k['smem_bytes'] / 1024:,.0f} KiB  "
            f"{k['regs_per_thread']} regs{' (spills)' if k['register_spill'] else ''}"
            + (f"  [{k['compiled']['source']}]" if "compiled" in k else "")
        )
    return "\n".join(lines)
