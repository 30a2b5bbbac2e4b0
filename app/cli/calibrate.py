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
never moves them. Without a GPU otherwise, it prints one line and exits with code 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from flashscope.app.cli.simulate import gpu_name
from flashscope.app.cli.traffic import positive_int

DEFAULT_SWEEP = Path(__file__).resolve().parents[2] / "benchmarks" / "sweeps" / "validation.json"


MAX_ALONE_WEIGHT = 10.0


def alone_weight(text: str) -> float:
    """A weight for the kernels timed alone: a number from 0 to MAX_ALONE_WEIGHT."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.0 <= value <= MAX_ALONE_WEIGHT:  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be from 0 to {MAX_ALONE_WEIGHT}, got {text}")
    return value


def add_command(sub: argparse._SubParsersAction) -> None:
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
        "--start",
        type=Path,
        default=None,
        help="start the fit from this calibration's fitted values (default: the preset's)",
    )
    p.set_defaults(func=run)


def _fail(flag: str, message: str) -> int:
    print(f"flashscope calibrate: error: {flag}: {message}", file=sys.stderr)
    return 2


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _read(path: Path) -> dict:
    doc = json.loads(path.read_text())
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: expected a JSON object")
    return doc


def run(args: argparse.Namespace) -> int:
    from flashscope.simulator.core import hardware
    from flashscope.simulator.core.calibration import (
        calibration_path,
        document,
        efficiency_from_ceilings,
        hardware_from_ceilings,
    )

    try:
        ceil_doc = _read(args.ceilings) if args.ceilings else None
        data_doc = _merge_datasets(args.measured) if args.measured else None
        start_doc = _read(args.start) if args.start else None
        probe_doc = _read(args.l2_probe) if args.l2_probe else None
    except (OSError, ValueError) as exc:
        return _fail("--ceilings/--measured/--start/--l2-probe", str(exc))
    need_gpu = ceil_doc is None or (data_doc is None and not args.no_fit)
    env: dict = {}
    if need_gpu:
        from flashscope.kernels.device import has_cuda

        if not has_cuda():
            return _fail(
                "gpu",
                "no CUDA GPU here: calibration measures this GPU (to refit without one, pass "
                "--ceilings CALIBRATION.json and --measured DATASET.json)",
            )
        from flashscope.kernels.sweep import environment

        env = environment()
    key = args.gpu or (ceil_doc or {}).get("gpu") or (data_doc or {}).get("gpu")
    try:
        key = key or hardware.resolve(env["device"])
        base = hardware.from_name(key, calibrated=False)
    except (KeyError, ValueError) as exc:
        return _fail("--gpu", f"{exc} (name the preset)")

    if ceil_doc is not None:
        ceilings = ceil_doc.get("measured", {}).get("ceilings")
        if not isinstance(ceilings, dict):
            return _fail("--ceilings", f'{args.ceilings}: no "measured": {{"ceilings": …}}')
        env = {**{k: ceil_doc.get(k) for k in ("device", "date")}, **env}
        env.setdefault("versions", ceil_doc.get("versions", {}))
    else:
        from flashscope.kernels.microbench import measure_all

        _say(f"micro-benchmarks on {env['device']} …")
        ceilings = measure_all()
    eff = efficiency_from_ceilings(base, ceilings)
    hw = hardware_from_ceilings(base, ceilings)
    try:
        gpu = dataclasses.replace(
            base, efficiency=dataclasses.replace(base.efficiency, **eff), **hw
        )
    except ValueError as exc:
        return _fail("ceilings", str(exc))
    _say("ceilings: " + ", ".join(f"{k} {v:.3g}" for k, v in {**eff, **hw}.items()))
    measured: dict = {"ceilings": ceilings}
    probed: dict = {}  # the fields the probe measured: the fit keeps them
    if probe_doc is not None:
        from flashscope.simulator.timing.l2model import fit_probe

        try:
            probe = fit_probe(probe_doc, base.l2_bytes)
        except ValueError as exc:
            return _fail("--l2-probe", f"{args.l2_probe}: {exc}")
        probed = {"l2_reuse_fraction": probe.fraction, "l2_shared_copies": probe.copies}
        measured["l2_probe"] = {
            "file": str(args.l2_probe),
            "device": probe_doc.get("device"),
            "date": probe_doc.get("date"),
            **dataclasses.asdict(probe),
        }
        eff.update(probed)
        gpu = dataclasses.replace(gpu, efficiency=dataclasses.replace(gpu.efficiency, **probed))
        _say(
            f"L2 probe: usable capacity {probe.fraction:.3f} of the L2 (worst {probe.worst:.2f}), "
            f"a shared line's room {probe.copies:.2f}"
        )

    fit_doc = None
    if not args.no_fit:
        try:
            rows = _attention_rows(args, data_doc, gpu)
        except ValueError as exc:
            return _fail("--measured/--sweep", str(exc))
        if start_doc is not None:
            try:
                gpu = _start_from(gpu, start_doc, keep=set(probed))
            except ValueError as exc:
                return _fail("--start", str(exc))
        fit_doc, values, fitted_hw = _fit(gpu, rows, args.max_evals, args.alone_weight)
        fit_doc["start"] = str(args.start) if args.start else "preset defaults and ceilings"
        if args.measured:
            fit_doc["measured"] = [str(m) for m in args.measured]
        if start_doc is not None:
            carried = _carried(start_doc, args.start, {*values, *fitted_hw, *probed})
            if carried:
                fit_doc["carried"] = carried
                values = {**carried["fields"], **values}
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
    out = args.out or calibration_path(base.key)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    _say(f"calibration of {base.key} → {out}")
    return 0


def _merge_datasets(paths: list[Path]) -> dict:
    """One dataset of the rows of `paths` (the first file's header); ValueError where they are
    of different GPUs or repeat a row id."""
    docs = [_read(p) for p in paths]
    gpus = {d.get("gpu") for d in docs}
    if len(gpus) > 1:
        raise ValueError(f"datasets of different GPUs: {sorted(map(str, gpus))}")
    rows: list = []
    seen: set = set()
    for path, d in zip(paths, docs, strict=True):
        for r in d.get("rows", []):
            if r.get("id") in seen:
                raise ValueError(f"{path}: row id {r.get('id')!r} appears in two datasets")
            seen.add(r.get("id"))
            rows.append(r)
    return {**docs[0], "rows": rows}


def _attention_rows(args: argparse.Namespace, data_doc: dict | None, gpu) -> list[dict]:
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


def observed_l2_gbs(rows: list[dict]) -> float | None:
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


def _start_from(gpu, doc: dict, keep: set[str] = frozenset()):
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


def _start_values(doc: dict) -> dict:
    """The values a calibration fitted, and those it carried from another, by field."""
    fit = doc.get("fit") or {}
    carried = (fit.get("carried") or {}).get("fields") or {}
    return {**carried, **(fit.get("values") or {})}


def _carried(start_doc: dict, start: Path, fitted: set[str]) -> dict | None:
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
    record = {
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
    gpu, rows: list[dict], max_evals: int, weight: float | None = None
) -> tuple[dict, dict, dict]:
    """(fit record, fitted efficiencies, fitted hardware fields) of `gpu` on `rows`."""
    from flashscope.simulator.calibrate.fitting import (
        ALONE_WEIGHT,
        PARAMS,
        REDUCE,
        Sample,
        apply,
        fit,
        l2_param,
        loss_of,
    )
    from flashscope.simulator.calibrate.validation import measured_alone, problem_key, workload_of

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

    def sample(r: dict) -> Sample:
        workload = workload_of(r["config"], gpu)
        return Sample(
            r["id"],
            workload,
            r["measured_us"] * 1e-6,
            r.get("measured_dram_bytes"),
            problem_key(r["config"]),
            tuple((one, seconds) for _, one, seconds in measured_alone(r, workload)),
        )

    def samples(subset: str) -> list[Sample]:
        return [sample(r) for r in rows if r.get("subset") == subset]

    train, held = samples("fit"), samples("holdout")
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


def _fit_spill(gpu, rows: list[dict]) -> tuple[dict | None, object]:
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


# Fewer single-kernel rows timed both ways than this: the power cap is not fitted.
MIN_CLOCK_SAMPLES = 8


def _fit_power(gpu, rows: list[dict]) -> tuple[dict | None, object]:
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
