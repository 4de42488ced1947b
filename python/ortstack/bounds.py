"""How much of an untrusted input ortstack reads: sizes and nesting depths, each overridable.

Every reader of a file a user or a server hands over stops at a bound instead of reading without
end: a stack file, a lock file, a wheel's build info, a download. The bounds come from the
``ORTSTACK_*`` environment (passed in as a mapping, read once in ``settings``); the defaults are far
above what a real input needs.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from ortstack.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

MIB = 1024**2


def positive_number(env: Mapping[str, str], key: str) -> float | None:
    """The number ``env[key]`` holds, None when unset; a value that is not above 0 is refused."""
    raw = env.get(key, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        msg = f"{key}={raw!r} is not a positive number"
        raise ConfigError(msg, tip=f"set {key} to a number above 0, or unset it for the default")
    return value


@dataclass(frozen=True, kw_only=True)
class Bounds:
    """The most ortstack reads of one input."""

    download_mib: float = 4096.0
    """A download whose digest is pinned or resolved on first use (``ORTSTACK_DOWNLOAD_MAX_MIB``)."""
    stack_file_mib: float = 1.0
    """``stack.toml`` (``ORTSTACK_STACK_FILE_MAX_MIB``); a real one is a few KiB."""
    lock_file_mib: float = 1.0
    """``stack.lock`` (``ORTSTACK_LOCK_FILE_MAX_MIB``)."""
    build_info_mib: float = 1.0
    """A wheel's ``ortstack_build_info.json`` (``ORTSTACK_BUILD_INFO_MAX_MIB``); a real one is a few KiB."""
    nesting: int = 32
    """Arrays and tables in TOML, arrays and objects in JSON, one inside the other (``ORTSTACK_MAX_NESTING``)."""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Bounds:
        names = {
            "download_mib": "ORTSTACK_DOWNLOAD_MAX_MIB",
            "stack_file_mib": "ORTSTACK_STACK_FILE_MAX_MIB",
            "lock_file_mib": "ORTSTACK_LOCK_FILE_MAX_MIB",
            "build_info_mib": "ORTSTACK_BUILD_INFO_MAX_MIB",
            "nesting": "ORTSTACK_MAX_NESTING",
        }
        values: dict[str, float | int] = {}
        for item in fields(cls):
            value = positive_number(env, names[item.name])
            if value is not None:
                values[item.name] = max(1, int(value)) if item.name == "nesting" else value
        return cls(**values)  # type: ignore[arg-type]


def size_limit(mib: float) -> int:
    """``mib`` in bytes."""
    return int(mib * MIB)


def nesting_of(value: object, limit: int) -> int:
    """How deep lists and dicts nest in ``value`` (a scalar is 0), counted no further than ``limit`` + 1."""
    depth = 0
    level: list[object] = [value]
    while depth <= limit:
        inner: list[object] = []
        for item in level:
            if isinstance(item, dict):
                inner.extend(item.values())
            elif isinstance(item, list | tuple):
                inner.extend(item)
        if not inner and not any(isinstance(item, dict | list | tuple) for item in level):
            return depth
        depth += 1
        level = inner
    return depth


def read_at_most(path: Path, limit: int) -> bytes | None:
    """The bytes of ``path``, or None when it holds more than ``limit`` (never read past it)."""
    with path.open("rb") as handle:
        data = handle.read(limit + 1)
    return data if len(data) <= limit else None
