"""Provenance carried inside every wheel: one JSON file next to the libraries.

``ortstack build`` writes it, ``ortstack inspect WHEEL`` and the wheel suites read it back.
"""

from __future__ import annotations

import importlib.util
import json
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from ortstack.errors import BuildError

BUILD_INFO_NAME = "ortstack_build_info.json"
"""File name of the build info inside the wheel's import package."""


@dataclass(frozen=True, kw_only=True)
class PatchInfo:
    id: str
    sha256: str


@dataclass(frozen=True, kw_only=True)
class BuildInfo:
    """Where a wheel came from."""

    ort_version: str
    """onnxruntime's VERSION_NUMBER at the pin."""
    ort_commit: str
    """The pinned onnxruntime commit."""
    tree_commit: str
    """The prepared tree's commit (pin + patches) the wheel was built from."""
    dawn_revision: str
    """Dawn's entry in the pin's cmake/deps.txt: its URL and sha1."""
    patches: tuple[PatchInfo, ...]
    """The patches applied, in order, with the sha256 of each file."""
    variant: str
    kind: str
    wheel_name: str
    version: str
    """The wheel's version: ``ort_version`` + ``+stack.<short hash>``."""
    cmake_options: dict[str, str]
    """Every option passed to onnxruntime's cmake."""
    compiler: str
    """The C++ compiler's first ``--version`` line."""
    platform: str
    date: str
    """UTC time of the build, ISO 8601."""
    ortstack_version: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> BuildInfo:
        data = json.loads(text)
        data["patches"] = tuple(PatchInfo(**p) for p in data.get("patches", ()))
        return cls(**data)


def read_from_wheel(wheel: Path) -> BuildInfo:
    """The build info inside ``wheel``; a wheel without one was not built by ortstack."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            names = [n for n in archive.namelist() if PurePosixPath(n).name == BUILD_INFO_NAME]
            if not names:
                msg = f"{wheel.name} carries no {BUILD_INFO_NAME}: it was not built by ortstack"
                raise BuildError(msg, tip="build it with `ortstack build`")
            return BuildInfo.from_json(archive.read(names[0]).decode("utf-8"))
    except (OSError, zipfile.BadZipFile) as exc:
        msg = f"cannot read {wheel}: {exc}"
        raise BuildError(msg) from None


def read_from_installed(package: str = "onnxruntime") -> BuildInfo | None:
    """The build info of the installed import ``package``; None for a wheel ortstack did not build."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / BUILD_INFO_NAME
    return BuildInfo.from_json(path.read_text(encoding="utf-8")) if path.is_file() else None
