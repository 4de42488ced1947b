"""What a Dawn build reads, at the pinned revisions, without running cmake.

onnxruntime's ``cmake/external/onnxruntime_external_deps.cmake`` says which Dawn options it forces
and which of its ``cmake/patches/dawn/`` patches it applies to its own Dawn download; Dawn's
``CMakeLists.txt``, ``third_party/CMakeLists.txt`` and ``generator/CMakeLists.txt``, walked under those
options by ``cmake_eval``, say which third-party folders the configure uses; Dawn's ``DEPS`` file says
where each comes from (repository and commit). ``plan`` puts the three together for one variant on
one platform.
"""

from __future__ import annotations

import ast
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from ortstack.errors import ConfigError, FetchError
from ortstack.source import cmake_eval

if TYPE_CHECKING:
    from collections.abc import Mapping


CUSTOM_DAWN_DEFINE = "onnxruntime_CUSTOM_DAWN_SRC_PATH"
ORT_DEPS_CMAKE = "cmake/external/onnxruntime_external_deps.cmake"
DAWN_ROOT = "@DAWN@"
# Folders of Dawn whose CMake decides which third-party sources are used (src/ only consumes them).
FOLLOWED = ("third_party", "generator")
# Targets that ORT's own dependency files create before Dawn configures (Dawn skips its copy then).
ORT_TARGETS = {"external/abseil-cpp.cmake": ("absl::strings",)}
# Python packages Dawn's generator loads (generator_lib.py: --jinja2-path/--markupsafe-path, the
# package folder); an installed one can stand in for the DEPS checkout.
PYTHON_PACKAGES = {"DAWN_JINJA2_DIR": "jinja2", "DAWN_MARKUPSAFE_DIR": "markupsafe"}
PLATFORM_VARIABLES = {
    "linux": {"UNIX": "1", "CMAKE_SYSTEM_NAME": "Linux"},
    "windows": {"WIN32": "1", "MSVC": "1", "CMAKE_SYSTEM_NAME": "Windows"},
    "macos": {"UNIX": "1", "APPLE": "1", "CMAKE_SYSTEM_NAME": "Darwin"},
}
_NOT_USES = {"set", "unset", "option", "set_if_not_defined", "message", "if", "elseif", "else", "endif"}


@dataclass(frozen=True, kw_only=True)
class ThirdParty:
    """One entry of Dawn's ``DEPS`` that the build uses."""

    path: str
    """Folder in the Dawn tree, e.g. ``third_party/spirv-headers/src``."""
    repository: str
    commit: str
    condition: str = ""
    """The entry's gclient condition, as DEPS writes it (informational: the CMake decides)."""
    python_package: str = ""
    """``jinja2``/``markupsafe``: an installed package may stand in for it."""


@dataclass(frozen=True, kw_only=True)
class Plan:
    """What one variant's Dawn needs on one platform, read from the pinned files."""

    revision: str
    third_party: tuple[ThirdParty, ...]
    patches: tuple[str, ...]
    """ORT's own Dawn patches (paths in the ORT tree) that its cmake applies to its download."""
    removed: tuple[str, ...]
    """Folders ORT's patch step removes from its Dawn download (``test``)."""
    configure_fetches: bool
    """Dawn would still run its clone script while configuring (ORT forces DAWN_FETCH_DEPENDENCIES)."""


# --------------------------------------------------------------------------------------------------
# Dawn's DEPS file.


def parse_deps(text: str, origin: str) -> dict[str, ThirdParty]:
    """The git entries of a DEPS file (a Python literal with ``Var()``), path -> entry."""
    try:
        tree = ast.parse(text, filename=origin)
    except SyntaxError as exc:
        msg = f"{origin}:{exc.lineno}: Dawn's DEPS file cannot be read: {exc.msg}"
        raise ConfigError(msg, tip="check the Dawn archive or checkout: DEPS should be Dawn's own") from None
    names: dict[str, object] = {}
    for statement in tree.body:
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
            target = statement.targets[0]
            if isinstance(target, ast.Name):
                names[target.id] = _literal(statement.value, names, origin)
    variables = names.get("vars", {})
    deps = names.get("deps")
    if not isinstance(variables, dict) or not isinstance(deps, dict):
        msg = f"{origin}: Dawn's DEPS file has no deps = {{...}} table"
        raise ConfigError(msg, tip="check the Dawn archive or checkout: DEPS should be Dawn's own")
    found: dict[str, ThirdParty] = {}
    for path, entry in deps.items():
        raw = entry.get("url") if isinstance(entry, dict) else entry
        if not isinstance(raw, str) or "@" not in raw:
            continue  # CIPD or GCS packages: tools, not sources
        url, _, commit = raw.format(**{str(k): v for k, v in variables.items()}).rpartition("@")
        condition = entry.get("condition", "") if isinstance(entry, dict) else ""
        found[str(path)] = ThirdParty(path=str(path), repository=url, commit=commit, condition=str(condition))
    return found


def _literal(node: ast.expr, names: Mapping[str, object], origin: str) -> object:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Dict):
        return {
            _literal(k, names, origin): _literal(v, names, origin)
            for k, v in zip(node.keys, node.values, strict=True)
            if k
        }
    if isinstance(node, ast.List | ast.Tuple):
        return [_literal(item, names, origin) for item in node.elts]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return f"{_literal(node.left, names, origin)}{_literal(node.right, names, origin)}"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in {"Var", "Str"} and node.args:
        value = _literal(node.args[0], names, origin)
        # Var('x') stands for {x}, which the URL's format() fills in.
        return f"{{{value}}}" if node.func.id == "Var" else value
    msg = f"{origin}:{node.lineno}: Dawn's DEPS file has an expression ortstack does not read: {ast.unparse(node)[:60]}"
    raise ConfigError(msg, tip="check the Dawn archive or checkout: DEPS should be Dawn's own")


# --------------------------------------------------------------------------------------------------
# Reading a Dawn source: the deps.txt zip in the mirror, or a checkout.


@dataclass(frozen=True, kw_only=True)
class DawnSource:
    """A Dawn tree to read files from: a zip with one top folder, or a folder."""

    location: Path

    def read(self, names: tuple[str, ...]) -> dict[str, str]:
        """The text of each of ``names`` that exists (one pass over a zip: a no-op build stays fast)."""
        if self.location.is_dir():
            paths = {name: self.location / name for name in names}
            return {n: p.read_text(encoding="utf-8", errors="replace") for n, p in paths.items() if p.is_file()}
        with self._zip() as bundle:
            top = _zip_top(bundle)
            present = set(bundle.namelist())
            return {
                name: bundle.read(f"{top}/{name}").decode("utf-8", errors="replace")
                for name in names
                if f"{top}/{name}" in present
            }

    def exists(self, relative: str) -> bool:
        if self.location.is_dir():
            return (self.location / relative).exists()
        with self._zip() as bundle:
            top = _zip_top(bundle)
            return any(n == f"{top}/{relative}" or n.startswith(f"{top}/{relative}/") for n in bundle.namelist())

    def _zip(self) -> zipfile.ZipFile:
        try:
            return zipfile.ZipFile(self.location)
        except (zipfile.BadZipFile, OSError) as exc:
            msg = f"the Dawn archive {self.location} is not a zip file ({exc})"
            tip = "remove it and run `ortstack fetch --deps` again, or declare a Dawn checkout ([deps.dawn] source_dir)"
            raise FetchError(msg, tip=tip) from None


def _zip_top(bundle: zipfile.ZipFile) -> str:
    return PurePosixPath(bundle.namelist()[0]).parts[0] if bundle.namelist() else ""


# --------------------------------------------------------------------------------------------------
# What the configure uses.


def ort_evaluation(ort_tree: Path, defines: Mapping[str, str], platform: str, *, custom: bool) -> cmake_eval.Evaluation:
    """ORT's cmake up to the point where it hands Dawn to FetchContent."""
    path = ort_tree / ORT_DEPS_CMAKE
    if not path.is_file():
        msg = f"the pinned onnxruntime has no {ORT_DEPS_CMAKE}, so ortstack cannot tell which Dawn options it forces"
        raise ConfigError(msg, tip="check [ort] commit in stack.toml: this is not an onnxruntime tree ortstack knows")
    evaluation = cmake_eval.Evaluation(variables=dict(PLATFORM_VARIABLES[platform]))
    cmake_dir = (ort_tree / "cmake").as_posix()
    evaluation.variables |= {"PROJECT_SOURCE_DIR": cmake_dir, "CMAKE_CURRENT_SOURCE_DIR": cmake_dir}
    evaluation.variables |= {"REPO_ROOT": ort_tree.as_posix()}
    evaluation.variables |= {"Patch_EXECUTABLE": "patch", "CMAKE_COMMAND": "cmake", "CMAKE_BUILD_TYPE": "Release"}
    top = ort_tree / "cmake" / "CMakeLists.txt"
    if top.is_file():  # option() defaults only: the rest of the top file is ORT's own build
        options = [c for c in cmake_eval.parse(top.read_text(encoding="utf-8"), str(top)) if c.name == "option"]
        evaluation.run(options, str(top))
    evaluation.cache |= {k: v for k, v in defines.items() if k != CUSTOM_DAWN_DEFINE}
    if custom:
        evaluation.cache[CUSTOM_DAWN_DEFINE] = DAWN_ROOT

    def stop_at_dawn(name: str, values: list[str]) -> None:
        if name == "include" and values:
            for file, targets in ORT_TARGETS.items():
                if values[0] == f"{cmake_dir}/{file}":
                    evaluation.targets.update(targets)
        if name.endswith("fetchcontent_makeavailable") and "dawn" in values:
            raise cmake_eval.Stop

    evaluation.watcher = stop_at_dawn
    try:
        evaluation.run(cmake_eval.parse(path.read_text(encoding="utf-8"), str(path)), str(path))
    except cmake_eval.Stop:
        return evaluation
    msg = f"{path} never makes Dawn available with onnxruntime_USE_WEBGPU=ON"
    raise ConfigError(msg, tip="this onnxruntime tree builds Dawn in a way ortstack does not read; please report it")


def ort_patches(ort_tree: Path, evaluation: cmake_eval.Evaluation) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The Dawn patches (ORT-relative paths) and removed folders of ORT's own Dawn FetchContent."""
    declared = next((v for n, v in evaluation.ran if n.endswith("fetchcontent_declare") and v[:1] == ["dawn"]), [])
    patches, removed = [], []
    for index, value in enumerate(declared):
        path = Path(value)
        if value.endswith(".patch") and path.is_relative_to(ort_tree):
            patches.append(path.relative_to(ort_tree).as_posix())
        match = re.fullmatch(r"<SOURCE_DIR>/(.+)", value)
        if match and "rm" in declared[max(0, index - 3) : index]:
            removed.append(match.group(1))
    return tuple(patches), tuple(removed)


def plan(ort_tree: Path, defines: Mapping[str, str], platform: str, source: DawnSource, revision: str) -> Plan:
    """Read what Dawn's configure will use for a variant with ``defines`` on ``platform``."""
    ort = ort_evaluation(ort_tree, defines, platform, custom=True)
    patches, removed = ort_patches(ort_tree, ort_evaluation(ort_tree, defines, platform, custom=False))
    files = source.read(("DEPS", "CMakeLists.txt", *(f"{folder}/CMakeLists.txt" for folder in FOLLOWED)))
    deps_text, top = files.get("DEPS"), files.get("CMakeLists.txt")
    if deps_text is None or top is None:
        missing = "DEPS" if deps_text is None else "CMakeLists.txt"
        msg = f"the Dawn source {source.location} has no {missing} file"
        raise FetchError(msg, tip="check that it is Dawn at the pinned revision (deps.txt's dawn entry)")
    entries = parse_deps(deps_text, f"{source.location}:DEPS")
    dawn = cmake_eval.Evaluation(variables={**ort.variables}, cache=dict(ort.cache), targets=set(ort.targets))
    dawn.variables |= {
        "Dawn_SOURCE_DIR": DAWN_ROOT,
        "PROJECT_SOURCE_DIR": DAWN_ROOT,
        "CMAKE_CURRENT_SOURCE_DIR": DAWN_ROOT,
    }

    def follow(folder: str) -> tuple[str, str] | None:
        relative = folder.removeprefix(f"{DAWN_ROOT}/")
        text = files.get(f"{relative}/CMakeLists.txt") if relative in FOLLOWED else None
        return None if text is None else (f"{source.location}:{relative}/CMakeLists.txt", text)

    dawn.follow = follow
    dawn.run(cmake_eval.parse(top, f"{source.location}:CMakeLists.txt"), f"{source.location}:CMakeLists.txt")
    dawn.run_uncalled_functions(f"{source.location}:generator/CMakeLists.txt")
    used = sorted({_relative(v) for n, vs in dawn.ran if n not in _NOT_USES for v in vs if _relative(v)})
    packages = {_relative(dawn.lookup(var) or ""): name for var, name in PYTHON_PACKAGES.items()}
    needed: dict[str, ThirdParty] = {}
    for path in used:
        entry = max(
            (e for k, e in entries.items() if path == k or path.startswith(f"{k}/")),
            key=lambda e: len(e.path),
            default=None,
        )
        if entry is None:
            if not source.exists(path):
                msg = f"Dawn's CMake uses {path}, which is neither in Dawn's DEPS nor in its tree"
                raise FetchError(msg, tip="check that the Dawn source is Dawn at the pinned revision")
            continue
        needed[entry.path] = ThirdParty(**{**entry.__dict__, "python_package": packages.get(entry.path, "")})
    fetch_script = any("fetch_dawn_dependencies" in v for n, vs in dawn.ran if n == "execute_process" for v in vs)
    return Plan(
        revision=revision,
        third_party=tuple(needed[k] for k in sorted(needed)),
        patches=patches,
        removed=removed,
        configure_fetches=fetch_script,
    )


def _relative(value: str) -> str:
    """``@DAWN@/third_party/x/y`` -> ``third_party/x/y``; anything else -> ''."""
    prefix = f"{DAWN_ROOT}/"
    if not value.startswith(prefix):
        return ""
    relative = PurePosixPath(value.removeprefix(prefix))
    return relative.as_posix() if relative.parts[:1] == ("third_party",) and len(relative.parts) > 1 else ""
