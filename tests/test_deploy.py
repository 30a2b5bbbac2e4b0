"""How flashscope ships: the Dockerfile's essentials, what the image holds, `make run`'s default.

There is no Docker engine on the test machines, so the image is checked by reading the
Dockerfile: every COPY source exists and is not ignored, every directory the app reads at run
time is copied in and pointed at, and the final stage runs as a numeric non-root user, checks
its health, and serves on 0.0.0.0:8000 without reaching the network.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import subprocess
import tomllib
from pathlib import Path

import pytest

import flashscope.app
from flashscope.app.config import Settings

ROOT = Path(__file__).resolve().parent.parent


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    text = (ROOT / "Dockerfile").read_text()
    logical = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        logical += stripped[:-1] + " " if stripped.endswith("\\") else stripped
        if not stripped.endswith("\\"):
            word, _, rest = logical.partition(" ")
            out.append((word.upper(), rest.strip()))
            logical = ""
    return out


def final_stage() -> list[tuple[str, str]]:
    steps = instructions()
    last_from = max(i for i, (word, _) in enumerate(steps) if word == "FROM")
    return steps[last_from:]


def ignored(path: str) -> bool:
    """Whether .dockerignore keeps `path` out of the build context (last matching rule wins)."""
    result = False
    for rule in (ROOT / ".dockerignore").read_text().splitlines():
        rule = rule.strip()
        if not rule or rule.startswith("#"):
            continue
        negate = rule.startswith("!")
        pattern = rule.lstrip("!").rstrip("/")
        parts = path.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        if any(fnmatch.fnmatch(p, pattern) for p in prefixes):
            result = not negate
    return result


def test_the_final_stage_runs_as_a_numeric_non_root_user():
    users = [args for word, args in final_stage() if word == "USER"]
    assert users, "the final stage sets no USER"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) != 0, users[-1]
    assert not gid or (gid.isdigit() and int(gid) != 0), users[-1]


def test_health_check_port_and_command():
    stage = dict(final_stage())
    assert "/api/health" in stage["HEALTHCHECK"]
    assert "8000" in stage["EXPOSE"].split()
    cmd = stage["CMD"]
    argv = json.loads(cmd) if cmd.startswith("[") else shlex.split(cmd)  # exec form is JSON
    assert argv[:2] == ["flashscope", "serve"]
    assert argv[argv.index("--host") + 1] == "0.0.0.0"
    assert argv[argv.index("--port") + 1] == "8000"


def test_nothing_reaches_the_network_at_run_time():
    for word, args in final_stage():
        if word in ("CMD", "ENTRYPOINT", "HEALTHCHECK"):
            assert not re.search(r"\b(curl|wget)\b", args), args
            for url in re.findall(r"https?://([^/'\"\s:]+)", args):
                assert url in ("127.0.0.1", "localhost"), args
        if word == "RUN":
            assert not re.search(r"\b(curl|wget|pip install)\b", args), args


def test_build_tools_enter_only_the_cuda_image():
    for word, args in final_stage():
        if word == "RUN" and "apt-get install" in args:
            assert re.search(r'if \[ "\$VARIANT" = "cuda" \]; then\s+apt-get', args), args
    steps = instructions()
    assert any(w == "ARG" and a.startswith("VARIANT=cpu") for w, a in steps)
    build = "".join(a for w, a in steps if w == "RUN")
    assert "whl/cpu" in build and '"$VARIANT" = "cuda"' in build


def test_every_copy_source_exists_and_is_in_the_build_context():
    copies = [args for word, args in instructions() if word == "COPY"]
    assert copies
    for args in copies:
        if args.startswith("--from="):
            continue
        *sources, _dest = shlex.split(args)
        for src in sources:
            assert (ROOT / src).exists(), f"COPY source {src} does not exist"
            assert not ignored(src), f".dockerignore drops COPY source {src}"


def test_the_app_reads_its_directories_from_the_installed_package():
    """Pages, static files and datasets are package data: the image points at no folder."""
    env = " ".join(a for w, a in final_stage() if w == "ENV")
    dirs = [name for name in Settings.model_fields if name.endswith("_dir")]
    assert {"templates_dir", "static_dir", "datasets_dir"} <= set(dirs)
    package_root = Path(flashscope.app.__file__).resolve().parents[1]
    for name in dirs:
        assert f"FLASHSCOPE_{name.upper()}" not in env, f"the image overrides {name}"
        if name == "compile_cache_dir":  # written at run time: the user's, never the package's
            assert not Settings().compile_cache_dir.is_relative_to(package_root)
            assert Settings().compile_cache_dir.is_relative_to(Path.home())
            continue
        assert getattr(Settings(), name).is_relative_to(package_root), name
    built = " ".join(shlex.split(a)[0] for w, a in instructions() if w == "COPY")
    for folder in ("app", "simulator", "kernels", "templates", "static"):
        assert folder in built.split(), f"the build stage does not copy {folder}/"


def test_the_installed_package_holds_every_module_and_data_file():
    """The image installs the project (not editable): anything not declared is left behind."""
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = set(cfg["packages"])
    folders = {folder: package for package, folder in cfg["package-dir"].items()}
    globs = cfg.get("package-data", {})
    for top, package in folders.items():
        assert package in packages, f"{package} is missing from [tool.setuptools] packages"
        for folder, _, files in os.walk(ROOT / top):
            rel = Path(folder).relative_to(ROOT / top)
            if "__pycache__" in rel.parts:
                continue
            name = ".".join((package, *rel.parts))
            if "__init__.py" in files:
                assert name in packages, f"{name} is missing from [tool.setuptools] packages"
                continue
            owner = max((p for p in packages if name == p or name.startswith(p + ".")), key=len)
            below = len(owner.split(".")) - len(package.split("."))  # owner's depth under top
            for f in files:
                inner = Path(*rel.parts[below:], f)
                assert any(fnmatch.fnmatch(str(inner), g) for g in globs.get(owner, [])), (
                    f"{top}/{rel / f} would not be installed: add it to package-data"
                )


def make_run(*args: str, env: dict[str, str] | None = None) -> str:
    out = subprocess.run(
        ["make", "-n", "--no-print-directory", "-C", str(ROOT), "run", *args],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **(env or {})},
    ).stdout
    return next(line for line in out.splitlines() if "flashscope serve" in line)


@pytest.mark.parametrize(
    ("args", "env", "host"),
    [
        ((), {}, "127.0.0.1"),
        ((), {"HOST": "0.0.0.0"}, "127.0.0.1"),  # an exported HOST does not widen it
        (("HOST=0.0.0.0",), {}, "0.0.0.0"),
    ],
)
def test_make_run_binds_loopback_unless_told(args, env, host):
    assert f"--host {host} " in make_run(*args, env=env)


def test_the_readme_documents_docker_with_and_without_a_gpu():
    text = (ROOT / "README.md").read_text()
    assert "docker run -p 8000:8000 flashscope" in text
    assert "--build-arg VARIANT=cuda" in text and "--gpus all" in text
