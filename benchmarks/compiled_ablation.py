"""What the compiled-kernel tables are worth to the engine: a validation dataset re-simulated as
shipped and with both tables emptied (no GPU).

    python benchmarks/compiled_ablation.py DATASET [DATASET …] --out RESULT.json

The engine takes a kernel's registers, shared memory and spill traffic from
`simulator/data/compiled-kernels.json` (Nsight Compute's counts) and
`simulator/data/compiled-spills.json` (the compiler's, read without a GPU), for the kernel
configurations those tables hold: every kernel of the committed sweeps and the kernels'
candidate and tuned tiles. Any other configuration gets the estimate from its tiles
(`compiled.estimate`, `occupancy.register_demand`). A sweep whose kernels are all in the tables
is therefore judged with knowledge a new configuration does not have; this script measures how
much, by re-simulating each dataset's measurements twice: as shipped, and with every table
lookup answering "unknown". Per dataset and per (algo, tile set) it writes the time, DRAM and L2
errors of both. With `--extra-compiler FILE` (a table of more keys written by
`compile_spills.py --sweeps … --out FILE`) also a third: the shipped tables with those keys'
compiler figures added, what the engine would give if the compiler's figures were at hand for
every kernel it is asked about. With `--compile-here` also a fourth: the kernels no table
holds compiled on this machine by the installed Triton, as the server and `flashscope validate
--compile` do (simulator/timing/ondemand.py), into empty caches so the time it took (kept beside)
is a first compile's.

    python benchmarks/compiled_ablation.py DATASET … --extra-compiler FILE --out RESULT.json
    python benchmarks/compiled_ablation.py DATASET … --compile-here --out RESULT.json
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import io
import json
import os
import platform
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np

from benchmarks.hostinfo import cpu_model
from flashscope.app.cli.main import main as cli
from flashscope.simulator.calibrate.validation import error_stats
from flashscope.simulator.timing import compiled

TABLES = ("register_table", "table", "writeback_table", "compiler_registers", "compiler_table",
          "compiler_shared")  # fmt: skip


@contextlib.contextmanager
def _tables(tables: dict[str, dict[str, Any]]) -> Iterator[None]:
    """The table functions of `compiled` named in `tables` answering with those tables."""
    saved = {name: getattr(compiled, name) for name in tables}
    try:
        for name, table in tables.items():
            setattr(compiled, name, lambda path=None, table=table: table)
        yield
    finally:
        for name, fn in saved.items():
            setattr(compiled, name, fn)


def tables_off() -> contextlib.AbstractContextManager[None]:
    """Every compiled-kernel table empty: each kernel takes the estimate from its tiles."""
    return _tables({name: {} for name in TABLES})


def compiler_extra(path: Path) -> contextlib.AbstractContextManager[None]:
    """The compiler table with `path`'s keys added (the shipped entries kept where both hold a
    key)."""
    extra = json.loads(path.read_text())
    return _tables({
        "compiler_registers": {k: int(v) for k, v in extra["registers"].items()}
        | compiled.compiler_registers(),
        "compiler_shared": {k: int(v) for k, v in extra["shared"].items()}
        | compiled.compiler_shared(),
        "compiler_table": {
            k: compiled.LocalTraffic.from_entry(e) for k, e in extra["kernels"].items()
        }
        | compiled.compiler_table(),
    })  # fmt: skip


def resimulate(dataset: Path, extra: list[str] | None = None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.json"
        with contextlib.redirect_stderr(io.StringIO()):
            argv = ["validate", "--measured", str(dataset), "--out", str(out), *(extra or [])]
            code = cli(argv)
        if code != 0:
            raise SystemExit(f"{dataset}: flashscope validate exited with {code}")
        doc: dict[str, Any] = json.loads(out.read_text())
        return doc


def resimulated(doc: dict[str, Any]) -> dict[str, Any]:
    """A dataset held in memory (merged from others, say) re-simulated as `resimulate` does a
    file's, without the temporary file's name it went through."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "merged.json"
        src.write_text(json.dumps(doc))
        out = resimulate(src)
    out.pop("resimulated_from", None)
    return out


def report(doc: dict[str, Any], out: Path) -> None:
    """One line on a dataset written to `out`: its rows, time MAPE and share within 10%."""
    t = doc["summary"]["all"]["time"]
    print(f"{len(doc['rows'])} rows → {out}: time MAPE {t['mape_pct']:.1f}%, "
          f"{t['within_10pct']:.0%} within 10%")  # fmt: skip


def stats(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"rows": len(rows)}
    for name, sim, meas in (("time", "simulated_us", "measured_us"),
                            ("dram_bytes", "simulated_dram_bytes", "measured_dram_bytes"),
                            ("l2_bytes", "simulated_l2_bytes", "measured_l2_bytes")):  # fmt: skip
        out[name] = error_stats([r["id"] for r in rows], [r.get(meas) for r in rows],
                                [r.get(sim) for r in rows])  # fmt: skip
    return out


def groups(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    by: dict[str, list[dict[str, Any]]] = {"all": rows}
    for r in rows:
        by.setdefault(f"{r['config']['algo']}/{r['tiles']}", []).append(r)
    return {k: stats(v) for k, v in sorted(by.items())}


def compiled_here(dataset: Path) -> dict[str, Any]:
    """`dataset` re-simulated with its kernels that no table holds compiled on this machine by
    the installed Triton (`flashscope validate --compile`), into an empty cache and with an
    empty Triton cache, so the compile time is a first compile's."""
    with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as triton:
        saved = os.environ.get("TRITON_CACHE_DIR")
        os.environ["TRITON_CACHE_DIR"] = triton
        try:
            return resimulate(dataset, ["--compile", "--compile-cache", cache])
        finally:
            if saved is None:
                os.environ.pop("TRITON_CACHE_DIR", None)
            else:
                os.environ["TRITON_CACHE_DIR"] = saved


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("datasets", type=Path, nargs="+")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--extra-compiler", type=Path, help="compiler figures of more keys")
    ap.add_argument("--compile-here", action="store_true",
                    help="also compile the kernels no table holds here, and time it")  # fmt: skip
    args = ap.parse_args()
    result: dict[str, Any] = {
        "benchmark": "compiled-table ablation",
        "extra_compiler": str(args.extra_compiler) if args.extra_compiler else None,
        "triton": compiled.triton_version(),
        "date": dt.date.today().isoformat(),
        "cpu": cpu_model(),
        "versions": {"python": platform.python_version(), "numpy": np.__version__},
        "datasets": {},
    }
    for path in args.datasets:
        shipped = resimulate(path)
        with tables_off():
            off = resimulate(path)
        entry = {"device": shipped.get("device"), "date": shipped.get("date"),
                 "sweep": shipped.get("sweep"), "shipped": groups(shipped["rows"]),
                 "tables_off": groups(off["rows"])}  # fmt: skip
        if args.extra_compiler:
            with compiler_extra(args.extra_compiler):
                entry["compiler_extra"] = groups(resimulate(path)["rows"])
        if args.compile_here:
            here = compiled_here(path)
            entry["compiled_here"] = groups(here["rows"])
            entry["compiled_on_demand"] = here["compiled_on_demand"]
        result["datasets"][str(path)] = entry
        for mode in ("tables_off", "compiler_extra", "compiled_here"):
            if mode in entry:
                a, b = entry["shipped"]["all"], entry[mode]["all"]
                ta, tb = a["time"]["mape_pct"], b["time"]["mape_pct"]
                da, db = a["dram_bytes"]["mape_pct"], b["dram_bytes"]["mape_pct"]
                print(f"{path.name}: time MAPE {ta:.1f}% → {tb:.1f}% {mode}; "
                      f"DRAM {da:.1f}% → {db:.1f}%")  # fmt: skip
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
