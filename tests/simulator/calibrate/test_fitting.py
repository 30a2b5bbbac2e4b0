"""The calibration fit: deterministic, and it recovers parameters that made the measurements."""

from __future__ import annotations

import math
import random

import pytest

from flashscope.simulator.calibrate.fitting import (
    DRAM_TOLERANCE,
    DRAM_WEIGHT,
    ORDER_TIE,
    ORDER_WEIGHT,
    Param,
    Sample,
    apply,
    fit,
    loss_of,
)
from flashscope.simulator.core.hardware import from_name
from flashscope.simulator.core.problem import AttentionProblem, TileConfig
from flashscope.simulator.timing import kernelplan


def _samples(truth, seed):
    rng = random.Random(seed)
    out = []
    for k in range(8):
        n = rng.choice([256, 512, 1024, 2048])
        p = AttentionProblem(seq_q=n, head_dim=rng.choice([64, 128]), batch=2, heads=8,
                             causal=rng.random() < 0.5)  # fmt: skip
        algo = rng.choice(["fa2", "fa2-bwd"])
        t = TileConfig(64, 64, 3, 4)
        w = kernelplan.build(algo, p, t, gpu_key="h100-sxm")
        out.append(Sample(f"s{k}", w, loss_of_time(truth, w)))
    return out


def loss_of_time(gpu, w):
    from flashscope.simulator.timing.engine import simulate_workload

    return simulate_workload(w, gpu).time_s


def test_fit_recovers_the_parameters_that_produced_the_times():
    seed = random.SystemRandom().randrange(2**31)
    base = from_name("h100-sxm", calibrated=False)
    truth = apply(base, {"overlap": 0.2, "cta_setup_ns": 2500.0})
    samples = _samples(truth, seed)
    params = (Param("overlap", 0.0, 1.0), Param("cta_setup_ns", 10.0, 20000.0, log=True))
    start = apply(base, {"overlap": 0.7, "cta_setup_ns": 100.0})
    assert loss_of(start, samples)[1] > 5, seed
    got = fit(start, samples, params, max_evals=150)
    assert got.loss < got.start_loss / 5, (got, seed)
    assert got.mape_pct < 2.0, (got, seed)
    assert got.values["overlap"] == pytest.approx(0.2, abs=0.08), (got.values, seed)
    again = fit(start, samples, params, max_evals=150)
    assert again.values == got.values  # no randomness


def test_params_map_their_range_and_round_integers():
    p = Param("warps_to_saturate", 1, 32, log=True, integer=True)
    assert p.from_unit(0.0) == 1 and p.from_unit(1.0) == 32 and p.from_unit(2.0) == 32
    assert isinstance(p.from_unit(0.5), int)
    q = Param("overlap", 0.0, 1.0)
    assert q.from_unit(q.to_unit(0.3)) == pytest.approx(0.3)


def test_measured_dram_bytes_join_the_loss_where_they_exist():
    gpu = from_name("h200")
    p = AttentionProblem(seq_q=2048, head_dim=64, batch=2, heads=8, causal=random.random() < 0.5)
    w = kernelplan.build("fa2", p, TileConfig(128, 64, 3, 4), gpu_key="h200")
    from flashscope.simulator.timing.engine import simulate_workload

    r = simulate_workload(w, gpu)
    dram = sum(k.dram_read_bytes + k.dram_write_bytes for k in r.kernels)
    factor = random.uniform(1.1, 3.0)
    plain = loss_of(gpu, [Sample("a", w, r.time_s * factor)])
    exact = loss_of(gpu, [Sample("a", w, r.time_s * factor, dram)])
    off = loss_of(gpu, [Sample("a", w, r.time_s * factor, dram * factor)])
    assert plain == exact  # matching bytes add nothing
    # their log error, and DRAM_WEIGHT times what of it lies beyond the target's 10%
    beyond = DRAM_WEIGHT * (math.log(factor) - math.log(1 + DRAM_TOLERANCE))
    assert off[0] == pytest.approx(plain[0] + math.log(factor) + beyond)
    assert off[1] == plain[1]  # the MAPE stays the time's
    near = loss_of(gpu, [Sample("a", w, r.time_s * factor, dram * 1.05)])
    assert near[0] == pytest.approx(plain[0] + math.log(1.05))  # within 10%: the log alone


def test_the_loss_charges_tiles_of_one_problem_that_are_off_unequally():
    """Samples sharing a problem add the spread of their log errors about the problem's mean:
    zero when every tile is off by the same factor, more when they are off differently."""
    from flashscope.simulator.timing.engine import call_time_s, simulate_workload

    gpu = from_name("h200")
    p = AttentionProblem(seq_q=2048, head_dim=64, batch=2, heads=8)
    ws = [kernelplan.build("fa2", p, t, gpu_key="h200")
          for t in (TileConfig(128, 64, 3, 4), TileConfig(64, 64, 3, 4))]  # fmt: skip
    times = [call_time_s(simulate_workload(w, gpu)) for w in ws]  # what the loss compares
    a, b = random.uniform(1.1, 2.0), random.uniform(1.1, 2.0)

    def loss(fa, fb, problem="p"):
        return loss_of(gpu, [Sample("a", ws[0], times[0] * fa, problem=problem),
                             Sample("b", ws[1], times[1] * fb, problem=problem)])[0]  # fmt: skip

    alike = loss(a, a)
    assert alike == pytest.approx(math.log(a))  # the same factor: no spread
    apart = loss(a, b)
    mean_abs = (math.log(a) + math.log(b)) / 2
    dm = math.log(times[1] * b / (times[0] * a))  # measured order of the pair
    ds = math.log(times[1] / times[0])  # simulated
    wrong = max(0.0, -math.copysign(1.0, dm) * ds) if abs(dm) > ORDER_TIE else 0.0
    spread = abs(math.log(a) - math.log(b)) / 2
    assert apart == pytest.approx(mean_abs + spread + ORDER_WEIGHT * wrong)
    # samples of different problems (or of none) are not compared with each other
    assert loss_of(gpu, [Sample("a", ws[0], times[0] * a, problem="x"),
                         Sample("b", ws[1], times[1] * b, problem="y")])[0] == pytest.approx(
        mean_abs)  # fmt: skip
    assert loss(a, b, problem=None) == pytest.approx(mean_abs)


def test_the_loss_charges_pairs_the_engine_orders_wrongly():
    """A pair measured in one order and simulated in the other adds ORDER_WEIGHT × the log gap
    of the simulated pair; the measured order adds nothing, nor do measured ties."""
    from flashscope.simulator.timing.engine import simulate_workload

    gpu = from_name("h100-sxm")
    p = AttentionProblem(seq_q=1024, head_dim=128, batch=4, heads=8, causal=random.random() < 0.5)
    ws = [kernelplan.build("fa2", p, t, gpu_key="h100-sxm")
          for t in (TileConfig(128, 128, 3, 8), TileConfig(64, 128, 2, 4))]  # fmt: skip
    t0, t1 = (simulate_workload(w, gpu).time_s for w in ws)
    assert abs(math.log(t1 / t0)) > 0.05  # the engine tells these two apart

    def loss(m0, m1):
        return loss_of(gpu, [Sample("a", ws[0], m0, problem="p"),
                             Sample("b", ws[1], m1, problem="p")])[0]  # fmt: skip

    def without_order(m0, m1):  # the other terms, by their definitions
        e = [math.log(t0 / m0), math.log(t1 / m1)]
        return (abs(e[0]) + abs(e[1])) / 2 + abs(e[0] - e[1]) / 2

    f = random.uniform(0.8, 1.2)
    same = (t0 * f, t1 * f * random.uniform(0.99, 1.01))  # the simulated order, > 4% apart
    assert loss(*same) == pytest.approx(without_order(*same))
    swapped = (t1 * f, t0 * f)  # the pair measured the other way round
    assert loss(*swapped) == pytest.approx(
        without_order(*swapped) + ORDER_WEIGHT * abs(math.log(t1 / t0))
    )
    tie = (t0 * f, t0 * f * math.exp(random.uniform(-0.5, 0.5) * ORDER_TIE))
    assert loss(*tie) == pytest.approx(without_order(*tie))


@pytest.mark.parametrize("weight", [1.0, 0.5, 0.0])
def test_kernels_timed_alone_join_the_loss(weight):
    """A sample's kernels timed one by one (Nsight Compute) add `alone_weight` × the mean |log|
    of their alone simulations against those times: nothing where they match, log(f) where all
    are off by f. The shipped default fits whole calls only."""
    from flashscope.simulator.calibrate.fitting import ALONE_WEIGHT
    from flashscope.simulator.timing.engine import alone_time_s, simulate_workload
    from flashscope.simulator.timing.workload import alone

    assert ALONE_WEIGHT == 0.0
    gpu = from_name("h100-sxm")
    p = AttentionProblem(seq_q=random.choice([1000, 2048]), head_dim=64, batch=2, heads=8)
    w = kernelplan.build("fa2-bwd", p, TileConfig(64, 64, 3, 4), route="separate")
    t = simulate_workload(w, gpu).time_s
    ones = [alone(w, name) for name in ("bwd_dq", "bwd_dkdv")]
    exact = tuple((one, alone_time_s(one, gpu)) for one in ones)
    f = random.uniform(1.1, 2.0)
    off = tuple((one, s * f) for one, s in exact)
    plain = loss_of(gpu, [Sample("a", w, t)], weight)
    matched = loss_of(gpu, [Sample("a", w, t, alone=exact)], weight)
    assert matched[0] == pytest.approx(plain[0], abs=1e-12)
    got = loss_of(gpu, [Sample("a", w, t, alone=off)], weight)
    assert got[0] == pytest.approx(plain[0] + weight * math.log(f))
    assert got[1] == plain[1]  # the MAPE stays the whole call's
    assert loss_of(gpu, [Sample("a", w, t, alone=off)]) == plain_default(gpu, w, t)


def plain_default(gpu, w, t):
    """The default loss ignores the kernels timed alone (ALONE_WEIGHT = 0)."""
    return loss_of(gpu, [Sample("a", w, t)])


def test_the_hosts_floor_is_found_on_its_grid_and_kept_where_nothing_shows_it():
    """Backward calls made to take a known host cost give it back; calls their kernels bound
    (no floor shows) leave the current values, the nearest of the equally good ones."""
    import dataclasses

    from flashscope.simulator.calibrate.fitting import CallSample, fit_host
    from flashscope.simulator.calibrate.validation import workload_of
    from flashscope.simulator.core import hardware
    from flashscope.simulator.timing.engine import simulate_workload

    gpu = hardware.from_name("h100-sxm")
    # whole tiles (the host makes the dQ kernel's 5 descriptors and the dK/dV kernel's 6) and
    # ragged lengths (the kernels make their own): the two kinds tell the terms apart
    small = [{"algo": "fa2-bwd", "impl": "flashscope", "seq": n, "head_dim": 64, "batch": 1,
              "heads": 2, "block_m": 64, "block_n": 64, "stages": 2, "warps": 4}
             for n in (128, 256, 200, 300)]  # fmt: skip
    workloads = [workload_of(c, gpu) for c in small]
    counts = [[x.host_descriptors for x in w.launches] for w in workloads]
    assert counts == [[0, 5, 6], [0, 5, 6], [0, 0, 0], [0, 0, 0]]
    host = [
        CallSample(str(i), w, (10.0 * len(w.launches) + 7.5 * sum(c) + 250.0) * 1e-6)
        for i, (w, c) in enumerate(zip(workloads, counts, strict=True))
    ]
    for s in host:  # the kernels are well under the call
        assert simulate_workload(s.workload, gpu).time_s < 200e-6
    values, loss = fit_host(gpu, host, launch_us=10.0)
    assert values == {"host_launch_us": 10.0, "host_descriptor_us": 7.5, "host_backward_us": 250.0}
    assert loss == pytest.approx(0.0, abs=1e-9)
    # long calls their kernels bound: any small floor fits them; the current one is kept
    big = {**small[0], "seq": 8192, "batch": 8, "heads": 16}
    w = workload_of(big, gpu)
    t = simulate_workload(w, gpu).time_s
    bound = [CallSample("big", w, t * 1.05)]
    now = dataclasses.replace(gpu, efficiency=dataclasses.replace(
        gpu.efficiency, host_launch_us=7.0, host_descriptor_us=3.25,
        host_backward_us=123.0))  # fmt: skip
    values, _ = fit_host(now, bound)
    assert values == {"host_launch_us": 7.0, "host_descriptor_us": 3.25, "host_backward_us": 123.0}
