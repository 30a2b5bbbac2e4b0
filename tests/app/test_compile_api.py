"""Kernels compiled on demand by the server: a simulation of a kernel no table holds answers at
once with the estimate and asks for the kernel; GET /api/compiled follows it; the next
simulation takes the compiled figures. The compiling process here is a stand-in that writes
each key's entry (the real compile: tests/simulator/timing/test_ondemand.py)."""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from flashscope.app.config import Settings
from flashscope.app.main import create_app
from flashscope.simulator.timing import compiled, ondemand

# a forward of flashscope's kernels at a spread tile no shipped table holds
BODY = {"gpu": "h100", "algo": "fa2", "impl": "flashscope", "batch": 2, "heads": 3, "seq": 1000,
        "head_dim": 80, "causal": True, "block_m": 128, "block_n": 16, "stages": 4,
        "warps": 2}  # fmt: skip

FAKE = """
import json, os, sys, time
root, keys, regs = sys.argv[1], sys.argv[2:-1], int(sys.argv[-1])
for _ in range(600):  # until the test lets it finish
    if os.path.exists(os.path.join(root, "go")):
        break
    time.sleep(0.05)
for k in keys:
    folder = os.path.join(root, {folder!r})
    os.makedirs(folder, exist_ok=True)
    doc = {{"format": 1, "key": k, "registers": regs, "shared": 4096, "kernel": None}}
    if "/s3/" in k:
        doc = {{"format": 1, "key": k, "error": "CompilationError: refused"}}
    with open(os.path.join(folder, k.replace("/", "_") + ".json"), "w") as f:
        json.dump(doc, f)
"""


@pytest.fixture
def regs() -> int:
    return random.randrange(32, 241, 8)  # the register file hands out multiples of 8


@pytest.fixture
def client(tmp_path: Path, regs: int, monkeypatch: pytest.MonkeyPatch):
    folder = compiled.cache_file(tmp_path, "k").parent.name
    script = FAKE.format(folder=folder)

    def command(root: Path, keys: list[str]) -> tuple[list[str], dict[str, str]]:
        return [sys.executable, "-c", script, str(root), *keys, str(regs)], {}

    monkeypatch.setattr(ondemand, "command", command)
    settings = Settings(compile_on_demand=True, compile_cache_dir=tmp_path)
    with TestClient(create_app(settings)) as c:
        yield c


def _wait(client: TestClient, key: str) -> str:
    root = client.app.state.settings.compile_cache_dir
    assert client.get("/api/compiled", params={"key": key}).json()["keys"][key] == "pending"
    (root / "go").touch()
    for _ in range(200):
        state = client.get("/api/compiled", params={"key": key}).json()["keys"][key]
        if state != "pending":
            return state
        time.sleep(0.05)
    raise AssertionError("still pending")


def test_a_new_kernel_is_compiled_in_the_background(client: TestClient, regs: int) -> None:
    first = client.post("/api/simulate", json=BODY)
    assert first.status_code == 200, first.text
    out = first.json()
    (kernel,) = out["kernels"]
    key = kernel["compiled"]["key"]
    assert kernel["compiled"]["source"] == "estimate" and out["compiling"] == {key: "pending"}
    assert _wait(client, key) == "done"
    again = client.post("/api/simulate", json=BODY).json()
    (kernel,) = again["kernels"]
    assert kernel["compiled"] == {"key": key, "source": "local"}
    assert kernel["regs_per_thread"] == regs and again["compiling"] == {}


def test_a_refused_kernel_is_asked_for_once(client: TestClient) -> None:
    body = {**BODY, "stages": 3}
    key = client.post("/api/simulate", json=body).json()["kernels"][0]["compiled"]["key"]
    assert _wait(client, key) == "failed"
    again = client.post("/api/simulate", json=body).json()
    assert again["kernels"][0]["compiled"]["source"] == "estimate"
    assert again["compiling"] == {key: "failed"}


def test_kernels_the_tables_hold_are_not_compiled(client: TestClient) -> None:
    body = {**BODY, "head_dim": 64, "seq": 4096, "block_m": 128, "block_n": 64, "stages": 2,
            "warps": 4}  # fmt: skip
    out = client.post("/api/simulate", json=body).json()
    assert out["compiling"] == {}
    assert out["kernels"][0]["compiled"]["source"] in ("measured", "compiler")
    # nor on a GPU of another architecture, nor for the papers' algorithms
    assert client.post("/api/simulate", json={**BODY, "gpu": "a100"}).json()["compiling"] == {}
    plain = {k: v for k, v in BODY.items() if k != "impl"}
    assert client.post("/api/simulate", json=plain).json()["compiling"] == {}


def test_the_status_route_checks_its_keys(client: TestClient) -> None:
    bad = client.get("/api/compiled", params={"key": "fwd/d64"})
    assert bad.status_code == 422 and "not a compiled-kernel key" in bad.text
    many = [f"fwd/d64/64x64/w4/s{s}/full" for s in range(2, 20)]
    r = client.get("/api/compiled", params={"key": many})
    assert r.status_code == 422
    detail = r.json()["detail"][0]
    assert detail["field"] == "key" and detail["limit"] == Settings().compile_max_status_keys
    assert client.get("/api/compiled").status_code == 422
    unknown = client.get("/api/compiled", params={"key": many[0]}).json()
    assert unknown["keys"] == {many[0]: "unknown"} and unknown["on_demand"] is True


def test_off_compiles_nothing(tmp_path: Path) -> None:
    settings = Settings(compile_on_demand=False, compile_cache_dir=tmp_path)
    with TestClient(create_app(settings)) as c:
        out = c.post("/api/simulate", json=BODY).json()
        assert out["compiling"] == {} and out["kernels"][0]["compiled"]["source"] == "estimate"
        key = out["kernels"][0]["compiled"]["key"]
        assert c.get("/api/compiled", params={"key": key}).json()["keys"] == {key: "off"}
    assert not any(tmp_path.iterdir())


def test_a_compiler_that_cannot_start_leaves_the_estimate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def command(root: Path, keys: list[str]) -> tuple[list[str], dict[str, str]]:
        return [str(tmp_path / "no-such-python"), *keys], {}

    monkeypatch.setattr(ondemand, "command", command)
    settings = Settings(compile_on_demand=True, compile_cache_dir=tmp_path)
    with TestClient(create_app(settings)) as c:
        out = c.post("/api/simulate", json=BODY).json()
        key = out["kernels"][0]["compiled"]["key"]
        for _ in range(100):
            state = c.get("/api/compiled", params={"key": key}).json()["keys"][key]
            if state != "pending":
                break
            time.sleep(0.05)
        assert state == "timeout"
        again = c.post("/api/simulate", json=BODY).json()
        assert again["kernels"][0]["compiled"]["source"] == "estimate"
        assert again["compiling"] == {key: "timeout"}  # not asked for again
