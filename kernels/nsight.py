"""DRAM and L2 bytes of each configuration's kernels, read with Nsight Compute (ncu).

ncu runs `python -m flashscope.kernels.ncu_target` with `--cache-control none --clock-control none`
and `--profile-from-start off`, so only the one marked call per configuration is profiled (never a
warm-up or compiling launch); the same launches sit inside the NVTX range "flashscope-profile". The
report is read back as CSV (`--page raw --print-units base`: bytes and nanoseconds) and its rows,
one per kernel in launch order, are handed back to the configurations in order, checked against the
kernel names each configuration launches.

Metrics: DRAM bytes read and written, L2 bytes (every request through the L2 tags) and the
kernel's duration are required; the L2 sectors requested by the SMs per operation (read, write,
reduction), registers and shared memory per CTA and the achieved occupancy are read too where
this ncu knows them (`ncu --query-metrics`).
"""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

REQUIRED = (
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "lts__t_bytes.sum",
    "gpu__time_duration.sum",
)
EXTRA = (
    "lts__t_sectors_srcunit_tex_op_read.sum",
    "lts__t_sectors_srcunit_tex_op_write.sum",
    "lts__t_sectors_srcunit_tex_op_red.sum",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
)
# A second, optional pass: where the L2's bytes go (SM side), spills, pipe utilization.
DIAGNOSTICS = (
    "l1tex__m_xbar2l1tex_read_bytes.sum",
    "l1tex__m_l1tex2xbar_write_bytes.sum",
    "l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum",
    "l1tex__t_bytes_pipe_lsu_mem_local_op_st.sum",
    "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "lts__t_sector_hit_rate.pct",
    "gpu__time_duration.sum",
)
# Launch statistics ncu reports with any metric (no extra pass): kept when present.
LAUNCH = (
    "launch__registers_per_thread",
    "launch__shared_mem_per_block_dynamic",
    "launch__shared_mem_per_block_static",
    "launch__occupancy_limit_registers",
    "launch__occupancy_limit_shared_mem",
    "launch__occupancy_limit_warps",
    "launch__waves_per_multiprocessor",
    "launch__grid_size",
    "launch__block_size",
)
SECTOR_BYTES = 32


def ncu_path() -> str | None:
    return shutil.which("ncu")


def available(ncu: str, wanted: tuple[str, ...] = REQUIRED + EXTRA) -> list[str]:
    """The metrics of `wanted` this ncu knows for the GPU here (all of them if it cannot tell)."""
    try:
        out = subprocess.run(
            [ncu, "--query-metrics"], capture_output=True, text=True, timeout=120
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return list(wanted)
    known = {line.split()[0] for line in out.splitlines() if line.strip()}
    if len(known) < 50:  # not a metric listing: keep everything and let ncu say
        return list(wanted)
    return [m for m in wanted if m.split(".")[0] in known]


def _number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def _raw_table(text: str) -> str | None:
    """The table of `ncu … --csv --page raw` output from its header on (None: no table)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if '"Kernel Name"' in line), None)
    return None if start is None else "\n".join(lines[start:])


def raw_csv_columns(text: str) -> list[str]:
    """The column names (metrics among them) of `ncu … --csv --page raw` output."""
    table = _raw_table(text)
    return [] if table is None else next(csv.reader(io.StringIO(table)))


def parse_raw_csv(text: str, metrics: list[str]) -> list[dict]:
    """Kernel rows of `ncu --import … --csv --page raw`: {"name", metric: value, …}."""
    table = _raw_table(text)
    if table is None:
        return []
    rows = []
    for rec in csv.DictReader(io.StringIO(table)):
        if _number(rec.get("ID", "")) is None:  # the units row
            continue
        row: dict = {"name": rec.get("Kernel Name", "")}
        for m in (*metrics, *LAUNCH):
            row[m] = _number(rec.get(m, "")) if m in rec else None
        rows.append(row)
    return rows


def assign(rows: list[dict], done: list[dict]) -> list[list[dict] | None]:
    """The kernel rows of each configuration of `done` (None where they cannot be matched)."""
    out: list[list[dict] | None] = []
    k = 0
    for entry in done:
        want = entry.get("kernels") or []
        if entry.get("error") or not want:
            out.append(None)
            continue
        got = rows[k : k + len(want)]
        ok = len(got) == len(want) and all(w in r["name"] for w, r in zip(want, got, strict=True))
        out.append(got if ok else None)
        if ok:
            k += len(want)
        else:  # resynchronize on the next configuration's first kernel
            nxt = k + 1
            while (
                nxt < len(rows)
                and "_bwd_preprocess" not in rows[nxt]["name"]
                and ("_attn_fwd" not in rows[nxt]["name"])
            ):
                nxt += 1
            k = nxt
    return out


def totals(kernels: list[dict]) -> dict:
    """Bytes of one configuration: DRAM read + write, L2 (all requests, and the SMs' own)."""

    def total(metric: str) -> float | None:
        values = [r.get(metric) for r in kernels]
        return None if any(v is None for v in values) else float(sum(values))  # type: ignore[arg-type]

    out = {
        "dram_read_bytes": total("dram__bytes_read.sum"),
        "dram_write_bytes": total("dram__bytes_write.sum"),
        "l2_bytes_all": total("lts__t_bytes.sum"),
        "duration_ns": total("gpu__time_duration.sum"),
    }
    out["dram_bytes"] = (
        None
        if out["dram_read_bytes"] is None or out["dram_write_bytes"] is None
        else out["dram_read_bytes"] + out["dram_write_bytes"]
    )
    sectors = [total(f"lts__t_sectors_srcunit_tex_op_{op}.sum") for op in ("read", "write", "red")]
    known = [s for s in sectors if s is not None]
    out["l2_bytes_sm"] = SECTOR_BYTES * sum(known) if len(known) == len(sectors) else None
    return out


def _passes(log: str) -> int | None:
    found = [int(x) for x in re.findall(r"(\d+) pass(?:es)?", log)]
    return max(found) if found else None


def profile(
    configs: list[dict],
    workdir: Path,
    timeout_s: float,
    ncu: str | None = None,
    wanted: tuple[str, ...] = REQUIRED + EXTRA,
    tag: str = "ncu",
) -> dict:
    """Profile one call of each configuration; per configuration its kernels and byte totals.

    `wanted`: the metrics to read (those this ncu knows); `tag` names the files in `workdir`.
    """
    ncu = ncu or ncu_path()
    if ncu is None:
        return {"error": "ncu is not on PATH", "results": [None] * len(configs)}
    workdir.mkdir(parents=True, exist_ok=True)
    metrics = available(ncu, wanted)
    cfg_path, done_path = workdir / f"{tag}-configs.json", workdir / f"{tag}-done.json"
    cfg_path.write_text(json.dumps(configs))
    report, log_path = workdir / f"{tag}-report", workdir / f"{tag}.log"
    base = [ncu, "--profile-from-start", "off", "--cache-control", "none", "--clock-control",
            "none", "--metrics", ",".join(metrics), "--export", str(report), "--force-overwrite",
            "--log-file", str(log_path)]  # fmt: skip
    target = [sys.executable, "-m", "flashscope.kernels.ncu_target", str(cfg_path), str(done_path)]
    attempts = [[base[0], "--nvtx", "--nvtx-include", "flashscope-profile/", *base[1:]], base]
    info: dict = {"metrics": metrics, "attempts": []}
    rows: list[dict] = []
    deadline = time.monotonic() + timeout_s
    for cmd in attempts:
        left = deadline - time.monotonic()
        if left < 30:
            break
        t0 = time.monotonic()
        try:
            proc = subprocess.run(cmd + target, capture_output=True, text=True, timeout=left)
            status: int | str = proc.returncode
        except subprocess.TimeoutExpired:
            status = "timeout"
        attempt = {"nvtx": "--nvtx" in cmd, "status": status, "s": time.monotonic() - t0}
        rep = report.with_suffix(".ncu-rep")
        if rep.is_file():
            imp = subprocess.run(
                [ncu, "--import", str(rep), "--csv", "--page", "raw", "--print-units", "base"],
                capture_output=True, text=True, timeout=300,
            )  # fmt: skip
            (workdir / f"{tag}-raw.csv").write_text(imp.stdout)
            rows = parse_raw_csv(imp.stdout, metrics)
        attempt["kernels"] = len(rows)
        info["attempts"].append(attempt)
        if rows:
            break
    log = log_path.read_text(errors="replace") if log_path.is_file() else ""
    info["passes"] = _passes(log)
    done = json.loads(done_path.read_text()) if done_path.is_file() else []
    matched = assign(rows, done)
    results: list[dict | None] = [None] * len(configs)
    for entry, kern in zip(done, matched, strict=True):
        if kern is not None:
            results[entry["index"]] = {"kernels": kern, **totals(kern)}
        elif entry.get("error"):
            results[entry["index"]] = {"error": entry["error"]}
    info["results"] = results
    return info
