"""The build-info JSON that ortstack puts inside every wheel it builds, and its reader.

The build writes ``onnxruntime/<BUILD_INFO_NAME>``; the wheel suites read it from the installed
package. Both import the name from here so they cannot drift apart.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BUILD_INFO_NAME = "ortstack_build_info.json"
"""File name inside the installed ``onnxruntime`` package directory."""


@dataclass(frozen=True, kw_only=True)
class BuildInfo:
    ort_commit: str
    """The onnxruntime commit the wheel was built from."""
    dawn_revision: str = ""
    """Dawn's revision as pinned by that commit's ``cmake/deps.txt``."""
    variant: str = ""
    """The build variant (``webgpu``: built-in EP, ``plugin``: WebGPU plugin EP)."""
    patches: tuple[str, ...] = ()
    """Ids of the patches applied, in series order."""
    features: tuple[str, ...] = ()
    """Feature names the patch stack claims to add (compared against what the suites detect)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Everything else the build recorded (flags, toolchain, hashes)."""

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BuildInfo:
        known = {"ort_commit", "dawn_revision", "variant", "patches", "features"}
        patches = data.get("patches", ())
        return cls(
            ort_commit=str(data.get("ort_commit", "")),
            dawn_revision=str(data.get("dawn_revision", "")),
            variant=str(data.get("variant", "")),
            patches=tuple(str(p["id"] if isinstance(p, dict) else p) for p in patches),
            features=tuple(str(f) for f in data.get("features", ())),
            extra={k: v for k, v in data.items() if k not in known},
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "ort_commit": self.ort_commit,
            "dawn_revision": self.dawn_revision,
            "variant": self.variant,
            "patches": list(self.patches),
            "features": list(self.features),
            **self.extra,
        }


def path_in_installed(package: str = "onnxruntime") -> Path | None:
    """Where the build info of the installed ``package`` would be, or None if it is not installed."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / BUILD_INFO_NAME


def read_from_installed(package: str = "onnxruntime") -> BuildInfo | None:
    """The build info of the installed ``package``; None for a wheel ortstack did not build."""
    path = path_in_installed(package)
    if path is None or not path.is_file():
        return None
    return BuildInfo.from_json(json.loads(path.read_text(encoding="utf-8")))
