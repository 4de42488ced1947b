"""End to end on the miniature upstream: fetch --deps, patch, build both variants, install, inspect.

The same code path as a real onnxruntime build: scikit-build-core runs cpp_ext, which configures the
prepared tree's cmake/ with the variant's options; auditwheel repairs; wheels land in dist/.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import venv
import zipfile
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest
from filelock import FileLock

from clirun import one_error
from upstream import git, stack_toml

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from upstream import Upstream

pytestmark = [pytest.mark.compile, pytest.mark.network, pytest.mark.slow]

VARIANTS = """
[variant.webgpu]
kind = "webgpu"
dawn = "static"

[variant.plugin]
kind = "plugin"
dawn = "static"
min_onnxruntime = "1.24.4"

[variant.webgpu-dawn]
kind = "webgpu"
dawn = "shared"
wheel_name = "onnxruntime-webgpu-dawn"

[build]
compiler_cache = "none"
jobs = 2
"""


@dataclass(frozen=True, kw_only=True)
class Project:
    root: Path
    env: Mapping[str, str]

    @property
    def dist(self) -> Path:
        return self.root / "dist"

    @property
    def work(self) -> Path:
        return self.root / "work"

    def ortstack(self, *args: str, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        common = ["--stack", str(self.root / "stack.toml"), "--cache-dir", str(self.root / "cache")]
        common += ["--work-dir", str(self.work), "--dist-dir", str(self.dist)]
        argv = [sys.executable, "-m", "ortstack", *args, *common]
        full_env = {**self.env, **(env or {})}
        return subprocess.run(
            argv, check=False, cwd=self.root, env=full_env, capture_output=True, text=True, timeout=300
        )

    def wheels(self) -> dict[str, bytes]:
        return {path.name: path.read_bytes() for path in sorted(self.dist.glob("*.whl"))}


def make_project(root: Path, upstream: Upstream, env: Mapping[str, str], extra: str = VARIANTS) -> Project:
    root.mkdir(parents=True, exist_ok=True)
    (root / "stack.toml").write_text(stack_toml(repository=upstream.url, commit=upstream.commit) + extra)
    return Project(root=root, env=env)


def assert_ok(result: subprocess.CompletedProcess[str]) -> str:
    """The run's whole output: its tables (stdout), then its log (stderr)."""
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout + result.stderr


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, upstream: Upstream, cli_env: dict[str, str]) -> Project:
    project = make_project(tmp_path_factory.mktemp("build") / "project", upstream, cli_env)
    assert "ok: " in assert_ok(project.ortstack("fetch", "--deps"))
    assert "ok: prepared webgpu" in assert_ok(project.ortstack("patch"))
    assert f"ok: 3 wheels in {project.dist}" in " ".join(assert_ok(project.ortstack("build")).split())
    return project


def run_in_fresh_venv(where: Path, wheels: list[Path], code: str) -> str:
    venv.create(where / "venv", with_pip=True)
    python = where / "venv" / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    install = [str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", *map(str, wheels)]
    subprocess.run(install, check=True, cwd=where, timeout=300)
    # Run from outside the repository so nothing imports from the source tree.
    return subprocess.run([str(python), "-c", code], check=True, cwd=where, capture_output=True, text=True).stdout


CHECK_WHEELS = """
import ctypes, json, pathlib, onnxruntime, onnxruntime_ep_webgpu as ep
core = ctypes.CDLL(str(pathlib.Path(onnxruntime.__file__).with_name("capi") / "libonnxruntime.so"))
plugin = ctypes.CDLL(ep.get_library_path())
core.OrtMiniWebGpuDawn.restype = plugin.OrtMiniPluginEpName.restype = plugin.OrtMiniPluginDawn.restype = ctypes.c_char_p
print(json.dumps({
    "ort_file": onnxruntime.__file__,
    "ort_version": onnxruntime.__version__,
    "providers": onnxruntime.get_available_providers(),
    "ort_dawn": core.OrtMiniWebGpuDawn().decode(),
    "ep_name": ep.get_ep_name(),
    "plugin_says": plugin.OrtMiniPluginEpName().decode(),
    "plugin_dawn": plugin.OrtMiniPluginDawn().decode(),
}))
"""

CHECK_SHARED_DAWN = """
import ctypes, json, pathlib, onnxruntime
capi = pathlib.Path(onnxruntime.__file__).with_name("capi")
core = ctypes.CDLL(str(capi / "libonnxruntime.so"))
core.OrtMiniWebGpuDawn.restype = ctypes.c_char_p
print(json.dumps({"dawn": core.OrtMiniWebGpuDawn().decode(), "files": sorted(p.name for p in capi.iterdir())}))
"""


def test_all_variants_install_in_fresh_venvs_and_import(built: Project, tmp_path: Path) -> None:
    names = sorted(built.wheels())
    assert len(names) == 3, names
    ep_wheel, ort_wheel, dawn_wheel = names
    assert ep_wheel.startswith("onnxruntime_ep_webgpu-1.31.0+stack.")
    assert "-py3-none-manylinux" in ep_wheel  # no Python extension: one wheel for every Python
    assert ort_wheel.startswith("onnxruntime_webgpu-1.31.0+stack.")
    assert "-manylinux" in ort_wheel
    assert dawn_wheel.startswith("onnxruntime_webgpu_dawn-1.31.0+stack.")
    builtin_and_plugin = [built.dist / ep_wheel, built.dist / ort_wheel]
    (tmp_path / "a").mkdir()
    out = json.loads(run_in_fresh_venv(tmp_path / "a", builtin_and_plugin, CHECK_WHEELS))
    assert str(tmp_path / "a" / "venv") in out["ort_file"]
    assert out["ort_version"] == "1.31.0"
    assert out["providers"] == ["WebGpuExecutionProvider", "CPUExecutionProvider"]
    assert out["ort_dawn"] == "mini_dawn 1.0 (static)"
    assert out["ep_name"] == out["plugin_says"] == "WebGpuExecutionProvider"
    assert out["plugin_dawn"] == "mini_dawn 1.0 (static)"
    (tmp_path / "b").mkdir()
    shared = json.loads(run_in_fresh_venv(tmp_path / "b", [built.dist / dawn_wheel], CHECK_SHARED_DAWN))
    assert shared["dawn"] == "mini_dawn 1.0 (shared)"
    assert "libwebgpu_dawn.so" in shared["files"]


def test_plugin_wheel_requires_stock_onnxruntime(built: Project) -> None:
    wheel = next(built.dist.glob("onnxruntime_ep_webgpu-*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        metadata = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        text = archive.read(metadata).decode()
    assert "Name: onnxruntime-ep-webgpu" in text
    assert "Requires-Dist: onnxruntime>=1.24.4" in text


@pytest.mark.parametrize("variant", ["webgpu", "plugin", "webgpu-dawn"])
def test_inspect_prints_the_inputs(built: Project, upstream: Upstream, variant: str) -> None:
    prefix = variant.replace("webgpu", "onnxruntime_webgpu").replace("plugin", "onnxruntime_ep_webgpu")
    prefix = prefix.replace("-", "_") + "-"
    wheel = next(built.dist.glob(f"{prefix}*.whl"))
    info = json.loads(assert_ok_stdout(built.ortstack("inspect", str(wheel))))
    tree = built.work / "prepared" / variant
    assert info["ort_commit"] == upstream.commit
    assert info["tree_commit"] == git("rev-parse", "HEAD", cwd=tree, env=built.env)
    assert info["variant"] == variant
    assert info["kind"] == variant.removesuffix("-dawn")
    assert wheel.name.startswith(f"{prefix}{info['version']}-")
    dawn_url = f"{upstream.server.url}/deps/mini_dawn-1.0.zip"
    mirrored = (built.root / "cache" / "deps-mirror").joinpath(*dawn_url.split("://")[1].split("/"))
    dawn_sha1 = hashlib.sha1(mirrored.read_bytes()).hexdigest()
    assert info["dawn_revision"] == f"{dawn_url}#sha1={dawn_sha1}"
    adapters = "ON" if variant == "plugin" else "OFF"
    assert info["cmake_options"]["onnxruntime_USE_EP_API_ADAPTERS"] == adapters
    assert info["cmake_options"]["onnxruntime_USE_WEBGPU"] == "ON"
    shared = "ON" if variant == "webgpu-dawn" else "OFF"
    assert info["cmake_options"]["onnxruntime_BUILD_DAWN_SHARED_LIBRARY"] == shared
    assert info["cmake_options"]["onnxruntime_USE_TELEMETRY"] == "OFF"
    assert info["cmake_options"]["FETCHCONTENT_TRY_FIND_PACKAGE_MODE"] == "NEVER"
    assert info["cmake_options"]["onnxruntime_CMAKE_DEPS_MIRROR_DIR"].endswith("deps-mirror")
    assert info["compiler"]
    assert info["patches"] == []
    # mini_ort's cmake does not read it: it is recorded, and never reaches its cmake.
    left_out = ["onnxruntime_WGSL_TEMPLATE=static"]
    assert info["extra"] == {
        "features": [],
        "options_not_read_by_tree": left_out,
        "local_sources": {},
        "installed_dependencies": [],
        "compiler_cache": {"tool": "", "distributed": False},  # compiler_cache = "none"
    }
    assert "onnxruntime_WGSL_TEMPLATE" not in info["cmake_options"]
    assert info["cmake_options"]["onnxruntime_BUILD_UNIT_TESTS"] == "OFF"


def assert_ok_stdout(result: subprocess.CompletedProcess[str]) -> str:
    assert_ok(result)
    return result.stdout


def test_a_second_build_with_nothing_changed_returns_the_same_wheels(built: Project) -> None:
    before = built.wheels()
    stderr = assert_ok(built.ortstack("build"))
    assert stderr.count("up to date") == 3, stderr
    assert "-m build" not in stderr  # nothing was configured or compiled
    assert built.wheels() == before


def test_status_lists_each_variant_with_its_wheel(built: Project, upstream: Upstream) -> None:
    stdout = assert_ok_stdout(built.ortstack("status"))
    table = stdout[stdout.index("variants and wheels") :]
    for name in built.wheels():
        assert name in table
    assert table.count(f"on {upstream.commit[:12]}") == 3
    assert "not built" not in table


TWO_OF_ONE_NAME = """
[variant.webgpu]
kind = "webgpu"
dawn = "static"

[variant.webgpu-dawn-shared]
kind = "webgpu"
dawn = "shared"

[build]
compiler_cache = "none"
jobs = 2
"""


def test_two_variants_of_one_distribution_keep_a_wheel_each(
    tmp_path: Path, upstream: Upstream, cli_env: dict[str, str]
) -> None:
    """Dawn static and shared are both onnxruntime-webgpu (as in the default stack): building one must not
    delete the other's wheel, status names each variant's own, and the suites' default takes both."""
    from ortstack.build.buildinfo import variant_of  # noqa: PLC0415
    from ortstack.suites import suites  # noqa: PLC0415

    project = make_project(tmp_path / "project", upstream, cli_env, extra=TWO_OF_ONE_NAME)
    assert_ok(project.ortstack("fetch", "--deps"))
    assert_ok(project.ortstack("patch"))
    assert_ok(project.ortstack("build", "--variant", "webgpu"))
    assert_ok(project.ortstack("build", "--variant", "webgpu-dawn-shared"))
    wheels = sorted(project.dist.glob("*.whl"))
    assert sorted(str(variant_of(w)) for w in wheels) == ["webgpu", "webgpu-dawn-shared"], [w.name for w in wheels]
    assert all(w.name.startswith("onnxruntime_webgpu-") for w in wheels)
    table = assert_ok_stdout(project.ortstack("status"))
    rows = " ".join(table[table.index("variants and wheels") :].split())
    for wheel in wheels:
        assert " │ ".join([str(variant_of(wheel)), "webgpu", "onnxruntime-webgpu", wheel.name]) in rows, rows
    assert suites.newest_wheels(project.dist) == wheels


def test_a_failed_compile_leaves_dist_untouched(built: Project) -> None:
    before = built.wheels()
    tree = built.work / "prepared" / "plugin"
    source = tree / "onnxruntime/contrib_ops/webgpu/bert/paged_attention.cc"
    original = source.read_text()
    source.write_text(original.replace("return shader;", "return shader  // missing semicolon\n"))
    git("commit", "--quiet", "-am", "break the kernel", cwd=tree, env=built.env)
    try:
        result = built.ortstack("build", "--variant", "plugin")
        line = one_error(result, 6)
        assert "paged_attention.cc" in line
        assert "error:" in line
        log_file = built.work / "logs" / "build-plugin.log"
        assert f"full log: {log_file}" in result.stderr
        assert line.split("failed: ", 1)[1] in log_file.read_text()  # the compiler's own line
        assert built.wheels() == before
    finally:
        git("reset", "--quiet", "--hard", "HEAD~1", cwd=tree, env=built.env)
    # Fixed again: the build compiles just that file and the wheel is back.
    stderr = assert_ok(built.ortstack("build", "--variant", "plugin"))
    assert "paged_attention.cc.o" in (built.work / "logs" / "build-plugin.log").read_text()
    assert "onnxruntime_ep_webgpu" in stderr


def test_uncommitted_edits_in_the_prepared_tree_are_built_and_named(built: Project) -> None:
    """An edit tried in the prepared tree before it is committed and exported: the build compiles it and the
    wheel's version and build info say it is not the series' tree; undone, the series' wheel comes back."""
    before = built.wheels()
    tree = built.work / "prepared" / "plugin"
    source = tree / "onnxruntime/contrib_ops/webgpu/bert/paged_attention.cc"
    original = source.read_text()
    source.write_text(original + "// tried before committing\n")
    try:
        output = assert_ok(built.ortstack("build", "--variant", "plugin"))
        assert "has uncommitted edits: building them" in output
        assert "paged_attention.cc.o" in (built.work / "logs" / "build-plugin.log").read_text()
        edited = set(built.wheels()) - set(before)
        assert len(edited) == 1, edited  # a wheel of its own version, beside the series' wheels
        assert "uncommitted tree" in assert_ok_stdout(built.ortstack("inspect", str(built.dist / edited.pop())))
    finally:
        source.write_text(original)
    assert "uncommitted" not in assert_ok(built.ortstack("build", "--variant", "plugin"))
    # Its content is HEAD's again, not what the last build compiled: compiled again, not taken as unchanged.
    assert "paged_attention.cc.o" in (built.work / "logs" / "build-plugin.log").read_text()
    assert set(before) <= set(built.wheels())


def test_a_file_rewritten_as_it_was_compiles_nothing_and_a_changed_one_compiles(built: Project) -> None:
    """Re-preparing the tree rewrites every patched file: with the content the last build saw, it gets that
    build's mtime back, so nothing that includes it compiles again; a changed byte compiles each includer."""
    tree = built.work / "prepared" / "webgpu"
    header = tree / "include/onnxruntime/core/session/onnxruntime_c_api.h"
    source = tree / "onnxruntime/contrib_ops/webgpu/bert/paged_attention.cc"  # does not include the header
    header_text, source_text = header.read_bytes(), source.read_bytes()
    build_log = built.work / "logs" / "build-webgpu.log"
    includers = ["dawn_info", "matmul_nbits", "ort_apis"]

    def compiled() -> list[str]:
        before = build_log.stat().st_mtime_ns
        assert_ok(built.ortstack("build", "--variant", "webgpu"))
        assert build_log.stat().st_mtime_ns != before, "the build ran its compiles"
        return sorted(set(re.findall(r"/(\w+)\.cc\.o\b", build_log.read_text())))

    try:
        source.write_bytes(source_text + b"// edited\n")  # something to build
        header.write_bytes(header_text)
        os.utime(header, ns=(time.time_ns(), time.time_ns()))
        assert compiled() == ["paged_attention"]
        header.write_bytes(header_text + b"// changed\n")
        assert compiled() == includers
    finally:
        header.write_bytes(header_text)
        source.write_bytes(source_text)
    assert compiled() == sorted([*includers, "paged_attention"]), "both back as they were: compiled again"


def test_missing_tools_are_reported_before_anything_starts(
    tmp_path: Path, upstream: Upstream, cli_env: dict[str, str]
) -> None:
    project = make_project(tmp_path / "project", upstream, cli_env)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("git", "python3"):
        found = subprocess.run(["which", tool], check=True, capture_output=True, text=True).stdout.strip()
        (bin_dir / tool).symlink_to(found)
    result = project.ortstack("build", env={"PATH": str(bin_dir)})
    line = one_error(result, 6)
    assert "cmake, ninja" in line
    assert not project.work.exists()
    assert not project.dist.exists()


def test_a_cmake_older_than_the_pin_needs_is_refused_before_configuring(built: Project) -> None:
    tree = built.work / "prepared" / "webgpu"
    cmake_lists = tree / "cmake" / "CMakeLists.txt"
    text = cmake_lists.read_text()
    cmake_lists.write_text(text.replace("cmake_minimum_required(VERSION 3.20)", "cmake_minimum_required(VERSION 99.1)"))
    git("commit", "--quiet", "-am", "needs a future cmake", cwd=tree, env=built.env)
    log_file = built.work / "logs" / "build-webgpu.log"
    log_file.unlink()
    try:
        line = one_error(built.ortstack("build", "--variant", "webgpu"), 6)
        assert "needs cmake >= 99.1" in line
        assert not log_file.exists()  # nothing was started
    finally:
        git("reset", "--quiet", "--hard", "HEAD~1", cwd=tree, env=built.env)


def test_a_build_dir_in_use_by_another_run_is_not_shared(built: Project) -> None:
    with FileLock(f"{built.work / 'cmake' / 'webgpu'}.lock"):
        line = one_error(built.ortstack("build", "--variant", "webgpu", "--no-wait"), 8)
    assert "another ortstack run is building in" in line


def test_a_plugin_library_without_its_entry_points_is_refused(built: Project) -> None:
    before = built.wheels()
    tree = built.work / "prepared" / "plugin"
    source = tree / "onnxruntime/core/providers/webgpu/ep/plugin_ep.cc"
    source.write_text(source.read_text().replace("CreateEpFactories", "CreateEpFactoriesRenamed"))
    git("commit", "--quiet", "-am", "an old tree: no plugin entry point", cwd=tree, env=built.env)
    try:
        line = one_error(built.ortstack("build", "--variant", "plugin"), 6)
        assert "does not export CreateEpFactories, so no onnxruntime can load it" in line
        assert built.wheels() == before
    finally:
        git("reset", "--quiet", "--hard", "HEAD~1", cwd=tree, env=built.env)


def _cached(cache: Path, name: str) -> str | None:
    """A variable's value in a CMakeCache.txt, or None."""
    for line in cache.read_text(encoding="utf-8").splitlines():
        if line.startswith(f"{name}:"):
            return line.split("=", 1)[1]
    return None


def test_a_build_with_other_compilers_configures_onnxruntime_afresh_with_every_option(
    tmp_path: Path, upstream: Upstream, cli_env: dict[str, str]
) -> None:
    """cmake drops a cache configured with other compilers and configures again without the initial cache the
    options come in (-C): every option would be lost, the offline sources with them. ortstack starts that build
    dir afresh instead, so the second build has the new compilers and still every option."""
    gcc, gxx, cc, cxx = (shutil.which(name) for name in ("gcc", "g++", "cc", "c++"))
    if None in (gcc, gxx, cc, cxx) or gxx == cxx:
        pytest.skip("needs g++ and c++ as two names of C++ compilers")
    project = make_project(tmp_path / "project", upstream, cli_env, extra='[variant.webgpu]\nkind = "webgpu"\n')
    assert_ok(project.ortstack("fetch", "--deps"))
    assert_ok(project.ortstack("patch"))
    cache = project.work / "cmake" / "webgpu" / "ort" / "CMakeCache.txt"
    option = "onnxruntime_USE_WEBGPU"
    for c_compiler, cxx_compiler in ((gcc, gxx), (cc, cxx)):
        output = assert_ok(project.ortstack("build", env={"CC": str(c_compiler), "CXX": str(cxx_compiler)}))
        assert ("starts afresh" in output) == (cxx_compiler == cxx)
        assert _cached(cache, "CMAKE_CXX_COMPILER") == cxx_compiler
        assert _cached(cache, option) == "ON", f"{option} lost after switching to {cxx_compiler}"


def test_a_copied_work_dir_builds_with_its_cmake_state_afresh(
    tmp_path: Path, upstream: Upstream, cli_env: dict[str, str]
) -> None:
    """cmake refuses a build dir whose cache was written for other paths ("does not match the source ... used to
    generate cache"): a copied or moved work dir would never build again. ortstack starts that cmake state
    afresh, with every option, and the copy's next build is a no-op."""
    project = make_project(tmp_path / "project", upstream, cli_env, extra='[variant.webgpu]\nkind = "webgpu"\n')
    assert_ok(project.ortstack("fetch", "--deps"))
    assert_ok(project.ortstack("patch"))
    assert_ok(project.ortstack("build"))
    copy = Project(root=tmp_path / "copy", env=cli_env)
    shutil.copytree(project.root, copy.root, symlinks=True)
    (copy.dist / next(iter(project.wheels()))).unlink()  # so that the copy has to build

    output = " ".join(assert_ok(copy.ortstack("build")).split())  # long paths wrap the line
    assert f"cmake state starts afresh: build dir {copy.work / 'cmake' / 'webgpu'} was configured as" in output
    cache = copy.work / "cmake" / "webgpu" / "ort" / "CMakeCache.txt"
    assert _cached(cache, "CMAKE_HOME_DIRECTORY") == (copy.work / "prepared" / "webgpu" / "cmake").as_posix()
    assert _cached(cache, "onnxruntime_USE_WEBGPU") == "ON"
    assert copy.wheels().keys() == project.wheels().keys()
    assert "starts afresh" not in assert_ok(copy.ortstack("build"))
    assert "starts afresh" not in assert_ok(project.ortstack("build"))


def test_a_build_for_another_python_drops_what_findpython_found_for_the_last_one(
    tmp_path: Path, upstream: Upstream, cli_env: dict[str, str]
) -> None:
    """FindPython takes a new interpreter but keeps the headers it found for the last one and then refuses
    them (on a real tree: 3.11 then 3.12, "Could NOT find Python (missing: Development.Module NumPy)"). When
    the cache names another interpreter, ortstack drops that state and nothing else; the same interpreter
    leaves the cache as it is (a no-op build must not configure again)."""
    project = make_project(tmp_path / "project", upstream, cli_env, extra='[variant.webgpu]\nkind = "webgpu"\n')
    assert_ok(project.ortstack("fetch", "--deps"))
    assert_ok(project.ortstack("patch"))
    assert_ok(project.ortstack("build"))
    cache = project.work / "cmake" / "webgpu" / "ort" / "CMakeCache.txt"
    assert _cached(cache, "_Python_EXECUTABLE") == sys.executable
    assert _cached(cache, "_Python_INCLUDE_DIR")

    unchanged = cache.read_bytes()
    output = assert_ok(project.ortstack("build"))
    assert "Python changed" not in output
    assert cache.read_bytes() == unchanged

    # The cache as a configure under another interpreter leaves it, and an edit so that a build runs.
    other = str(tmp_path / "other" / "bin" / "python3")
    text = cache.read_text(encoding="utf-8")
    for name in ("Python_EXECUTABLE:STRING", "_Python_EXECUTABLE:INTERNAL"):
        text = text.replace(f"\n{name}={sys.executable}\n", f"\n{name}={other}\n")
    cache.write_text(text, encoding="utf-8")
    options = cache.parent.parent / "ort-options.cmake"
    options.write_text(options.read_text(encoding="utf-8").replace(f"[==[{sys.executable}]==]", f"[==[{other}]==]"))
    source = project.work / "prepared" / "webgpu" / "onnxruntime" / "core" / "platform" / "telemetry_1ds.cc"
    source.write_text(source.read_text(encoding="utf-8") + "// edited\n", encoding="utf-8")
    output = assert_ok(project.ortstack("build"))
    assert f"Python changed ({other} -> {sys.executable})" in output
    assert _cached(cache, "_Python_EXECUTABLE") == sys.executable
    assert _cached(cache, "onnxruntime_USE_WEBGPU") == "ON"
