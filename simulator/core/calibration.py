"""Calibration files: measured efficiencies that overwrite a preset's defaults.

A file `simulator/data/calibration-<key>.json` (key as in `hardware.PRESETS`, e.g.
`calibration-h100-sxm.json`) holds one JSON object:

    {
      "format": 1,                          # this layout; anything else is refused
      "gpu": "h100-sxm",                    # must equal the preset key of the file name
      "device": "NVIDIA H100 80GB HBM3",    # what the measuring machine reported
      "date": "2026-11-21",
      "versions": {"torch": "…", "triton": "…", "cuda": "…"},
      "efficiency": {"tensor": 0.717, "hbm": 0.901, "launch_us": 2.1, …},
      "hardware": {"l2_gbs": 9800.0},       # optional: measured values of estimated fields
      "measured": {…},                      # free-form raw figures the fit came from
      "fit": {…}                            # optional: how the structural fields were fitted
    }

`efficiency` may name any subset of `hardware.Efficiency`'s fields; the rest keep the preset's
values. `hardware` may replace only the datasheet fields the presets estimate (`ESTIMATED_FIELDS`:
no vendor publishes them), with what the micro-benchmarks measured. Unknown names, wrong types or
out-of-range values raise ValueError (a bad calibration must never pass silently).
`efficiency_from_ceilings` turns the output of `flashscope.kernels.microbench.measure_all()` into
such a dict and `hardware_from_ceilings` the estimated fields; `flashscope calibrate`
(app/cli/calibrate.py) writes the file.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from flashscope.simulator.core.gpu import EFFICIENCY_FIELDS, GPU

DATA_DIR = Path(__file__).resolve().parents[1] / "data"
FORMAT = 1
ESTIMATED_FIELDS = ("l2_gbs",)


def calibration_path(key: str, data_dir: Path = DATA_DIR) -> Path:
    return data_dir / f"calibration-{key}.json"


def read_calibration(path: Path, key: str) -> dict[str, float]:
    """The efficiency overrides of one calibration file, checked."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a readable JSON file ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError(f'{path}: expected a JSON object with "format": {FORMAT}')
    if doc.get("gpu") != key:
        raise ValueError(f'{path}: "gpu" is {doc.get("gpu")!r}, expected {key!r}')
    eff = doc.get("efficiency")
    if not isinstance(eff, dict):
        raise ValueError(f'{path}: "efficiency" must be an object')
    unknown = sorted(set(eff) - set(EFFICIENCY_FIELDS))
    if unknown:
        raise ValueError(f"{path}: unknown efficiency fields {unknown}")
    return eff


def read_hardware(path: Path) -> dict[str, float]:
    """The measured replacements of estimated datasheet fields in a calibration file, checked."""
    doc = json.loads(path.read_text())
    hw = doc.get("hardware", {})
    if not isinstance(hw, dict):
        raise ValueError(f'{path}: "hardware" must be an object')
    unknown = sorted(set(hw) - set(ESTIMATED_FIELDS))
    if unknown:
        raise ValueError(f"{path}: hardware may set only {list(ESTIMATED_FIELDS)}, not {unknown}")
    return hw


def apply_calibration(gpu: GPU, data_dir: Path = DATA_DIR) -> GPU:
    """`gpu` with its calibration file applied; unchanged when there is no file."""
    path = calibration_path(gpu.key, data_dir)
    if not path.is_file():
        return gpu
    overrides: dict[str, Any] = read_calibration(path, gpu.key)
    hw: dict[str, Any] = read_hardware(path)
    try:
        eff = dataclasses.replace(gpu.efficiency, **overrides)
        return dataclasses.replace(gpu, efficiency=eff, **hw)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{path}: {exc}") from None


def hardware_from_ceilings(gpu: GPU, ceilings: dict[str, Any]) -> dict[str, float]:
    """Estimated datasheet fields the micro-benchmarks measured above the estimate (l2_gbs)."""
    out: dict[str, float] = {}
    if "l2_read" in ceilings and ceilings["l2_read"]["gbs"] > gpu.l2_gbs:
        out["l2_gbs"] = float(ceilings["l2_read"]["gbs"])
    return out


def document(
    gpu: GPU,
    efficiency: dict[str, float],
    *,
    device: str,
    date: str,
    versions: dict[str, Any],
    measured: dict[str, Any],
    hardware: dict[str, float] | None = None,
    fit: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A calibration file's content (checked by applying it to `gpu`)."""
    doc = {
        "format": FORMAT,
        "gpu": gpu.key,
        "device": device,
        "date": date,
        "versions": versions,
        "efficiency": efficiency,
        "hardware": hardware or {},
        "measured": measured,
    }
    if fit is not None:
        doc["fit"] = fit
    changes: dict[str, Any] = efficiency
    dataclasses.replace(gpu, efficiency=dataclasses.replace(gpu.efficiency, **changes))
    return doc


def efficiency_from_ceilings(gpu: GPU, ceilings: dict[str, Any]) -> dict[str, float]:
    """Efficiency fields from micro-benchmark ceilings
    (`flashscope.kernels.microbench.measure_all()`).

    Uses what is present: matmul_fp16.tflops → tensor, copy.gbs → hbm, l2_read.gbs → l2,
    exp.exps_per_s → sfu, launch.us_per_launch → launch_us. Fractions are capped at 1 (a
    measured rate above the datasheet peak means the clock ran above the preset's).
    """
    out: dict[str, float] = {}

    def frac(measured: float, peak: float) -> float:
        return min(1.0, float(measured) / peak)

    if "matmul_fp16" in ceilings:
        out["tensor"] = frac(ceilings["matmul_fp16"]["tflops"] * 1e12, gpu.tensor_flops("fp16"))
    if "copy" in ceilings:
        out["hbm"] = frac(ceilings["copy"]["gbs"] * 1e9, gpu.hbm_bytes_per_s)
    if "l2_read" in ceilings:
        out["l2"] = frac(ceilings["l2_read"]["gbs"], gpu.l2_gbs)
    if "exp" in ceilings:
        out["sfu"] = frac(ceilings["exp"]["exps_per_s"], gpu.sfu_exps)
    if "launch" in ceilings:
        out["launch_us"] = float(ceilings["launch"]["us_per_launch"])
    return out
