"""A stand-in for the GPU part of a warpgroup run (what warpgroups), for tests without a GPU.

`execute` is the real executor (app/runs/jobs.py) with its `_record` replaced by `fake_record`,
which answers what an H100 would: stamps written here by hand, as the kernel writes them, and
invented timings. Everything after the kernel call (decoding the stamps into intervals, the
result's shape) is the real code.

The stamps (`handmade_stamps`): one consumer warpgroup, not pipelined, one tile of one key block
per program; the loader's stamps and the consumer's, in SM cycles, with the global timer at
3 ns a cycle. Program 0:

    loader     start 100; step 0: 100 before K's slot is free, 106 K's copy issued, 107 V's;
               tile 0: 105 Q's copy issued (for consumer 0); end 120
    consumer   start 100; tile 0: 100 before Q, 110 Q landed, 200 epilogue, 210 O's copy;
               step 0: 110 begin, 130 S issued (K landed), 150 S done, 170 softmax done,
               175 V landed, 180 P V issued, 195 P V done; end 220

Program 1 is the same 1000 cycles later. `EXPECTED` is program 0's intervals, worked out by hand
from the stamps (ns from the first stamp).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from flashscope.app.schemas.trace import RunRequest
from flashscope.kernels.hopper_forward import (
    REC_HEADER,
    REC_STEP_EVENTS,
    REC_TILE_EVENTS,
    WsConfig,
    record_size,
)
from flashscope.kernels.warpgroups import Stamps

STEPS, TILES = 96, 4  # as app/runs/jobs.py WARPGROUP_RECORDING
JOB = RunRequest.model_validate(  # as the worker gets it: every field of the request
    {"mode": "fwd", "what": "warpgroups", "batch": 1, "heads": 1, "seq": 128, "head_dim": 64,
     "block_n": 128, "stages": 2, "consumers": 1, "pipeline": False}
).model_dump()  # fmt: skip
FIGURES = {"same_output": True, "plain_ms": 0.010, "recorded_branch_ms": 0.011,
           "overhead": 0.1, "span_ms": 0.0034, "span_vs_plain": -0.66,
           "plain_ungated_ms": 0.012, "gate_ms": 0.26, "mode": 6,
           "first_run_s": 1.5}  # fmt: skip
GPU = {"device": "NVIDIA H100 80GB HBM3", "capability": "9.0", "sms": 132}
NS = 3  # ns per cycle

EXPECTED = [  # (role, warpgroup, phase, tile, block, start_ns, end_ns)
    ("loader", -1, "load_q", 0, -1, 15, 30),  # 105 → Q landed at 110
    ("loader", -1, "load_k", 0, 0, 18, 90),  # 106 → the consumer saw K at 130
    ("loader", -1, "load_v", 0, 0, 21, 225),  # 107 → it saw V at 175
    ("consumer", 0, "wait_k", 0, 0, 30, 90),
    ("consumer", 0, "qk", 0, 0, 90, 150),
    ("consumer", 0, "softmax", 0, 0, 150, 210),
    ("consumer", 0, "wait_v", 0, 0, 210, 225),
    ("consumer", 0, "pv", 0, 0, 225, 285),
    ("consumer", 0, "epilogue", 0, -1, 300, 330),
]


def handmade_stamps() -> Stamps:
    """The stamps of the module docstring, as a recording of JOB's launch leaves them."""
    cfg = WsConfig(1, 128, 2, False)
    n_step, n_tile = STEPS * REC_STEP_EVENTS, TILES * REC_TILE_EVENTS
    raw = np.full((2, 2, record_size(STEPS, TILES)), -1, dtype=np.int64)
    for program, shift in ((0, 0), (1, 1000)):
        consumer, loader = raw[program, 0], raw[program, 1]
        steps = consumer[:n_step].reshape(STEPS, REC_STEP_EVENTS)
        for code, t in {0: 110, 2: 130, 5: 150, 6: 170, 3: 175, 4: 180, 7: 195}.items():
            steps[0, code] = t + shift
        tiles = consumer[n_step : n_step + n_tile].reshape(TILES, REC_TILE_EVENTS)
        for code, t in {0: 100, 1: 110, 5: 200, 6: 210}.items():
            tiles[0, code] = t + shift
        loader_steps = loader[:n_step].reshape(STEPS, REC_STEP_EVENTS)
        loader_steps[0, :3] = (100 + shift, 106 + shift, 107 + shift)
        loader[n_step] = 105 + shift  # tile 0, Q's copy for consumer 0
        for role, end in ((consumer, 220), (loader, 120)):
            a, b = 100 + shift, end + shift
            role[n_step + n_tile : n_step + n_tile + REC_HEADER] = (a, NS * a, b, NS * b, b, NS * b)
    return Stamps(raw, cfg, STEPS, TILES)


def fake_record(
    job: dict[str, Any], cfg: WsConfig, seed: int, progress: Any
) -> tuple[Stamps, dict[str, Any], dict[str, Any]]:
    """What `app.runs.jobs._record` returns on an H100 for JOB (any job gets the same)."""
    progress("recording (stand-in stamps)")
    return handmade_stamps(), dict(FIGURES), dict(GPU)


def execute(job: dict, device: str, progress) -> dict:
    """The real executor, its GPU part replaced (the worker's own module, patched here)."""
    from flashscope.app.runs import jobs

    jobs._record = fake_record  # type: ignore[assignment]
    return jobs.execute(job, "cpu", progress)
