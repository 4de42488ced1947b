"""A path the user gives as a wheel: checked once, the same way for every verb that takes one."""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from typing import TYPE_CHECKING

from packaging.tags import sys_tags
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from ortstack.errors import NotAWheelError, WheelNotForThisMachineError

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
    tags: tuple[str, ...] = ()
    """The compatibility tags of the file name (``cp312-cp312-linux_x86_64``), sorted."""

    @property
    def label(self) -> str:
        return f"{self.name}=={self.version}"


def check(path: Path) -> WheelFile:
    """``path`` as a wheel: it exists, its name parses as a wheel file name and it is a zip archive."""
    try:
        path = path.expanduser().resolve()
    except (OSError, RuntimeError):  # RuntimeError: a loop of links, before Python 3.13
        msg = f"{path} cannot be followed: a loop of links, not a wheel"
        raise NotAWheelError(msg, tip=_TIP) from None
    if not path.is_file():
        msg = f"{path} is a folder, not a wheel" if path.is_dir() else f"wheel not found: {path}"
        raise NotAWheelError(msg, tip=_TIP)
    try:
        name, version, _, tags = parse_wheel_filename(path.name)
    except InvalidWheelFilename as exc:
        msg = f"{path} is not a wheel file name: {exc}"
        raise NotAWheelError(msg, tip=_TIP) from None
    if not zipfile.is_zipfile(path):
        msg = f"{path} is named like a wheel but is not a zip archive"
        raise NotAWheelError(msg, tip=_TIP)
    return WheelFile(
        path=path, name=str(canonicalize_name(name)), version=str(version), tags=tuple(sorted(map(str, tags)))
    )


def check_fits_machine(wheel: WheelFile) -> None:
    """Refuse, as pip would, a wheel built for another platform (``win_amd64`` on Linux)."""
    platforms = {tag.rsplit("-", 1)[-1] for tag in wheel.tags}
    if "any" in platforms or platforms & {tag.platform for tag in sys_tags()}:
        return
    here = next(iter(sys_tags())).platform
    msg = f"{wheel.path.name} is built for {', '.join(sorted(platforms))}, which this machine ({here}) cannot install"
    raise WheelNotForThisMachineError(
        msg, tip="pass a wheel built for this platform, or run on the one it is built for"
    )
