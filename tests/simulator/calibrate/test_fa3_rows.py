"""The FA-3 model beside the Hopper forward's measured rows and recorded timelines
(simulator/calibrate/fa3_rows.py, fa3_timelines.py): the split, the held-out error, the
variants' ranking and the phases' lengths, each recomputed from the committed data."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from flashscope.simulator.calibrate.fa3_rows import (
    all_rows,
    compare,
    config_of,
    full_entry,
    group,
    held_out,
    measured_rows,
    reproduced,
    result_paths,
    routed_ranking,
    variant_rows,
)
from flashscope.simulator.calibrate.fa3_timelines import compare_phases, recorded, unseen
from flashscope.simulator.core.problem import AttentionProblem
from flashscope.simulator.timing.fa3 import Fa3Config, simulate_fa3

RESULTS = Path(__file__).resolve().parents[3] / "benchmarks" / "results"
H100 = RESULTS / "hopper-forward-NVIDIA-H100-80GB-HBM3-2026-11-22.json"
TIMELINES = RESULTS / "warpgroups-timelines-NVIDIA-H100-80GB-HBM3-2026-11-26.json"
VARIANTS = RESULTS / "warpgroups-NVIDIA-H100-80GB-HBM3-2026-11-26.json"
RECORD = RESULTS / "fa3-model-2026-11-28.json"
BANDS = RESULTS / "hopper-forward-d64-causal-bands-NVIDIA-H200-2026-11-22.json"
SCHEDULED = RESULTS / "hopper-forward-causal-scheduled-NVIDIA-H200-2026-11-22.json"
# What the shipped terms reach (docs/timing-model.md); a change that worsens them fails here.
# The held-out error is held at the target on each GPU: 7.1% (H100 6.5%, H200 7.4%)
# since a program waits for O's last store and long launches end on a whole last wave.
HELD_OUT_MAPE = 0.08
# The ranking counts pairs within each run: 83 of 98 (85%) in the first H100 run of the variants,
# 168 of 203 (83%) with the second (2026-11-27) beside it, the model unchanged.
RANKING = 0.82
# On the pairs both H100 runs of the variants order the same way by more than 5%: 81 of 92.
REPRODUCED = 0.85
# As the kernel routes them (causal steps merged, variants-merged-*.json): 321 of 355 pairs per
# run, 120 of the 129 every run repeats; the merged rows, never fitted, at 5.3%.
ROUTED = 0.90
ROUTED_MERGED_MAPE = 0.08
# A steady block's softmax, S and P·V phases and the K/V copies, model against recorded.
PHASE_TOLERANCE = 0.5  # the plain loop's S is modelled 1.5 times its recorded length
LAUNCH_TOLERANCE = 0.06  # and the recorded launches' times (persistent ping-pong: +5.1%)
# One CTA per tile against persistent programs of the same tiles (benchmarks/cta_start.py),
# measured after the terms were fitted
CTA_START = RESULTS / "cta-start-NVIDIA-H100-80GB-HBM3-2026-11-27.json"


@pytest.fixture(scope="module")
def result():
    rows, pinned = all_rows(RESULTS)
    return compare(rows, pinned=pinned), pinned


def test_a_row_names_its_configuration():
    assert config_of("ws[2, 128, 2, 1, 1]") == Fa3Config(2, 128, 2, True, 1)
    assert config_of("ws[3, 128, 2, 1, 1, 1, 1, 8]") == Fa3Config(
        3, 128, 2, True, 1, pingpong=True, persistent=True, band=8
    )
    assert config_of("ws[2, 256, 2, 0, 1, 0, 1, 32]/whole") is None
    assert config_of("triton") is None
    # causal steps in one loop: a kernel the model does not tell from the two loops, left out
    assert config_of("ws[3, 128, 2, 0, 1, 0, 1, 8, 1]") is None
    assert config_of("ws[3, 128, 2, 0, 1, 0, 1, 8, 0]") == Fa3Config(
        3, 128, 2, False, 1, persistent=True, band=8
    )
    # the full list behind both: the left-out entries at their defaults
    assert full_entry("ws[3, 128, 2, 0, 1]") == (3, 128, 2, 0, 1, 0, 0, 1, 0)
    assert full_entry("ws[3, 128, 2, 0, 1, 0, 1, 8, 1]") == (3, 128, 2, 0, 1, 0, 1, 8, 1)
    assert full_entry("ws[3, 128, 2, 0, 1]/whole") is None
    with pytest.raises(ValueError, match="5 to 9 entries"):
        full_entry("ws[3, 128, 2, 0, 1, 0, 1, 8, 1, 0]")
    # asked for, it is its two-loop twin (benchmarks/fa3_unseen.py judges the forms apart)
    twin = config_of("ws[3, 128, 2, 0, 1, 0, 1, 8]")
    assert config_of("ws[3, 128, 2, 0, 1, 0, 1, 8, 1]", merged_as_plain=True) == twin
    assert config_of("ws[2, 64, 2, 1, 1, 0, 0, 16, 1]", merged_as_plain=True) == Fa3Config(
        2, 64, 2, True, 1, band=16
    )


def test_the_split_is_by_configuration_and_fixed(result):
    out, pinned = result
    sides: dict[str, set[bool]] = {}
    for r in out["rows"]:
        sides.setdefault(r["group"], set()).add(r["held_out"])
    assert all(len(s) == 1 for s in sides.values())
    assert out["groups"]["fit"] + out["groups"]["held_out"] >= 60
    assert out["groups"]["held_out"] >= 30
    assert pinned and not any(held_out(k, pinned) for k in pinned)
    # the draw depends only on the seed and the key
    assert [held_out(k) for k in sorted(sides)] == [held_out(k) for k in sorted(sides)]


def test_the_held_out_error_and_the_ranking_hold(result):
    out, _ = result
    assert out["mape_held_out"]["all"] <= HELD_OUT_MAPE
    assert out["mape_held_out"]["h100-sxm"] <= HELD_OUT_MAPE
    assert out["mape_held_out"]["h200"] <= HELD_OUT_MAPE
    assert out["ranking"]["pairs"] >= 60
    assert out["ranking"]["accuracy"] >= RANKING
    again = out["ranking"]["reproduced"]
    assert again["pairs"] >= 60 and again["accuracy"] >= REPRODUCED


def _variant(file: str, variant: str, ms: float, model_ms: float, gpu: str = "h100-sxm") -> dict:
    return {"variant": variant, "file": file, "ms": ms, "model_ms": model_ms, "gpu": gpu,
            "head_dim": 64, "seq_len": 1024, "batch": 4, "heads": 8, "causal": True,
            "dtype": "fp16"}  # fmt: skip


def test_only_pairs_every_run_repeats_are_judged_again():
    rows = [
        _variant("r1", "a", 1.0, 1.0), _variant("r2", "a", 1.0, 1.0),
        _variant("r1", "b", 1.2, 1.1), _variant("r2", "b", 1.25, 1.1),
        _variant("r1", "c", 1.1, 0.9), _variant("r2", "c", 1.01, 0.9),
        _variant("r1", "d", 1.0, 1.3), _variant("r2", "d", 1.0, 1.3),
        _variant("r1", "e", 1.3, 1.05), _variant("r2", "e", 1.3, 1.05),
        # one run only (another GPU): counted apart
        _variant("r3", "a", 1.0, 1.0, gpu="h200"), _variant("r3", "b", 1.5, 1.1, gpu="h200"),
    ]  # fmt: skip
    got = reproduced(rows)
    # apart by more than 5% in the same order in both runs: a–b, a–e, b–c, c–e (the model
    # agrees), b–d and d–e (it does not); a–c, b–e and c–d are apart in one run only; a and d
    # are level in both
    assert (got["pairs"], got["right"], got["noisy"], got["one_run"]) == (6, 4, 3, 1)
    assert {(w["faster"], w["slower"]) for w in got["wrong"]} == {("d", "b"), ("d", "e")}
    # runs that disagree in order are noisy, not judged
    flipped = [_variant("r1", "x", 1.0, 1.0), _variant("r1", "y", 1.2, 1.1),
               _variant("r2", "x", 1.2, 1.0), _variant("r2", "y", 1.0, 1.1)]  # fmt: skip
    assert reproduced(flipped)["pairs"] == 0 and reproduced(flipped)["noisy"] == 1


def test_the_variants_as_the_kernel_routes_them_rank_right(result):
    out, _ = result
    routed = routed_ranking(out["rows"], result_paths(RESULTS)["variants_merged"])
    assert routed["merged_rows"] >= 100
    assert routed["merged_mape"]["all"] <= ROUTED_MERGED_MAPE
    assert routed["pairs"] >= 300 and routed["accuracy"] >= ROUTED
    again = routed["reproduced"]
    assert again["pairs"] >= 100 and again["accuracy"] >= ROUTED
    # both GPUs' merged runs are in it, and no two-loop causal variant
    assert any("H200" in f for f in routed["sources"] if f.startswith("variants-merged"))
    assert any("H100" in f for f in routed["sources"] if f.startswith("variants-merged"))
    record = json.loads(RECORD.read_text())["ranking_routed"]
    assert (record["right"], record["pairs"]) == (routed["right"], routed["pairs"])


def test_the_routed_ranking_puts_merged_causal_rows_in_place_of_two_loop_ones(tmp_path):
    """Causal variants come from the merged file only; unmasked ones from the compared rows."""
    n = random.choice([1024, 2048, 4096])
    base = {"head_dim": 64, "seq": n, "batch": 16384 // n, "heads": 32, "causal": True,
            "dtype": "fp16"}  # fmt: skip
    configs = {"plain": [3, 128, 2, 0, 1, 0, 0, 1, 1], "pingpong": [3, 128, 2, 1, 1, 1, 0, 1, 1]}
    path = tmp_path / "variants-merged-TEST.json"

    def write(ms: dict[str, float]) -> list[dict]:
        variants = [{**base, "variant": k, "config": c, "ms": ms[k]} for k, c in configs.items()]
        path.write_text(json.dumps({"device": "NVIDIA H100 80GB HBM3", "variants": variants}))
        return compare(variant_rows([path], merged_as_plain=True))["rows"]

    model = {r["variant"]: r["model_ms"] for r in write(dict.fromkeys(configs, 1.0))}
    assert model["plain"] != model["pingpong"]
    # measured in the opposite order to the model's, 20% apart: one pair, ordered wrong
    fast, slow = sorted(model, key=model.get, reverse=True)
    write({fast: 1.0, slow: 1.2})
    unmasked = [{**_variant("r", v, ms, m), "causal": False} for v, ms, m in
                (("a", 1.0, 1.0), ("b", 1.5, 1.4))]  # fmt: skip
    two_loop = [_variant("r", "a", 1.0, 2.0), _variant("r", "b", 1.5, 1.0)]  # wrong, dropped
    got = routed_ranking(unmasked + two_loop, [path])
    assert (got["pairs"], got["right"], got["merged_rows"]) == (2, 1, 2)
    assert [(w["faster"], w["slower"]) for w in got["wrong"]] == [(fast, slow)]


def test_the_committed_record_is_the_models(result):
    """The record in benchmarks/results is what the shipped model gives on the committed rows."""
    out, _ = result
    record = json.loads(RECORD.read_text())
    assert record["count"] == out["count"]
    assert record["mape_held_out"]["all"] == pytest.approx(out["mape_held_out"]["all"], rel=1e-6)
    assert record["ranking"]["right"] == out["ranking"]["right"]


def test_a_cta_per_tile_costs_what_persistent_programs_save():
    """36 launches timed in pairs that differ only in `persistent` (d = 64 and 128, N = 1024-4096,
    causal and not): the model stays within 10% of each but three, causal at N = 1024 (three
    warpgroups 19% fast and 34% fast against a persistent launch whose passes lie 0.27 and
    0.38 ms apart; two persistent warpgroups of 256-key steps 12% slow), and charges the
    one-CTA-per-tile launch of each pair 0.7-1.6 us more per CTA than the persistent one,
    where 17 of the 18 pairs measured 0.7-2.6 us (the other is that three-warpgroup pair)."""
    data = json.loads(CTA_START.read_text())
    rows = data["rows"]
    assert len(rows) == 36
    off, extra = 0, []
    for one, pers in zip(rows[::2], rows[1::2], strict=True):
        assert one["config"][:6] == pers["config"][:6]
        assert (one["config"][6], pers["config"][6]) == (0, 1)
        model = []
        for r in (one, pers):
            p = AttentionProblem(seq_q=r["n"], head_dim=r["d"], batch=r["batch"], heads=r["heads"],
                                 causal=r["causal"])  # fmt: skip
            cfg = config_of("ws" + str(r["config"]))
            assert cfg is not None
            model.append(simulate_fa3(p, cfg, "h100-sxm").time_ns * 1e-6)
            measured = sorted(r["ms"])[1]
            off += abs(model[-1] / measured - 1) > 0.1
        extra.append((model[0] - model[1]) * 1e3 / (one["tiles"] / data["sms"]))
    assert off <= 3
    assert min(extra) > 0.7 and max(extra) < 1.7


def test_the_timelines_phases_are_near_the_recorded_ones():
    runs = recorded(TIMELINES)
    assert len(runs) == 9
    for cmp in compare_phases(runs):
        for phase in ("qk", "softmax", "pv", "load_k", "load_v"):
            m, s = cmp["measured"][phase], cmp["model"][phase]
            assert abs(s - m) <= PHASE_TOLERANCE * m, (cmp["variant"], phase, m, s)
        assert cmp["model_ms"] == pytest.approx(cmp["measured_ms"], rel=LAUNCH_TOLERANCE)


def test_timelines_recorded_after_the_fit_are_near_the_model():
    """The 15 launches each GPU recorded on 2026-11-27 (benchmarks/warpgroups.py, the variants'
    files), whose phases no term was fitted to: median errors per phase H100 / H200 S 26% / 31%
    (a product of 150-450 ns, near what the stamps resolve), softmax 15% / 10%, P·V 7% / 10%,
    K copies 10% / 8%, V copies 8% / 5%; the record carries the same."""
    later = sorted(RESULTS.glob("warpgroups-NVIDIA-*-2026-11-27.json"))
    got = unseen(later)
    for gpu in ("h100-sxm", "h200"):
        assert got[gpu]["launches"] == 15
        errors = got[gpu]["phase_median_error"]
        assert errors["qk"] <= 0.35, (gpu, errors)
        assert max(errors[p] for p in ("softmax", "pv", "load_k", "load_v")) <= 0.2, (gpu, errors)
    record = json.loads(RECORD.read_text())["timelines_unseen"]
    assert record["sources"] == [p.name for p in later]
    for gpu in ("h100-sxm", "h200"):
        assert record[gpu]["phase_median_error"] == pytest.approx(got[gpu]["phase_median_error"])


def test_a_masked_block_costs_the_softmax_what_the_timelines_record():
    """The causal timelines' last block (masked) records a softmax about a microsecond longer
    than a steady one at d = 128 (plain 699 → 1647 ns, ping-pong 850 → 1590): the model's
    masked step (`Fa3Terms.mask_ops`) gives it within a fifth, and at least 0.6 of the
    excess."""
    runs = [r for r in recorded(TIMELINES) if r["causal"]]
    assert len(runs) == 2
    for cmp in compare_phases(runs):
        m, s = cmp["measured"], cmp["model"]
        assert s["softmax_last"] == pytest.approx(m["softmax_last"], rel=0.2), cmp["variant"]
        excess = m["softmax_last"] - m["softmax"]
        assert excess > 500.0
        assert s["softmax_last"] - s["softmax"] > 0.6 * excess, cmp["variant"]


def _variants(head_dim: int, causal: bool) -> dict[int, dict[str, dict]]:
    """The variants timed side by side (warpgroups-*.json), by length, with the model's time."""
    rows = [
        r
        for r in variant_rows([VARIANTS])
        if r["head_dim"] == head_dim and r["causal"] == causal and r["dtype"] == "fp16"
    ]
    out = compare(rows)
    by_n: dict[int, dict[str, dict]] = {}
    for r in out["rows"]:
        by_n.setdefault(r["seq_len"], {})[r["variant"]] = r
    return by_n


@pytest.mark.parametrize("causal", [False, True])
def test_pingpong_ranks_ahead_of_the_plain_loop_where_measured(causal):
    """At d = 128 the ping-pong variants mostly measure 10–24% faster than the plain loop (one
    warpgroup's softmax under the other's products, the products one at a time): the model
    orders every pair that differs by more than 10% the same way."""
    pairs = 0
    for n, v in _variants(128, causal).items():
        for pp in ("pingpong", "persistent-pingpong"):
            fast, slow = v[pp], v["plain"]
            if slow["ms"] > 1.1 * fast["ms"]:
                pairs += 1
                assert slow["model_ms"] > fast["model_ms"], (n, pp)
    assert pairs >= 3


def test_the_model_stays_near_the_measured_h100_rows():
    rows = [r for r in measured_rows([H100]) if r["seq_len"] == 4096]
    assert len(rows) == 44 and {r["gpu"] for r in rows} == {"h100-sxm"}
    out = compare(rows)
    assert out["count"] == 44
    assert out["mape"]["all"] < 0.25
    for r in out["rows"]:
        assert r["model_ms"] > 0
        assert r["error"] == pytest.approx((r["model_ms"] - r["ms"]) / r["ms"])
        assert r["group"] == group(r)


def test_rows_measured_before_the_host_schedule_take_their_tiles_in_turn():
    """The bands file was measured with persistent causal programs taking their tiles in turn:
    three warpgroups in bands of one head measure 1.4-1.9x bands of 8 at N = 1024-4096 (132
    programs, 6, 11 or 22 tiles a head: each program meets one rank of every head). Modelled
    in turn, band 1 is within 25% of each of those rows and slower than band 8 by 1.2x at
    least; the same configuration measured with the host schedule is modelled with it."""
    bands = [r for r in measured_rows([BANDS]) if r["seq_len"] <= 4096]
    assert bands and all(not r["config"].scheduled and not r["config"].half_steps for r in bands)
    assert all(r["config"].scheduled for r in measured_rows([SCHEDULED]))
    pp = [r for r in bands if r["impl"].startswith("ws[3, 128, 2, 1, 1, 1, 1")]
    out = {(r["impl"], r["seq_len"], r["dtype"]): r for r in compare(pp)["rows"]}
    slow = 0
    for (impl, n, dtype), r in out.items():
        if impl != "ws[3, 128, 2, 1, 1, 1, 1]":
            continue
        eight = out[("ws[3, 128, 2, 1, 1, 1, 1, 8]", n, dtype)]
        assert r["ms"] > 1.4 * eight["ms"]
        assert abs(r["error"]) < 0.25, (n, dtype, r["error"])
        assert r["model_ms"] > 1.2 * eight["model_ms"], (n, dtype)
        slow += 1
    assert slow == 6


def test_the_fit_leaves_the_d256_rows_out(result):
    """The d = 256 rows stay an out-of-sample check: some lie on the fit side of the split, and
    the fit's loss is the same with them as without them."""
    from flashscope.simulator.calibrate.fa3_fit import loss
    from flashscope.simulator.timing.fa3 import TERMS

    rows, pinned = all_rows(RESULTS)
    d256 = [r for r in rows if r["head_dim"] == 256]
    # 60 at the protocol's lengths, 72 at N = 1000, 3000, 5000, 54 causal ones there in bands
    assert len(d256) == 186
    assert any(not held_out(group(r), pinned) for r in d256)
    others = [r for r in rows if r["head_dim"] != 256]
    assert loss(TERMS, rows, [], pinned) == loss(TERMS, others, [], pinned)
