"""`flashscope calibrate`: measure this GPU's ceilings and fit the engine to its kernel times.

    flashscope calibrate [--gpu KEY] [--out PATH]

On a GPU: runs the micro-benchmarks (kernels/microbench.py: fp16 and bf16 matrix products, a device
copy, an exp-bound kernel, empty-kernel launches, repeated L2 reads), turns them into efficiencies
(flashscope.simulator.core.calibration.efficiency_from_ceilings), then times flashscope's kernels
over the validation sweep and fits the engine's structural parameters
(simulator/calibrate/fitting.py) on the sweep's "fit" entries only; the error on the held-out
entries is reported apart. Writes simulator/data/calibration-<key>.json (or --out). `--ceilings
FILE` takes the micro-benchmark figures of an earlier calibration file and `--measured DATASET` the
kernel times of a validation dataset (repeat it to fit on the rows of several datasets of one GPU):
with both, no GPU is needed (a refit). `--l2-probe FILE` takes the L2's usable capacity
(`l2_reuse_fraction`) and the room of a line every SM reads (`l2_shared_copies`) from a run of
benchmarks/l2_reuse_probe.py on that GPU instead of the preset's (or --start's) values; the fit
never moves them. `--fit-terms host-and-local` fits only the spills' L1 rate and the host's
share of a call (local_gbs, host_launch_us, host_descriptor_us, host_backward_us: a sweep of
the space users meet exercises them, the protocol does not) on the fit half and reports the
held-out figures; `all` fits them first, then the structural parameters. Without a GPU
otherwise, it prints one line and exits with code 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flashscope.app.cli.simulate import gpu_name
from flashscope.app.cli.traffic import positive_int

if TYPE_CHECKING:
    from flashscope.simulator.core.hardware import GPU

Json = dict[str, Any]  # a JSON object as read or written

DEFAULT_SWEEP = Path(__file__).resolve().parents[2] / "benchmarks" / "sweeps" / "validation.json"


MAX_ALONE_WEIGHT = 10.0
# --fit-terms: the structural parameters, the spills' L1 rate and the host's share of a call
# (which a sweep of the space users meet exercises and the protocol does not), or both
FIT_TERMS = ("structural", "host-and-local", "all")


def alone_weight(text: str) -> float:
    """A weight for the kernels timed alone: a number from 0 to MAX_ALONE_WEIGHT."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.0 <= value <= MAX_ALONE_WEIGHT:  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be from 0 to {MAX_ALONE_WEIGHT}, got {text}")
    return value


def add_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The `calibrate` subcommand and its flags."""
    p = sub.add_parser(
        "calibrate",
        help="measure this GPU's ceilings and fit the timing engine (GPU)",
        description="Run micro-benchmarks on this GPU, fit the engine's structural parameters "
        "to flashscope's kernel times, and write the calibration file the simulator loads.",
    )
    p.add_argument("--gpu", type=gpu_name, default=None, help="preset key (default: this GPU)")
    p.add_argument("--out", type=Path, default=None, help="file to write")
    p.add_argument("--sweep", type=Path, default=DEFAULT_SWEEP, help="configurations to time")
    p.add_argument(
        "--measured",
        type=Path,
        action="append",
        default=None,
        help="take kernel times from a dataset (repeatable: the rows of every file, one GPU)",
    )
    p.add_argument("--ceilings", type=Path, default=None, help="take ceilings from a calibration")
    p.add_argument("--no-fit", action="store_true", help="write the ceilings only")
    p.add_argument("--max-evals", type=positive_int, default=400, help="fit budget (simulations)")
    p.add_argument(
        "--alone-weight",
        type=alone_weight,
        default=None,
        help="weight in the fit of the backward's kernels timed alone by Nsight Compute against "
        f"the engine's (0 to {MAX_ALONE_WEIGHT}; default 0: whole calls only)",
    )
    p.add_argument(
        "--l2-probe",
        type=Path,
        default=None,
        help="take the L2's usable capacity from this run of benchmarks/l2_reuse_probe.py "
        "(on this GPU)",
    )
    p.add_argument(
        "--fit-terms",
        choices=FIT_TERMS,
        default="structural",
        help="what to fit on the fit half: the structural parameters (default), only the "
        "spills' L1 rate and the host's share of a call (host-and-local: local_gbs, "
        "host_launch_us, host_descriptor_us, host_backward_us, the rest kept from --start or "
        "the preset), or both "
        "(all)",
    )
    p.add_argument(
        "--start",
        type=Path,
        default=None,
        help="start the fit from this calibration's fitted values (default: the preset's)",
    )
    p.set_defaults(func=run)


def _fail(flag: str, message: str) -> int:
    """Say on stderr, in one line, what is wrong with `flag`; the exit code of a refusal."""
    print(f"flashscope calibrate: error: {flag}: {message}", file=sys.stderr)
    return 2


def _say(message: str) -> None:
    """One line of progress on stderr, at once."""
    print(message, file=sys.stderr, flush=True)


def _read(path: Path) -> Json:
    """The JSON object in `path`; ValueError where it holds something else."""
    doc = json.loads(path.read_text())
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: expected a JSON object")
    return doc


class _Refused(Exception):
    """A step that cannot go on: the flag at fault and why (`run` exits with code 2)."""

    def __init__(self, flag: str, message: str) -> None:
        super().__init__(f"{flag}: {message}")
        self.flag = flag
        self.message = message


@dataclass(frozen=True)
class _Inputs:
    """The files the command reads instead of measuring; None where a flag is not given."""

    ceilings: Json | None  # --ceilings: an earlier calibration, for its micro-benchmarks
    dataset: Json | None  # --measured: the rows of one or several datasets, merged
    start: Json | None  # --start: a calibration whose fitted values the fit starts from
    probe: Json | None  # --l2-probe: a run of benchmarks/l2_reuse_probe.py


def run(args: argparse.Namespace) -> int:
    """The command: 0 once the calibration file is written, or 2 with one line on stderr
    that names the flag at fault."""
    try:
        _calibrate(args)
    except _Refused as exc:
        return _fail(exc.flag, exc.message)
    return 0


def _calibrate(args: argparse.Namespace) -> None:
    """Read the inputs, measure (or read) the ceilings, take the L2 probe, fit, write."""
    from flashscope.simulator.core.calibration import calibration_path, document

    inputs = _read_inputs(args)
    env = _environment(args, inputs)
    base = _preset(args, inputs, env)
    ceilings, env = _ceilings(args, inputs, env)
    gpu, eff, hw = _from_ceilings(base, ceilings)
    measured: Json = {"ceilings": ceilings}
    probed: dict[str, Any] = {}  # the fields the probe measured: the fit keeps them
    if inputs.probe is not None:
        probed, measured["l2_probe"] = _probe(args.l2_probe, inputs.probe, base)
        eff.update(probed)
        gpu = dataclasses.replace(gpu, efficiency=dataclasses.replace(gpu.efficiency, **probed))
    fit_doc = None
    if not args.no_fit:
        eager = (ceilings.get("launch_eager") or {}).get("us_per_launch")
        fit_doc, values, fitted_hw = _fit_step(args, inputs, gpu, set(probed), eager)
        eff.update(values)
        hw.update(fitted_hw)
    versions = env.get("versions") or {k: env.get(k) for k in ("torch", "triton", "cuda")}
    doc = document(
        base,
        eff,
        device=env.get("device") or base.name,
        date=env.get("date") or "",
        versions=versions,
        measured=measured,
        hardware=hw,
        fit=fit_doc,
    )
    _write(args.out or calibration_path(base.key), doc, base.key)


def _read_inputs(args: argparse.Namespace) -> _Inputs:
    """The files the flags name, read; _Refused where one is unreadable or not an object."""
    try:
        return _Inputs(
            ceilings=_read(args.ceilings) if args.ceilings else None,
            dataset=_merge_datasets(args.measured) if args.measured else None,
            start=_read(args.start) if args.start else None,
            probe=_read(args.l2_probe) if args.l2_probe else None,
        )
    except (OSError, ValueError) as exc:
        raise _Refused("--ceilings/--measured/--start/--l2-probe", str(exc)) from None


def _environment(args: argparse.Namespace, inputs: _Inputs) -> Json:
    """This GPU's device name and software versions where the command must measure on it
    (no ceilings given, or a fit without a dataset); {} where the files suffice."""
    if inputs.ceilings is not None and (inputs.dataset is not None or args.no_fit):
        return {}
    from flashscope.kernels.device import has_cuda

    if not has_cuda():
        raise _Refused(
            "gpu",
            "no CUDA GPU here: calibration measures this GPU (to refit without one, pass "
            "--ceilings CALIBRATION.json and --measured DATASET.json)",
        )
    from flashscope.kernels.sweep import environment

    env: Json = environment()
    return env


def _preset(args: argparse.Namespace, inputs: _Inputs, env: Json) -> GPU:
    """The uncalibrated preset to calibrate: --gpu, else the files' GPU, else this device's."""
    from flashscope.simulator.core import hardware

    key = args.gpu or (inputs.ceilings or {}).get("gpu") or (inputs.dataset or {}).get("gpu")
    try:
        key = key or hardware.resolve(env["device"])
        return hardware.from_name(key, calibrated=False)
    except (KeyError, ValueError) as exc:
        raise _Refused("--gpu", f"{exc} (name the preset)") from None


def _ceilings(args: argparse.Namespace, inputs: _Inputs, env: Json) -> tuple[Json, Json]:
    """(micro-benchmark ceilings, environment): the --ceilings file's, its device, date and
    versions filling what `env` lacks; or measured here."""
    if inputs.ceilings is None:
        from flashscope.kernels.microbench import measure_all

        _say(f"micro-benchmarks on {env['device']} …")
        measured: Json = measure_all()
        return measured, env
    doc = inputs.ceilings
    ceilings = doc.get("measured", {}).get("ceilings")
    if not isinstance(ceilings, dict):
        raise _Refused("--ceilings", f'{args.ceilings}: no "measured": {{"ceilings": …}}')
    env = {**{k: doc.get(k) for k in ("device", "date")}, **env}
    env.setdefault("versions", doc.get("versions", {}))
    return ceilings, env


def _from_ceilings(base: GPU, ceilings: Json) -> tuple[GPU, dict[str, Any], dict[str, Any]]:
    """(`base` with the ceilings' efficiencies and hardware fields, those efficiencies, those
    fields), said in one line; _Refused where the ceilings make no valid GPU."""
    from flashscope.simulator.core.calibration import (
        efficiency_from_ceilings,
        hardware_from_ceilings,
    )

    eff: dict[str, Any] = efficiency_from_ceilings(base, ceilings)
    hw: dict[str, Any] = hardware_from_ceilings(base, ceilings)
    try:
        gpu = dataclasses.replace(
            base, efficiency=dataclasses.replace(base.efficiency, **eff), **hw
        )
    except ValueError as exc:
        raise _Refused("ceilings", str(exc)) from None
    _say("ceilings: " + ", ".join(f"{k} {v:.3g}" for k, v in {**eff, **hw}.items()))
    return gpu, eff, hw


def _probe(path: Path, doc: Json, base: GPU) -> tuple[dict[str, Any], Json]:
    """(the L2 fields the probe in `doc` measured, its record for the file's "measured"),
    said in one line; _Refused where the probe is not one of this GPU's L2."""
    from flashscope.simulator.timing.l2model import fit_probe

    try:
        probe = fit_probe(doc, base.l2_bytes)
    except ValueError as exc:
        raise _Refused("--l2-probe", f"{path}: {exc}") from None
    record = {
        "file": str(path),
        "device": doc.get("device"),
        "date": doc.get("date"),
        **dataclasses.asdict(probe),
    }
    _say(
        f"L2 probe: usable capacity {probe.fraction:.3f} of the L2 (worst {probe.worst:.2f}), "
        f"a shared line's room {probe.copies:.2f}"
    )
    return {"l2_reuse_fraction": probe.fraction, "l2_shared_copies": probe.copies}, record


def _fit_step(
    args: argparse.Namespace,
    inputs: _Inputs,
    gpu: GPU,
    keep: set[str],
    eager_us: float | None = None,
) -> tuple[Json, dict[str, Any], dict[str, Any]]:
    """(fit record, fitted efficiencies, fitted hardware fields) on the dataset's rows or a
    sweep measured here, from --start's values where given (but for the fields in `keep`);
    the --start file's values of fields not fitted here are carried, and recorded. `eager_us`:
    the ceilings' eager launch, the host's cost per launch where --fit-terms asks for it."""
    try:
        rows = _attention_rows(args, inputs.dataset, gpu)
    except ValueError as exc:
        raise _Refused("--measured/--sweep", str(exc)) from None
    if inputs.start is not None:
        try:
            gpu = _start_from(gpu, inputs.start, keep=keep)
        except ValueError as exc:
            raise _Refused("--start", str(exc)) from None
    terms = getattr(args, "fit_terms", "structural")
    host_local: Json | None = None
    if terms != "structural":
        try:
            host_local, gpu = _fit_host_and_local(gpu, rows, eager_us)
        except ValueError as exc:
            raise _Refused("--fit-terms", str(exc)) from None
    if terms == "host-and-local":
        assert host_local is not None
        fit_doc: Json = {"params": list(host_local["values"]), "values": host_local["values"]}
        values: dict[str, Any] = dict(host_local["values"])
        # the start's fitted hardware fields (the L2's bandwidth), which the fit ran with: kept
        # (not the ceilings' measured value), and said so
        fitted_hw: dict[str, Any] = _start_hardware(inputs.start)
        if fitted_hw:
            fit_doc["carried_hardware"] = {"from": str(args.start), "fields": fitted_hw}
    else:
        fit_doc, values, fitted_hw = _fit(gpu, rows, args.max_evals, args.alone_weight)
    if host_local is not None:
        fit_doc["host_and_local"] = host_local
        values = {**host_local["values"], **values}
    fit_doc["start"] = str(args.start) if args.start else "preset defaults and ceilings"
    if args.measured:
        fit_doc["measured"] = [str(m) for m in args.measured]
    if inputs.start is not None:
        carried = _carried(inputs.start, args.start, {*values, *fitted_hw, *keep})
        if carried:
            fit_doc["carried"] = carried
            values = {**carried["fields"], **values}
    return fit_doc, values, fitted_hw


def _write(out: Path, doc: Json, key: str) -> None:
    """Write the calibration file `doc` of preset `key` to `out`, and say where."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    _say(f"calibration of {key} → {out}")


def _merge_datasets(paths: list[Path]) -> Json:
    """One dataset of the rows of `paths` (the first file's header); ValueError where they are
    of different GPUs or repeat a row id."""
    docs = [_read(p) for p in paths]
    gpus = {d.get("gpu") for d in docs}
    if len(gpus) > 1:
        raise ValueError(f"datasets of different GPUs: {sorted(map(str, gpus))}")
    rows: list[Json] = []
    seen: set[object] = set()
    for path, d in zip(paths, docs, strict=True):
        for r in d.get("rows", []):
            if r.get("id") in seen:
                raise ValueError(f"{path}: row id {r.get('id')!r} appears in two datasets")
            seen.add(r.get("id"))
            rows.append(r)
    return {**docs[0], "rows": rows}


def _attention_rows(args: argparse.Namespace, data_doc: Json | None, gpu: GPU) -> list[Json]:
    """Dataset-style rows (id, subset, config, measured_us) to fit on and to hold out."""
    if data_doc is not None:
        rows = [r for r in data_doc.get("rows", []) if r.get("measured_us")]
        if not rows:
            names = ", ".join(str(m) for m in args.measured)
            raise ValueError(f"{names}: no measured rows")
        return rows
    from flashscope.kernels.sweep import measure_sweep
    from flashscope.simulator.calibrate.validation import measured_fields, read_sweep

    entries = read_sweep(args.sweep)
    work = Path(args.out or ".").resolve().parent / "calibrate-work"
    got = measure_sweep(entries, work, use_ncu=False, progress=_say)
    rows = []
    for e, m in zip(entries, got["rows"], strict=True):
        config = {**e.config, "gpu": gpu.key}
        if m.get("route"):
            config["route"] = m["route"]
        rows.append({"id": e.id, "subset": e.subset, "config": config, **measured_fields(m)})
    return [r for r in rows if r["measured_us"]]


def observed_l2_gbs(rows: list[Json]) -> float | None:
    """The highest L2 → SM rate any measured kernel reached (ncu bytes over its duration)."""
    from flashscope.simulator.calibrate.validation import SM_L2_READ, ncu_kernels
    from flashscope.simulator.timing.compiled import NCU_DURATION

    rates = [
        k[SM_L2_READ] / k[NCU_DURATION]
        for r in rows
        for k in ncu_kernels(r)
        if k.get(SM_L2_READ) and k.get(NCU_DURATION)
    ]
    return max(rates) if rates else None


def _start_from(gpu: GPU, doc: Json, keep: Collection[str] = frozenset()) -> GPU:
    """`gpu` with the fitted values of another calibration (a warm start: the search is local,
    so where it starts decides which of several near-optimal fits it finds; another preset's
    calibration may serve, e.g. an H100's for an H200, whose SMs are alike; parameters the file
    lacks, and those in `keep` (measured here), keep their values)."""
    from flashscope.simulator.calibrate.fitting import HARDWARE_FIELDS, apply
    from flashscope.simulator.core.hardware import EFFICIENCY_FIELDS

    if not isinstance((doc.get("fit") or {}).get("values"), dict):
        raise ValueError('no fitted values ("fit": {"values": …}) in that calibration')
    values = _start_values(doc)
    unknown = sorted(set(values) - set(EFFICIENCY_FIELDS) - set(HARDWARE_FIELDS))
    if unknown:
        raise ValueError(f"unknown fitted fields {unknown}")
    return apply(gpu, {k: v for k, v in values.items() if k not in keep})


def _start_values(doc: Json) -> Json:
    """The values a calibration fitted, and those it carried from another, by field."""
    fit = doc.get("fit") or {}
    carried = (fit.get("carried") or {}).get("fields") or {}
    return {**carried, **(fit.get("values") or {})}


def _start_hardware(doc: Json | None) -> Json:
    """The hardware fields (`fitting.HARDWARE_FIELDS`) a --start calibration fitted, or {}."""
    from flashscope.simulator.calibrate.fitting import HARDWARE_FIELDS

    if doc is None:
        return {}
    return {k: v for k, v in _start_values(doc).items() if k in HARDWARE_FIELDS}


def _carried(start_doc: Json, start: Path, fitted: set[str]) -> Json | None:
    """The --start calibration's values of the fields this fit did not fit (its dataset has
    no rows that exercise them, e.g. the reduce-adds without atomic-route rows), to keep in
    the new file with where they came from; None when there are none."""
    from flashscope.simulator.calibrate.fitting import HARDWARE_FIELDS

    fields = {
        k: v for k, v in _start_values(start_doc).items()
        if k not in fitted and k not in HARDWARE_FIELDS
    }  # fmt: skip
    if not fields:
        return None
    record: Json = {
        "from": str(start),
        "fields": fields,
        "why": "not fitted here (no rows of these datasets exercise them): the --start "
        "calibration's values, kept",
    }
    earlier = (start_doc.get("fit") or {}).get("carried") or {}
    if set(earlier.get("fields") or {}) & set(fields):  # carried there too: say from where
        record["first_from"] = earlier.get("first_from") or earlier.get("from")
        record["first_why"] = earlier.get("first_why") or earlier.get("why")
    return record


def _fit(
    gpu: GPU, rows: list[Json], max_evals: int, weight: float | None = None
) -> tuple[Json, dict[str, Any], dict[str, Any]]:
    """(fit record, fitted efficiencies, fitted hardware fields) of `gpu` on `rows`."""
    from flashscope.simulator.calibrate.fitting import (
        ALONE_WEIGHT,
        PARAMS,
        REDUCE,
        apply,
        fit,
        l2_param,
        loss_of,
    )
    from flashscope.simulator.calibrate.validation import time_samples

    weight = ALONE_WEIGHT if weight is None else weight

    params = list(PARAMS)
    observed = observed_l2_gbs(rows)
    if observed:  # the kernels reached this: the L2 can do at least as much
        params.append(l2_param(observed))
        gpu = dataclasses.replace(
            gpu,
            l2_gbs=max(observed, gpu.l2_gbs * gpu.efficiency.l2),
            efficiency=dataclasses.replace(gpu.efficiency, l2=1.0),
        )
    train_rows = [r for r in rows if r.get("subset") == "fit"]
    if any(r["config"].get("route") == "atomic" for r in train_rows):
        params.extend(REDUCE)
    power_doc, gpu = _fit_power(gpu, rows)
    spill_doc, gpu = _fit_spill(gpu, rows)

    train, held = time_samples(rows, gpu, "fit"), time_samples(rows, gpu, "holdout")
    if not train:
        raise ValueError("no measured rows of the fit subset")
    _say(f"fitting {len(params)} parameters on {len(train)} configurations …")
    result = fit(gpu, train, params, max_evals=max_evals, alone_weight=weight)
    fitted = apply(gpu, result.values)
    held_loss, held_mape = loss_of(fitted, held, weight) if held else (None, None)
    start_mape = loss_of(gpu, train, weight)[1]
    _say(
        f"fit: MAPE {start_mape:.1f}% → {result.mape_pct:.1f}% on {len(train)} fitted; "
        f"held out ({len(held)}): {held_mape if held_mape is None else round(held_mape, 1)}%"
    )
    values = dict(result.values)
    hw = {k: values.pop(k) for k in ("l2_gbs",) if k in values}
    if hw:
        values["l2"] = 1.0
    doc = {
        "method": "Nelder–Mead then coordinate search on mean |log(simulated / measured)|",
        "alone_weight": weight,
        "params": [p.name for p in params],
        "values": result.values,
        "observed_l2_gbs": observed,
        "evaluations": result.evaluations,
        "fit": {"n": len(train), "loss": result.loss, "mape_pct": result.mape_pct,
                "start_loss": result.start_loss, "start_mape_pct": start_mape},
        "holdout": {"n": len(held), "loss": held_loss, "mape_pct": held_mape},
        "power": power_doc,
        "spill": spill_doc,
    }  # fmt: skip
    if power_doc:
        values = {**power_doc["values"], **values}
    if spill_doc:
        values = {**spill_doc["values"], **values}
    return doc, values, hw


def _fit_spill(gpu: GPU, rows: list[Json]) -> tuple[Json | None, GPU]:
    """(record, `gpu` with `spill_l1_miss` fitted) from the fit subset's rows whose L2 bytes
    were measured and whose kernels reload spilled registers; (None, `gpu`) where none does."""
    from flashscope.simulator.calibrate.fitting import apply, fit_spill_miss, spill_loss
    from flashscope.simulator.calibrate.validation import spill_samples

    train = spill_samples([r for r in rows if r.get("subset") == "fit"], gpu)
    held = [s for s in spill_samples([r for r in rows if r.get("subset") == "holdout"], gpu)
            if s.local_load > 0]  # fmt: skip
    try:
        miss, loss = fit_spill_miss(train)
    except ValueError as exc:
        _say(f"spill_l1_miss not fitted: {exc}")
        return None, gpu
    n = sum(s.local_load > 0 for s in train)
    held_loss = spill_loss(miss, held) if held else None
    _say(
        f"spill reloads reaching L2: {miss:.3f} (L2 bytes off by {loss:.3f} mean |log| on {n} "
        f"fitted; held out ({len(held)}): {'-' if held_loss is None else f'{held_loss:.3f}'})"
    )
    doc = {
        "method": "grid over [0, 1] on mean |log(simulated / measured L2 bytes)| of the rows "
        "whose kernels reload spilled registers (compiled.py's measured local bytes)",
        "values": {"spill_l1_miss": miss},
        "fit": {"n": n, "loss": loss},
        "holdout": {"n": len(held), "loss": held_loss},
    }
    return doc, apply(gpu, {"spill_l1_miss": miss})


def _fit_host_and_local(gpu: GPU, rows: list[Json], eager_us: float | None) -> tuple[Json, GPU]:
    """(record, `gpu` with them) of the spills' L1 rate and the host's share of a call, fitted
    on the fit subset's rows (the launch term is the ceilings' eager launch where they measured
    one), with the held-out rows' time errors before and after, said in two lines."""
    from flashscope.simulator.calibrate.fitting import (
        CallSample,
        apply,
        call_errors,
        fit_host_and_local,
    )
    from flashscope.simulator.calibrate.validation import workload_of

    def samples(subset: str) -> list[CallSample]:
        return [
            CallSample(r["id"], workload_of(r["config"], gpu), r["measured_us"] * 1e-6)
            for r in rows
            if r.get("subset") == subset
        ]

    train, held = samples("fit"), samples("holdout")
    if not train:
        raise ValueError("no measured rows of the fit subset")
    _say(f"fitting the spills' L1 rate and the host's share on {len(train)} configurations …")
    result = fit_host_and_local(gpu, train, eager_us)
    fitted = apply(gpu, result.values)
    for name, why in result.skipped.items():
        _say(f"{name} not fitted: {why}")
    doc: Json = {
        "method": "local_gbs: golden section over its logarithm (or off); host_launch_us, "
        "host_descriptor_us and host_backward_us: a grid against the kernels' times; two "
        "rounds; mean "
        "|log(simulated / measured)| of the whole calls of the fit subset",
        "values": result.values,
        "host_launch_from": "ceilings.launch_eager" if eager_us is not None else "fitted",
        "fit": {"n": len(train), "loss": result.loss, "start_loss": result.start_loss},
        "skipped": result.skipped,
    }
    if held:
        before, after = call_errors(gpu, held), call_errors(fitted, held)
        doc["holdout"] = {"n": len(held), "before": _time_figures(before),
                          "after": _time_figures(after)}  # fmt: skip
        b, a = doc["holdout"]["before"], doc["holdout"]["after"]
        _say(
            f"held out ({len(held)}): time MAPE {b['mape_pct']:.1f}% → {a['mape_pct']:.1f}%, "
            f"bias {b['bias_pct']:+.1f}% → {a['bias_pct']:+.1f}%, within 10% "
            f"{b['within_10pct']:.0%} → {a['within_10pct']:.0%}, worst {b['worst_pct']:+.0f}% → "
            f"{a['worst_pct']:+.0f}%"
        )
    _say(
        "host and local: "
        + ", ".join(f"{k} {v:g}" for k, v in result.values.items())
        + f" (loss {result.start_loss:.3f} → {result.loss:.3f} on {len(train)} fitted)"
    )
    return doc, fitted


def _time_figures(err: Any) -> Json:
    """Time MAPE, bias, worst error (%) and the share within 10% of relative errors `err`."""
    import numpy as np

    k = int(np.argmax(np.abs(err)))
    return {
        "mape_pct": float(np.mean(np.abs(err)) * 100),
        "bias_pct": float(np.mean(err) * 100),
        "worst_pct": float(err[k] * 100),
        "within_10pct": float(np.mean(np.abs(err) <= 0.10)),
    }


# Fewer single-kernel rows timed both ways than this: the power cap is not fitted.
MIN_CLOCK_SAMPLES = 8


def _fit_power(gpu: GPU, rows: list[Json]) -> tuple[Json | None, GPU]:
    """(record, `gpu` with the power cap fitted) from the fit subset's single-kernel rows that
    Nsight Compute also timed alone; (None, `gpu`) where there are too few."""
    from flashscope.simulator.calibrate.fitting import apply, fit_power, power_loss
    from flashscope.simulator.calibrate.validation import clock_samples

    train = clock_samples([r for r in rows if r.get("subset") == "fit"], gpu)
    held = clock_samples([r for r in rows if r.get("subset") == "holdout"], gpu)
    if len(train) < MIN_CLOCK_SAMPLES:
        _say(f"power cap not fitted: {len(train)} single-kernel rows timed alone as well")
        return None, gpu
    result = fit_power(gpu.efficiency, train)
    fitted = apply(gpu, result.values)
    held_loss = power_loss(fitted.efficiency, held) if held else None
    _say(
        f"power cap: sustained / alone off by {result.start_loss:.3f} → {result.loss:.3f} "
        f"(mean |log|) on {len(train)} kernels; held out ({len(held)}): "
        f"{'-' if held_loss is None else f'{held_loss:.3f}'}"
    )
    doc = {
        "method": "sustained over single-launch (Nsight Compute) time of one-kernel rows",
        "values": result.values,
        "fit": {"n": len(train), "loss": result.loss, "start_loss": result.start_loss},
        "holdout": {"n": len(held), "loss": held_loss},
    }
    return doc, fitted


def main(argv: list[str] | None = None) -> int:
    """This command alone (`python -m flashscope.app.cli.calibrate`): needs no web-app
    dependency."""
    parser = argparse.ArgumentParser(prog="flashscope")
    add_command(parser.add_subparsers(required=True))
    args = parser.parse_args(["calibrate", *(sys.argv[1:] if argv is None else argv)])
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
