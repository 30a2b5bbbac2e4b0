"""The validation datasets the app ships (benchmarks/results/validation-<gpu>-<date>.json),
the measured schedules and the Hopper forward's measured warpgroup timelines.

`Datasets` lives on app.state: it lists the files of Settings.datasets_dir, keeps the newest file
per GPU preset, and re-reads a file only when it changed on disk. No GPU is needed: these are
measurements made elsewhere (device, date and versions travel with each file).
"""

from __future__ import annotations

import gzip
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flashscope.simulator.core import hardware

# The datasets shipped with the app (package data: app/data/ in the repository).
DATA_DIR = Path(__file__).resolve().parent / "data"
PATTERNS = ("validation-*.json", "validation-*.json.gz")  # the larger ones gzipped

# The sweep a dataset measured (its "sweep" field; "protocol" where it has none), how the app
# labels it, and which subset its headline figures are of: the protocol's over all its rows, as
# its targets are set; the users' space's over the held-out half, which nothing was fitted on;
# the fresh sweeps' over all their rows, none of which anything was fitted on.
SWEEPS: dict[str, dict[str, str]] = {
    "protocol": {"label": "the papers' protocol", "headline": "all"},
    "users": {"label": "the space users meet", "headline": "holdout"},
    # sweeps drawn after the engine was last fitted (benchmarks/fresh_dataset.py): all held out
    "fresh": {"label": "fresh shapes, in no sweep the engine knows", "headline": "all"},
}


def sweep_of(doc: dict[str, Any]) -> str:
    """The sweep a dataset measured: its "sweep" field, "protocol" where it has none."""
    sweep = doc.get("sweep")
    return sweep if isinstance(sweep, str) and sweep else "protocol"


def dataset_key(gpu: str, sweep: str = "protocol") -> str:
    """How Datasets.all keys a dataset: the GPU preset key, with the sweep after a colon where
    it is not the protocol ("h100-sxm", "h100-sxm:users")."""
    return gpu if sweep == "protocol" else f"{gpu}:{sweep}"


class _ByMtime:
    """Parsed files, each re-parsed only when its modification time changes (thread-safe). A
    parse that yields None (unreadable, not the expected kind) is not kept."""

    def __init__(self) -> None:
        self._cache: dict[Path, tuple[float, Any]] = {}
        self._lock = threading.Lock()

    def read(self, path: Path, parse: Callable[[Path], Any | None]) -> Any | None:
        try:
            mtime = path.stat().st_mtime
        except OSError:
            return None
        with self._lock:
            hit = self._cache.get(path)
            if hit and hit[0] == mtime:
                return hit[1]
        value = parse(path)
        if value is not None:
            with self._lock:
                self._cache[path] = (mtime, value)
        return value


def _parse_dataset(path: Path) -> dict[str, Any] | None:
    try:
        raw = path.read_bytes()
        doc = json.loads(gzip.decompress(raw) if path.name.endswith(".gz") else raw)
    except (OSError, EOFError, ValueError):  # gzip.BadGzipFile and JSONDecodeError included
        return None
    if not isinstance(doc, dict) or doc.get("kind") != "flashscope validation":
        return None
    doc["file"] = path.name
    return doc


class Datasets:
    """Newest validation dataset per GPU preset key and sweep (`dataset_key`), read lazily and
    cached by mtime."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self._files = _ByMtime()

    def all(self) -> dict[str, dict[str, Any]]:
        """`dataset_key` → the newest dataset of that GPU and sweep (by the date it holds, then
        the file name)."""
        best: dict[str, dict[str, Any]] = {}
        paths = sorted({p for pattern in PATTERNS for p in self.folder.glob(pattern)})
        for path in paths:
            doc = self._files.read(path, _parse_dataset)
            if doc is None or not isinstance(doc.get("rows"), list):
                continue
            gpu = doc.get("gpu")
            if not isinstance(gpu, str):
                continue
            key = dataset_key(gpu, sweep_of(doc))
            old = best.get(key)
            if old is None or (doc.get("date") or "", doc["file"]) > (
                old.get("date") or "",
                old["file"],
            ):
                best[key] = doc
        return best


TIMELINE_PATTERN = "timeline-*.json.gz"


class Timelines:
    """Measured schedules (benchmarks/timeline.py: each CTA's start, end and SM of one launch)
    by (GPU preset key, configuration id), from the gzipped files of Settings.datasets_dir.

    Only records in the kernel's default launch order (band 1) are indexed: those are the
    runs the validation datasets time. Files are re-read when they change on disk.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self._files = _ByMtime()

    def get(self, gpu: str, config_id: str) -> dict[str, Any] | None:
        """The record of `config_id` on `gpu` in the last file by name (names carry the date)."""
        found = None
        for path in sorted(self.folder.glob(TIMELINE_PATTERN)):
            index = self._files.read(path, _index_timelines) or {}
            found = index.get((gpu, config_id), found)
        return found


def _index_timelines(path: Path) -> dict[tuple[str, str], dict[str, Any]] | None:
    """(GPU key, configuration id) → record, for a file's band-1 records with a schedule."""
    try:
        doc = json.loads(gzip.decompress(path.read_bytes()))
    except (OSError, EOFError, ValueError):
        return None
    index: dict[tuple[str, str], dict[str, Any]] = {}
    records = doc.get("records") if isinstance(doc, dict) else None
    for rec in records if isinstance(records, list) else []:
        config = rec.get("config") if isinstance(rec, dict) else None
        if not isinstance(config, dict) or rec.get("band", 1) != 1:
            continue
        if not all(isinstance(rec.get(k), list) for k in ("start_us", "end_us", "sm")):
            continue
        rec = {**rec, "device": doc.get("device"), "date": doc.get("date"), "file": path.name}
        index[(str(config.get("gpu")), str(rec.get("id")))] = rec
    return index


WARPGROUPS_PATTERN = "warpgroups-*.json.gz"


def _parse_warpgroups(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(gzip.decompress(path.read_bytes()))
    except (OSError, EOFError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("kind") != "flashscope warpgroup timelines":
        return None
    doc["file"] = path.name
    return doc


class Warpgroups:
    """Measured warpgroup timelines and variant times of the Hopper forward
    (benchmarks/warpgroups.py), newest file per GPU preset key, re-read when a file changes."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self._files = _ByMtime()

    def all(self) -> dict[str, dict[str, Any]]:
        """GPU preset key → its newest dataset (by date, then file name)."""
        best: dict[str, dict[str, Any]] = {}
        for path in sorted(self.folder.glob(WARPGROUPS_PATTERN)):
            doc = self._files.read(path, _parse_warpgroups)
            if doc is None:
                continue
            try:
                key = hardware.resolve(str(doc.get("device")))
            except ValueError:
                continue
            old = best.get(key)
            if old is None or (doc.get("date") or "", doc["file"]) >= (
                old.get("date") or "",
                old["file"],
            ):
                best[key] = doc
        return best
