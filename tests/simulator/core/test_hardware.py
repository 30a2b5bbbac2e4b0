"""GPU presets, friendly names, custom GPUs and calibration files."""

from __future__ import annotations

import json

import pytest

from flashscope.simulator.core import hardware
from flashscope.simulator.core.calibration import (
    apply_calibration,
    efficiency_from_ceilings,
    read_calibration,
)
from flashscope.simulator.core.hardware import PRESETS, custom, from_name


def test_presets_are_sane():
    h100, pcie, h200 = PRESETS["h100-sxm"], PRESETS["h100-pcie"], PRESETS["h200"]
    a100, l40s, rtx = PRESETS["a100-80gb"], PRESETS["l40s"], PRESETS["rtx-4090"]
    assert h200.hbm_gbs > h100.hbm_gbs > pcie.hbm_gbs > a100.hbm_gbs * 0.9 > l40s.hbm_gbs
    assert h200.hbm_gb > h100.hbm_gb == a100.hbm_gb > l40s.hbm_gb > rtx.hbm_gb
    assert h100.sms == h200.sms == 132 and pcie.sms == 114 and a100.sms == 108
    assert h100.tensor_tflops > pcie.tensor_tflops > l40s.tensor_tflops > a100.tensor_tflops
    assert a100.tensor_tflops > rtx.tensor_tflops
    for gpu in PRESETS.values():
        assert gpu.smem_per_block_kib < gpu.smem_per_sm_kib <= 228, gpu.key
        assert 0 < gpu.efficiency.tensor <= 1 and 0 < gpu.efficiency.hbm <= 1, gpu.key
        # the tensor peak is per-SM work at the stated clock: 512 FLOP per clock (GeForce Ada
        # with fp32 accumulate) to 4,096 (Hopper)
        per_clk = gpu.tensor_tflops * 1e12 / (gpu.sms * gpu.clock_ghz * 1e9)
        assert 500 < per_clk < 4200, gpu.key
        assert gpu.l2_gbs > gpu.hbm_gbs, gpu.key
    # measured ceilings (shared/anchors) are the default efficiencies of H100 and H200
    assert h100.efficiency.tensor * h100.tensor_tflops == pytest.approx(710)
    assert h200.efficiency.hbm * h200.hbm_gbs == pytest.approx(4270)


@pytest.mark.parametrize(
    ("alias", "key"),
    [
        ("h100", "h100-sxm"),
        ("H100 SXM", "h100-sxm"),
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("h100_pcie", "h100-pcie"),
        ("H200", "h200"),
        ("a100", "a100-80gb"),
        ("L40S", "l40s"),
        ("4090", "rtx-4090"),
        ("RTX 4090", "rtx-4090"),
    ],
)
def test_friendly_names(alias, key):
    assert from_name(alias).key == key


def test_unknown_gpu_lists_the_choices():
    with pytest.raises(ValueError, match="h100-sxm, h100-pcie, h200"):
        from_name("v100")


def test_custom_changes_fields_and_validates():
    twice = custom("h100", smem_per_sm_kib=456, smem_per_block_kib=455, tensor=0.8)
    assert twice.smem_per_sm == 2 * from_name("h100").smem_per_sm
    assert twice.efficiency.tensor == 0.8 and twice.key == "h100-sxm+custom"
    more = custom("h200", sms=264)
    assert more.tensor_tflops == pytest.approx(2 * PRESETS["h200"].tensor_tflops)
    assert more.hbm_gbs == PRESETS["h200"].hbm_gbs  # DRAM is off-chip: unchanged
    for bad, match in [
        ({"smem": 1}, "unknown hardware field 'smem'"),
        ({"sms": 0}, "sms must be an integer"),
        ({"hbm_gbs": -1.0}, "hbm_gbs must be a finite number"),
        ({"tensor": 1.5}, "tensor must be a fraction"),
        ({"smem_per_block_kib": 300}, "cannot exceed smem_per_sm_kib"),
        ({"l2_gbs": float("nan")}, "l2_gbs must be a finite number"),
    ]:
        with pytest.raises(ValueError, match=match):
            custom("h100", **bad)


def _write(path, doc):
    path.write_text(json.dumps(doc))
    return path


def test_calibration_file_overrides_efficiencies(tmp_path):
    gpu = PRESETS["h200"]
    _write(
        tmp_path / "calibration-h200.json",
        {"format": 1, "gpu": "h200", "efficiency": {"tensor": 0.6, "launch_us": 1.5}},
    )
    got = apply_calibration(gpu, tmp_path)
    assert got.efficiency.tensor == 0.6 and got.launch_us == 1.5
    assert got.efficiency.hbm == gpu.efficiency.hbm
    assert apply_calibration(PRESETS["l40s"], tmp_path) is PRESETS["l40s"]  # no file: unchanged


@pytest.mark.parametrize(
    ("doc", "match"),
    [
        ({"format": 2, "gpu": "h200", "efficiency": {}}, "format"),
        ({"format": 1, "gpu": "h100-sxm", "efficiency": {}}, "expected 'h200'"),
        ({"format": 1, "gpu": "h200", "efficiency": {"tensr": 0.5}}, "unknown efficiency"),
        ({"format": 1, "gpu": "h200", "efficiency": {"tensor": 2.0}}, "tensor must be a fraction"),
    ],
)
def test_bad_calibration_files_are_refused(tmp_path, doc, match):
    _write(tmp_path / "calibration-h200.json", doc)
    with pytest.raises(ValueError, match=match):
        apply_calibration(PRESETS["h200"], tmp_path)
    with pytest.raises(ValueError, match="not a readable JSON"):
        read_calibration(tmp_path / "missing.json", "h200")


def test_efficiency_from_microbenchmark_ceilings():
    gpu = PRESETS["h100-sxm"]
    eff = efficiency_from_ceilings(
        gpu,
        {
            "matmul_fp16": {"tflops": 700.0},
            "copy": {"gbs": 3000.0},
            "l2_read": {"gbs": 6000.0},
            "exp": {"exps_per_s": gpu.sfu_exps * 1.2},
            "launch": {"us_per_launch": 2.0},
        },
    )
    assert eff["tensor"] == pytest.approx(700 / 989.4)
    assert eff["hbm"] == pytest.approx(3000 / 3350)
    assert eff["l2"] == pytest.approx(0.8)
    assert eff["sfu"] == 1.0  # capped: the clock ran above the preset's
    assert eff["launch_us"] == 2.0
    custom(gpu, **eff)  # a valid set of efficiencies


def test_specs_are_plain_values():
    specs = from_name("a100").specs()
    assert specs["sms"] == 108 and isinstance(specs["efficiency"], dict)
    json.dumps(specs)
    assert set(hardware.GPU_FIELDS) <= set(specs)


@pytest.mark.parametrize("key", sorted(PRESETS))
def test_a_dram_miss_never_returns_before_an_l2_hit(key):
    gpu = from_name(key)  # shipped calibrations included
    assert gpu.efficiency.dram_latency_ns >= gpu.efficiency.l2_latency_ns
    with pytest.raises(ValueError, match=r"dram_latency_ns \(.*\) must be ≥ l2_latency_ns"):
        custom(gpu, dram_latency_ns=gpu.efficiency.l2_latency_ns * 0.5)
