"""Run-wide settings, resolved from one chain: defaults < ``ORTSTACK_*`` environment < command line.

The environment is passed in as a mapping; nothing below this module reads ``os.environ``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import platformdirs

from ortstack.bounds import Bounds
from ortstack.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Mapping


@dataclass(frozen=True, kw_only=True)
class Settings:
    stack_file: Path
    """The ``stack.toml`` in use (``--stack``, ``ORTSTACK_STACK``; default ``./stack.toml``)."""
    cache_dir: Path
    """Content-addressed downloads and sources (``--cache-dir``, ``ORTSTACK_CACHE_DIR``)."""
    work_dir: Path
    """Prepared trees and build directories (``--work-dir``, ``ORTSTACK_WORK_DIR``; default ``./build``)."""
    dist_dir: Path
    """Finished wheels (``--dist-dir``, ``ORTSTACK_DIST_DIR``; default ``./dist``)."""
    locked: bool = False
    """Refuse to resolve anything not yet in ``stack.lock`` (``--locked``, ``ORTSTACK_LOCKED=1``)."""
    wait_for_lock: bool = True
    """Wait for another ortstack process holding a cache lock (``--no-wait`` turns it off)."""
    env: Mapping[str, str]
    """The environment subprocesses inherit."""
    bounds: Bounds = field(default_factory=Bounds)
    """How much of an untrusted input is read (``ORTSTACK_*_MAX_*``)."""

    @property
    def lock_file(self) -> Path:
        return self.stack_file.with_suffix(".lock")

    @property
    def project_root(self) -> Path:
        return self.stack_file.parent


def truthy(value: str, name: str) -> bool:
    """An ``ORTSTACK_*`` switch: 1/true/yes/on or 0/false/no/off (empty is off)."""
    lowered = value.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"", "0", "false", "no", "off"}:
        return False
    msg = f"{name}={value!r} is not a boolean"
    raise ConfigError(msg, tip=f"set {name}=1 or {name}=0")


def resolve(
    env: Mapping[str, str],
    *,
    stack_file: Path | None = None,
    cache_dir: Path | None = None,
    work_dir: Path | None = None,
    dist_dir: Path | None = None,
    locked: bool | None = None,
    wait_for_lock: bool | None = None,
) -> Settings:
    """Combine command-line values (``None`` = not given) with the environment and the defaults."""

    def pick(cli: Path | None, name: str, default: Path) -> Path:
        chosen = cli if cli is not None else Path(env[name]).expanduser() if env.get(name) else default
        try:
            return chosen.resolve()
        except (OSError, RuntimeError):  # RuntimeError: a loop of links, before Python 3.13
            option = f"--{name.removeprefix('ORTSTACK_').lower().replace('_', '-')} or {name}"
            msg = f"{chosen} cannot be followed: a loop of links ({option})"
            raise ConfigError(msg, tip="point it at a real file or folder") from None

    stack = pick(stack_file, "ORTSTACK_STACK", Path("stack.toml"))
    return Settings(
        stack_file=stack,
        cache_dir=pick(cache_dir, "ORTSTACK_CACHE_DIR", Path(platformdirs.user_cache_dir("ortstack"))),
        work_dir=pick(work_dir, "ORTSTACK_WORK_DIR", stack.parent / "build"),
        dist_dir=pick(dist_dir, "ORTSTACK_DIST_DIR", stack.parent / "dist"),
        locked=locked if locked is not None else truthy(env.get("ORTSTACK_LOCKED", ""), "ORTSTACK_LOCKED"),
        wait_for_lock=wait_for_lock if wait_for_lock is not None else True,
        env=dict(env),
        bounds=Bounds.from_env(env),
    )


def current_env() -> dict[str, str]:
    """The process environment, read once at the CLI edge."""
    return dict(os.environ)
