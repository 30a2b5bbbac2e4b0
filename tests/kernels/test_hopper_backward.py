"""The warp-specialized Gluon backward on the CPU: its configurations, the reasons a call does not
qualify, the tuned table's routing, and the kernel compiled for sm_90a (Gluon has no interpreter:
its gradients are checked by the GPU tests, tests/kernels/test_gpu.py)."""

from __future__ import annotations

import json
import random

import pytest
import torch

from flashscope.kernels.backward import launch_backward
from flashscope.kernels.config import TUNED_FILE, gpu_table
from flashscope.kernels.forward import launch_forward
from flashscope.kernels.hopper_backward import (
    CANDIDATES,
    LOADER_REGS,
    REGS_PER_SM,
    SHARED_LIMIT,
    BwdConfig,
    supports,
    tuned,
    tuned_config,
)
from flashscope.kernels.reference import attention_backward
from flashscope.simulator.timing.kernelplan import SEQ_BUCKETS
from flashscope.simulator.timing.tuned_tables import LENT

from .conftest import compiled_apart

H100 = "NVIDIA H100 80GB HBM3"


@pytest.mark.parametrize(
    "bad", [{"consumers": 3}, {"block_m": 32}, {"stages": 4}, {"band": -1}, {"band": 257}]
)
def test_a_bad_configuration_is_refused_by_name(bad: dict) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        BwdConfig(**bad)


@pytest.mark.parametrize(
    ("d", "cfg"), [(d, c) for d, cs in CANDIDATES.items() for c in cs], ids=str
)
def test_the_candidates_fit_one_sms_registers_and_shared_memory(d: int, cfg: BwdConfig) -> None:
    launch, consumer = cfg.registers()
    warps = 4 * (cfg.consumers + 1)
    assert launch * 32 * warps <= REGS_PER_SM
    assert consumer * 128 * cfg.consumers + LOADER_REGS * 128 <= launch * 32 * warps
    # what the dK and dV accumulators of 64 keys need at d = 128 (at 256: half the columns each)
    assert consumer == 240
    assert cfg.shared_bytes(d) <= SHARED_LIMIT
    # at 256 two warpgroups share 64 keys (the head dimension split between them)
    assert cfg.keys(d) == (64 if d == 256 else 64 * cfg.consumers)


def test_a_call_that_does_not_qualify_says_why() -> None:
    cfg = BwdConfig()
    q = torch.zeros(1, 2, 128, 128)
    assert "fp16 or bf16" in supports(q, q, q, cfg)
    q = q.half()
    for d in (16, 32, 264, 512):
        odd = torch.zeros(1, 2, 128, d, dtype=torch.half)
        assert "head_dim of 33 to 256" in supports(odd, odd, odd, cfg)
    for d in (96, 192):  # run at 128 and 256: only the GPU is missing
        padded = torch.zeros(1, 2, 128, d, dtype=torch.half)
        assert "Hopper GPU" in supports(padded, padded, padded, cfg)
    wide = torch.zeros(1, 2, 128, 256, dtype=torch.half)
    for other in (BwdConfig(1, 64, 2), BwdConfig(2, 128, 2)):
        assert "2 consumers and 64-row query blocks" in supports(wide, wide, wide, other)
    assert "(B·H·N, d)" in supports(q.transpose(1, 2), q, q, cfg)
    assert "Hopper GPU" in supports(q, q, q, cfg)  # CPU tensors
    assert "shared memory" in supports(q, q, q, BwdConfig(2, 128, 3))  # 128 rows at d = 128


def test_every_tuned_entry_is_a_candidate_and_routes_by_length() -> None:
    table = json.loads(TUNED_FILE.read_text())["gpus"]
    for edge, section in ((False, "bwd-ws"), (True, "bwd-ws-edge")):
        entries = {g: t.get(section, {}) for g, t in table.items() if t.get(section)}
        assert entries, f"no GPU's table routes a backward to the Gluon kernel ({section})"
        for gpu, found in entries.items():
            for key, entry in found.items():
                mode, bits, d, mask, bucket = key.split("/")
                assert (mode, bits, mask in ("full", "causal")) == ("bwd", "16", True), key
                assert int(bucket.removeprefix("n")) in SEQ_BUCKETS, key
                assert BwdConfig(*entry) in CANDIDATES[int(d.removeprefix("d"))], key
                n = int(bucket.removeprefix("n"))
                got = tuned_config(gpu, int(d[1:]), mask == "causal", n - 3, edge)
                assert got == BwdConfig(*entry), key
    # a bucket the table leaves out stays on Triton (causal d = 128 at the shortest whole
    # lengths, say); lengths that fill no tile take that bucket's edge entry, else the whole
    # lengths' one
    assert tuned_config(H100, 128, True, 1024) is None
    assert tuned_config(H100, 128, True, 1000, edge=True) is not None
    whole = tuned_config(H100, 128, False, 2048)
    assert whole is not None and tuned_config(H100, 128, False, 2000, edge=True) == whole
    # a GPU the table does not name takes another's entries (simulator/timing/tuned_tables.py)
    donor = gpu_table("a GPU with no table")[LENT]["bwd/d64"]
    lent = tuned_config("a GPU with no table", 64, False, 16384)
    assert lent == tuned_config(donor, 64, False, 16384) is not None


def test_no_call_on_the_cpu_is_routed_to_the_gluon_kernel(seed: int) -> None:
    """On the CPU (the interpreter) the Triton backward runs whatever the table says."""
    q, k, v, do = (torch.randn(1, 2, 64, 64, dtype=torch.float16) for _ in range(4))
    assert tuned(q, k, v, False) is None
    o, lse = launch_forward(q, k, v, False, 0.125)
    got = launch_backward(q, k, v, o, lse, do, False, 0.125)
    for g, r in zip(got, attention_backward(q, k, v, do, False, 0.125), strict=True):
        assert torch.allclose(g.double(), r, atol=2e-2, rtol=2e-2), f"seed={seed}"


def test_the_kernel_compiles_for_hopper_with_its_products_in_flight() -> None:
    """Every candidate (one at random per head_dim, at lengths that fill no tile or not), causal
    and not, compiles for sm_90a with its five products as wgmma, dQ's share as copy-engine
    reductions (no per-element atomics), the shared memory `shared_bytes` counts, and no note
    from ptxas that it serialized the products (an accumulator read while in flight, or too few
    registers for products in flight)."""
    wanted = [[random.choice(cs).as_list(), d] for d, cs in CANDIDATES.items()]
    rows = compiled_apart("hopper_backward", wanted, *random.choice([(), ("--edges",)]))
    assert len(rows) == 2 * len(wanted)
    for row in rows:
        cfg = BwdConfig(*row["config"])
        what = f"{row['config']} d={row['head_dim']} causal={row['causal']}"
        assert row["serialized"] == [], f"{what}: {row['serialized']}"
        assert row["wgmma"] > 0 and row["reduces"] > 0 and row["atomics"] == 0, what
        need = cfg.shared_bytes(row["head_dim"])
        assert need <= row["shared"] <= need + 1024, f"{what}: {row['shared']} vs {need}"
