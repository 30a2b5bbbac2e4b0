"""GET /api/hopper's body: the FA-3 model of one launch beside the Hopper forward's measured
warpgroup timeline and time, FA-1 and FA-2 of the engine on the same problem, and the FP8
what-if. Runs in a compute worker (app/compute/tasks.py); the measured side comes from the
shipped dataset (app/datasets.py `Warpgroups`), matched here.

Both timelines keep the interval schema of simulator/timing/fa3_config.py; the page draws them.
A live recording of the same launch on the server's GPU (a finished run of what warpgroups,
app/runs/jobs.py) takes the shipped one's place when the route passes it.
"""

from __future__ import annotations

import math
from typing import Any

from flashscope.app.compute.simulation import parts
from flashscope.app.figures.fa3 import explanation_figure
from flashscope.app.figures.report import summary
from flashscope.app.schemas.hopper import HopperParams
from flashscope.app.schemas.simulate import FA3_MAX_INTERVALS, SimulateRequest, fa3_config
from flashscope.simulator.core import hardware
from flashscope.simulator.teach.numerics_fp8 import precision_errors
from flashscope.simulator.timing import fa3
from flashscope.simulator.timing.fa3_config import Fa3Config, tile_steps

CONFIG_FIELDS = ("consumers", "block_n", "stages", "pipeline", "ctas", "pingpong", "persistent")
PRECISION_N = 256  # queries and keys of the one head the precision errors are measured on
LABELS = {"fa1": "FA-1", "fa2": "FA-2", "fa3": "FA-3"}
# program 0 slower per step than the launch's programs by more than this: the view says so
# (a stretched stamped loop: docs/kernels.md, the warpgroups' measured timeline)
STEP_RATIO_NOTE = 1.25


def config_of(row: dict[str, Any]) -> tuple[int, ...]:
    """A measured row's configuration as seven integers (the file leaves trailing zeros out)."""
    c = [int(x) for x in row.get("config", [])]
    return tuple(c + [0] * (len(CONFIG_FIELDS) - len(c)))[: len(CONFIG_FIELDS)]


def step_ratio(rec: dict[str, Any], sms: int | None) -> float | None:
    """Program 0's time per key step over the launch's time per step and CTA slot (its span by
    the global timer × the slots ÷ every tile's steps, `fa3_config.tile_steps`), or None where
    a figure is missing. Near 1 (persistent programs, which fetch a tile under the last, below
    it) where the timeline shown runs at the pace of the launch's other programs; well above 1
    where its stamped loop ran slower than their plain one (three ping-pong warpgroups recorded
    with predicated stamps: 3.3-3.6 unmasked, 1.1-1.8 causal, where a program 0 running the
    heaviest tiles shows 0.56-0.78 unstretched; benchmarks/results/recording-cost-*.json)."""
    c = rec.get("config")
    cfg = c if isinstance(c, dict) else config_dict(config_of(rec))
    intervals = rec.get("intervals") or []
    steps_shown = sum(rec.get("tile_steps") or [])
    n_q, span_ms = rec.get("seq"), rec.get("span_ms")
    rows = int(rec.get("batch") or 0) * int(rec.get("heads") or 0)
    if not (intervals and steps_shown and sms and n_q and span_ms and rows):
        return None
    # the steps depend on the tile's rows and keys alone
    launch = Fa3Config(int(cfg["consumers"]), int(cfg["block_n"]), ctas=int(cfg.get("ctas") or 1))
    steps = int(
        tile_steps(launch, rows, n_q, rec.get("seq_k") or n_q, bool(rec.get("causal"))).sum()
    )
    launch_step_ns = span_ms * 1e6 * sms * launch.ctas / steps
    shown_ns = max(x["end_ns"] for x in intervals) - min(x["start_ns"] for x in intervals)
    return float(shown_ns / steps_shown / launch_step_ns)


def _stretched(ratio: float | None) -> list[str]:
    """The note for a program 0 that ran its steps slower than the launch (`step_ratio`)."""
    if ratio is None or ratio <= STEP_RATIO_NOTE:
        return []
    return [
        f"program 0 took {ratio:.1f}× as long per step as the launch's programs on average: "
        "its stamped loop ran slower than their plain one, so this timeline is stretched"
    ]


def config_dict(config: tuple[int, ...]) -> dict[str, Any]:
    return {
        name: bool(v) if name in ("pipeline", "pingpong", "persistent") else v
        for name, v in zip(CONFIG_FIELDS, config, strict=True)
    }


def differences(config: tuple[int, ...], other: tuple[int, ...]) -> list[str]:
    """The fields in which two configurations differ, as `name value` of the other."""
    out = []
    for name, a, b in zip(CONFIG_FIELDS, config, other, strict=True):
        if a != b:
            out.append(f"{name} {'on' if b else 'off'}" if name in ("pipeline", "pingpong",
                       "persistent") else f"{name} {b}")  # fmt: skip
    return out


def coverage(intervals: list[dict[str, Any]]) -> dict[str, float]:
    """Share of the timeline's span during which a product was in flight on some warpgroup
    ("tensor"), some warpgroup was in its softmax ("softmax"), and a copy was in flight
    ("copy"): the measured dataset's `busy`, computed the same way for either source."""
    if not intervals:
        return {"tensor": 0.0, "softmax": 0.0, "copy": 0.0}
    start = min(x["start_ns"] for x in intervals)
    span = max(float(max(x["end_ns"] for x in intervals)) - float(start), 1e-9)

    def union(phases: tuple[str, ...]) -> float:
        spans = sorted(
            (float(x["start_ns"]), float(x["end_ns"])) for x in intervals if x["phase"] in phases
        )
        total, a0, b0 = 0.0, 0.0, -1.0  # b0 < a0: no span open yet
        for a, b in spans:
            if a > b0:
                total += max(0.0, b0 - a0)
                a0, b0 = a, b
            else:
                b0 = max(b0, b)
        return (total + max(0.0, b0 - a0)) / span

    return {
        "tensor": union(("qk", "pv")),
        "softmax": union(("softmax",)),
        "copy": union(("load_q", "load_k", "load_v")),
    }


def _same_problem(row: dict[str, Any], p: HopperParams) -> bool:
    batch, heads = p.problem_sizes()
    return (
        row.get("head_dim") == p.head_dim
        and bool(row.get("causal")) == p.causal
        and row.get("seq") == p.seq
        and row.get("batch") == batch
        and row.get("heads") == heads
    )


def _nearest(rows: list[dict[str, Any]], p: HopperParams) -> dict[str, Any] | None:
    """The measured row nearest the request: same head_dim and mask; then the fewest
    configuration differences, then N, batch and heads nearest (on a log scale)."""
    cfg = p.config_tuple()
    batch, heads = p.problem_sizes()
    same = [
        r for r in rows if r.get("head_dim") == p.head_dim and bool(r.get("causal")) == p.causal
    ]
    if not same:
        return None

    def distance(r: dict[str, Any]) -> tuple[float, float]:
        shape = sum(
            abs(math.log2(max(1, r.get(k, 1)) / v))
            for k, v in (("seq", p.seq), ("batch", batch), ("heads", heads))
        )
        return (len(differences(cfg, config_of(r))), shape)

    return min(same, key=distance)


def _row_time(row: dict[str, Any], p: HopperParams, exact: bool) -> dict[str, Any]:
    cfg = config_of(row)
    what = [f"variant {row['variant']!r}"]
    shape_diff = [f"N {row['seq']}"] if row.get("seq") != p.seq else []
    batch, heads = p.problem_sizes()
    if row.get("batch") != batch or row.get("heads") != heads:
        shape_diff.append(f"batch {row.get('batch')} × {row.get('heads')} heads")
    diff = differences(p.config_tuple(), cfg) + shape_diff
    if p.dtype != row.get("dtype", "fp16"):
        diff.append(f"dtype {row.get('dtype', 'fp16')}")
    label = (
        f"measured: {what[0]}"
        if exact
        else f"nearest measured: {what[0]} ({', '.join(diff) or 'same shape'})"
    )
    return {
        "ms": row["ms"],
        "tflops": row.get("tflops"),
        "variant": row["variant"],
        "config": config_dict(cfg),
        "seq": row.get("seq"),
        "batch": row.get("batch"),
        "heads": row.get("heads"),
        "dtype": row.get("dtype", "fp16"),
        "exact": exact,
        "differs": [] if exact else diff,
        "label": label,
    }


def measured_side(p: HopperParams, gpu: str, doc: dict[str, Any] | None) -> dict[str, Any]:
    """What the dataset of `gpu` measured for this request: the recorded timeline of the same
    variant and problem (N, head_dim, mask), and the time of the same variant and shape, or of
    the nearest one, labelled. Without a dataset for `gpu`: why not."""
    if doc is None:
        return {
            "available": False,
            "why": f"no measurement for this GPU ({gpu}): the shipped warpgroup timelines are "
            "from an H100 only",
            "timeline": None,
            "time": None,
        }
    rows = [r for r in doc.get("variants", []) if isinstance(r, dict) and "ms" in r]
    cfg = p.config_tuple()
    out: dict[str, Any] = {
        "available": True,
        "device": doc.get("device"),
        "date": doc.get("date"),
        "file": doc.get("file"),
        "versions": {k: doc.get(k) for k in ("python", "torch", "triton")},
        "sms": doc.get("sms"),
        "timeline": None,
        "timeline_why": None,
        "time": None,
        "time_why": None,
    }
    if p.dtype == "fp8":
        out["timeline_why"] = out["time_why"] = (
            "fp8 is a simulated what-if: flashscope's Hopper forward runs fp16 and bf16, so "
            "nothing was measured"
        )
    else:
        exact = [r for r in rows if config_of(r) == cfg and _same_problem(r, p)]
        exact = [r for r in exact if r.get("dtype", "fp16") == p.dtype] or exact
        row = exact[0] if exact else _nearest(rows, p)
        if row is not None:
            out["time"] = _row_time(row, p, bool(exact) and row.get("dtype", "fp16") == p.dtype)
        else:
            out["time_why"] = f"no variant was measured at head_dim {p.head_dim}"
        out.update(_recorded(p, doc))
    return out


def _recorded(p: HopperParams, doc: dict[str, Any]) -> dict[str, Any]:
    """The recorded timeline of this variant at this head_dim and mask (program 0), or why none."""
    cfg = p.config_tuple()
    recs = [t for t in doc.get("timelines", []) if isinstance(t, dict)]
    same = [
        t
        for t in recs
        if config_of(t) == cfg and t.get("head_dim") == p.head_dim
        and bool(t.get("causal")) == p.causal
    ]  # fmt: skip
    if not same:
        have = sorted({
            f"{t['variant']} (d {t['head_dim']}{', causal' if t.get('causal') else ''})"
            for t in recs
        })  # fmt: skip
        return {
            "timeline_why": "this variant was not recorded; the recorded ones are "
            + "; ".join(have),
            "recorded": _recorded_list(recs),
        }
    # the recording at this N, else the nearest (by ratio)
    t = min(same, key=lambda t: abs(math.log(int(t.get("seq") or p.seq) / p.seq)))
    notes = []
    if t.get("seq") != p.seq:
        notes.append(f"recorded at N = {t.get('seq')}, not {p.seq}")
    if t.get("dtype", "fp16") != p.dtype:
        notes.append(f"recorded in {t.get('dtype', 'fp16')}")
    config = t.get("config", [])  # its ninth entry: the causal steps in one loop (`merged`)
    merged = bool(t.get("causal")) and len(config) > 8 and config[8] == 1
    if merged:
        notes.append(
            "recorded with its diagonal and unmasked steps merged into one loop, the form the "
            "tuned routes run; the model draws the two-loop form"
        )
    if t.get("mode") == SPLIT_RECORDING:
        notes.append(_two_launches(t))
    prog = next((x for x in t.get("programs", []) if x.get("program") == 0), None)
    if prog is None:
        return {"timeline_why": "the record has no program 0", "recorded": _recorded_list(recs)}
    timeline = {
        "variant": t["variant"],
        "config": config_dict(config_of(t)),
        "head_dim": t["head_dim"],
        "causal": bool(t.get("causal")),
        "merged": merged,
        "seq": t.get("seq"),
        "batch": t.get("batch"),
        "heads": t.get("heads"),
        "dtype": t.get("dtype", "fp16"),
        **{k: t.get(k) for k in TIMES},
        "program": 0,
        "tile_steps": prog.get("tile_steps"),
        "ns_per_cycle": prog.get("ns_per_cycle"),
        "busy": prog.get("busy"),
        "intervals": prog.get("intervals", []),
        "notes": notes,
    }
    timeline["step_ratio"] = step_ratio(timeline, doc.get("sms"))
    notes.extend(_stretched(timeline["step_ratio"]))
    return {"timeline": timeline, "recorded": _recorded_list(recs)}


# `kernels.hopper_forward.SPLIT_RECORDING` (the app does not import the kernels): a recording
# in launches side by side.
SPLIT_RECORDING = 6
# A recording's times (`warpgroups.record_and_time`): the plain kernel's, behind the gate a
# recording in launches side by side waits for (`plain_ms`), and as do_bench times a call
# (`plain_ungated_ms`; none in recordings of one launch, where the two are the same), the
# recorded one's and its overhead, the gate's, the launch's span by the global timer.
TIMES = ("plain_ms", "plain_ungated_ms", "recorded_branch_ms", "overhead", "gate_ms", "span_ms")


def _two_launches(t: dict[str, Any]) -> str:
    """The note on a recording in launches side by side (`Recording.mode` 6)."""
    gate = f"{t['gate_ms'] * 1e3:.0f} µs" if t.get("gate_ms") else "a gate"
    plain = t.get("plain_ungated_ms")
    told = f", {plain:.3f} ms right after do_bench's flush" if plain else ""
    return (
        "recorded in launches side by side, programs 0 and 1 stamping every phase of their "
        "first tiles in a launch of their own and running any other tiles in one after it, "
        f"all behind {gate} of wait on the GPU that is taken off, the plain kernel timed "
        f"behind the same wait{told}"
    )


def _recorded_list(recs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "variant": t["variant"],
            "head_dim": t["head_dim"],
            "causal": bool(t.get("causal")),
            "config": config_dict(config_of(t)),
        }
        for t in recs
    ]


def _fa3(p: HopperParams, dtype: str, shown_tiles: int) -> fa3.Fa3Result:
    body = SimulateRequest.model_validate({**p.simulate_body("fa3"), "dtype": dtype})
    problem = parts(body).problem
    gpu = hardware.from_name(p.gpu_key())
    return fa3.simulate_fa3(problem, fa3_config(body), gpu, dtype=dtype,
                            shown_tiles=shown_tiles, max_intervals=FA3_MAX_INTERVALS)  # fmt: skip


def _engine(p: HopperParams, algo: str) -> dict[str, Any]:
    body = SimulateRequest.model_validate(p.simulate_body(algo))
    s = summary(parts(body).run())
    return {"algo": algo, "label": LABELS[algo], "time_us": s["time_us"], "tflops": s["tflops"],
            "source": "simulated"}  # fmt: skip


def _variant_rows(p: HopperParams, doc: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Every variant measured at this shape (head_dim, mask, N, batch, heads, fp16), each
    simulated again beside its measured time."""
    if doc is None or p.dtype == "fp8":
        return []
    out = []
    for r in doc.get("variants", []):
        if not (isinstance(r, dict) and _same_problem(r, p)):
            continue
        c = config_dict(config_of(r))
        if c["ctas"] != 1:
            continue
        q = p.model_copy(update={k: c[k] for k in ("consumers", "block_n", "stages", "pipeline",
                                                     "pingpong", "persistent")})  # fmt: skip
        res = _fa3(q, "fp16", 1)
        out.append({
            "variant": r["variant"],
            "config": c,
            "measured_ms": r["ms"],
            "simulated_ms": res.time_ns / 1e6,
            "error": res.time_ns / 1e6 / r["ms"] - 1,
            "current": config_of(r) == p.config_tuple(),
        })  # fmt: skip
    return out


def live_timeline(wg: dict[str, Any]) -> dict[str, Any] | None:
    """A live run's recording (app/runs/jobs.py, what warpgroups) as `measured.timeline` has the
    shipped ones: program 0's intervals, with the run's device and the recording's overhead."""
    prog = next((x for x in wg.get("programs", []) if x.get("program") == 0), None)
    if prog is None:
        return None
    out = {
        "variant": "live",
        "live": True,
        "device": wg.get("device"),
        "config": wg.get("config"),
        **{k: wg.get(k) for k in ("head_dim", "causal", "seq", "seq_k", "batch", "heads", "dtype")},
        **{k: wg.get(k) for k in TIMES},
        "same_output": wg.get("same_output"),
        "program": 0,
        "tile_steps": prog.get("tile_steps"),
        "ns_per_cycle": prog.get("ns_per_cycle"),
        "busy": prog.get("busy"),
        "intervals": prog.get("intervals", []),
    }
    out["step_ratio"] = step_ratio(out, wg.get("sms"))
    out["notes"] = _stretched(out["step_ratio"])
    return out


def _with_live(measured: dict[str, Any], live: dict[str, Any] | None) -> None:
    """Put a live recording (the route's `live_recording`) in place of the shipped timeline, or
    say why it is not shown (`measured.live`)."""
    if live is None:
        return
    timeline = live_timeline(live["warpgroups"]) if live.get("warpgroups") else None
    if timeline is None:
        why = live.get("why") or "the live recording has no program 0"
        measured["live"] = {"run": live["run"], "why": why}
        return
    measured["live"] = {"run": live["run"], "device": timeline["device"],
                        "finished": live.get("finished"), "why": None}  # fmt: skip
    measured["timeline"] = timeline
    measured["timeline_why"] = None


def response(
    p: HopperParams,
    doc: dict[str, Any] | None,
    live: dict[str, Any] | None = None,
    record: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The body of GET /api/hopper (see docs/api.md); `live`: the route's finished live
    recording of this launch; `record`: whether this server can record it."""
    gpu = hardware.from_name(p.gpu_key())
    measured = measured_side(p, gpu.key, doc)
    _with_live(measured, live)
    rec = measured.get("timeline")
    if rec and rec.get("tile_steps"):
        shown = min(4, len(rec["tile_steps"]))
    else:
        shown = 2 if p.persistent else 1
    sim = _fa3(p, p.dtype, shown)
    sim_out = sim.as_dict()
    sim_out["coverage"] = coverage(sim.intervals)
    if rec:
        rec["coverage"] = coverage(rec["intervals"])
    batch, heads = p.problem_sizes()
    compare = [_engine(p, "fa1"), _engine(p, "fa2")]
    compare.append({"algo": "fa3", "label": "FA-3", "time_us": sim.time_ns / 1e3,
                    "tflops": sim.tflops, "source": "simulated"})  # fmt: skip
    mtime = measured.get("time")
    if mtime is not None:
        compare.append({
            "algo": "fa3",
            "label": "FA-3 (measured)" if mtime["exact"] else "FA-3 (nearest measured)",
            "time_us": mtime["ms"] * 1e3,
            "tflops": mtime["tflops"],
            "source": "measured",
            "note": mtime["label"],
        })  # fmt: skip
    if rec and rec.get("live") and rec.get("plain_ms"):
        flops = sim.tflops * 1e12 * sim.time_ns * 1e-9  # the model's useful work, per launch
        plain = rec.get("plain_ungated_ms") or rec["plain_ms"]  # as do_bench times a call
        compare.append({
            "algo": "fa3",
            "label": "FA-3 (live)",
            "time_us": plain * 1e3,
            "tflops": flops / (plain * 1e-3) / 1e12,
            "source": "measured",
            "note": f"recorded live on {rec['device']}: the plain kernel, do_bench's median",
        })  # fmt: skip
    fp8: dict[str, Any] = {"errors": precision_errors(
        PRECISION_N, PRECISION_N, p.head_dim, p.causal, block_m=fa3.BLOCK_M, block_n=p.block_n
    )}  # fmt: skip
    base = sim if p.dtype != "fp8" else _fa3(p, "fp16", 1)
    try:
        what_if = sim if p.dtype == "fp8" else _fa3(p, "fp8", 1)
        fp8["simulated"] = {"time_us": what_if.time_ns / 1e3, "tflops": what_if.tflops,
                            "busy": what_if.busy}  # fmt: skip
    except ValueError as exc:
        fp8["simulated"] = None
        fp8["why"] = str(exc)
    fp8["base"] = {"dtype": base.dtype, "time_us": base.time_ns / 1e3, "tflops": base.tflops,
                   "busy": base.busy}  # fmt: skip
    return {
        "params": {**p.model_dump(), "batch": batch, "heads": heads, "gpu": gpu.key},
        "gpu": gpu.key,
        "gpu_name": gpu.name,
        "simulated": sim_out,
        "measured": measured,
        "variants": _variant_rows(p, doc),
        "compare": compare,
        "fp8": fp8,
        "figures": {"explanation": explanation_figure(sim.explanation)},
        "record": record
        or {"available": False, "why": "not asked", "device": None, "request": None},
    }
