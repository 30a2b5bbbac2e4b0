"""The package as users install it: a wheel, installed outside the repository, serves every page.

The wheel is built from the source tree and installed with `--no-deps` into a fresh virtual
environment in a temporary folder. Its dependencies (numpy, FastAPI, torch, …) are borrowed from
the test environment through a `.pth` line, so the test does not download torch again; flashscope
itself can come only from the wheel (the test environment's editable install is a finder that
the borrowed folder does not activate), and the test checks that it does.
"""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
import urllib.request
import venv
import zipfile
from pathlib import Path

import pytest

from flashscope.app.views import VIEWS
from tests.app.servers import flashscope_server

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(out), str(ROOT)],
        check=True,
        capture_output=True,
    )
    (path,) = out.glob("flashscope-*.whl")
    return path


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """A fresh venv holding the wheel; returns its python."""
    home = tmp_path_factory.mktemp("venv")
    venv.create(home, with_pip=True)
    python = home / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--no-deps", str(wheel)],
        check=True,
        capture_output=True,
    )
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(site) / "borrowed_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def test_the_wheel_holds_one_namespace_and_its_data(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"flashscope"}, tops  # no generic top-level `app`, `kernels`, `simulator`
    for wanted in (
        "flashscope/templates/base.html",
        "flashscope/templates/_partials/nav.html",
        "flashscope/static/css/app.css",
        "flashscope/kernels/tuned.json",
        "flashscope/simulator/data/compiled-kernels.json",
    ):
        assert wanted in names, wanted
    assert any(n.startswith("flashscope/static/vendor/plotly-") for n in names)
    assert any(n.startswith("flashscope/app/data/validation-") for n in names)
    # every shipped dataset, the gzipped users' sweep among them
    shipped = sorted(p.name for p in (ROOT / "app" / "data").glob("validation-*.json*"))
    assert any(n.endswith(".json.gz") for n in shipped)
    for name in shipped:
        assert f"flashscope/app/data/{name}" in names, name
    assert any(n.startswith("flashscope/app/data/timeline-") for n in names)


def test_the_installed_wheel_serves_every_page(installed, tmp_path):
    where = subprocess.run(
        [str(installed), "-c", "import flashscope.app as a; print(a.__file__)"],
        check=True,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    ).stdout.strip()
    assert Path(where).is_relative_to(installed.parents[1]), where  # the wheel, not the repo
    with flashscope_server(python=str(installed), cwd=str(tmp_path)) as base:
        for path in ["/", *(v.path for v in VIEWS if v.ready), "/static/css/app.css"]:
            with urllib.request.urlopen(base + path, timeout=60) as r:
                assert r.status == 200, path
                assert r.read(), path
        compare = next(v for v in VIEWS if v.path == "/compare")
        with urllib.request.urlopen(base + compare.api.split("?")[0], timeout=60) as r:
            assert r.status == 200  # the shipped datasets are found in the installed package
        with urllib.request.urlopen(base + "/api/compare?sweep=users", timeout=60) as r:
            assert json.load(r)["dataset"]["sweep"] == "users"
