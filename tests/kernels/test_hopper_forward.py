"""The warp-specialized Gluon forward on the CPU: its configurations, the reasons a call does
not qualify, the tuned table's routing, and the kernel compiled for sm_90a (Gluon has no
interpreter: its numerics are checked by the GPU tests, tests/kernels/test_gpu.py)."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from itertools import product

import pytest
import torch

from flashscope.kernels.config import TUNED_FILE, gpu_table
from flashscope.kernels.forward import launch_forward
from flashscope.kernels.hopper_forward import (
    LOADER_REGS,
    REGS_PER_SM,
    SHARED_LIMIT,
    WsConfig,
    qk_dim,
    schedule,
    supports,
    tile_costs,
    tuned,
    tuned_config,
    tuned_configs,
)
from flashscope.kernels.launch import pad_dim
from flashscope.simulator.timing.kernelplan import SEQ_BUCKETS
from flashscope.simulator.timing.tuned_tables import LENT

from .conftest import compiled_apart

VALID = [
    WsConfig(c, n, s, pipe, ctas, pingpong=pp)
    for c, n, s, pipe, ctas, pp in product((1, 2, 3), (64, 128, 256), (2, 3, 4), (False, True),
                                           (1, 2), (False, True))
    if not pp or (pipe and c > 1)
]  # fmt: skip


def ws_table(gpu: str = "NVIDIA H200") -> tuple[dict, dict]:
    entry = json.loads(TUNED_FILE.read_text())["gpus"][gpu]
    return entry.get("routes", {}), entry.get("ws", {})


@pytest.mark.parametrize(
    "bad",
    [
        {"consumers": 4},
        {"consumers": 0},
        {"block_n": 96},
        {"block_n": 32},
        {"stages": 1},
        {"stages": 5},
        {"ctas": 3},
        {"block_m": 128},
        {"pingpong": True, "consumers": 1},
        {"pingpong": True, "pipeline": False},
    ],
)
def test_a_bad_configuration_is_refused_by_name(bad: dict) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        WsConfig(**bad)


def test_the_table_format_has_five_entries_and_trailing_ones_only_where_set() -> None:
    assert WsConfig(2, 128, 2, True).as_list() == [2, 128, 2, 1, 1]  # older tables stay valid
    assert WsConfig(3, 128, 2, True, pingpong=True).as_list() == [3, 128, 2, 1, 1, 1]
    assert WsConfig(3, 128, 2, True, persistent=True).as_list() == [3, 128, 2, 1, 1, 0, 1]
    band = random.choice([0, 2, 8, 32])
    banded = WsConfig(2, 256, 2, False, persistent=True, band=band)
    assert banded.as_list() == [2, 256, 2, 0, 1, 0, 1, band]
    assert WsConfig.from_list(banded.as_list()) == banded
    assert WsConfig.from_list([3, 128, 2, 1, 1, 0]) == WsConfig(3, 128, 2, True)
    assert WsConfig.from_list([3, 128, 2, 1, 1, 0, 0, 1]) == WsConfig(3, 128, 2, True)
    merged = WsConfig(3, 128, 2, False, merged=True)
    assert merged.as_list() == [3, 128, 2, 0, 1, 0, 0, 1, 1]
    assert WsConfig.from_list([3, 128, 2, 0, 1, 0, 0, 1, 0]) == WsConfig(3, 128, 2, False)
    with pytest.raises(ValueError, match="5 to 9 entries"):
        WsConfig.from_list([3, 128, 2, 1, 1, 1, 1, 1, 1, 1])
    with pytest.raises(ValueError, match="band"):
        WsConfig(band=-1)


def test_a_launch_has_a_program_per_tile_or_per_cta_slot_when_persistent() -> None:
    rows, n_q = random.randint(1, 64), 64 * random.randint(1, 64)
    three = WsConfig(3, 128, 2, True)
    assert three.tiles(rows, n_q) == rows * -(-n_q // 192)  # the top tile may be partial
    assert three.programs(1000, 132) == 1000
    assert WsConfig(3, 128, 2, True, persistent=True).programs(1000, 132) == 132
    assert WsConfig(1, 128, 2, True, 2, persistent=True).programs(1000, 132) == 264
    assert WsConfig(persistent=True).programs(100, 132) == 100  # no program without a tile


def _costs_by_masks(
    cfg: WsConfig, rows: int, n_q: int, n_k: int, fixed: float = 1.0, per_masked: float = 0.0
) -> list[float]:
    """tile_costs' oracle from the causal mask itself: tiles in launch order (bands of rows,
    within a band every row's heaviest query block first), each costing the key blocks its
    rows see (rows above 0 of a head's top tile included: the kernel computes them), the last
    one as half where no row sees past its first half and some row not all of it (unpipelined
    kernels whose tiles are not whole blocks, `HALF_STEPS`), plus `fixed`, plus `per_masked`
    for each of those blocks that some row of the tile does not see whole."""
    tile, bn = cfg.tile_m, cfg.block_n
    n_mb, band = -(-n_q // tile), cfg.band or rows
    costs = []
    for first in range(0, rows, band):
        for rank in range(n_mb):
            for _ in range(first, min(first + band, rows)):
                m0 = n_q - (rank + 1) * tile
                seen = (
                    torch.arange(n_k)[None, :] <= torch.arange(m0, m0 + tile)[:, None] + n_k - n_q
                )
                last = int(seen.any(0).nonzero().max()) if seen.any() else -1
                blocks = max(last // bn + 1, 1)
                start = (blocks - 1) * bn
                masked = not seen[:, start : start + bn].all()
                halves = not cfg.pipeline and tile % bn != 0
                half = halves and masked and last < start + bn // 2
                crossed = sum(not seen[:, b * bn : (b + 1) * bn].all() for b in range(blocks))
                costs.append(blocks - 0.5 * half + fixed + per_masked * crossed)
    return costs


def test_tile_costs_follow_the_causal_mask(monkeypatch) -> None:
    import flashscope.kernels.hopper_forward as hopper_forward

    for i in range(12):
        fixed, per_masked = (1.0, 0.0) if i < 6 else (random.choice((2.0, 3.0)), 0.5)
        monkeypatch.setattr(hopper_forward, "TILE_FIXED_COST", fixed)
        monkeypatch.setattr(hopper_forward, "MASKED_STEP_COST", per_masked)
        pipeline, band = random.random() < 0.5, random.choice((0, 1, 2, 5))
        cfg = WsConfig(random.choice((1, 2, 3)), random.choice((64, 128, 256)), 2, pipeline,
                       persistent=True, band=band)  # fmt: skip
        rows, n_q = random.randint(1, 6), 64 * random.randint(1, 12)
        n_k = cfg.block_n * random.randint(1, 1024 // cfg.block_n)
        what = f"{cfg.as_list()} rows={rows} n_q={n_q} n_k={n_k}"
        costs = tile_costs(
            cfg, rows, n_q, n_k, halves=not pipeline and cfg.tile_m % cfg.block_n != 0
        )
        assert costs.tolist() == _costs_by_masks(cfg, rows, n_q, n_k, fixed, per_masked), what
    monkeypatch.undo()
    # 128-row tiles of 256-key blocks, N = 2048: every other tile ends half way into a block
    cfg = WsConfig(2, 256, 2, False, persistent=True)
    costs = tile_costs(cfg, 1, 2048, 2048, halves=True)
    assert costs.tolist() == [9, 8.5, 8, 7.5, 7, 6.5, 6, 5.5, 5, 4.5, 4, 3.5, 3, 2.5, 2, 1.5]


def test_half_steps_follow_the_switch_at_every_launch(monkeypatch) -> None:
    import flashscope.kernels.hopper_forward as hopper_forward

    halves = WsConfig(2, 256, 2, False)  # 128-row tiles of 256-key blocks, unpipelined
    assert hopper_forward._half(halves, True) and not hopper_forward._half(halves, False)
    assert not hopper_forward._half(WsConfig(2, 256, 2, True), True)  # pipelined: whole
    assert not hopper_forward._half(WsConfig(2, 128, 2, False), True)  # whole blocks
    monkeypatch.setattr(hopper_forward, "HALF_STEPS", False)  # read anew, not remembered
    assert not hopper_forward._half(halves, True)


def test_the_schedule_gives_each_tile_once_and_keeps_launch_order() -> None:
    seed = random.randrange(2**31)
    draw = random.Random(seed)
    programs = draw.randint(1, 40)
    gen = torch.Generator().manual_seed(seed)
    costs = torch.rand(draw.randint(1, 500), generator=gen).double().numpy() * 9 + 1
    sched = schedule(costs, programs)
    offsets, order = sched[: programs + 1], sched[programs + 1 :]
    msg = f"seed={seed}"
    assert offsets[0] == 0 and offsets[-1] == len(costs), msg
    assert (offsets[1:] >= offsets[:-1]).all(), msg
    assert sorted(order.tolist()) == list(range(len(costs))), msg
    loads = []
    for p in range(programs):
        mine = order[offsets[p] : offsets[p + 1]]
        assert (mine[1:] > mine[:-1]).all(), msg  # launch order within a program
        loads.append(costs[mine].sum())
    # greedy list scheduling: nobody ends later than the mean load plus the largest tile
    assert max(loads) <= costs.sum() / programs + costs.max() + 1e-9, msg


def test_the_schedule_balances_the_protocols_causal_tiles_better_than_turns() -> None:
    cfg = WsConfig(2, 256, 2, False, persistent=True, band=8)
    costs = tile_costs(cfg, 256, 2048, 2048, halves=True)  # B·H = 256, N = 2048
    sched = schedule(costs, 132)
    offsets, order = sched[:133], sched[133:]
    scheduled = max(costs[order[offsets[p] : offsets[p + 1]]].sum() for p in range(132))
    in_turn = max(costs[p::132].sum() for p in range(132))
    mean = costs.sum() / 132
    assert scheduled < in_turn and scheduled / mean < 1.01 < in_turn / mean


def test_configurations_round_trip_through_the_table_format() -> None:
    for cfg in random.sample(VALID, 24):
        assert WsConfig.from_list(cfg.as_list()) == cfg
        assert cfg.tile_m == 64 * cfg.consumers
        merged = replace(cfg, merged=True)  # the ninth entry, kept only where on
        assert merged.as_list() == [*cfg.as_list(), *([0, 0, 1][len(cfg.as_list()) - 5 :]), 1]
        assert WsConfig.from_list(merged.as_list()) == merged
    assert WsConfig.from_list([3, 128, 2, 0, 1, 0, 1, 8]).merged is False  # older lists


def test_merged_steps_are_compiled_in_only_for_causal_launches() -> None:
    """`merged` sets the kernel's MERGED for a causal call and leaves a full one as it was."""
    from flashscope.kernels import hopper_forward

    q, k, v = (torch.randn(1, 2, 384, 64, dtype=torch.float16) for _ in range(3))
    o, lse = torch.empty_like(q), torch.empty(1, 2, 384)
    for merged in (False, True):
        cfg = WsConfig(3, 128, 2, False, persistent=True, band=8, merged=merged)
        for causal in (False, True):
            _, constexprs, _ = hopper_forward._arguments(q, k, v, o, lse, causal, 0.1, cfg, 132)
            assert constexprs["MERGED"] is (causal and merged), (merged, causal)


@pytest.mark.parametrize("cfg", VALID, ids=lambda c: "-".join(map(str, c.as_list())))
def test_every_partition_gets_registers_the_sm_has(cfg: WsConfig) -> None:
    launch, consumer = cfg.registers()
    warps = 4 * (cfg.consumers + 1)
    assert launch % 8 == 0 and consumer % 8 == 0 and 24 <= consumer <= 256
    # at launch: every CTA meant to share the SM fits its register file
    assert cfg.ctas * launch * 32 * warps <= REGS_PER_SM
    # after the hand-over: the consumers and the loader's warpgroup within what the CTA had
    assert 128 * (cfg.consumers * consumer + LOADER_REGS) <= launch * 32 * warps


def test_shared_memory_counts_q_and_the_ring() -> None:
    cfg = WsConfig(2, 128, 2, True)
    # Q and O: 128 rows each; K and V: 2 stages of 128 rows; 2 bytes each; 8 bytes per mbarrier
    # (Q ready, Q free and the turn per consumer, ready and free for K and V per stage)
    assert cfg.shared_bytes(128) == 2 * 128 * 128 * 2 + 2 * 2 * 128 * 128 * 2 + 8 * (6 + 8)
    assert WsConfig(3, 256, 4, False).shared_bytes(128) > SHARED_LIMIT


def _qkv(b=1, h=2, hk=2, n_q=256, n_k=256, d=64, dtype=torch.float16):
    q = torch.empty(b, h, n_q, d, dtype=dtype)
    k = torch.empty(b, hk, n_k, d, dtype=dtype)
    return q, k, torch.empty_like(k)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"dtype": torch.float32}, "fp16 or bf16"),
        ({"d": 32}, "multiple of 8 from 40 to 256"),
        ({"d": 100}, "multiple of 8 from 40 to 256"),
        ({"d": 264}, "multiple of 8 from 40 to 256"),
        ({"d": 192}, "shared memory"),  # 128-key stages of 256 columns do not fit
        ({}, "Hopper GPU"),  # a call that qualifies in every other way, on the CPU
        # head dims that are not a power of two run padded: only the GPU is missing
        ({"d": 80}, "Hopper GPU"),
        ({"d": 96, "dtype": torch.bfloat16}, "Hopper GPU"),
        ({"d": 40}, "Hopper GPU"),
        # lengths that fill no tile qualify (masked edges): only the GPU is missing
        ({"n_q": 200}, "Hopper GPU"),
        ({"n_k": 320}, "Hopper GPU"),
        ({"n_q": 1, "n_k": 3001}, "Hopper GPU"),
    ],
)
def test_a_call_that_does_not_qualify_says_why(change: dict, reason: str) -> None:
    cfg = WsConfig(2, 128, 2, False)  # fits shared memory at every head_dim up to 128
    assert reason in supports(*_qkv(**change), cfg)


def test_the_fa3_model_counts_the_kernels_shared_memory() -> None:
    from flashscope.simulator.timing.fa3_config import Fa3Config

    for entry in ([2, 128, 2, 1, 1], [3, 64, 3, 0, 1], [2, 64, 2, 1, 1, 1], [1, 64, 2, 1, 1, 0, 1],
                  [2, 64, 2, 1, 1, 0, 1, 8]):  # fmt: skip
        ws = WsConfig.from_list(entry)
        model = Fa3Config(ws.consumers, ws.block_n, ws.stages, ws.pipeline, ws.ctas, ws.pingpong,
                          ws.persistent, ws.band)  # fmt: skip
        for d in (64, 128, 256):
            assert model.shared_bytes(d) == ws.shared_bytes(d), (entry, d)


def test_head_dims_past_128_fit_where_o_leaves_through_qs_stage() -> None:
    """At 256 columns two warpgroups' Q and two K/V stages fit only if O reuses Q's stage, which
    a program of one tile (not persistent) can do; persistent, one warpgroup fits."""
    two = WsConfig(2, 64, 2, True)
    assert two.o_in_q(256) and not two.o_in_q(128)
    assert two.shared_bytes(256) == 128 * 256 * 2 + 2 * 2 * 64 * 256 * 2 + 8 * (6 + 8)
    for d in (136, 192, 256):
        assert "Hopper GPU" in supports(*_qkv(d=d), two)
        assert "Hopper GPU" in supports(*_qkv(d=d), WsConfig(1, 64, 2, True, persistent=True))
        assert "shared memory" in supports(*_qkv(d=d), WsConfig(2, 64, 2, True, persistent=True))


def test_lengths_that_fill_no_tile_compile_with_masked_edges() -> None:
    """N_q and N_k that are not multiples of the tiles compile (the masked last key block and the
    masked store of the top tile's straddling warpgroup) without spilling."""
    rows = compiled_apart(
        "hopper_forward", [([2, 128, 2, 1, 1, 1], 128), ([3, 128, 2, 0, 1], 64)], "--edges"
    )
    assert len(rows) == 4
    for row in rows:
        what = f"{row['config']} d={row['head_dim']} causal={row['causal']}"
        assert row["stack"] == 0 and row["local"] == 0, f"{what} spills with masked edges"


def test_padded_head_dims_compile_without_spilling() -> None:
    """head_dim 80, 96 and 192 run in tiles of 128 or 256 columns (the copy engine pads and clips
    them), with lengths that fill no tile so the masked store's column mask is compiled too; at
    256, two warpgroups whose O leaves through Q's stage and one persistent warpgroup."""
    wanted = [([2, 128, 2, 1, 1, 1, 1, 8], 80), ([2, 64, 3, 1, 1], 96), ([2, 64, 2, 1, 1], 256),
              ([1, 64, 2, 0, 1, 0, 1], 192)]  # fmt: skip
    rows = compiled_apart("hopper_forward", wanted, "--edges")
    got = {(row["head_dim"], row["causal"]) for row in rows}
    assert got == {(d, causal) for d in (80, 96, 192, 256) for causal in (False, True)}
    for row in rows:
        what = f"{row['config']} d={row['head_dim']} causal={row['causal']}"
        assert row["stack"] == 0 and row["local"] == 0, f"{what} spills"
        assert row["wgmma"] > 0, f"{what} compiled no wgmma"


@pytest.mark.parametrize("d", range(8, 257, 8))
def test_the_score_product_covers_the_head_dims_columns_in_two_powers_of_two(d: int) -> None:
    """S = Q Kᵀ runs over d rounded up to wgmma's 16 where two products of power-of-two widths,
    half the padded tile and the rest, cover it; else over the whole padded tile."""
    full, got = pad_dim(d), qk_dim(d)
    assert d <= got <= full and got % 16 == 0
    if got < full:  # no more than wgmma's step over d, and two power-of-two products
        rest = got - full // 2
        assert got - d < 16 and 0 < rest < full // 2 and rest & (rest - 1) == 0


def test_the_score_products_widths_at_common_head_dims() -> None:
    assert {d: qk_dim(d) for d in (40, 80, 96, 120, 160, 176, 192)} == {
        40: 48, 80: 80, 96: 96, 120: 128, 160: 160, 176: 256, 192: 192}  # fmt: skip


def test_padded_head_dims_issue_products_over_their_own_columns() -> None:
    """S = Q Kᵀ runs over the head dim's columns where half the padded tile and a power of two
    more cover them (192 of 256, 96 of 128), P V too where that second part is 64 wide or more
    (192, in two accumulators; not 96). The work of the compiled wgmma instructions (the sum
    of their widths, each m64 × N × k16) is then (192 + 192) / (256 + 256) of the padded
    tile's, and (96 + 128) / (128 + 128). 120 in 128 columns runs over the whole tile."""
    wanted = [([2, 64, 2, 1, 1], 192), ([2, 64, 2, 1, 1], 256), ([2, 128, 2, 1, 1, 1], 96),
              ([2, 128, 2, 1, 1, 1], 120), ([2, 128, 2, 1, 1, 1], 128)]  # fmt: skip
    rows = compiled_apart("hopper_forward", wanted)
    work = {(r["head_dim"], r["causal"]): r["wgmma_n"] for r in rows}
    for causal in (False, True):
        assert work[192, causal] * 512 == work[256, causal] * 384, work
        assert work[96, causal] * 256 == work[128, causal] * 224, work
        assert work[120, causal] == work[128, causal], work
    for row in rows:
        assert row["stack"] == 0 and row["local"] == 0, row


def test_rows_off_the_copy_engines_alignment_do_not_qualify() -> None:
    base = torch.empty(2 * 256 * 64 + 1, dtype=torch.float16)
    q = base[1:].view(1, 2, 256, 64)  # 2 bytes past a 16-byte boundary
    _, k, v = _qkv()
    assert "16-byte" in supports(q, k, v, WsConfig())


def test_too_much_shared_memory_and_strided_inputs_do_not_qualify() -> None:
    assert "shared memory" in supports(*_qkv(d=128), WsConfig(2, 256, 3, True))
    assert "shared memory" in supports(*_qkv(d=128), WsConfig(1, 64, 4, True, ctas=2))
    q, k, v = _qkv()
    assert "flatten" in supports(q.transpose(1, 2).contiguous().transpose(1, 2), k, v,
                                 WsConfig())  # fmt: skip


def test_the_table_routes_each_length_bucket() -> None:
    routes, ws = ws_table()
    seen = set()
    for d, causal in product((64, 128), (False, True)):
        name = "causal" if causal else "full"
        for lo, hi in zip((0, *SEQ_BUCKETS), SEQ_BUCKETS, strict=False):
            n = random.randint(lo + 1, hi)
            got = tuned_config("NVIDIA H200", d, causal, n)
            route = routes[f"fwd-route/16/d{d}/{name}/n{hi}"]
            seen.add(route)
            if route == "ws":
                assert got == WsConfig.from_list(ws[f"fwd/16/d{d}/{name}/n{hi}"]), (d, causal, n)
            else:
                assert got is None, (d, causal, n)
    assert seen == {"ws", "triton"}  # both kernels win somewhere: the lookup is not constant
    # a GPU the table does not name: another GPU's entries (simulator/timing/tuned_tables.py)
    donor = gpu_table("Some GPU")[LENT]["fwd/d128"]
    assert tuned_config("Some GPU", 128, False, 4096) == tuned_config(donor, 128, False, 4096)
    assert tuned_config("Some GPU", 128, False, 4096) is not None


def test_every_routed_bucket_has_a_configuration() -> None:
    for gpu in json.loads(TUNED_FILE.read_text())["gpus"]:
        routes, ws = ws_table(gpu)
        for key, route in routes.items():
            if key.startswith("fwd-route/") and route == "ws":
                entry = ws["fwd/" + key.removeprefix("fwd-route/")]
                WsConfig.from_list(entry)  # a valid configuration


def test_odd_lengths_take_the_edge_entry_of_their_bucket() -> None:
    """Lengths that fill no 64-row tile take the bucket's "ws-edge" entry where the table has
    one, whole lengths (and buckets without one) the "ws" entry."""
    gpu = "NVIDIA H100 80GB HBM3"
    table = json.loads(TUNED_FILE.read_text())["gpus"][gpu]
    edges = table["ws-edge"]
    assert edges, "the H100's table has no edge entries"
    for key, entry in edges.items():
        _, _, d, mask, bucket = key.split("/")
        hi = int(bucket[1:])
        n = random.randint(hi // 2 + 1, hi - 1)
        args = (gpu, int(d[1:]), mask == "causal", n)
        assert tuned_config(*args, edge=True) == WsConfig.from_list(entry), key
        assert tuned_config(*args) == WsConfig.from_list(table["ws"][key]), key
    plain = [k for k in table["ws"] if k not in edges]
    key = random.choice(plain)
    _, _, d, mask, bucket = key.split("/")
    args = (gpu, int(d[1:]), mask == "causal", int(bucket[1:]) - 1)
    assert tuned_config(*args, edge=True) == tuned_config(*args)


def test_the_tuned_configurations_are_listed_with_their_head_dims() -> None:
    for gpu, table in json.loads(TUNED_FILE.read_text())["gpus"].items():
        ws = {
            **table.get("ws", {}),
            **{k + "/edge": e for k, e in table.get("ws-edge", {}).items()},
        }
        want = {(WsConfig.from_list(e), int(key.split("/")[2][1:])) for key, e in ws.items()}
        assert set(tuned_configs(gpu)) == want and len(tuned_configs(gpu)) == len(want), gpu
    assert set(tuned_configs()) == {c for gpu in ("NVIDIA H200", "NVIDIA H100 80GB HBM3")
                                    for c in tuned_configs(gpu)}  # fmt: skip
    assert tuned_configs("Some GPU") == []


def test_the_interpreter_never_takes_the_gluon_kernel(monkeypatch) -> None:
    import flashscope.kernels.forward as forward

    def refuse(*args, **kwargs):
        raise AssertionError("the Gluon kernel ran under the interpreter")

    monkeypatch.setattr(forward, "launch_forward_ws", refuse)
    q, k, v = (torch.randn(1, 1, 128, 64, dtype=torch.float16) for _ in range(3))
    assert tuned(q, k, v, False) is None
    o, _ = launch_forward(q, k, v, False, 0.125)
    assert o.shape == q.shape and not o.isnan().any()


@pytest.fixture(scope="module")
def compiled() -> list[dict]:
    """Every configuration the tuned tables name, and a few more, compiled for sm_90a in a process
    of its own (Triton's compiler, not its interpreter)."""
    extra = [([3, 128, 2, 1, 1], 64), ([2, 64, 3, 1, 1], 128), ([3, 128, 2, 1, 1, 1], 64),
             ([2, 256, 2, 0, 1, 0, 1, 32], 64)]  # fmt: skip
    return compiled_apart(
        "hopper_forward", extra + [(cfg.as_list(), d) for cfg, d in tuned_configs()]
    )


def test_the_tuned_configurations_compile_for_hopper_without_spilling(compiled) -> None:
    for row in compiled:
        what = f"{row['config']} d={row['head_dim']} causal={row['causal']}"
        cfg = WsConfig.from_list(row["config"])
        launch, consumer = cfg.registers()
        if cfg.consumers == 3 and cfg.pipeline and row["causal"]:
            # three pipelined warpgroups at 160 registers, causal: 8 scalar registers are saved
            # and restored once per tile around the diagonal's loop, nothing inside a loop
            assert row["stack"] <= 32 and row["local"] == 0, f"{what} spills"
        else:
            assert row["stack"] == 0 and row["local"] == 0, f"{what} spills"
        assert row["regs"] <= launch, what
        assert row["clock_reads"] == 0, f"{what}: the plain kernel reads the cycle counter"
        # the loader's warpgroup gives its registers up and the consumers take theirs
        assert LOADER_REGS in row["setmaxnreg"] and consumer in row["setmaxnreg"], what
        assert row["shared"] <= SHARED_LIMIT, what
        # Machine code: causal kernels hold 90-113 KiB (every consumer its own copy of the
        # masked, unmasked and half steps), where the SMs' instruction fetch already stalls
        # (benchmarks/band_latency.py); a kernel that grows past 128 KiB should be looked at.
        assert 16 * 1024 < row["code_bytes"] <= 128 * 1024, f"{what}: {row['code_bytes']} bytes"
        # Each consumer's products: Q Kᵀ and P V per step, split by the compiler into
        # wgmma instructions of k = 16: (d + block_n) / 16 of them per step, times the loop
        # copies (pipelined: prologue, loop and epilogue) and the consumers' copies; an
        # unpipelined causal kernel whose tiles block_n does not divide also has a half step,
        # block_n / 32 fewer.
        per_step = (row["head_dim"] + cfg.block_n) // 16
        half = row["causal"] and not cfg.pipeline and cfg.tile_m % cfg.block_n != 0
        wgmma = row["wgmma"] + (cfg.consumers * cfg.block_n // 32 if half else 0)
        assert wgmma % per_step == 0 and wgmma >= per_step * cfg.consumers * (1 + half), what


def test_merged_causal_steps_compile_smaller_without_spilling() -> None:
    """`merged`: a causal tile's unmasked and diagonal steps in one loop, the mask in a branch,
    so each consumer holds one copy of the step (benchmarks/band_latency.py found the causal
    kernels' code stalling instruction fetch)."""
    plain_lists = [([3, 128, 2, 0, 1, 0, 1, 8], 64), ([2, 128, 2, 1, 1, 1, 1, 8], 128)]
    rows = compiled_apart("hopper_forward", plain_lists + [([*c, 1], d) for c, d in plain_lists])
    apart = {(tuple(r["config"]), r["head_dim"], r["causal"]): r for r in rows}
    merged = [r for r in rows if len(r["config"]) == 9]
    assert len(merged) == 4  # two configurations, causal and not
    for row in merged:
        what = f"{row['config']} d={row['head_dim']} causal={row['causal']}"
        assert row["stack"] == 0 and row["local"] == 0, f"{what} spills"
        plain = apart[(tuple(row["config"][:8]), row["head_dim"], row["causal"])]
        if row["causal"]:  # measured 80 against 113 KiB, 69 against 93 KiB
            assert row["code_bytes"] < 0.8 * plain["code_bytes"], what
            assert row["wgmma"] < plain["wgmma"], f"{what}: the masked loop's copy is still there"
        else:  # the switch leaves unmasked kernels as they were
            assert row["code_bytes"] == plain["code_bytes"], what


def test_a_recording_launches_a_stamping_kernel_and_the_plain_one_with_its_edges() -> None:
    """RECORD compiles the stamps in (the plain kernels read no clock: the test above). A
    recording launches kernels side by side: the programs that record their steps run one copy
    of each loop with every stamp over their first tiles (RECORD 7), then the rest of their
    shares with only their roles' last end stamped (RECORD 8), and the others the plain kernel's
    loop with only their roles' edges stamped (RECORD 5), so that the launch runs at
    the plain kernel's time. One kernel holding both copies (RECORD 2) cost three ping-pong
    warpgroups causal 10-13% on an H200 even where no program took the stamped copy, one copy
    with start and end stamps 0-2% (benchmarks/results/recording-modes-*.json). With two
    pipelined ping-pong consumers at d = 128, the lesson's configuration, two plain ones at
    d = 64 and three ping-pong ones: the unstamped launches' kernels are the plain one's code,
    the machine code within a kilobyte, the stack the same (at most 8 bytes more for a
    stamping program's rest), with three clock reads a role (its start, end and last end; the
    rest's launch only the last end); the stamping
    kernel's loop costs no local memory traffic, and causal a few scalars go to the stack at a
    tile's edges (three ping-pong warpgroups, which spill 32 bytes unrecorded: 128 in two
    loops, 48 with the causal steps merged into one, the form benchmarks/warpgroups.py
    records)."""
    wanted = [([2, 128, 2, 1, 1, 1], 128), ([2, 128, 2, 0, 1], 64), ([3, 128, 2, 1, 1, 1], 64),
              ([3, 128, 2, 1, 1, 1, 0, 1, 1], 64)]  # fmt: skip
    plain = {(tuple(r["config"]), r["causal"]): r for r in compiled_apart("hopper_forward", wanted)}
    rows = compiled_apart("hopper_forward", wanted, "--record")
    assert len(plain) == 8 and sorted(r["record"] for r in rows) == [5] * 8 + [7] * 8 + [8] * 8
    for row in rows:
        what = f"{row['config']} d={row['head_dim']} causal={row['causal']} RECORD {row['record']}"
        twin = plain[(tuple(row["config"]), row["causal"])]
        assert row["wgmma"] == twin["wgmma"], what
        assert row["local"] == 0, f"{what} spills when recorded"
        roles = row["config"][0] + 1
        if row["record"] in (5, 8):
            assert twin["stack"] <= row["stack"] <= twin["stack"] + 8 * (row["record"] == 8), what
            assert abs(row["code_bytes"] - twin["code_bytes"]) <= 1024, what
            # each role's start, end and last end, or (the rest's launch) its last end
            edges = 3 if row["record"] == 5 else 1
            assert row["clock_reads"] == edges * roles, what
            continue
        three, merged = row["config"][0] == 3, row["config"][8:] == [1]
        limit = ((64 if merged else 128) if three else 16) if row["causal"] else 0
        assert row["stack"] <= limit, f"{what} spills when recorded"
        # at least the loop's stamps of every step (the loader's 3, the consumers' 9 or 7) and
        # the roles' start, end and last end
        assert row["clock_reads"] >= 3 + 7 + 3 * roles, what


def test_choose_writes_odd_lengths_to_their_buckets_edge_entries(tmp_path, monkeypatch) -> None:
    """`benchmarks/hopper_forward.py choose` on a time file: a whole length sets the bucket's
    route and configuration, a length that fills no tile only the bucket's edge entry (and none
    where the Triton forward was faster), with times summed over the dtypes."""
    import flashscope.kernels.config as config
    from benchmarks.hopper_forward import choose

    table = tmp_path / "tuned.json"
    table.write_text(json.dumps({"gpus": {}}))
    monkeypatch.setattr(config, "TUNED_FILE", table)
    config.tuned_table.cache_clear()
    fast, slow = [2, 64, 2, 1, 1], [2, 64, 2, 0, 1]
    n_odd = random.choice([1000, 777, 1023])
    ms = {  # (seq, impl) → ms per dtype: at n_odd the pipelined one wins on the sum only
        (2048, "triton"): (1.0, 1.0), (2048, f"ws{slow}"): (0.7, 0.7),
        (2048, f"ws{fast}"): (0.8, 0.8), (n_odd, "triton"): (1.0, 1.0),
        (n_odd, f"ws{slow}"): (0.5, 0.9), (n_odd, f"ws{fast}"): (0.6, 0.7),
        (3000, "triton"): (1.0, 1.0), (3000, f"ws{fast}"): (1.0, 1.01),
    }  # fmt: skip
    rows = [
        {"impl": impl, "dtype": dt, "head_dim": 256, "seq_len": n,
         "causal": True, "ms": t}
        for (n, impl), times in ms.items() for dt, t in zip(("fp16", "bf16"), times, strict=True)
    ]  # fmt: skip
    rows.append({**rows[0], "impl": "sdpa-cudnn", "ms": 0.1})  # peers are never chosen
    result = tmp_path / "time.json"
    result.write_text(json.dumps({"device": "Some GPU", "rows": rows}))
    chosen = choose(result, write=True)
    bucket = "fwd/16/d256/causal/n1024"
    assert chosen == {
        "fwd-route/16/d256/causal/n2048": "ws",
        "ws/fwd/16/d256/causal/n2048": slow,
        f"ws-edge/{bucket}": fast,  # 1.3 ms against 1.4
    }  # 3000: no edge entry, the Triton forward as fast
    saved = json.loads(table.read_text())["gpus"]["Some GPU"]
    assert saved["ws-edge"] == {bucket: fast}
    assert saved["ws"] == {"fwd/16/d256/causal/n2048": slow}
    assert set(saved["routes"]) == {"fwd-route/16/d256/causal/n2048"}
    monkeypatch.undo()
    config.tuned_table.cache_clear()


def _geometry(rng: random.Random) -> tuple:
    """Inputs and a configuration of a random call the kernel takes: batch, heads over K/V
    heads, lengths that fill a tile or not, a head_dim padded or not, a schedule or not."""
    b, hk, group = rng.randint(1, 3), rng.randint(1, 3), rng.choice([1, 2, 4])
    n_q, n_k = rng.choice([64, 200, 384, 1000]), rng.choice([64, 130, 512, 1000])
    d = rng.choice([64, 80, 96, 128])
    dtype = rng.choice([torch.float16, torch.bfloat16])
    q = torch.randn(b, hk * group, n_q, d, dtype=dtype)
    k, v = (torch.randn(b, hk, n_k, d, dtype=dtype) for _ in range(2))
    cfg = WsConfig(rng.choice([1, 2, 3]), rng.choice([64, 128]), 2, True,
                   persistent=rng.random() < 0.5, band=rng.choice([0, 1, 2]))  # fmt: skip
    return q, k, v, cfg, rng.random() < 0.7


def test_a_planned_call_passes_what_arguments_would_for_any_tensors(monkeypatch) -> None:
    """The plan of a geometry, made at one call, gives a later call on other tensors of that
    geometry the positional arguments `_arguments` builds for it, descriptor by descriptor, and
    the same fastlaunch signature; the launch's grid, constexprs and options are the plan's."""
    from flashscope.kernels import fastlaunch, hopper_forward
    from flashscope.kernels.fastlaunch import signature

    monkeypatch.setattr(fastlaunch, "_current_device", lambda: 0)
    rng = random.Random()
    for _ in range(6):
        q, k, v, cfg, causal = _geometry(rng)
        sms = rng.choice([66, 132])
        o, lse = torch.empty_like(q), torch.empty(q.shape[:3])
        plan = hopper_forward._plan(q, k, v, o, lse, causal, 0.1, cfg, sms)
        q2, k2, v2, o2 = (x.clone() for x in (q, k, v, o))
        lse2 = torch.empty_like(lse)
        want, constexprs, options = hopper_forward._arguments(q2, k2, v2, o2, lse2, causal, 0.3,
                                                              cfg, sms)  # fmt: skip
        got = hopper_forward._planned(plan, q2, k2, v2, o2, lse2, 0.3, cfg)
        assert len(got) == len(want)
        for i, (a, b) in enumerate(zip(got, want, strict=True)):
            if isinstance(b, hopper_forward.TensorDescriptor):
                assert type(a) is type(b) and vars(a) == vars(b) and a.base is b.base, i
            elif isinstance(b, torch.Tensor):
                assert a is b or (i == 12 and torch.equal(a, b)), i  # the schedule: cached
            else:
                assert a == b and type(a) is type(b), i
        assert plan.constexprs == constexprs and plan.options == options
        assert plan.key == signature(hopper_forward._attn_fwd_ws, want, constexprs, options)
        tiles = cfg.tiles(q.shape[0] * q.shape[1], q.shape[2])
        assert plan.grid == (cfg.programs(tiles, sms),)


def test_a_copied_descriptor_is_a_new_ones_and_holds_no_tensor() -> None:
    """`_descriptor` of a geometry seen before copies its kept descriptor onto the new tensor:
    every field as Triton would build it; the kept one does not keep its first tensor alive;
    a tensor off the 16-byte alignment is still refused, by Triton."""
    import gc
    import weakref

    from flashscope.kernels.hopper_forward import TensorDescriptor, _descriptor, _new_descriptor

    first = torch.randn(2, 3, 257, 80, dtype=torch.float16)
    gone = weakref.ref(first)
    kept = _descriptor(first, 64)
    del first, kept
    gc.collect()
    assert gone() is None
    x = torch.randn(2, 3, 257, 80, dtype=torch.float16)
    copy, new = _descriptor(x, 64), _new_descriptor(x, 64)
    assert type(copy) is TensorDescriptor and vars(copy) == vars(new) and copy.base is x
    assert copy.shape == [2 * 3 * 257, 80] and copy.block_shape == [64, 128]
    base = torch.empty(x.numel() + 1, dtype=torch.float16)
    with pytest.raises(AssertionError, match="16-byte"):
        _descriptor(base[1:].view(x.shape), 64)


def test_the_tuned_lookup_follows_the_table_when_it_is_read_again(tmp_path, monkeypatch) -> None:
    """`tuned_config` remembers its answers, for as long as the table they came from."""
    import flashscope.kernels.config as config

    table = json.loads(TUNED_FILE.read_text())
    path = tmp_path / "tuned.json"
    path.write_text(json.dumps(table))
    monkeypatch.setattr(config, "TUNED_FILE", path)
    config.tuned_table.cache_clear()
    gpu, key = "NVIDIA H200", "fwd/16/d128/full/n4096"
    before = tuned_config(gpu, 128, False, 4096)
    cfg = [random.choice([2, 3]), 128, 2, 1, 1, 1]
    config.merge_tuned(gpu, {"fwd-route/16/d128/full/n4096": "ws", f"ws/{key}": cfg})
    assert tuned_config(gpu, 128, False, 4096) == WsConfig.from_list(cfg) != before
    config.merge_tuned(gpu, {"fwd-route/16/d128/full/n4096": "triton"})
    assert tuned_config(gpu, 128, False, 4096) is None
    monkeypatch.undo()
    config.tuned_table.cache_clear()
    assert tuned_config(gpu, 128, False, 4096) == before
