"""Kernels compiled on demand (simulator/timing/ondemand.py): a key names the binary it stands
for, the engine takes a cached compile after the shipped tables and before the estimate, and a
real compile for sm_90a on this CPU gives what the shipped compiler table says of the same
binary."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.timing import compiled, kernelplan, ondemand


def _random_problem(rng: random.Random) -> tuple[AttentionProblem, TileConfig]:
    d = rng.choice([32, 64, 80, 96, 128, 192, 256])
    heads = rng.choice([1, 4, 6, 8, 32])
    kv = rng.choice([h for h in (1, 2, heads) if heads % h == 0])
    n = rng.choice([128, 333, 1000, 2048, 4097])
    p = AttentionProblem(seq_q=n, seq_k=rng.choice([n, n + 13, 512]), head_dim=d, batch=1,
                         heads=heads, kv_heads=kv, causal=rng.random() < 0.5,
                         dtype=rng.choice(["fp16", "bf16"]))  # fmt: skip
    t = TileConfig(rng.choice([16, 32, 64, 128]), rng.choice([16, 32, 64, 128]),
                   rng.choice([2, 3, 4]), rng.choice([2, 4, 8]),
                   rng.choice([None, None, 128]))  # fmt: skip
    return p, t


def test_a_key_names_the_binary_it_stands_for() -> None:
    rng = random.Random()
    seen = 0
    for _ in range(60):
        p, t = _random_problem(rng)
        for algo, route in (("fa2", None), ("fa2-bwd", "separate"), ("fa2-bwd", "atomic")):
            for k in kernelplan.compiled_keys(algo, p, t, route=route):
                rep = ondemand.parse_key(k)
                assert ondemand.engine_key(rep) == k
                assert rep.dtype == "fp16" and rep.heads == ondemand.REPRESENTATIVE_HEADS
                assert (rep.seq_q % 16 != 0) == ("/ragged" in k)
                assert (rep.kv_heads < rep.heads) == ("/gqa" in k)
                seen += 1
    assert seen >= 180
    for bad in ("fwd/d64", "fwd/d80p256/64x64/w4/s2/full", "xyz/d64/64x64/w4/s2/full", ""):
        with pytest.raises(ValueError, match="not a compiled-kernel key"):
            ondemand.parse_key(bad)


def test_compiled_keys_are_the_keys_build_gives_its_launches() -> None:
    rng = random.Random()
    for _ in range(30):
        p, t = _random_problem(rng)
        for algo, route in (("fa2", None), ("fa2-bwd", None), ("fa2-bwd", "atomic")):
            try:
                w = kernelplan.build(algo, p, t, gpu_key="h200", route=route)
            except ValueError:  # a route the problem does not take
                continue
            got = sorted(x.compiled_key for x in w.launches if x.compiled_key)
            assert got == sorted(kernelplan.compiled_keys(algo, p, t, gpu_key="h200", route=route))


def _unknown_key() -> str:
    """A forward key no shipped table holds (a spread tile at a padded head dim)."""
    p = AttentionProblem(seq_q=1000, head_dim=80, batch=1, heads=3, causal=True, dtype="fp16")
    for bm, bn, w, s in ((128, 16, 2, 4), (16, 128, 8, 4), (256, 32, 2, 3), (32, 256, 2, 4)):
        k = compiled.key("fa2", p, TileConfig(bm, bn, s, w))
        if compiled.source(k) == "estimate":
            return k
    raise AssertionError("every candidate key is in a shipped table")


def test_a_cached_compile_comes_after_the_tables_and_before_the_estimate(tmp_path: Path) -> None:
    k = _unknown_key()
    regs = random.randint(40, 250)
    entry = {"load_step": 8.0, "load_cta": 32.0, "store_step": 4.0, "store_cta": 16.0,
             "load_head": 0.0, "store_head": 0.0, "stack": 48}  # fmt: skip
    doc = {"format": compiled.FORMAT, "key": k, "registers": regs, "shared": 12345,
           "kernel": entry}  # fmt: skip
    path = compiled.cache_file(tmp_path, k)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(doc))
    assert compiled.source(k) == "estimate" and compiled.registers(k) is None  # no cache in use
    with compiled.local_cache(tmp_path):
        assert compiled.source(k) == "local" and compiled.local_state(k) == "done"
        assert compiled.registers(k) == regs and compiled.shared(k) == 12345
        traffic = compiled.lookup(k)
        assert traffic is not None and (traffic.load_step, traffic.stack) == (8.0, 48)
        assert not compiled.wants_compile(k)
        assert compiled.source(k, "a100") == "estimate"  # another architecture: never
        # a measured key keeps Nsight Compute's figures whatever the cache says
        measured = next(iter(compiled.register_table()))
        other = compiled.cache_file(tmp_path, measured)
        other.write_text(json.dumps({**doc, "key": measured, "registers": 1}))
        assert compiled.source(measured) == "measured"
        assert compiled.registers(measured) == compiled.register_table()[measured]
    # the engine takes it: registers and spills of the kernel it simulates
    p = AttentionProblem(seq_q=1000, head_dim=80, batch=1, heads=3, causal=True, dtype="fp16")
    bm, bn = (int(x) for x in k.split("/")[2].split("x"))
    w, s = int(k.split("/")[3][1:]), int(k.split("/")[4][1:])
    t = TileConfig(bm, bn, s, w)
    with compiled.local_cache(tmp_path):
        (launch,) = kernelplan.build("fa2", p, t).launches
    assert (launch.compiled_key, launch.compiled_source, launch.regs) == (k, "local", regs)
    assert launch.local_load.sum() > 0
    (plain,) = kernelplan.build("fa2", p, t).launches
    assert plain.compiled_source == "estimate" and plain.regs is None


def test_a_refused_compile_keeps_the_estimate(tmp_path: Path) -> None:
    k = _unknown_key()
    path = compiled.cache_file(tmp_path, k)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"format": compiled.FORMAT, "key": k, "error": "OutOfResources"}))
    with compiled.local_cache(tmp_path):
        assert compiled.local_state(k) == "failed"
        assert compiled.source(k) == "estimate" and compiled.registers(k) is None


def test_a_compile_on_this_cpu_agrees_with_the_shipped_compiler_table(tmp_path: Path) -> None:
    # a key of the shipped compiler table (compiled there by the Triton the GPUs ran) and one
    # that no table holds, compiled here by the installed Triton in a process of their own
    shipped = sorted(k for k in compiled.compiler_shared() if k.startswith("fwd/d64/"))[0]
    new = _unknown_key()
    states = ondemand.compile_keys([shipped, new], tmp_path, timeout_s=600)
    assert states == {shipped: "done", new: "done"}
    with compiled.local_cache(tmp_path):
        for k in (shipped, new):
            doc = compiled.local_entry(k)
            assert doc is not None and doc["triton"] == compiled.triton_version()
            assert 24 <= doc["registers"] <= 255 and doc["shared"] > 0
        # the shared memory a binary asks for is the same under both Triton versions
        assert compiled.local_entry(shipped)["shared"] == compiled.compiler_shared()[shipped]
        assert compiled.source(new) == "local"
    # a key it cannot read is answered at once, as failed, and nothing else is touched
    assert ondemand.compile_keys(["fwd/d64"], tmp_path, timeout_s=600) == {"fwd/d64": "failed"}


def test_a_datasets_kernel_keys_are_those_of_its_workload() -> None:
    """validation.kernel_keys (what is compiled before a dataset is re-simulated) names the
    Triton kernels workload_of builds, backward routes included, on either GPU."""
    from flashscope.simulator.calibrate.validation import kernel_keys, workload_of
    from flashscope.simulator.core import hardware

    name = "validation-users-NVIDIA-H100-80GB-HBM3-2026-11-26-resimulated.json"
    rows = json.loads((Path("benchmarks/results") / name).read_text())["rows"]
    for gpu in (hardware.from_name("h100-sxm"), hardware.from_name("h200")):
        for r in random.sample(rows, 40):
            built = workload_of(r["config"], gpu).launches
            want = sorted(w.compiled_key for w in built if w.compiled_key)
            assert sorted(kernel_keys(r["config"], gpu)) == want, r["id"]
    assert kernel_keys({**rows[0]["config"], "impl": "convention"}, gpu) == []
