"""Provenance carried inside every wheel: one JSON file next to the libraries.

``ortstack build`` writes it, ``ortstack inspect WHEEL`` and the wheel suites read it back.
"""

from __future__ import annotations

import importlib.util
import json
import stat
import zipfile
import zlib
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from ortstack.bounds import Bounds, nesting_of, size_limit
from ortstack.errors import BuildError

if TYPE_CHECKING:
    from collections.abc import Callable

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
    def from_json(cls, text: str | bytes, *, origin: str = BUILD_INFO_NAME, bounds: Bounds | None = None) -> BuildInfo:
        """Parse build info; anything but the object ``to_json`` writes is one :class:`BuildError` naming ``origin``."""
        bounds = bounds or Bounds()
        too_deep = f"arrays or objects nested more than {bounds.nesting} deep"
        try:
            data = json.loads(text.decode("utf-8") if isinstance(text, bytes) else text)
        except UnicodeDecodeError:
            raise _unreadable(origin, "not UTF-8 text") from None
        except ValueError as exc:
            raise _unreadable(origin, f"not JSON ({str(exc).splitlines()[0]})") from None
        except RecursionError:  # deeper than the parser can follow: far past the bound
            raise _unreadable(origin, too_deep) from None
        if nesting_of(data, bounds.nesting) > bounds.nesting:
            raise _unreadable(origin, too_deep)
        if not isinstance(data, dict):
            raise _unreadable(origin, f"a JSON {_JSON_KINDS.get(type(data), 'value')}, not an object of build info")
        unknown = sorted(set(data) - set(_FIELD_TYPES))
        if unknown:
            raise _unreadable(origin, f"unknown key {unknown[0][:80]!r}")
        missing = [name for name, f in _FIELDS.items() if f.default is MISSING and name not in data]
        if missing:
            raise _unreadable(origin, f"missing key {missing[0]!r}")
        for name, value in data.items():
            if not _FIELD_TYPES[name](value):
                raise _unreadable(origin, f"{name!r} is not {_FIELD_SHAPES[name]}")
        data["patches"] = tuple(PatchInfo(**p) for p in data.get("patches", ()))
        return cls(**data)


def _unreadable(origin: str, why: str) -> BuildError:
    msg = f"{origin}: {why}"
    return BuildError(msg, tip="this is not build info ortstack wrote: rebuild the wheel with `ortstack build`")


def _strings(value: object) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())


def _patch_list(value: object) -> bool:
    return isinstance(value, list) and all(
        isinstance(p, dict) and set(p) == {"id", "sha256"} and all(isinstance(v, str) for v in p.values())
        for p in value
    )


_JSON_KINDS = {list: "array", str: "string", int: "number", float: "number", bool: "boolean", type(None): "null"}
_FIELDS = {f.name: f for f in fields(BuildInfo)}
_FIELD_TYPES: dict[str, Callable[[object], bool]] = {
    name: (lambda value: isinstance(value, str)) for name in _FIELDS
} | {"patches": _patch_list, "cmake_options": _strings, "extra": lambda value: isinstance(value, dict)}
_FIELD_SHAPES = dict.fromkeys(_FIELDS, "a string") | {
    "patches": "a list of {id, sha256} objects",
    "cmake_options": "an object of strings",
    "extra": "an object",
}


def read_from_wheel(wheel: Path, bounds: Bounds | None = None) -> BuildInfo:
    """The build info inside ``wheel`` (no more of it than ``bounds`` allow); a wheel without one was
    not built by ortstack."""
    bounds = bounds or Bounds()
    limit = size_limit(bounds.build_info_mib)
    try:
        with zipfile.ZipFile(wheel) as archive:
            infos = [i for i in archive.infolist() if PurePosixPath(i.filename).name == BUILD_INFO_NAME]
            if not infos:
                msg = f"{wheel.name} carries no {BUILD_INFO_NAME}: it was not built by ortstack"
                raise BuildError(msg, tip="build it with `ortstack build`")
            info = infos[0]
            origin = f"{wheel.name}: {info.filename[:200]}"
            if stat.S_ISLNK(info.external_attr >> 16) or info.is_dir():
                raise _unreadable(origin, "a link or a folder, not a file")
            if info.file_size > limit:
                why = f"larger than {bounds.build_info_mib:g} MiB (raise ORTSTACK_BUILD_INFO_MAX_MIB to read it)"
                raise _unreadable(origin, why)
            with archive.open(info) as member:  # reads no further than the declared size
                data = member.read(limit)
    except (OSError, EOFError, zlib.error, zipfile.BadZipFile) as exc:
        msg = f"cannot read {wheel}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
        raise BuildError(msg, tip="the wheel is damaged: build or download it again") from None
    except (NotImplementedError, RuntimeError) as exc:  # an unsupported compression method, an encrypted member
        msg = f"{wheel.name} holds build info ortstack cannot read ({exc})"
        raise BuildError(msg, tip="a wheel's members are stored or deflated, never encrypted") from None
    return BuildInfo.from_json(data, origin=origin, bounds=bounds)


def variant_of(wheel: Path) -> str | None:
    """The variant an ortstack wheel was built as (its build info says); None for any other wheel."""
    try:
        return read_from_wheel(wheel).variant
    except BuildError:
        return None


def read_from_installed(package: str = "onnxruntime") -> BuildInfo | None:
    """The build info of the installed import ``package``; None for a wheel ortstack did not build."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / BUILD_INFO_NAME
    return BuildInfo.from_json(path.read_bytes(), origin=str(path)) if path.is_file() else None
