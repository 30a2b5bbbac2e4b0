"""Which tile configuration a launch gets: tuned per GPU and per sequence-length bucket."""

from __future__ import annotations

import json
import random

import pytest
import torch

import flashscope.kernels.launch as launch
from flashscope.kernels.config import TUNED_FILE, KernelConfig, table_key
from flashscope.simulator.timing.kernelplan import SEQ_BUCKETS


@pytest.fixture
def on_h200(monkeypatch):
    """choose_config as it runs on the H200 of kernels/tuned.json (no GPU needed to look up)."""
    monkeypatch.setattr(launch, "interpreting", lambda: False)
    monkeypatch.setattr(launch, "gpu_name", lambda: "NVIDIA H200")
    return json.loads(TUNED_FILE.read_text())["gpus"]["NVIDIA H200"]["configs"]


def never(_cfg):
    raise AssertionError("a tuned entry exists: nothing should be autotuned")


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d", [64, 128])
def test_a_sequence_length_takes_the_smallest_bucket_that_holds_it(on_h200, d, causal):
    key = table_key("fwd", 16, d, causal)
    for lo, hi in zip((0, *SEQ_BUCKETS), SEQ_BUCKETS, strict=False):
        n = random.randint(lo + 1, hi)
        got = launch.choose_config("fwd", torch.float16, d, causal, never, seq_len=n)
        assert got == KernelConfig.from_list(on_h200[f"{key}/n{hi}"]), (n, hi)
    beyond = random.randint(16385, 10**6)
    got = launch.choose_config("fwd", torch.bfloat16, d, causal, never, seq_len=beyond)
    assert got == KernelConfig.from_list(on_h200[f"{key}/n16384"])
    # Without a length (or for a mode tuned only once) the single entry is used.
    plain = launch.choose_config("fwd", torch.float16, d, causal, never)
    assert plain == KernelConfig.from_list(on_h200[key])


def test_a_bucket_without_an_entry_falls_back_to_the_single_entry(on_h200):
    key = table_key("bwd-atomic", 16, 128, True)
    assert f"{key}/n4096" not in on_h200  # the atomic route won no bucket there
    got = launch.choose_config("bwd-atomic", torch.float16, 128, True, never, seq_len=3000)
    assert got == KernelConfig.from_list(on_h200[key])


@pytest.mark.parametrize("mode", ["bwd", "bwd-dq"])
def test_backward_tiles_follow_the_sequence_length_bucket(on_h200, mode):
    for d in (64, 128):
        for causal in (False, True):
            key = table_key(mode, 16, d, causal)
            for lo, hi in zip((0, *SEQ_BUCKETS), SEQ_BUCKETS, strict=False):
                if f"{key}/n{hi}" not in on_h200:  # that bucket chose the atomic route
                    continue
                n = random.randint(lo + 1, hi)
                got = launch.choose_config(mode, torch.float16, d, causal, never, seq_len=n)
                assert got == KernelConfig.from_list(on_h200[f"{key}/n{hi}"]), (key, n)


def test_the_dq_route_follows_the_sequence_length_bucket(on_h200, monkeypatch):
    import flashscope.kernels.backward as backward

    monkeypatch.setattr(backward, "interpreting", lambda: False)
    monkeypatch.setattr(backward, "gpu_name", lambda: "NVIDIA H200")
    routes = json.loads(TUNED_FILE.read_text())["gpus"]["NVIDIA H200"]["routes"]
    seen = set()
    for d in (64, 128):
        for causal in (False, True):
            key = table_key("bwd-route", 16, d, causal)
            for lo, hi in zip((0, *SEQ_BUCKETS), SEQ_BUCKETS, strict=False):
                n = random.randint(lo + 1, hi)
                got = backward.default_dq_mode(torch.bfloat16, d, causal, n)
                assert got == routes[f"{key}/n{hi}"], (key, n)
                seen.add(got)
            # without a length: the route tuned at one length
            assert backward.default_dq_mode(torch.float16, d, causal) == routes[key]
    assert seen == {"separate", "atomic"}  # the table has both, so the lookup is not constant
    # fp32 inputs were never tuned: the separate route
    assert backward.default_dq_mode(torch.float32, 64, False, 2048) == "separate"


def test_a_sweep_merges_its_choices_into_the_table(tmp_path, monkeypatch):
    import flashscope.kernels.config as config

    path = tmp_path / "tuned.json"
    path.write_text(TUNED_FILE.read_text())
    monkeypatch.setattr(config, "TUNED_FILE", path)
    config.tuned_table.cache_clear()
    before = json.loads(path.read_text())["gpus"]["NVIDIA H200"]
    bm = random.choice([32, 64, 128])
    chosen = {"bwd/16/d64/full/n2048": [bm, 64, 4, 3, 0], "bwd-route/16/d64/full/n2048": "atomic"}
    config.merge_tuned("NVIDIA H200", chosen)
    config.merge_tuned("Some GPU", {"fwd/16/d64/full": [64, 64, 4, 2, 0]})
    after = json.loads(path.read_text())["gpus"]
    h200 = after["NVIDIA H200"]
    assert h200["configs"] == {**before["configs"], "bwd/16/d64/full/n2048": [bm, 64, 4, 3, 0]}
    assert h200["routes"] == {**before["routes"], "bwd-route/16/d64/full/n2048": "atomic"}
    assert after["Some GPU"] == {"configs": {"fwd/16/d64/full": [64, 64, 4, 2, 0]}}
    # the lookups see the new entries at once
    assert config.lookup("NVIDIA H200", "bwd/16/d64/full/n2048") == KernelConfig(bm, 64, 4, 3)
    assert config.route("NVIDIA H200", "bwd-route/16/d64/full/n2048") == "atomic"
    # a Gluon configuration is added, then removed again (None) when its bucket goes to Triton
    ws = [3, 128, random.choice([2, 3]), 1, 1, 1]
    config.merge_tuned("NVIDIA H200", {"ws/fwd/16/d64/full/n512": ws})
    assert config.tuned_entry("NVIDIA H200", "ws", ["fwd/16/d64/full/n512"]) == ws
    config.merge_tuned("NVIDIA H200", {"ws/fwd/16/d64/full/n512": None})
    assert config.tuned_entry("NVIDIA H200", "ws", ["fwd/16/d64/full/n512"]) is None
    assert json.loads(path.read_text())["gpus"]["NVIDIA H200"]["ws"] == before["ws"]
    # an edge entry goes to its own section, looked up first for lengths that fill no tile
    config.merge_tuned("NVIDIA H200", {"ws-edge/fwd/16/d64/full/n1024": ws})
    keys = ["fwd/16/d64/full/n1024"]
    assert config.tuned_entry("NVIDIA H200", "ws", keys, edge=True) == ws
    assert config.tuned_entry("NVIDIA H200", "ws", keys) == before["ws"].get(keys[0])
    config.merge_tuned("NVIDIA H200", {"ws-edge/fwd/16/d64/full/n1024": None})
    after_edge = json.loads(path.read_text())["gpus"]["NVIDIA H200"].get("ws-edge", {})
    assert after_edge == before.get("ws-edge", {})
    monkeypatch.undo()
    config.tuned_table.cache_clear()


def test_a_register_cap_round_trips_through_the_table_format():
    capped = KernelConfig(128, 64, 8, 2, False, 128)
    assert capped.as_list() == [128, 64, 8, 2, 0, 128]
    assert KernelConfig.from_list(capped.as_list()) == capped
    assert capped.launch_options() == {"num_warps": 8, "num_stages": 2, "maxnreg": 128}
    plain = KernelConfig(128, 64, 8, 2)
    assert plain.as_list() == [128, 64, 8, 2, 0]  # five entries: older tables stay valid
    assert KernelConfig.from_list([128, 64, 8, 2, 0]) == plain
    assert "maxnreg" not in plain.launch_options()


@pytest.mark.parametrize("cap", [16, 100, 256, True, 128.0])
def test_a_register_cap_outside_the_hardware_range_is_refused(cap):
    with pytest.raises(ValueError, match="maxnreg must be a multiple of 8"):
        KernelConfig(128, 64, 8, 2, False, cap)
