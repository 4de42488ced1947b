"""Dependencies from local sources, and builds that survive today's toolchains, end to end.

The miniature upstream gets what a real onnxruntime tree has: a dependency patch of its own applied
by the PATCH_COMMAND of its FetchContent declaration (``cmake/patches/mini_dep/…``), targets with
``COMPILE_WARNING_AS_ERROR`` and a warning, and a dependency whose ``cmake_minimum_required`` cmake 4
refuses. The dependency comes from a local git checkout, checked against the deps.txt pin.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import TYPE_CHECKING

import pytest

from clirun import one_error
from ortstack.source import dep_sources
from ortstack.source.deps import Dependency
from test_build import Project, assert_ok, make_project, run_in_fresh_venv
from upstream import MINI_DEP_PATH, PACKAGES, git

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from upstream import LoopbackServer, Upstream

pytestmark = [pytest.mark.compile, pytest.mark.network, pytest.mark.slow]

MODULUS_PATCH = """\
--- a/include/mini_dep/checksum.h
+++ b/include/mini_dep/checksum.h
@@ -15,8 +15,8 @@
   std::uint16_t low = 0;
   std::uint16_t high = 0;
   for (std::size_t i = 0; i < size; ++i) {
-    low = static_cast<std::uint16_t>((low + data[i]) % 255);
-    high = static_cast<std::uint16_t>((high + low) % 255);
+    low = static_cast<std::uint16_t>((low + data[i]) % 251);
+    high = static_cast<std::uint16_t>((high + low) % 251);
   }
   return static_cast<std::uint16_t>((high << 8) | low);
 }
"""
WEBGPU_ONLY = """
[variant.webgpu]
kind = "webgpu"
dawn = "static"

[build]
compiler_cache = "none"
jobs = 2
"""
CHECKSUM = """
import ctypes, pathlib, onnxruntime
core = ctypes.CDLL(str(pathlib.Path(onnxruntime.__file__).with_name("capi") / "libonnxruntime.so"))
print(core.OrtMiniDependencyChecksum())
"""


def fletcher16(data: bytes, modulus: int) -> int:
    low = high = 0
    for byte in data:
        low = (low + byte) % modulus
        high = (high + low) % modulus
    return (high << 8) | low


def _upstream_like_onnxruntime(upstream: Upstream) -> str:
    """A mini_ort commit whose cmake patches its dependency, warns under -Werror, and pins a tag."""
    cmake = upstream.file_at(upstream.commit, "cmake/CMakeLists.txt").decode()
    declare = "FetchContent_Declare(mini_dep URL ${DEP_URL_mini_dep} URL_HASH SHA1=${DEP_SHA1_mini_dep})"
    assert declare in cmake
    patched_declare = declare.replace(
        ")", "\n  PATCH_COMMAND patch -p1 < ${CMAKE_CURRENT_SOURCE_DIR}/patches/mini_dep/modulus.patch)"
    )
    werror = (
        "set_target_properties(onnxruntime PROPERTIES COMPILE_WARNING_AS_ERROR ON)\n"
        "if(NOT MSVC)\n  target_compile_options(onnxruntime PRIVATE -Wall)\nendif()\n"
    )
    cmake = cmake.replace(declare, patched_declare).replace(
        "target_link_libraries(onnxruntime PRIVATE mini_dep::mini_dep)",
        "target_link_libraries(onnxruntime PRIVATE mini_dep::mini_dep)\n" + werror,
    )
    deps_txt = upstream.file_at(upstream.commit, "cmake/deps.txt").decode()
    deps_txt = deps_txt.replace(upstream.mini_dep_url, "https://example.invalid/mini_dep/archive/refs/tags/v1.0.zip")
    source = upstream.file_at(upstream.commit, "onnxruntime/core/session/ort_apis.cc").decode()
    source = source.replace(
        "namespace {\n", "namespace {\n\nint unused_in_this_build = 0;  // a warning, as newer compilers find\n", 1
    )
    return upstream.add_pull_request(
        9101,
        {
            "cmake/CMakeLists.txt": cmake,
            "cmake/deps.txt": deps_txt,
            "cmake/patches/mini_dep/modulus.patch": MODULUS_PATCH,
            "onnxruntime/core/session/ort_apis.cc": source,
        },
        "Shaped like onnxruntime: a dependency patch, warnings as errors, a tag pin",
    )


def _git_identity(env: Mapping[str, str]) -> dict[str, str]:
    identity = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid"}
    return {**env, **identity, "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}


def _local_checkout(root: Path, env: dict[str, str]) -> Path:
    """mini_dep as a git checkout at tag v1.0, declaring a cmake minimum cmake 4 refuses."""
    checkout = root / "mini_dep"
    shutil.copytree(PACKAGES / "mini_dep", checkout)
    cmake = checkout / "CMakeLists.txt"
    cmake.write_text(cmake.read_text().replace("VERSION 3.20", "VERSION 3.1"), encoding="utf-8")
    git("init", "-q", cwd=checkout, env=env)
    git("add", "-A", cwd=checkout, env=env)
    git("commit", "-q", "-m", "mini_dep 1.0", cwd=checkout, env=env)
    git("tag", "v1.0", cwd=checkout, env=env)
    return checkout


@pytest.fixture(scope="module")
def local_build(
    tmp_path_factory: pytest.TempPathFactory, upstream: Upstream, cli_env: dict[str, str]
) -> tuple[Project, Path]:
    root = tmp_path_factory.mktemp("dep-sources")
    commit = _upstream_like_onnxruntime(upstream)
    project = make_project(root / "project", upstream, cli_env, extra=WEBGPU_ONLY)
    stack = project.root / "stack.toml"
    stack.write_text(stack.read_text().replace(upstream.commit, commit), encoding="utf-8")
    checkout = _local_checkout(root, _git_identity(cli_env))
    local = f"mini_dep={checkout}"
    assert_ok(project.ortstack("fetch", "--deps", "--dep-source", local))
    assert_ok(project.ortstack("patch"))
    assert_ok(project.ortstack("build", "--dep-source", local))
    return project, checkout


def test_pins_are_read_from_the_deps_txt_url() -> None:
    def ref(url: str) -> tuple[str, str]:
        return dep_sources.pinned_ref(Dependency(name="x", url=url, sha1="", line=1))

    commit = "5c210da409e7f1e51ddf445134a4376fdbd70d7d"
    assert ref(f"https://github.com/dmlc/dlpack/archive/{commit}.zip") == ("commit", commit)
    assert ref(f"https://github.com/eigen-mirror/eigen/archive/{commit}/eigen-{commit}.zip") == ("commit", commit)
    assert ref("https://github.com/abseil/abseil-cpp/archive/refs/tags/20250814.0.zip") == ("tag", "20250814.0")
    assert ref("https://github.com/ARM-software/kleidiai/archive/refs/tags/v1.20.0.tar.gz") == ("tag", "v1.20.0")
    assert ref("https://example.invalid/dep.zip") == ("", "")


def test_a_local_source_is_patched_as_onnxruntime_would_and_used(
    local_build: tuple[Project, Path], tmp_path: Path
) -> None:
    project, checkout = local_build
    wheels = sorted(project.dist.glob("*.whl"))
    checksum = int(run_in_fresh_venv(tmp_path, wheels, CHECKSUM).strip())
    # The dependency's own code changed by the tree's cmake/patches/mini_dep/modulus.patch.
    assert checksum == fletcher16(b"mini_ort", 251) != fletcher16(b"mini_ort", 255)
    # The user's checkout is never written: the patch went into a copy in the cache.
    assert git("status", "--porcelain", cwd=checkout, env=project.env) == ""
    assert "% 255" in (checkout / "include" / "mini_dep" / "checksum.h").read_text()
    assert list((project.root / "cache" / "dep-sources").glob("mini_dep-*"))


def test_the_build_info_says_where_the_dependency_came_from(local_build: tuple[Project, Path]) -> None:
    project, _ = local_build
    wheel = next(project.dist.glob("*.whl"))
    info = project.ortstack("inspect", str(wheel))
    assert info.returncode == 0, info.stderr
    assert '"mini_dep": "tag v1.0 (' in info.stdout


def test_warnings_do_not_fail_a_build_unless_asked(local_build: tuple[Project, Path], tmp_path: Path) -> None:
    project, checkout = local_build
    # The default build above compiled a warning under COMPILE_WARNING_AS_ERROR, with cmake 4 and a
    # dependency that says cmake_minimum_required(VERSION 3.1).
    cmake_version = subprocess.run(["cmake", "--version"], check=True, capture_output=True, text=True).stdout
    assert int(cmake_version.split()[2].split(".")[0]) >= 4, "the build dependency group brings cmake 4"
    strict = Project(root=tmp_path / "strict", env=project.env)
    strict.root.mkdir()
    stack_text = (project.root / "stack.toml").read_text() + "warnings_as_errors = true\n"
    (strict.root / "stack.toml").write_text(stack_text, encoding="utf-8")
    local = f"mini_dep={checkout}"
    assert_ok(strict.ortstack("fetch", "--deps", "--dep-source", local))
    assert_ok(strict.ortstack("patch"))
    line = one_error(strict.ortstack("build", "--dep-source", local), 6)
    assert "unused_in_this_build" in line
    assert not list(strict.dist.glob("*.whl"))


def test_a_local_checkout_off_the_pin_is_refused(local_build: tuple[Project, Path], tmp_path: Path) -> None:
    project, checkout = local_build
    moved = tmp_path / "moved"
    shutil.copytree(checkout, moved)
    git("commit", "-q", "--allow-empty", "-m", "past the tag", cwd=moved, env=_git_identity(project.env))
    line = one_error(project.ortstack("build", "--dep-source", f"mini_dep={moved}"), 4)
    assert "but deps.txt pins tag v1.0" in line
    assert f"git -C {moved} checkout v1.0" in project.ortstack("build", "--dep-source", f"mini_dep={moved}").stderr


def _tree_mirror_commit(upstream: Upstream) -> str:
    """mini_ort shaped like onnxruntime 1.21: no mirror option, deps looked up under <tree>/mirror."""
    cmake = upstream.file_at(upstream.commit, "cmake/CMakeLists.txt").decode()
    option = next(line for line in cmake.splitlines() if line.startswith("set(onnxruntime_CMAKE_DEPS_MIRROR_DIR"))
    cmake = cmake.replace(option + "\n", "")
    cmake = cmake.replace('"${onnxruntime_CMAKE_DEPS_MIRROR_DIR}/" dep_local', '"${REPO_ROOT}/mirror/" dep_local')
    cmake = cmake.replace(
        'if(onnxruntime_CMAKE_DEPS_MIRROR_DIR AND EXISTS "${dep_local}")', 'if(EXISTS "${dep_local}")'
    )
    assert "onnxruntime_CMAKE_DEPS_MIRROR_DIR" not in cmake
    return upstream.add_pull_request(
        9102, {"cmake/CMakeLists.txt": cmake}, "The deps mirror as onnxruntime 1.21 reads it"
    )


def test_a_tree_that_reads_its_mirror_from_the_tree_gets_it_there(
    tmp_path: Path, upstream: Upstream, server: LoopbackServer, cli_env: dict[str, str]
) -> None:
    project = make_project(tmp_path / "project", upstream, cli_env, extra=WEBGPU_ONLY)
    stack = project.root / "stack.toml"
    stack.write_text(stack.read_text().replace(upstream.commit, _tree_mirror_commit(upstream)), encoding="utf-8")
    assert_ok(project.ortstack("fetch", "--deps"))
    assert_ok(project.ortstack("patch"))
    served = server.requests(MINI_DEP_PATH)
    assert_ok(project.ortstack("build"))
    # Configure took mini_dep from <tree>/mirror (nothing more was downloaded), and no mirror option
    # the tree does not read reached its cmake.
    assert server.requests(MINI_DEP_PATH) == served
    host = upstream.mini_dep_url.split("://")[1]
    assert (project.work / "prepared" / "webgpu" / "mirror").joinpath(*host.split("/")).is_file()
    info = project.ortstack("inspect", str(next(project.dist.glob("*.whl"))))
    assert "onnxruntime_CMAKE_DEPS_MIRROR_DIR" not in info.stdout
    assert '"onnxruntime_USE_WEBGPU": "ON"' in info.stdout


def test_an_installed_dependency_is_neither_mirrored_nor_required(
    tmp_path: Path, upstream: Upstream, cli_env: dict[str, str]
) -> None:
    project = make_project(
        tmp_path / "project", upstream, cli_env, extra=WEBGPU_ONLY + "\n[deps.mini_dep]\ninstalled = true\n"
    )
    assert_ok(project.ortstack("fetch", "--deps"))
    assert_ok(project.ortstack("patch"))
    mirror = project.root / "cache" / "deps-mirror"
    assert not [p for p in mirror.rglob("*") if p.is_file() and "mini_dep" in p.name]
    plan = project.ortstack("build", "--plan")
    assert plan.returncode == 0, plan.stderr
    row = next(line for line in (plan.stdout + plan.stderr).splitlines() if "mini_dep" in line)
    assert "installed package (find_package)" in row


def test_a_local_source_for_no_deps_txt_entry_is_refused(local_build: tuple[Project, Path]) -> None:
    project, checkout = local_build
    line = one_error(project.ortstack("build", "--dep-source", f"mini_dpe={checkout}"), 3)
    # A name only another variant uses passes (one set of sources serves a stack); a misspelt one does not.
    assert "local source given for mini_dpe, which is not an entry of cmake/deps.txt" in line


def test_a_plain_source_folder_is_identified_by_every_file_path_size_and_mtime(tmp_path: Path) -> None:
    """A folder that is no git checkout (an unpacked archive): what its patched copy is keyed by."""
    source = tmp_path / "dep"
    (source / "src" / "deep").mkdir(parents=True)
    (source / "CMakeLists.txt").write_text("project(dep)\n")
    (source / "src" / "deep" / "a.cc").write_text("int a;\n")
    (source / "src" / "linked.cc").symlink_to(source / "src" / "deep" / "a.cc")
    (source / "loop").symlink_to(source, target_is_directory=True)  # a symlinked folder is not entered
    (source / "dangling").symlink_to(source / "nowhere")
    env = dict(os.environ, GIT_CEILING_DIRECTORIES=str(tmp_path))

    def stamp(relative: str) -> str:
        found = (source / relative).stat()
        return f"{relative}:{found.st_size}:{found.st_mtime_ns}"

    expected = [stamp("CMakeLists.txt"), stamp("src/deep/a.cc"), stamp("src/linked.cc")]
    before = dep_sources._identity(source, env)
    assert before == "\n".join(sorted(expected))
    (source / "src" / "deep" / "a.cc").write_text("int a = 1;\n")
    assert dep_sources._identity(source, env) != before
    changed = dep_sources._identity(source, env)
    (source / "src" / "new.h").write_text("")
    assert dep_sources._identity(source, env) != changed
