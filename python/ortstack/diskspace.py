"""Free-space checks before long steps, so a build fails in a second instead of after an hour."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from ortstack.errors import DiskSpaceError

if TYPE_CHECKING:
    from collections.abc import Mapping

GIB = 1024**3

# Upper estimates for a Release build of ORT with WebGPU, Dawn included (not measured on the machines
# this project is developed on, which cannot build ORT).
# ORTSTACK_MIN_FREE_GIB_<STEP> overrides a figure (e.g. for a smaller upstream or a bigger variant).
REQUIRED_GIB: dict[str, float] = {
    "fetch": 2.0,
    "deps": 3.0,
    "patch": 2.0,
    "build": 40.0,
}


def _existing_parent(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path(path.anchor or ".")


def required_bytes(step: str, env: Mapping[str, str]) -> int:
    override = env.get(f"ORTSTACK_MIN_FREE_GIB_{step.upper()}")
    gib = float(override) if override else REQUIRED_GIB[step]
    return int(gib * GIB)


def check(step: str, where: Path, env: Mapping[str, str]) -> None:
    """Raise ``DiskSpaceError`` when the file system holding ``where`` lacks room for ``step``."""
    needed = required_bytes(step, env)
    free = shutil.disk_usage(_existing_parent(where)).free
    if free < needed:
        msg = f"{step} needs {needed / GIB:.1f} GiB free under {where}, only {free / GIB:.1f} GiB is free"
        tip = (
            "free some space or point the step elsewhere (--cache-dir, --work-dir); "
            f"ORTSTACK_MIN_FREE_GIB_{step.upper()} overrides the figure"
        )
        raise DiskSpaceError(msg, tip=tip)
