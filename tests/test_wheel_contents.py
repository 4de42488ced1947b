"""What a built wheel's libraries may export: a static C++ runtime stays private.

Real compilers and cmake: a library linked with ``-static-libstdc++`` (as GCC toolchains without a
shared libstdc++ link every library) exports that runtime's unique symbols unless ortstack's linker
flag hides them, and the wheel check refuses it. The headers' constants that GCC exports as unique from
the library's own code (Dawn's ``std::piecewise_construct`` and ``std::nullopt``) are read-only: they pass.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from typing import TYPE_CHECKING

import pytest

from ortstack.build import build, toolchain, wheel
from ortstack.build.buildinfo import BUILD_INFO_NAME
from ortstack.build.variants import WheelPlan
from ortstack.errors import BuildError

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [
    pytest.mark.compile,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ELF libraries and GNU linker flags: Linux"),
]

SOURCE = """\
#include <sstream>
extern "C" int formatted_length(int value) {
  std::ostringstream out;
  out << value;
  return static_cast<int>(out.str().size());
}
"""
# Header constants used by address: GCC emits each as a read-only STB_GNU_UNIQUE object of the library.
HEADER_CONSTANTS = """\
#include <optional>
#include <utility>
template <class T> const void* address_of(const T& value) { return &value; }
extern "C" const void* piecewise_tag() { return address_of(std::piecewise_construct); }
extern "C" const void* nullopt_tag() { return address_of(std::nullopt); }
"""
PLAN = WheelPlan(name="demo", package="demo", py_api="py3", dependencies=(), libraries=(), required=())


def _library(tmp_path: Path, name: str, *flags: str, code: str = SOURCE) -> Path:
    source = tmp_path / f"{name}.cc"
    source.write_text(code, encoding="utf-8")
    out = tmp_path / f"lib{name}.so"
    subprocess.run(["g++", "-O1", "-fPIC", "-shared", *flags, str(source), "-o", str(out)], check=True)
    return out


def _wheel_with(tmp_path: Path, library: Path) -> Path:
    path = tmp_path / "demo-1.0-py3-none-linux_x86_64.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"demo/{BUILD_INFO_NAME}", "{}")
        archive.write(library, f"demo/{library.name}")
    return path


def test_a_library_that_exports_a_static_cxx_runtime_is_refused(tmp_path: Path) -> None:
    library = _library(tmp_path, "exporting", "-static-libstdc++")
    with pytest.raises(BuildError) as refused:
        wheel.check_contents(_wheel_with(tmp_path, library), PLAN)
    assert "demo/libexporting.so holds a static C++ runtime and exports" in str(refused.value)
    assert toolchain.HIDE_STATIC_CXX_RUNTIME in (refused.value.tip or "")


def test_read_only_header_constants_pass(tmp_path: Path) -> None:
    flags = ("-std=c++17", "-static-libstdc++", toolchain.HIDE_STATIC_CXX_RUNTIME)
    library = _library(tmp_path, "tags", *flags, code=HEADER_CONSTANTS)
    symbols = subprocess.run(["readelf", "--dyn-syms", "-W", library], check=True, capture_output=True, text=True)
    unique = {line.split()[-1] for line in symbols.stdout.splitlines() if " UNIQUE " in line}
    assert unique == {"_ZSt19piecewise_construct", "_ZSt7nullopt"}, "the case needs GCC's unique header constants"
    wheel.check_contents(_wheel_with(tmp_path, library), PLAN)


@pytest.mark.parametrize("flags", [("-static-libstdc++", toolchain.HIDE_STATIC_CXX_RUNTIME), ()])
def test_a_hidden_or_shared_cxx_runtime_passes(tmp_path: Path, flags: tuple[str, ...]) -> None:
    wheel.check_contents(_wheel_with(tmp_path, _library(tmp_path, "quiet", *flags)), PLAN)


def test_the_options_file_hides_the_runtime_and_keeps_the_users_ldflags(tmp_path: Path) -> None:
    cmake = shutil.which("cmake")
    assert cmake, "cmake is on PATH wherever the compile tests run"
    assert shutil.which("ninja"), "ninja is on PATH wherever the compile tests run"
    project = tmp_path / "project"
    project.mkdir()
    (project / "format.cc").write_text(SOURCE, encoding="utf-8")
    (project / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.20)\nproject(demo CXX)\nadd_library(demo SHARED format.cc)\n",
        encoding="utf-8",
    )
    options = tmp_path / "options.cmake"
    options.write_bytes(build._ort_options_file(toolchain.linker_defines("linux")))
    binary = tmp_path / "build"
    env = {**os.environ, "LDFLAGS": "-static-libstdc++"}
    subprocess.run([cmake, "-S", project, "-B", binary, "-G", "Ninja", "-C", options], check=True, env=env)
    subprocess.run([cmake, "--build", binary], check=True, env=env)
    library = binary / "libdemo.so"
    needed = subprocess.run(["readelf", "-d", library], check=True, capture_output=True, text=True).stdout
    assert "libstdc++" not in needed, "LDFLAGS was dropped: the runtime is linked dynamically"
    wheel.check_no_exported_cxx_runtime(library.read_bytes(), str(library))
