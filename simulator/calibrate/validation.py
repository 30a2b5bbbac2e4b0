"""The validation of the timing engine against flashscope's kernels: sweeps, rows and summaries.

A sweep file (benchmarks/sweeps/validation.json) lists configurations, each the fields of
`flashscope simulate` (CONFIG_FIELDS) with an id, the subset it belongs to ("fit": calibration
may be fitted on it; "holdout": never) and whether Nsight Compute should read its bytes:

    {"format": 1, "entries": [{"id": "fwd-d64-full-n512-t0", "subset": "fit", "ncu": false,
                                "config": {"algo": "fa2", "impl": "flashscope", "seq": 512, …}}]}

A dataset (benchmarks/results/validation-<gpu>-<date>.json) holds, per configuration, what the
GPU measured and what the engine predicts, and a summary (`summarize`):

    time      mean absolute percentage error (MAPE) and the worst error, per subset
    bytes     the same for DRAM bytes (read + write) and L2 bytes where ncu measured them
    kernels_alone  the same per backward kernel (dQ, dK/dV; the atomic route's dK/dV apart):
              each simulated alone at the boost clock against Nsight Compute's duration of it
              (it times launches one by one), where ncu ran
    ranking   per problem (a configuration less its tile fields), the Spearman rank correlation
              of the simulated against the measured times of its tile configurations (ties
              share their mean rank; problems whose measured times are all equal are left
              out), averaged over problems with equal weight; and whether the tile
              configuration the simulator ranks first is within 5% of the measured best;
              with several timing passes, also how well the passes rank alike (the ceiling);
              a sweep with "spread" tile configurations also gets the ranking among the
              "candidate" ones alone (`ranking_candidates`)
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from flashscope.simulator.calibrate.fitting import ClockSample, Sample, SpillSample
from flashscope.simulator.core import hardware
from flashscope.simulator.core.hardware import GPU
from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.timing import compiled, kernelplan
from flashscope.simulator.timing.compiled import NCU_DURATION
from flashscope.simulator.timing.engine import (
    alone_time_s,
    call_time_s,
    power_counts,
    simulate_workload,
)
from flashscope.simulator.timing.results import SimResult
from flashscope.simulator.timing.workload import Workload, alone, build

FORMAT = 1
SUBSETS = ("fit", "holdout")
CONFIG_FIELDS = (
    "gpu", "algo", "impl", "batch", "heads", "kv_heads", "seq", "seq_k", "head_dim", "causal",
    "dtype", "block_m", "block_n", "stages", "warps", "maxnreg", "splits", "route",
    "dq_block_m", "dq_block_n", "dq_stages", "dq_warps",
)  # fmt: skip
TILE_FIELDS = ("block_m", "block_n", "stages", "warps", "maxnreg", "dq_block_m", "dq_block_n",
               "dq_stages", "dq_warps")  # fmt: skip
BEST_WITHIN = 0.05
TILE_SETS = ("candidate", "spread")


@dataclass(frozen=True)
class Entry:
    """One configuration of a sweep."""

    id: str
    subset: str
    config: dict[str, Any]
    ncu: bool = False
    tiles: str = "candidate"  # "candidate": one the kernels try; "spread": chosen to differ


def check_config(config: dict[str, Any]) -> None:
    unknown = sorted(set(config) - set(CONFIG_FIELDS))
    if unknown:
        raise ValueError(f"unknown config fields {unknown}; fields: {', '.join(CONFIG_FIELDS)}")
    for need in ("algo", "seq", "head_dim", "block_m", "block_n", "stages", "warps"):
        if need not in config:
            raise ValueError(f"config needs {need!r}")
    problem_of(config)
    tiles_of(config)


def read_sweep(path: Path) -> list[Entry]:
    """The entries of a sweep file, checked (ValueError naming the entry otherwise)."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a readable JSON file ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError(f'{path}: expected a JSON object with "format": {FORMAT}')
    entries, seen = [], set()
    for i, raw in enumerate(doc.get("entries") or []):
        where = f"{path}: entry {i}"
        if not isinstance(raw, dict) or not isinstance(raw.get("config"), dict):
            raise ValueError(f"{where}: expected an object with a config")
        eid, subset = raw.get("id"), raw.get("subset")
        if not isinstance(eid, str) or not eid or eid in seen:
            raise ValueError(f"{where}: id must be a new non-empty string, got {eid!r}")
        if subset not in SUBSETS:
            raise ValueError(f"{where}: subset must be one of {SUBSETS}, got {subset!r}")
        try:
            check_config(raw["config"])
        except ValueError as exc:
            raise ValueError(f"{where} ({eid}): {exc}") from None
        tiles = raw.get("tiles", "candidate")
        if tiles not in TILE_SETS:
            raise ValueError(f"{where} ({eid}): tiles must be one of {TILE_SETS}, got {tiles!r}")
        seen.add(eid)
        entries.append(Entry(eid, subset, dict(raw["config"]), bool(raw.get("ncu", False)), tiles))
    if not entries:
        raise ValueError(f"{path}: no entries")
    return entries


# The sweep of the papers' protocol (benchmarks/sweeps/validation.json and its variants): the
# name a dataset of it carries in its "sweep" field (the app's default, app/datasets.py).
PROTOCOL = "protocol"


def sweep_name(path: Path) -> str:
    """The name of the sweep in file `path`, which its datasets carry in their "sweep" field: the
    file's own "sweep" field where it has one, else from the file's name: `validation*.json`
    (the papers' protocol) is "protocol", any other its stem (`users.json`: "users")."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a readable JSON file ({exc})") from None
    named = doc.get("sweep") if isinstance(doc, dict) else None
    if isinstance(named, str) and named:
        return named
    stem = Path(path).name.removesuffix(".json")
    return PROTOCOL if stem.startswith("validation") else stem


def problem_of(c: dict[str, Any]) -> AttentionProblem:
    return AttentionProblem(
        seq_q=c["seq"],
        seq_k=c.get("seq_k"),
        head_dim=c["head_dim"],
        batch=c.get("batch", 1),
        heads=c.get("heads", 1),
        kv_heads=c.get("kv_heads"),
        causal=bool(c.get("causal", False)),
        dtype=c.get("dtype", "fp16"),
    )


def tiles_of(c: dict[str, Any]) -> TileConfig:
    return TileConfig(c["block_m"], c["block_n"], c["stages"], c["warps"], c.get("maxnreg"))


def dq_tiles_of(c: dict[str, Any]) -> TileConfig | None:
    if not any(c.get(f) for f in ("dq_block_m", "dq_block_n", "dq_stages", "dq_warps")):
        return None
    t = tiles_of(c)
    return TileConfig(
        c.get("dq_block_m") or t.block_m,
        c.get("dq_block_n") or t.block_n,
        c.get("dq_stages") or t.stages,
        c.get("dq_warps") or t.warps,
        t.maxnreg,  # a register cap holds for every kernel of the configuration
    )


def _kernel_options(c: dict[str, Any], gpu: GPU, p: AttentionProblem) -> dict[str, Any]:
    """kernelplan's options for an impl flashscope configuration: the datasets' backward rows
    timed the Triton backward, so its route where a row has none (the Gluon backward's rows are
    simulator/calibrate/ws_rows.py's)."""
    route = c.get("route") or (
        kernelplan.kernel_route(gpu.key, p) if c["algo"] == "fa2-bwd" else None
    )
    return {"gpu_key": gpu.key, "route": route, "dq_tiles": dq_tiles_of(c)}


def workload_of(c: dict[str, Any], gpu: GPU) -> Workload:
    """The engine's workload of one configuration (impl flashscope: the kernels' launches)."""
    p, t = problem_of(c), tiles_of(c)
    if c.get("impl", "convention") == "flashscope":
        return kernelplan.build(c["algo"], p, t, **_kernel_options(c, gpu, p))
    return build(c["algo"], p, t, sms=gpu.sms, splits=c.get("splits"))


def kernel_keys(c: dict[str, Any], gpu: GPU) -> list[str]:
    """The compiled-kernel keys of the Triton kernels `workload_of` launches for `c`, without
    building it (none for the papers' algorithms)."""
    if c.get("impl", "convention") != "flashscope":
        return []
    p = problem_of(c)
    return kernelplan.compiled_keys(c["algo"], p, tiles_of(c), **_kernel_options(c, gpu, p))


def simulate_config(c: dict[str, Any], gpu: GPU | None = None) -> SimResult:
    gpu = gpu or hardware.from_name(c.get("gpu", "h100-sxm"))
    return simulate_workload(workload_of(c, gpu), gpu)


def ncu_kernels(row: dict[str, Any]) -> list[dict[str, Any]]:
    """The per-kernel rows Nsight Compute read for a dataset row ([] where it read none)."""
    return ((row.get("measured") or {}).get("ncu") or {}).get("kernels") or []


# The backward's kernels that Nsight Compute times one by one (each launch alone: it serialises
# them) and whose durations a whole call's time cannot tell apart: checked, and fitted, alone.
ALONE_KERNELS = ("bwd_dq", "bwd_dkdv")


def measured_alone(row: dict[str, Any], workload: Workload) -> list[tuple[str, Workload, float]]:
    """(launch name, the launch alone, Nsight's duration in s) for each of a flashscope backward
    row's ALONE_KERNELS that Nsight Compute timed."""
    if workload.algo != "fa2-bwd" or workload.impl != "flashscope":
        return []
    names = {w.name for w in workload.launches}
    out = []
    for k in ncu_kernels(row):
        name = compiled.KERNEL_LAUNCH.get(k.get("name", ""))
        ns = k.get(NCU_DURATION)
        if name in ALONE_KERNELS and name in names and ns:
            out.append((name, alone(workload, name), float(ns) * 1e-9))
    return out


def _plain_writes(rows: list[dict[str, Any]]) -> dict[tuple[str, str], float]:
    """(problem, Nsight kernel name) → the mean DRAM writes of that kernel's launches that
    stored nothing to local memory, over `rows` (the baseline a spilling sibling is held to)."""
    seen: dict[tuple[str, str], list[float]] = {}
    for r in rows:
        for k in ncu_kernels(r):
            written = k.get(compiled.DRAM_WRITE)
            if written is not None and k.get(compiled.LOCAL_STORE) == 0:
                seen.setdefault((problem_key(r["config"]), k["name"]), []).append(written)
    return {key: float(np.mean(v)) for key, v in seen.items()}


def compiled_observations(rows: list[dict[str, Any]], gpu: GPU) -> list[compiled.Observation]:
    """Every flashscope kernel Nsight Compute read in `rows`: its key in the compiled-kernel
    table, its loop steps and CTAs as the engine counts them, its local-memory bytes, and for a
    kernel that stores to local memory, its DRAM writes beyond the mean of the same problem's
    launches of that kernel that do not (where `rows` hold such a launch)."""
    plain = _plain_writes(rows)
    out = []
    for r in rows:
        c = r["config"]
        if c.get("impl") != "flashscope":
            continue
        workload = workload_of(c, gpu)
        launches = {w.name: w for w in workload.launches}
        for k in ncu_kernels(r):
            w = launches.get(compiled.KERNEL_LAUNCH.get(k.get("name", ""), ""))
            if w is None or k.get(compiled.LOCAL_LOAD) is None:
                continue
            t = w.tiles or workload.tiles
            regs = k.get(compiled.REGISTERS)
            store = float(k.get(compiled.LOCAL_STORE) or 0.0)
            base = plain.get((problem_key(c), k["name"]))
            written = k.get(compiled.DRAM_WRITE)
            writeback = None  # spilled: DRAM writes beyond the plain launches'
            if store > 0 and base is not None and written is not None:
                writeback = float(written) - base
            out.append(
                compiled.Observation(
                    key=compiled.key(w.name, workload.problem, t, workload.route),
                    steps=float(w.iters.sum()),
                    ctas=w.n_ctas,
                    threads=32 * t.warps,
                    load=float(k[compiled.LOCAL_LOAD]),
                    store=store,
                    regs=None if regs is None else int(regs),
                    gpu=gpu.key.removesuffix("+custom"),
                    writeback=writeback,
                )
            )
    return out


def time_samples(rows: list[dict[str, Any]], gpu: GPU, subset: str) -> list[Sample]:
    """The rows of `subset` as `fitting.fit` weighs them: each call's workload on `gpu`, its
    measured time and DRAM bytes, its problem (for the ranking terms) and its kernels that
    Nsight Compute timed alone."""
    out = []
    for r in rows:
        if r.get("subset") != subset:
            continue
        workload = workload_of(r["config"], gpu)
        alone = tuple((one, seconds) for _, one, seconds in measured_alone(r, workload))
        out.append(
            Sample(
                r["id"], workload, r["measured_us"] * 1e-6, r.get("measured_dram_bytes"),
                problem_key(r["config"]), alone,
            )
        )  # fmt: skip
    return out


def spill_samples(rows: list[dict[str, Any]], gpu: GPU) -> list[SpillSample]:
    """The rows whose L2 bytes Nsight Compute measured, as `fitting.fit_spill_miss` weighs
    them: the engine's L2 requests less the spill reloads, and those reloads."""
    out = []
    for r in rows:
        measured = sm_side_l2_bytes(ncu_kernels(r))
        if not measured:
            continue
        launches = workload_of(r["config"], gpu).launches
        base = sum(float((w.read_bytes + w.write_bytes + w.local_store).sum()) for w in launches)
        load = sum(float(w.local_load.sum()) for w in launches)
        out.append(SpillSample(r["id"], base, load, measured))
    return out


def clock_samples(rows: list[dict[str, Any]], gpu: GPU) -> list[ClockSample]:
    """The rows of one kernel timed alone by Nsight Compute as well as back to back: how much
    slower it ran sustained (the power cap's evidence, `fitting.fit_power`)."""
    out = []
    for r in rows:
        kernels = ncu_kernels(r)
        single = kernels[0].get(NCU_DURATION) if len(kernels) == 1 else None
        if not single or not r.get("measured_us"):
            continue
        launches = workload_of(r["config"], gpu).launches
        if len(launches) != 1:
            continue
        flops, l2_bytes = power_counts(launches[0], gpu.efficiency)
        sustained = r["measured_us"] * 1e-6
        out.append(ClockSample(r["id"], flops, l2_bytes, single * 1e-9, sustained))
    return out


def problem_key(c: dict[str, Any]) -> str:
    """A configuration less its tile fields: the problem its tile configurations compete on."""
    return json.dumps({k: v for k, v in sorted(c.items()) if k not in TILE_FIELDS})


# --- summary maths ----------------------------------------------------------------------------


def rel_errors(measured: np.ndarray, simulated: np.ndarray) -> np.ndarray:
    """(simulated − measured) / measured."""
    err: np.ndarray = (simulated - measured) / measured
    return err


def error_stats(
    ids: Sequence[str], measured: Sequence[float | None], simulated: Sequence[float | None]
) -> dict[str, Any]:
    """MAPE (%), worst absolute error (%) and which row it is, over rows with both values."""
    pairs = [
        (i, m, s)
        for i, m, s in zip(ids, measured, simulated, strict=True)
        if m is not None and s is not None and m > 0
    ]
    if not pairs:
        return {"n": 0, "mape_pct": None, "worst_pct": None, "worst_id": None, "within_10pct": None}
    err = rel_errors(np.array([p[1] for p in pairs]), np.array([p[2] for p in pairs]))
    k = int(np.argmax(np.abs(err)))
    return {
        "n": len(pairs),
        "mape_pct": float(np.mean(np.abs(err)) * 100),
        "bias_pct": float(np.mean(err) * 100),
        "worst_pct": float(err[k] * 100),
        "worst_id": pairs[k][0],
        "within_10pct": float(np.mean(np.abs(err) <= 0.10)),
    }


def ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 1…n, ties sharing their mean rank."""
    order = np.argsort(x, kind="stable")
    r = np.empty(len(x))
    r[order] = np.arange(1, len(x) + 1)
    for v in np.unique(x):
        same = x == v
        r[same] = r[same].mean()
    return r


def spearman(a: np.ndarray, b: np.ndarray) -> float | None:
    """Spearman's rank correlation (Pearson on ranks); None when either side is constant."""
    ra, rb = ranks(np.asarray(a, float)), ranks(np.asarray(b, float))
    sa, sb = ra.std(), rb.std()
    if sa == 0 or sb == 0:
        return None
    return float(np.mean((ra - ra.mean()) * (rb - rb.mean())) / (sa * sb))


def repeat_spearman(rows: list[dict[str, Any]]) -> float | None:
    """How well one timing pass ranks a problem's tile configurations as another pass does.

    The mean Spearman correlation over every pair of passes (`measured.ms_passes`, all rows
    alike); None with fewer than two passes. The ceiling any model's ranking can be checked
    against: above it the measurement, not the model, decides the order.
    """
    passes = [(r.get("measured") or {}).get("ms_passes") or [] for r in rows]
    n = min(len(p) for p in passes)
    if n < 2:
        return None
    table = np.array([p[:n] for p in passes])  # (configurations, passes)
    pairs = [spearman(table[:, i], table[:, j]) for i in range(n) for j in range(i + 1, n)]
    rhos = [r for r in pairs if r is not None]
    return float(np.mean(rhos)) if rhos else None


def ranking(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per problem: rank correlation of tile configurations and the simulator's pick."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if r.get("measured_us") and r.get("simulated_us"):
            groups.setdefault(problem_key(r["config"]), []).append(r)
    problems = []
    for rs in groups.values():
        if len(rs) < 2:
            continue
        m = np.array([r["measured_us"] for r in rs])
        s = np.array([r["simulated_us"] for r in rs])
        pick = int(np.argmin(s))
        gap = float(m[pick] / m.min() - 1)
        problems.append(
            {
                "ids": [r["id"] for r in rs],
                "spearman": spearman(m, s),
                "repeat_spearman": repeat_spearman(rs),
                "measured_best": rs[int(np.argmin(m))]["id"],
                "simulated_best": rs[pick]["id"],
                "pick_gap_pct": gap * 100,
                "pick_within_5pct": gap <= BEST_WITHIN,
            }
        )
    rhos = [p["spearman"] for p in problems if p["spearman"] is not None]
    repeats = [p["repeat_spearman"] for p in problems if p["repeat_spearman"] is not None]
    picks = [p["pick_within_5pct"] for p in problems]
    return {
        "problems": len(problems),
        "spearman_mean": float(np.mean(rhos)) if rhos else None,
        "spearman_counted": len(rhos),
        "repeat_spearman_mean": float(np.mean(repeats)) if repeats else None,
        "pick_within_5pct": float(np.mean(picks)) if picks else None,
        "pick_gap_worst_pct": max((p["pick_gap_pct"] for p in problems), default=None),
        "by_problem": problems,
    }


def _subset_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    ids = [r["id"] for r in rows]
    out = {
        "rows": len(rows),
        "time": error_stats(
            ids, [r.get("measured_us") for r in rows], [r.get("simulated_us") for r in rows]
        ),
    }
    for level in ("dram", "l2"):
        out[f"{level}_bytes"] = error_stats(
            ids,
            [r.get(f"measured_{level}_bytes") for r in rows],
            [r.get(f"simulated_{level}_bytes") for r in rows],
        )
    alone: dict[str, tuple[list[str], list[float | None], list[float | None]]] = {}
    for r in rows:
        for k in r.get("kernels_alone") or []:
            ids_, meas, sim = alone.setdefault(k["name"], ([], [], []))
            ids_.append(r["id"])
            meas.append(k["measured_us"])
            sim.append(k["simulated_us"])
    if alone:
        out["kernels_alone"] = {name: error_stats(*v) for name, v in sorted(alone.items())}
    rk = ranking(rows)
    out["ranking"] = {k: v for k, v in rk.items() if k != "by_problem"}
    if any(r.get("tiles") == "spread" for r in rows):
        rk = ranking([r for r in rows if r.get("tiles", "candidate") == "candidate"])
        out["ranking_candidates"] = {k: v for k, v in rk.items() if k != "by_problem"}
    return out


TARGETS = {
    "time_mape_pct": 10.0,
    "time_worst_pct": 25.0,
    "bytes_pct": 10.0,
    "spearman": 0.9,
    "best_within_pct": 5.0,
}


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Errors over all rows and per subset, the ranking, and each target met or not."""
    out = {"all": _subset_summary(rows)}
    for subset in SUBSETS:
        out[subset] = _subset_summary([r for r in rows if r.get("subset") == subset])
    full = ranking(rows)
    out["ranking_by_problem"] = full["by_problem"]
    a = out["all"]

    def met(value: float | None, ok: Callable[[float], bool]) -> bool | None:
        return (
            None if value is None or (isinstance(value, float) and math.isnan(value)) else ok(value)
        )

    out["targets"] = {
        "time_mape": met(a["time"]["mape_pct"], lambda v: v <= TARGETS["time_mape_pct"]),
        "time_worst": met(a["time"]["worst_pct"], lambda v: abs(v) <= TARGETS["time_worst_pct"]),
        "dram_bytes": met(a["dram_bytes"]["worst_pct"], lambda v: abs(v) <= TARGETS["bytes_pct"]),
        "l2_bytes": met(a["l2_bytes"]["worst_pct"], lambda v: abs(v) <= TARGETS["bytes_pct"]),
        "spearman": met(a["ranking"]["spearman_mean"], lambda v: v >= TARGETS["spearman"]),
        "best_within_5pct": met(a["ranking"]["pick_within_5pct"], lambda v: v >= 1.0),
        "limits": TARGETS,
    }
    return out


def simulated_fields(result: SimResult) -> dict[str, Any]:
    """What a dataset row keeps of a simulation: time, bytes and the breakdown by limiter."""
    return {
        "simulated_us": call_time_s(result) * 1e6,
        "simulated_kernels_us": result.time_s * 1e6,  # the GPU's part, without the host floor
        "simulated_dram_bytes": result.dram_read_bytes + result.dram_write_bytes,
        "simulated_l2_bytes": result.l2_bytes,
        "simulated": {
            "limiter": result.limiter,
            "route": result.workload.route,
            "kernels": [
                {
                    "name": k.name,
                    "start_us": (k.end_s - k.time_s) * 1e6 + k.breakdown["launch"] * 1e6,
                    "time_us": k.time_s * 1e6,
                    "ctas": k.n_ctas,
                    "ctas_per_sm": k.ctas_per_sm,
                    "waves": k.waves,
                    "dram_bytes": k.dram_read_bytes + k.dram_write_bytes,
                    "limiter": {lim: v / k.time_s for lim, v in k.breakdown.items()},
                }
                for k in result.kernels
            ],
        },
    }


SM_L2_READ = "l1tex__m_xbar2l1tex_read_bytes.sum"
SM_L2_WRITE = "l1tex__m_l1tex2xbar_write_bytes.sum"


def sm_side_l2_bytes(kernels: list[dict[str, Any]]) -> float | None:
    """Bytes the SMs received from L2 and sent to it, summed over a call's kernels.

    This is what the engine's L2 bytes count (every global request of the kernels). ncu's L2-side
    counts (lts__t_*) are smaller where the L2 merges simultaneous requests of several SMs for
    the same sector, and they include traffic no SM asked for; they are kept in `measured.ncu`.
    """
    values = [(k.get(SM_L2_READ), k.get(SM_L2_WRITE)) for k in kernels]
    known = [(r, w) for r, w in values if r is not None and w is not None]
    if not values or len(known) < len(values):
        return None
    return float(sum(r + w for r, w in known))


def measured_fields(m: dict[str, Any]) -> dict[str, Any]:
    """What a dataset row reports of a measurement: time (µs) and bytes where ncu read them."""
    ncu = m.get("ncu") or {}
    return {
        "measured_us": m["ms"] * 1e3 if m.get("ms") else None,
        "measured_dram_bytes": ncu.get("dram_bytes"),
        "measured_l2_bytes": sm_side_l2_bytes(ncu.get("kernels") or []),
    }


def kernels_alone(row: dict[str, Any], workload: Workload, gpu: GPU) -> list[dict[str, Any]]:
    """Each backward kernel Nsight Compute timed, against the engine's time for it alone."""
    out = []
    for name, one, measured in measured_alone(row, workload):
        simulated = alone_time_s(one, gpu)
        atomic = name == "bwd_dkdv" and workload.route == "atomic"
        out.append(
            {
                "name": name + ("-atomic" if atomic else ""),
                "measured_us": measured * 1e6,
                "simulated_us": simulated * 1e6,
                "error_pct": (simulated / measured - 1) * 100,
            }
        )
    return out


def build_dataset(
    entries: list[Entry],
    measured: list[dict[str, Any]],
    env: dict[str, Any],
    gpu: GPU,
    ncu: dict[str, Any] | None = None,
    sweep: str | None = None,
    sweep_file: str | None = None,
) -> dict[str, Any]:
    """Rows of measured against simulated for each entry, and their summary.

    `measured[i]` belongs to `entries[i]`: flashscope.kernels.sweep's row (ms, tflops, …, route,
    ncu) or {"error": …}. The backward's route is the one the kernels took when measured.
    `sweep` names the sweep the entries come from (`sweep_name`) and `sweep_file` the file:
    the dataset carries both (the app files a dataset under its sweep; without one, the
    protocol).
    """
    rows = []
    for e, m in zip(entries, measured, strict=True):
        config = {**e.config, "gpu": gpu.key}
        if config.get("algo") == "fa2-bwd" and m.get("route"):
            config["route"] = m["route"]
        row: dict[str, Any] = {
            "id": e.id, "subset": e.subset, "ncu": e.ncu, "tiles": e.tiles, "config": config
        }  # fmt: skip
        row.update(measured_fields(m))
        row["measured"] = {k: v for k, v in m.items() if k != "id"}
        try:
            workload = workload_of(config, gpu)
            row.update(simulated_fields(simulate_workload(workload, gpu)))
            row["kernels_alone"] = kernels_alone(row, workload, gpu)
        except ValueError as exc:
            row.update(simulated_us=None, simulated_dram_bytes=None, simulated_l2_bytes=None)
            row["simulation_error"] = str(exc)
        if row["measured_us"] and row.get("simulated_us"):
            row["error_pct"] = (row["simulated_us"] / row["measured_us"] - 1) * 100
        rows.append(row)
    return {
        "format": FORMAT,
        "kind": "flashscope validation",
        **({"sweep": sweep} if sweep else {}),
        **({"sweep_file": sweep_file} if sweep_file else {}),
        "gpu": gpu.key,
        **{k: env.get(k) for k in ("device", "date", "python", "torch", "triton", "cuda")},
        "sms": env.get("sms"),
        "l2_bytes": env.get("l2_bytes"),
        "seconds": {"compile": env.get("compile_s"), "timing": env.get("timing_s")},
        "timing_passes": env.get("timing_passes") or 1,
        "efficiency": dataclasses.asdict(gpu.efficiency),
        "hardware": {"l2_gbs": gpu.l2_gbs},
        "ncu": ncu or {},
        "rows": rows,
        "summary": summarize(rows),
    }
