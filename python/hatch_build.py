"""Put the wheel project (``pyproject.toml`` and ``cpp_ext/``) into the ortstack wheel as ``ortstack/wheel_project``.

From the repository it is one folder up; from ortstack's sdist, in ``wheel_project/``. An editable
install reads it from the repository instead, so it is not copied there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

TARGET = "ortstack/wheel_project"


class WheelProjectHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if version == "editable":
            return
        root = Path(self.root)
        source = next(p for p in (root.parent, root / "wheel_project") if (p / "cpp_ext" / "CMakeLists.txt").is_file())
        build_data["force_include"][str(source / "pyproject.toml")] = f"{TARGET}/pyproject.toml"
        build_data["force_include"][str(source / "cpp_ext")] = f"{TARGET}/cpp_ext"
