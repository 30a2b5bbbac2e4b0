"""flashscope validate and calibrate without a GPU: one-line refusals, and refits from files."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from flashscope.app.cli.main import main
from flashscope.simulator.calibrate.validation import (
    build_dataset,
    read_sweep,
    simulate_config,
    sweep_name,
)
from flashscope.simulator.core import hardware

ROOT = Path(__file__).resolve().parents[2]
SWEEP = ROOT / "benchmarks" / "sweeps" / "validation.json"
CALIBRATION = ROOT / "simulator" / "data" / "calibration-h200.json"


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["validate", "--sweep", str(SWEEP), "--out", "x.json"], "no CUDA GPU here"),
        (["calibrate"], "no CUDA GPU here"),
        (["validate", "--out", "x.json"], "a sweep file is needed"),
        (["validate", "--sweep", str(SWEEP), "--out", "x.json", "--repeats", "10"], "at most 9"),
        (["validate", "--sweep", "missing.json", "--out", "x.json"], "not a readable JSON"),
    ],
)
def test_without_a_gpu_each_command_says_why_in_one_line(argv, needle, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "flashscope.app.cli.main", *argv], capture_output=True, text=True,
        cwd=tmp_path, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "CUDA_VISIBLE_DEVICES":
        ""},
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


def _fake_dataset(tmp_path: Path, seed: int) -> Path:
    """Measurements made up from the engine itself, ±20%: a stand-in for a GPU's."""
    rng = random.Random(seed)
    entries = [e for e in read_sweep(SWEEP) if e.config["seq"] <= 1024][:16]
    gpu = hardware.from_name("h200")
    measured = [
        {"id": e.id, "ms": simulate_config(e.config, gpu).time_s * 1e3 * rng.uniform(0.8, 1.2)}
        for e in entries
    ]
    ds = build_dataset(entries, measured, {"device": "NVIDIA H200", "date": "2026-01-02"}, gpu)
    path = tmp_path / "validation-h200-test.json"
    path.write_text(json.dumps(ds))
    return path


def test_validate_resimulates_a_measured_dataset(tmp_path, capsys):
    seed = random.SystemRandom().randrange(2**31)
    src = _fake_dataset(tmp_path, seed)
    out = tmp_path / "again.json"
    assert main(["validate", "--measured", str(src), "--out", str(out)]) == 0
    old, new = json.loads(src.read_text()), json.loads(out.read_text())
    assert [r["measured_us"] for r in new["rows"]] == [r["measured_us"] for r in old["rows"]]
    assert new["device"] == "NVIDIA H200" and new["resimulated_from"] == str(src)
    assert "16 configurations on NVIDIA H200" in capsys.readouterr().err
    assert main(["validate", "--measured", str(src), "--out", str(out), "--only", "nope"]) == 2


def test_a_sweep_is_named_by_its_field_else_by_its_file():
    assert sweep_name(SWEEP) == "protocol"  # the papers' protocol, as the app calls it
    assert sweep_name(ROOT / "benchmarks" / "sweeps" / "validation-h200-routes.json") == "protocol"
    assert sweep_name(ROOT / "benchmarks" / "sweeps" / "users.json") == "users"
    assert sweep_name(ROOT / "benchmarks" / "sweeps" / "spills-causal.json") == "spills-causal"


def test_a_sweeps_own_name_wins(tmp_path):
    path = tmp_path / "validation.json"
    path.write_text(json.dumps({**json.loads(SWEEP.read_text()), "sweep": "mine"}))
    assert sweep_name(path) == "mine"
    with pytest.raises(ValueError, match="not a readable JSON"):
        sweep_name(tmp_path / "missing.json")


def _measure_with_the_engine(monkeypatch, seed: int) -> None:
    """Stand-ins for the GPU: CUDA is there, and each entry measures as the engine says ±20%."""
    rng = random.Random(seed)
    gpu = hardware.from_name("h100")

    def measure_sweep(entries, work, **kwargs):
        rows = []
        for e in entries:
            ms = simulate_config(e.config, gpu).time_s * 1e3 * rng.uniform(0.8, 1.2)
            rows.append({"id": e.id, "ms": ms})
        env = {"device": "NVIDIA H100 80GB HBM3", "date": "2026-01-02"}
        return {"rows": rows, "env": env, "ncu": {}}

    kernels = {"device": SimpleNamespace(has_cuda=lambda: True),
               "sweep": SimpleNamespace(measure_sweep=measure_sweep)}  # fmt: skip
    for name, module in kernels.items():
        monkeypatch.setitem(sys.modules, f"flashscope.kernels.{name}", module)


@pytest.mark.parametrize(
    ("name", "sweep", "key"),
    [("users.json", "users", "h100-sxm:users"), ("validation.json", "protocol", "h100-sxm")],
)
def test_validate_writes_the_sweep_it_measured(name, sweep, key, tmp_path, monkeypatch):
    """The dataset a measurement writes carries its sweep, so that it ships as it is: the app
    files it under that sweep (the users' beside the protocol's, not in its place)."""
    from flashscope.app.datasets import dataset_key, sweep_of

    seed = random.SystemRandom().randrange(2**31)
    _measure_with_the_engine(monkeypatch, seed)
    doc = json.loads((ROOT / "benchmarks" / "sweeps" / name).read_text())
    path = tmp_path / name  # a few of the sweep's entries, under its name
    path.write_text(json.dumps({**doc, "entries": doc["entries"][:4]}))
    out = tmp_path / "dataset.json"
    assert main(["validate", "--sweep", str(path), "--out", str(out), "--gpu", "h100"]) == 0, seed
    ds = json.loads(out.read_text())
    assert (ds["sweep"], ds["sweep_file"]) == (sweep, str(path))
    assert dataset_key(ds["gpu"], sweep_of(ds)) == key
    assert len(ds["rows"]) == 4 and all(r["simulated_us"] for r in ds["rows"])


def test_a_resimulated_dataset_keeps_its_sweep(tmp_path):
    seed = random.SystemRandom().randrange(2**31)
    src = _fake_dataset(tmp_path, seed)
    doc = json.loads(src.read_text())
    assert "sweep" not in doc  # the protocol's, as shipped
    out = tmp_path / "again.json"
    assert main(["validate", "--measured", str(src), "--out", str(out)]) == 0
    assert "sweep" not in json.loads(out.read_text())
    users = {"sweep": "users", "sweep_file": "benchmarks/sweeps/users.json"}
    src.write_text(json.dumps({**doc, **users}))
    assert main(["validate", "--measured", str(src), "--out", str(out)]) == 0
    again = json.loads(out.read_text())
    assert (again["sweep"], again["sweep_file"]) == (users["sweep"], users["sweep_file"])
    # measurements of one sweep re-read against the file of another: the file names it
    assert main(["validate", "--measured", str(src), "--sweep", str(SWEEP), "--out", str(out),
                 "--only", ",".join(r["id"] for r in doc["rows"])]) == 0  # fmt: skip
    assert json.loads(out.read_text())["sweep"] == "protocol"


def test_calibrate_refits_from_ceilings_and_a_dataset(tmp_path):
    seed = random.SystemRandom().randrange(2**31)
    data = _fake_dataset(tmp_path, seed)
    ceilings = tmp_path / "ceilings.json"
    ceilings.write_text(json.dumps({
        "format": 1, "gpu": "h200", "device": "NVIDIA H200", "date": "2026-01-02",
        "efficiency": {}, "measured": {"ceilings": {
            "matmul_fp16": {"tflops": 700.0}, "copy": {"gbs": 4200.0},
            "l2_read": {"gbs": 9000.0}, "exp": {"exps_per_s": 4.0e12},
            "launch": {"us_per_launch": 1.0}}}}))  # fmt: skip
    out = tmp_path / "calibration-h200.json"
    rc = main(["calibrate", "--ceilings", str(ceilings), "--measured", str(data),
               "--out", str(out), "--max-evals", "30"])  # fmt: skip
    assert rc == 0, seed
    doc = json.loads(out.read_text())
    assert doc["gpu"] == "h200" and doc["hardware"]["l2_gbs"] == 9000.0
    assert doc["efficiency"]["tensor"] == pytest.approx(700 / 989.4)
    fit = doc["fit"]
    assert fit["fit"]["n"] + fit["holdout"]["n"] == 16
    assert fit["fit"]["loss"] <= fit["fit"]["start_loss"] + 1e-12, seed
    assert fit["start"] == "preset defaults and ceilings"
    # the file is one the simulator accepts
    from flashscope.simulator.core.calibration import apply_calibration

    gpu = apply_calibration(hardware.PRESETS["h200"], tmp_path)
    assert gpu.l2_gbs == 9000.0 and gpu.efficiency.overlap == fit["values"]["overlap"]


def test_calibrate_may_start_its_search_from_another_calibration(tmp_path):
    seed = random.SystemRandom().randrange(2**31)
    data = _fake_dataset(tmp_path, seed)
    first = tmp_path / "first.json"
    args = ["calibrate", "--ceilings", str(CALIBRATION), "--measured", str(data),
            "--max-evals", "25"]  # fmt: skip
    assert main([*args, "--out", str(first)]) == 0, seed
    again = tmp_path / "again.json"
    assert main([*args, "--out", str(again), "--start", str(first)]) == 0, seed
    done, warm = json.loads(first.read_text())["fit"], json.loads(again.read_text())["fit"]
    # the second search starts where the first ended: its starting error is the first's result
    assert warm["fit"]["start_mape_pct"] == pytest.approx(done["fit"]["mape_pct"]), seed
    assert warm["fit"]["loss"] <= done["fit"]["loss"] + 1e-12, seed
    assert warm["start"] == str(first)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": 1, "gpu": "h200", "efficiency": {}}))
    assert main([*args, "--out", str(again), "--start", str(bad)]) == 2


def test_calibrate_fits_on_the_rows_of_several_datasets(tmp_path, capsys):
    seed = random.SystemRandom().randrange(2**31)
    doc = json.loads(_fake_dataset(tmp_path, seed).read_text())
    cut = random.Random(seed).randrange(1, len(doc["rows"]))
    parts = []
    for name, rows in (("a", doc["rows"][:cut]), ("b", doc["rows"][cut:])):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({**doc, "rows": rows}))
        parts.append(path)
    out = tmp_path / "both.json"
    args = ["calibrate", "--ceilings", str(CALIBRATION), "--max-evals", "20", "--out", str(out)]
    assert main([*args, "--measured", str(parts[0]), "--measured", str(parts[1])]) == 0, seed
    fit = json.loads(out.read_text())["fit"]
    assert fit["fit"]["n"] + fit["holdout"]["n"] == 16, seed
    assert fit["measured"] == [str(p) for p in parts]
    capsys.readouterr()
    # the same rows twice, or rows of another GPU, are refused in one line
    assert main([*args, "--measured", str(parts[0]), "--measured", str(parts[0])]) == 2
    assert "appears in two datasets" in capsys.readouterr().err
    other = tmp_path / "h100.json"
    other.write_text(json.dumps({**doc, "gpu": "h100-sxm", "rows": []}))
    assert main([*args, "--measured", str(parts[0]), "--measured", str(other)]) == 2
    assert "different GPUs" in capsys.readouterr().err


def test_calibrate_fits_the_power_cap_first_where_kernels_were_timed_alone(tmp_path, capsys):
    """Forward rows whose kernel Nsight Compute also timed alone: their slowdowns, made here by
    a known cap, are fitted before the rest, and the calibration carries the fitted cap."""
    from flashscope.simulator.calibrate.validation import workload_of
    from flashscope.simulator.timing.engine import clock_share

    seed = random.SystemRandom().randrange(2**31)
    doc = json.loads(_fake_dataset(tmp_path, seed).read_text())
    gpu = hardware.from_name("h200")
    # a cap well away from the shipped one the search starts from
    truth = hardware.custom(gpu, power_tflops=300.0, power_l2_tbs=6.0, power_exp=0.4).efficiency
    timed = 0
    for r in doc["rows"]:
        if r["config"]["algo"] != "fa2":
            continue
        (w,) = workload_of(r["config"], gpu).launches
        alone = r["measured_us"] * random.Random(seed + timed).uniform(0.8, 0.95)
        l2 = float(w.read_bytes.sum() + w.write_bytes.sum())
        r["measured_us"] = alone / clock_share(truth, float(w.flops.sum()), l2, alone * 1e-6)
        r["measured"]["ncu"] = {"kernels": [{"name": "_attn_fwd",
                                             "gpu__time_duration.sum": alone * 1e3}]}  # fmt: skip
        timed += 1
    data = tmp_path / "timed.json"
    data.write_text(json.dumps(doc))
    out = tmp_path / "calibration-h200.json"
    args = ["calibrate", "--ceilings", str(CALIBRATION), "--max-evals", "20", "--out", str(out)]
    assert main([*args, "--measured", str(data)]) == 0, seed
    fitted = json.loads(out.read_text())
    power = fitted["fit"]["power"]
    assert power["fit"]["n"] + power["holdout"]["n"] == timed >= 8, seed
    assert power["fit"]["start_loss"] > 0.1, seed  # the shipped cap explains little here
    assert power["fit"]["loss"] < 0.2 * power["fit"]["start_loss"], seed
    for name, value in power["values"].items():
        assert fitted["efficiency"][name] == value
    assert "power cap: sustained / alone off by" in capsys.readouterr().err
    # without single-launch times there is nothing to fit it on: said, and left out
    assert main([*args, "--measured", str(_fake_dataset(tmp_path, seed))]) == 0
    assert json.loads(out.read_text())["fit"]["power"] is None
    assert "power cap not fitted" in capsys.readouterr().err


def test_calibrate_keeps_the_start_files_values_of_fields_it_cannot_fit(tmp_path):
    """A dataset without atomic-route rows cannot fit the L2's reduce-adds: a refit started
    from a calibration that fitted (or carried) them keeps its values and says so."""
    seed = random.SystemRandom().randrange(2**31)
    rng = random.Random(seed)
    data = _fake_dataset(tmp_path, seed)
    assert not any(
        r["config"].get("route") == "atomic" for r in json.loads(data.read_text())["rows"]
    )
    start = json.loads(CALIBRATION.read_text())
    reduce = {"l2_reduce": rng.uniform(0.3, 0.9), "reduce_op_ns": rng.uniform(50.0, 400.0),
              "bulk_read_ns": rng.uniform(0.0, 900.0)}  # fmt: skip
    start["fit"]["values"].update(reduce)
    # the spills' L1 rate and the host's share are fitted on the users' sweep, not here: kept too
    users = ("local_gbs", "host_launch_us", "host_descriptor_us", "host_backward_us")
    kept = {**{k: start["fit"]["values"][k] for k in users}, **reduce}
    start_path = tmp_path / "start.json"
    start_path.write_text(json.dumps(start))
    args = ["calibrate", "--ceilings", str(CALIBRATION), "--measured", str(data),
            "--max-evals", "20"]  # fmt: skip
    first = tmp_path / "first.json"
    assert main([*args, "--out", str(first), "--start", str(start_path)]) == 0, seed
    doc = json.loads(first.read_text())
    carried = doc["fit"]["carried"]
    assert carried["fields"] == kept and carried["from"] == str(start_path), seed
    assert "l2_reduce" not in doc["fit"]["params"]
    for k, v in reduce.items():
        assert doc["efficiency"][k] == v, (k, seed)
    # refit again from that file: still kept, and where they first came from is still said
    again = tmp_path / "again.json"
    assert main([*args, "--out", str(again), "--start", str(first)]) == 0, seed
    doc = json.loads(again.read_text())
    assert doc["fit"]["carried"]["fields"] == kept, seed
    assert doc["fit"]["carried"]["first_from"] == str(start_path), seed
    assert doc["efficiency"]["l2_reduce"] == reduce["l2_reduce"], seed


@pytest.mark.parametrize("bad", ["-0.5", "11", "nan", "x"])
def test_calibrate_refuses_an_alone_weight_out_of_range(bad, tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["calibrate", "--alone-weight", bad, "--out", str(tmp_path / "c.json")])
    assert exc.value.code == 2
    assert "--alone-weight" in capsys.readouterr().err


def test_calibrate_records_the_weight_of_the_kernels_timed_alone(tmp_path):
    seed = random.SystemRandom().randrange(2**31)
    data = _fake_dataset(tmp_path, seed)
    args = ["calibrate", "--ceilings", str(CALIBRATION), "--measured", str(data),
            "--max-evals", "12"]  # fmt: skip
    for weight, want in ((None, 0.0), ("0.5", 0.5)):
        out = tmp_path / f"w{weight}.json"
        extra = ["--alone-weight", weight] if weight else []
        assert main([*args, *extra, "--out", str(out)]) == 0, seed
        assert json.loads(out.read_text())["fit"]["alone_weight"] == want


def _probe(tmp_path, l2_bytes: int, fraction: float, exponent: float, copies: float) -> Path:
    """A probe file whose hit shares follow known curves: one-reader lines at `fraction` of
    the L2, a scan of shared lines at `fraction / copies`."""
    rows = []
    for mib in range(8, 96, 2):
        s = mib * 2**20
        for order, cap in (("same", fraction), ("shuffled", fraction),
                           ("shared-twice", fraction / copies)):  # fmt: skip
            c = cap * l2_bytes
            hit = 1.0 if s <= c else (c / s) ** exponent
            rows.append({"mib": mib, "order": order, "bytes": s,
                         "second_miss_share": 1.0 - hit})  # fmt: skip
    path = tmp_path / "probe.json"
    path.write_text(json.dumps({"device": "NVIDIA H200", "date": "2026-01-02",
                                "l2_bytes": l2_bytes, "rows": rows}))  # fmt: skip
    return path


def test_calibrate_takes_the_l2_capacity_from_a_probe_and_the_fit_keeps_it(tmp_path, capsys):
    seed = random.SystemRandom().randrange(2**31)
    rng = random.Random(seed)
    fraction = round(rng.uniform(0.6, 0.9) / 0.0025) * 0.0025  # on the fit's grid
    shared = round(rng.uniform(fraction / 1.9, fraction) / 0.0025) * 0.0025  # copies ≤ 2
    l2 = hardware.PRESETS["h200"].l2_bytes
    probe = _probe(tmp_path, l2, fraction, 2.0 ** (rng.choice(range(8, 40)) / 8), fraction / shared)
    data = _fake_dataset(tmp_path, seed)
    start = json.loads(CALIBRATION.read_text())
    start["fit"]["values"].update(l2_reuse_fraction=0.99, l2_shared_copies=1.9)  # not kept
    start_path = tmp_path / "start.json"
    start_path.write_text(json.dumps(start))
    out = tmp_path / "c.json"
    args = ["calibrate", "--ceilings", str(CALIBRATION), "--measured", str(data),
            "--max-evals", "12", "--out", str(out), "--l2-probe", str(probe)]  # fmt: skip
    assert main([*args, "--start", str(start_path)]) == 0, seed
    doc = json.loads(out.read_text())
    eff, measured = doc["efficiency"], doc["measured"]["l2_probe"]
    assert eff["l2_reuse_fraction"] == pytest.approx(fraction, abs=1e-9), seed
    assert eff["l2_shared_copies"] == pytest.approx(fraction / shared, rel=1e-6), seed
    assert measured["fraction"] == eff["l2_reuse_fraction"] and measured["worst"] < 0.01, seed
    for name in ("l2_reuse_fraction", "l2_shared_copies"):
        assert name not in doc["fit"]["params"]
        assert name not in (doc["fit"].get("carried") or {}).get("fields", {})
    assert "L2 probe: usable capacity" in capsys.readouterr().err
    # a probe of another GPU's L2, or no probe at all, is refused in one line naming the flag
    other = _probe(tmp_path, hardware.PRESETS["h100-sxm"].l2_bytes, fraction, 8.0, 1.3)
    assert main([*args[:-1], str(other)]) == 2
    err = capsys.readouterr().err
    (line,) = [x for x in err.splitlines() if "error:" in x]
    assert "--l2-probe" in line and "B of L2" in line
    junk = tmp_path / "junk.json"
    junk.write_text(json.dumps({"l2_bytes": l2, "rows": [{"order": "same", "bytes": -1}]}))
    assert main([*args[:-1], str(junk)]) == 2
    assert "--l2-probe" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("doc", "flag"),
    [
        (None, "--ceilings/--measured/--start/--l2-probe"),  # no such file
        ([1, 2], "--ceilings/--measured/--start/--l2-probe"),
        ({"gpu": "h200", "measured": {}}, "--ceilings"),
        ({"measured": {"ceilings": {}}}, "--gpu"),  # no GPU named, none here to ask
        ({"gpu": "h200", "measured": {"ceilings": {"copy": {"gbs": -1.0}}}}, "ceilings"),
    ],
)
def test_calibrate_refuses_a_bad_ceilings_file_in_one_line_naming_the_flag(
    doc, flag, tmp_path, capsys
):
    path = tmp_path / "ceilings.json"
    if doc is not None:
        path.write_text(json.dumps(doc))
    out = tmp_path / "c.json"
    assert main(["calibrate", "--ceilings", str(path), "--no-fit", "--out", str(out)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"flashscope calibrate: error: {flag}: ") and not out.exists()


def test_calibrate_fits_the_spills_l1_rate_and_the_hosts_share_on_the_fit_half(tmp_path, capsys):
    """Rows of the shipped users' sweep (host-bound backwards, kernels that spill), their times
    made by a known L1 rate, host cost per descriptor the host makes and per backward:
    `--fit-terms host-and-local` finds them on the fit half (the launch term is the ceilings'
    eager launch), reports the held-out half's figures, and keeps --start's other values."""
    import dataclasses
    import gzip

    from flashscope.app.datasets import DATA_DIR
    from flashscope.simulator.calibrate.fitting import moves_local
    from flashscope.simulator.calibrate.known_misses import host_bound
    from flashscope.simulator.calibrate.validation import workload_of
    from flashscope.simulator.timing.engine import call_time_s, simulate_workload

    (path,) = DATA_DIR.glob("validation-users-h100-*.json.gz")
    users = json.loads(gzip.decompress(path.read_bytes()))
    gpu = hardware.from_name("h100-sxm")
    truth = dataclasses.replace(gpu, efficiency=dataclasses.replace(
        gpu.efficiency, local_gbs=150.0, host_descriptor_us=9.0,
        host_backward_us=250.0))  # fmt: skip
    seed = random.SystemRandom().randrange(2**31)
    rng = random.Random(seed)
    hosted = [r for r in users["rows"] if host_bound(r) and r["config"]["algo"] == "fa2-bwd"]
    spilling = [r for r in users["rows"]
                if not host_bound(r) and moves_local(workload_of(r["config"], gpu))]  # fmt: skip
    # rows whose time the L1 rate moves (a rate twice as fast saves ≥ 10%), so the fit half's four
    # determine it; a sample of rows the rate barely touches leaves it free
    faster = dataclasses.replace(truth, efficiency=dataclasses.replace(
        truth.efficiency, local_gbs=300.0))  # fmt: skip

    def call_us(r: dict, g) -> float:
        return call_time_s(simulate_workload(workload_of(r["config"], g), g)) * 1e6

    spilling = [r for r in spilling if call_us(r, faster) < 0.9 * call_us(r, truth)]
    # backwards of whole tiles (the host makes 11 descriptors) and of ragged lengths (none),
    # two of each kind in the fit half: together they tell the two host terms apart
    whole = [r for r in hosted if sum(w.host_descriptors for w in
                                      workload_of(r["config"], gpu).launches)]  # fmt: skip
    ragged = [r for r in hosted if r not in whole]
    w3, r3 = rng.sample(whole, 3), rng.sample(ragged, 3)
    rows = []
    for r in [w3[0], w3[1], r3[0], r3[1], w3[2], r3[2], *rng.sample(spilling, 8)]:
        rows.append({**r, "measured_us": call_us(r, truth)})
    for i, r in enumerate(rows):  # both halves hold both kinds
        r["subset"] = ("fit", "holdout")[i % 2]
    data = tmp_path / "users.json"
    data.write_text(json.dumps({**users, "rows": rows}))
    start = ROOT / "simulator" / "data" / "calibration-h100-sxm.json"
    out = tmp_path / "calibration-h100-sxm.json"
    args = ["calibrate", "--ceilings", str(start), "--start", str(start), "--measured",
            str(data), "--fit-terms", "host-and-local", "--out", str(out)]  # fmt: skip
    capsys.readouterr()
    assert main(args) == 0, seed
    err = capsys.readouterr().err
    assert "held out (7): time MAPE" in err, err
    doc = json.loads(out.read_text())
    fit = doc["fit"]
    values = fit["host_and_local"]["values"]
    assert values["host_launch_us"] == doc["measured"]["ceilings"]["launch_eager"]["us_per_launch"]
    assert values["host_backward_us"] == pytest.approx(250.0, abs=3.0), (seed, values)
    assert values["host_descriptor_us"] == pytest.approx(9.0, abs=0.5), (seed, values)
    assert values["local_gbs"] == pytest.approx(150.0, rel=0.1), (seed, values)
    assert doc["efficiency"]["host_backward_us"] == values["host_backward_us"]
    held = fit["host_and_local"]["holdout"]
    # (the file's other values differ a little from the calibrated preset's that made the times)
    assert held["n"] == 7 and held["after"]["mape_pct"] < 5.0, (seed, held)
    assert held["after"]["mape_pct"] < held["before"]["mape_pct"] / 2, (seed, held)
    # only these three were fitted: the structural values are --start's, carried
    assert set(fit["params"]) == {
        "local_gbs", "host_launch_us", "host_descriptor_us", "host_backward_us"}  # fmt: skip
    shipped = json.loads(start.read_text())["fit"]["values"]
    for k in ("overlap", "cta_setup_ns", "lockstep"):
        assert doc["efficiency"][k] == shipped[k], k
    assert {"overlap", "cta_setup_ns"} <= set(fit["carried"]["fields"])
    # and so is the L2's fitted bandwidth, which the fit ran with (not the ceilings' measured one)
    l2_gbs = doc["hardware"]["l2_gbs"]
    assert l2_gbs == shipped["l2_gbs"] != doc["measured"]["ceilings"]["l2_read"]["gbs"]
    assert fit["carried_hardware"]["fields"] == {"l2_gbs": shipped["l2_gbs"]}


def test_validate_compile_simulates_with_the_kernels_compiled_here(tmp_path, capsys):
    """A re-simulated row whose forward no table holds (a 2-warp 256×16 tile, d = 64, grouped
    heads) gets that kernel compiled for sm_90a here first and is simulated with its figures:
    the same as the engine with that cache, not the estimate's."""
    from flashscope.simulator.timing import compiled

    name = "validation-users-unseen-NVIDIA-H100-80GB-HBM3-2026-11-27.json"
    doc = json.loads((ROOT / "benchmarks" / "results" / name).read_text())
    (row,) = [r for r in doc["rows"] if r["id"].startswith("u001-")]
    src, out, cache = tmp_path / "one.json", tmp_path / "out.json", tmp_path / "kernels"
    src.write_text(json.dumps({**doc, "rows": [row]}))
    args = ["validate", "--measured", str(src), "--out", str(out), "--compile",
            "--compile-cache", str(cache), "--jobs", "1"]  # fmt: skip
    assert main(args) == 0
    got = json.loads(out.read_text())
    assert got["compiled_on_demand"]["states"] == {"done": 1}
    gpu = hardware.from_name("h100-sxm")
    with compiled.local_cache(cache):
        here = simulate_config(row["config"], gpu).time_s * 1e6
    estimate = simulate_config(row["config"], gpu).time_s * 1e6
    assert got["rows"][0]["simulated_us"] == pytest.approx(here)
    assert abs(here / estimate - 1) > 0.05
    assert main(args) == 0  # a second time: nothing left to compile
    assert json.loads(out.read_text())["compiled_on_demand"]["compiled"] == 0
    assert "compiling for sm_90a" in capsys.readouterr().err
