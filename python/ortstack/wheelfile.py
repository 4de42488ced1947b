"""A path the user gives as a wheel: checked once, the same way for every verb that takes one."""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from typing import TYPE_CHECKING

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from ortstack.errors import NotAWheelError

if TYPE_CHECKING:
    from pathlib import Path

_TIP = "pass a .whl file: one `ortstack build` put in dist/, or one pip downloaded"


@dataclass(frozen=True, kw_only=True)
class WheelFile:
    path: Path
    """The wheel, absolute."""
    name: str
    """The canonical distribution name (``onnxruntime-webgpu``)."""
    version: str
    """The version from the file name, local part included (``1.21.0+stack.ab12``)."""

    @property
    def label(self) -> str:
        return f"{self.name}=={self.version}"


def check(path: Path) -> WheelFile:
    """``path`` as a wheel: it exists, its name parses as a wheel file name and it is a zip archive."""
    path = path.expanduser().resolve()
    if not path.is_file():
        msg = f"{path} is a folder, not a wheel" if path.is_dir() else f"wheel not found: {path}"
        raise NotAWheelError(msg, tip=_TIP)
    try:
        name, version, _, _ = parse_wheel_filename(path.name)
    except InvalidWheelFilename as exc:
        msg = f"{path} is not a wheel file name: {exc}"
        raise NotAWheelError(msg, tip=_TIP) from None
    if not zipfile.is_zipfile(path):
        msg = f"{path} is named like a wheel but is not a zip archive"
        raise NotAWheelError(msg, tip=_TIP)
    return WheelFile(path=path, name=str(canonicalize_name(name)), version=str(version))
