"""The documentation against the code: settings, routes, links, README length, wording.

Each check reads the source of truth (Settings, the app's routes, the files on disk) and fails
when a doc has drifted from it. The small tests at the end feed each checker a bad input, so
none of them is a check that cannot fail.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.routing import APIRoute, APIWebSocketRoute

from flashscope.app.config import Settings
from flashscope.app.main import create_app

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
MAX_README_LINES = 150
LINKED = [README, ROOT / "CONTRIBUTING.md", *sorted(DOCS.glob("*.md"))]


def _docs_text() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in sorted(DOCS.glob("*.md")))


# --- settings -----------------------------------------------------------------------------


def undocumented_settings(names: list[str], text: str) -> list[str]:
    """The FLASHSCOPE_<NAME> variables of `names` that `text` never mentions (whole name)."""
    return [
        f"FLASHSCOPE_{n.upper()}"
        for n in names
        if not re.search(rf"\bFLASHSCOPE_{n.upper()}(?![A-Z0-9_])", text)
    ]


def test_every_setting_is_documented():
    missing = undocumented_settings(list(Settings.model_fields), _docs_text())
    assert not missing, f"settings missing from docs/: {missing}"


# --- routes -------------------------------------------------------------------------------


def _routes(routes: list, prefix: str = "") -> Iterator[str]:
    """Paths of the app's own HTTP and WebSocket routes, through included routers."""
    for r in routes:
        inner = getattr(r, "original_router", None)  # an included router (newer FastAPI)
        if inner is not None:
            yield from _routes(inner.routes, prefix + getattr(inner, "prefix", ""))
        elif isinstance(r, APIRoute | APIWebSocketRoute):
            yield prefix + r.path


def app_paths() -> set[str]:
    """Every path under /api and /ws, and every page, that the app serves."""
    return set(_routes(create_app(Settings()).routes))


def undocumented_routes(paths: set[str], text: str) -> list[str]:
    """Paths that `text` never shows in code spans (`GET /api/x`, `/tiles`, `WS /ws/y`)."""
    return sorted(
        p
        for p in paths
        if not re.search(rf"`(?:(?:GET|POST|WS) )?{re.escape(p)}(?:\?[^`]*)?`", text)
    )


def test_the_app_serves_pages_api_and_sockets():
    paths = app_paths()
    assert {"/", "/tiles", "/api/trace", "/ws/trace", "/ws/rooms/{code}"} <= paths


def test_every_route_is_in_the_api_doc():
    missing = undocumented_routes(app_paths(), (DOCS / "api.md").read_text(encoding="utf-8"))
    assert not missing, f"routes missing from docs/api.md: {missing}"


# --- README length ------------------------------------------------------------------------


def test_the_readme_fits_on_a_screen_or_two():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines"


# --- links --------------------------------------------------------------------------------

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = heading.strip().lower()
    kept = "".join(
        c for c in text if c in " -_" or unicodedata.category(c)[0] in "LN"
    )  # letters and numbers
    return kept.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    return {slug(m) for m in re.findall(r"^#+\s+(.*)$", text, re.M)}


def broken_links(path: Path) -> list[str]:
    """Relative links (and images) of a markdown file whose target or heading does not exist."""
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    bad = []
    for target in LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists() or (dest.suffix == ".md" and anchor and anchor not in anchors(dest)):
            bad.append(target)
    return bad


@pytest.mark.parametrize("path", LINKED, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(path):
    assert path.exists()
    bad = broken_links(path)
    assert not bad, f"{path.relative_to(ROOT)}: broken links {bad}"


def test_the_docs_by_topic_exist():
    names = {p.name for p in DOCS.glob("*.md")}
    assert {
        "architecture.md",
        "timing-model.md",
        "validation.md",
        "kernels.md",
        "workshops.md",
        "api.md",
    } <= names


# --- wording ------------------------------------------------------------------------------

WORD = "sess" + "ion"  # split so that this file is no hit of its own search
ALLOWED = (re.compile(r"""scope=["']""" + WORD + """["']"""),)  # pytest fixture scope


def disallowed_hits(lines: list[str]) -> list[str]:
    """`git grep -n` lines (path:line:text) that use the word other than as allowed."""
    return [h for h in lines if not any(a.search(h.split(":", 2)[-1]) for a in ALLOWED)]


def test_the_tree_speaks_of_the_project_not_of_how_it_was_built():
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    out = subprocess.run(
        ["git", "grep", "-I", "-n", "-i", "-w", "--untracked", "-e", WORD],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode in (0, 1), out.stderr  # 1: no hit at all
    bad = disallowed_hits(out.stdout.splitlines())
    assert not bad, "\n".join(bad)


# --- the checkers fail on bad input -------------------------------------------------------


def test_the_checkers_catch_drift(tmp_path):
    assert undocumented_settings(["max_seq"], "FLASHSCOPE_MAX_SEQ_GPU only") == [
        "FLASHSCOPE_MAX_SEQ"
    ]
    assert undocumented_settings(["max_seq"], "`FLASHSCOPE_MAX_SEQ` = 1024") == []
    assert undocumented_routes({"/api/x", "/"}, "`GET /api/x?y=1` and /") == ["/"]
    page = tmp_path / "page.md"
    (tmp_path / "there.md").write_text("# A heading, here\n")
    page.write_text(
        "[ok](there.md) [anchor](there.md#a-heading-here) [web](https://example.org)\n"
        "[gone](missing.md) [bad anchor](there.md#nowhere) ![img](pics/none.png)\n"
        "```\n[in code](not-checked.md)\n```\n"
    )
    assert broken_links(page) == ["missing.md", "there.md#nowhere", "pics/none.png"]
    hits = [
        "tests/conftest.py:45:@pytest.fixture(scope='" + WORD + "')",
        "README.md:3:the fifth " + WORD + " measured",
    ]
    assert disallowed_hits(hits) == [hits[1]]


def test_the_architecture_table_names_every_app_module():
    """Each module of app/ has its row (a cell may name several: `a.py`, `b.py`)."""
    text = (DOCS / "architecture.md").read_text()
    named = set(re.findall(r"`([\w/]+\.py)`", text))
    modules = {
        str(p.relative_to(ROOT / "app"))
        for p in (ROOT / "app").rglob("*.py")
        if p.name != "__init__.py" and "__pycache__" not in p.parts
    }
    assert not modules - named, f"docs/architecture.md lacks rows for {sorted(modules - named)}"
