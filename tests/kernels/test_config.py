"""Which tile configuration a launch gets: tuned per GPU and per sequence-length bucket."""

from __future__ import annotations

import json
import random

import pytest
import torch

import kernels.launch as launch
from kernels.config import TUNED_FILE, KernelConfig, table_key


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
    for lo, hi in zip((0, *launch.SEQ_BUCKETS), launch.SEQ_BUCKETS, strict=False):
        n = random.randint(lo + 1, hi)
        got = launch.choose_config("fwd", torch.float16, d, causal, never, seq_len=n)
        assert got == KernelConfig.from_list(on_h200[f"{key}/n{hi}"]), (n, hi)
    beyond = random.randint(16385, 10**6)
    got = launch.choose_config("fwd", torch.bfloat16, d, causal, never, seq_len=beyond)
    assert got == KernelConfig.from_list(on_h200[f"{key}/n16384"])
    # Without a length (or for a mode tuned only once) the single entry is used.
    plain = launch.choose_config("fwd", torch.float16, d, causal, never)
    assert plain == KernelConfig.from_list(on_h200[key])


def test_a_mode_without_buckets_falls_back_to_its_single_entry(on_h200):
    key = table_key("bwd", 16, 128, True)
    got = launch.choose_config("bwd", torch.float16, 128, True, never, seq_len=3000)
    assert got == KernelConfig.from_list(on_h200[key])
