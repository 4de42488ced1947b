"""``stack.lock``: values resolved on first use (trust-on-first-use), written atomically.

The lock holds what ``stack.toml`` leaves open: the sha256 of an archive fetched for the first time,
the sha256 of a patch vendored by the first networked build. With ``--locked`` nothing new may be
resolved: a missing value is an error, so CI builds exactly what a developer locked.
"""

from __future__ import annotations

import os
import re
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import tomli_w

from ortstack import log
from ortstack.bounds import Bounds, nesting_of, read_at_most, size_limit
from ortstack.config import HEX40, HEX64
from ortstack.errors import ConfigError

HEADER = "# Written by ortstack: values resolved on first use. Commit this file; edit stack.toml instead.\n"


@dataclass(kw_only=True)
class Lock:
    path: Path
    locked: bool = False
    """Refuse to resolve new values (``--locked``)."""
    values: dict[str, str] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path, *, locked: bool = False, bounds: Bounds | None = None) -> Lock:
        """The lock at ``path`` (empty when there is none); every value checked for its shape."""
        bounds = bounds or Bounds()
        tip = f"restore {path.name} from version control, or delete it to resolve its values again"
        try:
            data = read_at_most(path, size_limit(bounds.lock_file_mib))
        except FileNotFoundError:
            return cls(path=path, locked=locked)
        except OSError as exc:
            msg = f"{path}: cannot read the lock file: {exc.strerror or exc}"
            raise ConfigError(msg, tip=tip) from None
        if data is None:
            msg = f"{path} is larger than {bounds.lock_file_mib:g} MiB: not a lock file ortstack wrote"
            raise ConfigError(msg, tip=f"{tip}; for a larger one raise ORTSTACK_LOCK_FILE_MAX_MIB")
        try:
            document = tomllib.loads(data.decode("utf-8"))
        except UnicodeDecodeError:
            msg = f"{path}: not UTF-8 text"
            raise ConfigError(msg, tip=tip) from None
        except tomllib.TOMLDecodeError as exc:
            msg = f"{path}: not valid TOML: {' '.join(str(exc).split())}"
            raise ConfigError(msg, tip=tip) from None
        except RecursionError:  # deeper than the parser can follow: far past the bound
            raise _too_deep(path, bounds, tip) from None
        if nesting_of(document, bounds.nesting) > bounds.nesting:
            raise _too_deep(path, bounds, tip)
        resolved = document.get("resolved", {})
        if not isinstance(resolved, dict) or not all(isinstance(v, str) for v in resolved.values()):
            msg = f"{path}: [resolved] must map names to strings"
            raise ConfigError(msg, tip=tip)
        for key, value in resolved.items():
            _check_value(path, key, value, tip)
        return cls(path=path, locked=locked, values=dict(resolved))

    def get(self, key: str) -> str | None:
        return self.values.get(key)

    def resolve(self, key: str, value: str, *, what: str) -> None:
        """Record ``value`` for ``key`` the first time it is seen; refuse under ``--locked``."""
        current = self.values.get(key)
        if current == value:
            return
        if current is not None:
            msg = f"{what}: {key} is locked to {current} but resolved to {value}"
            raise ConfigError(msg, tip=f"if the change is intended, remove {key} from {self.path.name}")
        self.check_resolvable(key, what=what)
        log.loud(f"trust on first use: {what}\n{key} = {value}\nrecorded in {self.path}")
        self.values[key] = value
        self.save()

    def check_resolvable(self, key: str, *, what: str) -> None:
        """Refuse, before any work, a value ``--locked`` will not let ``resolve`` record."""
        if self.locked and key not in self.values:
            msg = f"{what}: {key} is not in {self.path.name} and --locked forbids resolving it"
            raise ConfigError(msg, tip="run once without --locked and commit the lock file")

    def save(self) -> None:
        payload = HEADER + tomli_w.dumps({"resolved": dict(sorted(self.values.items()))})
        write_atomic(self.path, payload.encode())


def _too_deep(path: Path, bounds: Bounds, tip: str) -> ConfigError:
    msg = f"{path}: arrays or tables nest more than {bounds.nesting} deep: not a lock file ortstack wrote"
    return ConfigError(msg, tip=tip)


VERSION_KEY_PREFIX = "VERSION_NUMBER of "
"""``VERSION_NUMBER of <commit>``: the version a tree naming no commit was taken as, on first use."""
_VERSION = re.compile(r"[0-9A-Za-z][0-9A-Za-z.+_-]{0,63}")


def _check_value(path: Path, key: str, value: str, tip: str) -> None:
    """A lock holds digests, commit ids and versions only: anything else (a path, ``..``) is refused
    before use."""
    if key.startswith("patch.") and key.endswith(".head"):
        shape, what = HEX40, "a 40-hex commit id"
    elif key.startswith(VERSION_KEY_PREFIX):
        shape, what = _VERSION, "a version such as 1.30.0"
    else:
        shape, what = HEX64, "a 64-hex sha256"
    if not shape.fullmatch(value):
        msg = f"{path}: {key!r} must be {what}, got {value[:80]!r}"
        raise ConfigError(msg, tip=tip)


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so readers see the old file or the new one, never a torn one; the file
    keeps its permissions, and a new one gets what the umask gives (not the temporary file's 0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = path.stat().st_mode & 0o7777
    except FileNotFoundError:
        mode = 0o666 & ~_umask()
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        Path(tmp).chmod(mode)
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    """The process's umask (reading it means setting it: set back at once)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
