"""The content-addressed cache: layout, per-artifact file locks, and publishing finished entries.

Layout under ``Settings.cache_dir`` (marked with ``CACHEDIR.TAG`` so backup tools skip it)::

    archives/<sha256>.<ext>        downloads, named by their digest once verified
    archives/<name>.part           a download in progress (resumed on the next run)
    git/objects.git                a bare repository holding shallow fetches of pinned commits
    sources/<commit>/              an extracted source tree, read-only, never edited in place
    sources/<commit>.json          its marker, written last: a tree without one is incomplete
    locks/<artifact>.lock          one file lock per artifact

Entries are built in a temporary folder beside their final place and renamed into it, so a crash
leaves only a temporary folder that the next run removes.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ortstack import locks
from ortstack.lockfile import write_atomic

if TYPE_CHECKING:
    from collections.abc import Iterator

# https://bford.info/cachedir/
CACHEDIR_TAG = (
    "Signature: 8a477f597d28d172789f06886806bc55\n"
    "# This file is a cache directory tag created by ortstack.\n"
    "# For information about cache directory tags see https://bford.info/cachedir/\n"
)
TEMP_PREFIX = ".tmp-"


@dataclass(frozen=True, kw_only=True)
class Cache:
    root: Path
    wait_for_lock: bool = True
    """Wait for a lock held by another process; when False, raise ``LockBusyError`` at once."""

    @property
    def archives(self) -> Path:
        return self.root / "archives"

    @property
    def git_dir(self) -> Path:
        return self.root / "git" / "objects.git"

    @property
    def sources(self) -> Path:
        return self.root / "sources"

    def source_dir(self, commit: str) -> Path:
        return self.sources / commit

    def source_marker(self, commit: str) -> Path:
        return self.sources / f"{commit}.json"

    def lock_path(self, artifact: str) -> Path:
        return self.root / "locks" / f"{artifact}.lock"

    def ensure(self) -> None:
        """Create the layout and the ``CACHEDIR.TAG`` on first use."""
        for folder in (self.archives, self.sources, self.root / "locks"):
            folder.mkdir(parents=True, exist_ok=True)
        tag = self.root / "CACHEDIR.TAG"
        if not tag.exists():
            write_atomic(tag, CACHEDIR_TAG.encode())

    @contextmanager
    def lock(self, artifact: str, *, what: str) -> Iterator[None]:
        """Hold the lock of ``artifact``; ``what`` says in messages what it guards."""
        self.ensure()
        path = self.lock_path(artifact)
        with locks.hold(path, wait=self.wait_for_lock, what=f"working on {what} (lock {path})"):
            yield

    def source_record(self, commit: str) -> dict[str, Any] | None:
        """The marker of a complete source tree, or ``None`` when the tree is absent or incomplete."""
        marker = self.source_marker(commit)
        if not marker.is_file() or not self.source_dir(commit).is_dir():
            return None
        try:
            record: dict[str, Any] = json.loads(marker.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return record if record.get("commit") == commit else None

    def temp_dir(self, parent: Path, name: str) -> Path:
        parent.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{name}-", dir=parent))

    def publish_source(self, staged: Path, commit: str, record: dict[str, Any]) -> Path:
        """Make ``staged`` the read-only tree of ``commit``; the marker is written last."""
        final = self.source_dir(commit)
        remove_tree(final)  # an incomplete tree left by a crash: it never got its marker
        make_read_only(staged)
        staged.rename(final)
        write_atomic(self.source_marker(commit), (json.dumps(record, indent=2, sort_keys=True) + "\n").encode())
        return final

    def remove_stale_temps(self, parent: Path, name: str) -> None:
        """Remove what crashed runs left while building ``name``; call only while holding its lock."""
        if parent.is_dir():
            for leftover in parent.glob(f"{TEMP_PREFIX}{name}-*"):
                remove_tree(leftover)


def make_read_only(root: Path) -> None:
    """Drop the write bits of every file under ``root`` (folders stay writable so it can be removed)."""
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            mode = stat.S_IMODE(path.stat().st_mode)
            path.chmod(mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def remove_tree(path: Path) -> None:
    """Remove ``path`` (a folder or a file) even when it holds read-only files."""
    if path.is_symlink() or path.is_file():
        path.unlink()
        return
    if not path.exists():
        return

    def make_writable_and_retry(function: Any, failed: str, info: Any) -> None:
        if isinstance(info[1], FileNotFoundError):  # gone meanwhile (a lock file of an interrupted git)
            return
        os.chmod(failed, stat.S_IWRITE | stat.S_IREAD | stat.S_IEXEC)  # noqa: PTH101 - shutil hands a str
        function(failed)

    shutil.rmtree(path, onerror=make_writable_and_retry)


def tree_size(root: Path) -> tuple[int, int]:
    """(files, bytes) under ``root``, links not followed."""
    files = total = 0
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            files += 1
            total += path.stat().st_size
    return files, total
