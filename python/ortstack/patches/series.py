"""The patch series as data: which entries apply on a platform, and their verified files.

Every vendored file is read, checked against its pinned sha256 and parsed before any patch is
applied, so a corrupt or tampered file stops the run while nothing has been written.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ortstack.errors import PatchError
from ortstack.patches import patchfile

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from unidiff.patch import PatchSet

    from ortstack.config import PatchEntry, Stack
    from ortstack.lockfile import Lock

FULL_ID = 40
"""Characters in a full commit id."""
REFRESH_COMMAND = "nox -s refresh-patches (or: ortstack refresh-patches)"


def host_platform() -> str:
    """This machine as a ``platforms`` value: ``linux``, ``windows`` or ``macos``."""
    if sys.platform == "win32":
        return "windows"
    if sys.platform == "darwin":
        return "macos"
    return "linux"


def applies_on(entry: PatchEntry, platform: str) -> bool:
    return not entry.platforms or platform in entry.platforms


def sha256_key(entry: PatchEntry) -> str:
    return f"patch.{entry.id}.sha256"


def head_key(entry: PatchEntry) -> str:
    return f"patch.{entry.id}.head"


def patch_path(stack: Stack, entry: PatchEntry) -> Path:
    return stack.root / entry.file


def is_vendored(stack: Stack, entry: PatchEntry) -> bool:
    return entry.mode == "in-base" or (bool(entry.file) and patch_path(stack, entry).is_file())


def expected_sha256(entry: PatchEntry, lock: Lock) -> str | None:
    """The pinned digest: ``stack.toml`` first, then the lock (trust-on-first-use)."""
    return entry.sha256 or lock.get(sha256_key(entry))


def pinned_head(entry: PatchEntry, lock: Lock) -> str:
    """The commit the entry is pinned to: a full id in ``stack.toml``, else the one locked."""
    locked = lock.get(head_key(entry)) or ""
    head = entry.origin.head
    if len(head) == FULL_ID or not locked.startswith(head):
        return head
    return locked


@dataclass(frozen=True, kw_only=True)
class Verified:
    """A vendored patch whose bytes match the pin and whose diff parsed cleanly."""

    entry: PatchEntry
    path: Path
    sha256: str
    patch: patchfile.PatchFile
    hunks: PatchSet
    first_use: bool = False
    """No digest was pinned: ``sha256`` is recorded in the lock once the series applied (trust-on-first-use)."""

    @property
    def name(self) -> str:
        return self.path.name


def fix_tip(entry: PatchEntry) -> str:
    """How to mend a patch that is corrupt or does not apply: a local one is ours to edit."""
    if entry.origin.kind == "local":
        return (
            f"{entry.id} is a local patch: fix {entry.file} by hand, or redo the change in a prepared tree "
            "and run `ortstack patch --export`"
        )
    return f"vendor {entry.id} again ({REFRESH_COMMAND}), or fix it in a prepared tree and `ortstack patch --export`"


def verify(stack: Stack, entry: PatchEntry, lock: Lock, env: Mapping[str, str]) -> Verified:
    """Read ``entry``'s file, check its sha256 and parse it; a digest seen for the first time is not
    recorded here but by ``record_first_use``, once the file has also applied: a refused patch is never trusted."""
    path = patch_path(stack, entry)
    if not path.is_file():
        msg = f"patch {entry.id} is not vendored: {entry.file} does not exist"
        tip = f"vendor it with {REFRESH_COMMAND}" if entry.origin.kind != "local" else "restore the file from git"
        raise PatchError(msg, tip=tip)
    data = path.read_bytes()
    found = patchfile.sha256_hex(data)
    expected = expected_sha256(entry, lock)
    if expected is None:
        lock.check_resolvable(sha256_key(entry), what=f"sha256 of {entry.file}")
    elif expected != found:
        msg = f"patch {path.name} ({entry.id}) has sha256 {found}, but the series pins {expected}"
        tip = (
            "the file changed since it was vendored: restore it from git, or if the change is intended "
            "run `ortstack refresh-patches --rehash` to record the new digest"
        )
        raise PatchError(msg, tip=tip)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        msg = f"patch {path.name} is not UTF-8 text"
        raise PatchError(msg, tip=fix_tip(entry)) from None
    parsed = patchfile.split(text, path.name)
    hunks = patchfile.validate(parsed, path.name, text=text, env=env, tip=fix_tip(entry))
    return Verified(entry=entry, path=path, sha256=found, patch=parsed, hunks=hunks, first_use=expected is None)


def record_first_use(verified: list[Verified], lock: Lock) -> None:
    """Record in the lock the digests of files that were verified, parsed and applied for the first time."""
    for patch in verified:
        if patch.first_use:
            lock.resolve(sha256_key(patch.entry), patch.sha256, what=f"sha256 of {patch.entry.file}")


def verify_series(stack: Stack, lock: Lock, platform: str, env: Mapping[str, str]) -> list[Verified]:
    """Verify the entries for ``platform`` (they must be vendored) and every other vendored file:
    a corrupt file is caught on any platform."""
    return [
        verify(stack, entry, lock, env)
        for entry in stack.patches
        if entry.mode == "apply" and (applies_on(entry, platform) or is_vendored(stack, entry))
    ]
