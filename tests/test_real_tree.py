"""A real onnxruntime tree (1.21.0) through ortstack, up to the compile, on every test run.

The archive is onnxruntime 1.21.0 from ``ORTSTACK_REAL_ORT_ARCHIVE`` (Debian's repack
``onnxruntime_1.21.0+dfsg.orig.tar.xz``, whose ``cmake/`` and C++ sources are whole, or GitHub's
archive of the tag), else GitHub's archive downloaded once into the cache (tests/real_ort.py: the
session checks it before any test runs, by the digests of the files these tests rely on). It is
served on 127.0.0.1, fetched by archive URL + sha256, patched with a patch made here, and every
variant is decided from its real cmake files: options the tree reads, the plugin EP it lacks, the
deps.txt entries a Linux WebGPU configure uses, and its ``<tree>/mirror`` deps mirror. Without an
archive the session stops at once naming both ways; these tests are never skipped.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest

import real_ort
from clirun import one_error
from ortstack import config
from ortstack.source import cmake_eval, dawn_plan, ort_tree
from upstream import git

if TYPE_CHECKING:
    from pathlib import Path

    from upstream import LoopbackServer

# v1.21.0; the stock onnxruntime 1.21.0 wheel's build info names it (git-commit-id=e0b66cad28).
# Neither archive carries a commit id: the digests of real_ort.EXPECTED say the tree is 1.21.0, and
# the sha256 of the archive at hand pins its bytes in the stack.
V1_21_0 = "e0b66cad282043d4377cea5269083f17771b6dfc"
PATCHED_FILE = real_ort.PATCHED_FILE
MARKER = "// ortstack real-tree test: this line comes from the project's patch"
# What a Linux WebGPU configure of 1.21 uses of its 41 deps.txt entries, as read from its cmake/.
LINUX_WEBGPU_DEPS = {
    "abseil_cpp", "date", "dawn", "dlpack", "eigen", "flatbuffers", "json", "microsoft_gsl", "mp11",
    "onnx", "protobuf", "pybind11", "pytorch_cpuinfo", "re2", "safeint", "utf8_range",
}  # fmt: skip


def real_archive() -> Path:
    try:
        return real_ort.session_archive(os.environ)
    except real_ort.RealTreeUnavailableError as error:
        pytest.fail(str(error))


def _project_patch(tree_file_text: str, scratch: Path, env: dict[str, str]) -> str:
    """A format-patch of one added line to PATCHED_FILE, made with git against the file's real text."""
    target = scratch / PATCHED_FILE
    target.parent.mkdir(parents=True)
    target.write_text(tree_file_text, encoding="utf-8")
    git("init", "-q", cwd=scratch, env=env)
    git("add", "-A", cwd=scratch, env=env)
    git("commit", "-q", "-m", "base", cwd=scratch, env=env)
    target.write_text(f"{MARKER}\n{tree_file_text}", encoding="utf-8")
    git("commit", "-q", "-am", "Mark the WebGPU MatMulNBits source\n\nOrigin: ortstack test", cwd=scratch, env=env)
    return git("format-patch", "-1", "--full-index", "--stdout", cwd=scratch, env=env)


@dataclass(frozen=True)
class RealProject:
    root: Path
    env: dict[str, str]

    @property
    def stack(self) -> Path:
        return self.root / "project" / "stack.toml"

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "ortstack", *args, "--stack", str(self.stack)]
        cwd = self.root / "project"
        result = subprocess.run(argv, check=False, cwd=cwd, env=self.env, capture_output=True, text=True, timeout=600)
        assert "Traceback" not in result.stderr, result.stderr
        return result

    def plan(self, variant: str) -> dict[tuple[str, str], str]:
        """``build --plan`` of ``variant`` as {(what, name): value}."""
        result = self.run("build", "--plan", "--variant", variant)
        assert result.returncode == 0, result.stderr
        rows: dict[tuple[str, str], str] = {}
        for line in (result.stdout + result.stderr).splitlines():  # the log's tables go to stderr
            cells = [cell.strip() for cell in line.strip().strip("│").split("│")]
            if len(cells) == 3 and cells[0] in {"option", "not read by this tree", "dependency"}:
                rows[(cells[0], cells[1])] = cells[2]
        return rows


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, server: LoopbackServer, cli_env: dict[str, str]) -> RealProject:
    """A project pinning the served 1.21.0 archive by sha256, fetched, then patched (three variants)."""
    archive = real_archive()
    url = server.add(f"/real/{archive.name}", archive.read_bytes())
    sha256 = hashlib.sha256(archive.read_bytes()).hexdigest()
    root = tmp_path_factory.mktemp("real-tree")
    env = {
        **cli_env,
        "ORTSTACK_CACHE_DIR": str(root / "cache"),
        "ORTSTACK_WORK_DIR": str(root / "work"),
        "ORTSTACK_DIST_DIR": str(root / "dist"),
    }
    real = RealProject(root=root, env=env)
    (root / "project" / "patches").mkdir(parents=True)
    real.stack.write_text(_stack(url, sha256), encoding="utf-8")
    fetched = real.run("fetch")
    assert fetched.returncode == 0, fetched.stderr
    source = root / "cache" / "sources" / V1_21_0
    git_env = {**env, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid"}
    git_env |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}
    patch = _project_patch((source / PATCHED_FILE).read_text(encoding="utf-8"), root / "scratch", git_env)
    (root / "project" / "patches" / "0001-mark-webgpu-matmulnbits.patch").write_text(patch, encoding="utf-8")
    entry = '[[patch]]\nid = "mark"\nfile = "patches/0001-mark-webgpu-matmulnbits.patch"\norigin = { kind = "local" }\n'
    real.stack.write_text(_stack(url, sha256) + "\n" + entry, encoding="utf-8")
    patched = real.run("patch")
    assert patched.returncode == 0, patched.stderr
    return real


def _stack(url: str, sha256: str) -> str:
    return f"""[ort]
repository = "https://github.com/microsoft/onnxruntime"
commit = "{V1_21_0}"
archive_url = "{url}"
archive_sha256 = "{sha256}"

[variant.webgpu]
kind = "webgpu"

[variant.webgpu-shared]
kind = "webgpu"
dawn = "shared"

[variant.plugin]
kind = "plugin"
min_onnxruntime = "1.24.4"
"""


def test_fetched_by_sha256_and_patched(project: RealProject) -> None:
    source = project.root / "cache" / "sources" / V1_21_0
    assert (source / "VERSION_NUMBER").read_text(encoding="utf-8").strip() == "1.21.0"
    assert sum(1 for p in source.rglob("*") if p.is_file()) > 8000
    for variant in ("webgpu", "webgpu-shared", "plugin"):
        tree = project.root / "work" / "prepared" / variant
        assert (tree / PATCHED_FILE).read_text(encoding="utf-8").startswith(MARKER)
        log = git("log", "--format=%s", cwd=tree, env=project.env).splitlines()
        assert log[0] == "Mark the WebGPU MatMulNBits source"


def test_options_are_the_ones_the_tree_reads(project: RealProject) -> None:
    rows = project.plan("webgpu")
    options = {name: value for (what, name), value in rows.items() if what == "option"}
    assert options == {
        "onnxruntime_USE_WEBGPU": "ON",
        "onnxruntime_ENABLE_PYTHON": "ON",
        "onnxruntime_BUILD_SHARED_LIB": "ON",
        "onnxruntime_BUILD_UNIT_TESTS": "OFF",
        "onnxruntime_USE_TELEMETRY": "OFF",
        "onnxruntime_USE_EXTERNAL_DAWN": "OFF",
        # 1.21's name for Dawn as one shared library (onnxruntime_BUILD_DAWN_SHARED_LIBRARY later)
        "onnxruntime_BUILD_DAWN_MONOLITHIC_LIBRARY": "OFF",
    }
    # 1.21 has no plugin EP option, no WGSL template generator and no deps-mirror option.
    left_out = {name for (what, name) in rows if what == "not read by this tree"}
    assert left_out == {"onnxruntime_USE_EP_API_ADAPTERS", "onnxruntime_WGSL_TEMPLATE"}
    shared = project.plan("webgpu-shared")
    assert shared[("option", "onnxruntime_BUILD_DAWN_MONOLITHIC_LIBRARY")] == "ON"
    assert ("option", "onnxruntime_BUILD_DAWN_SHARED_LIBRARY") not in shared


def test_the_plugin_variant_is_refused_naming_what_the_tree_lacks(project: RealProject) -> None:
    line = one_error(project.run("build", "--variant", "plugin"), 3)
    expected = "reads neither onnxruntime_USE_EP_API_ADAPTERS nor onnxruntime_BUILD_WEBGPU_EP_STATIC_LIB"
    assert f"cannot build a plugin variant: its cmake {expected}" in line
    assert not (project.root / "dist").exists()


def test_only_the_dependencies_the_configure_uses(project: RealProject) -> None:
    rows = project.plan("webgpu")
    needed = {name for (what, name) in rows if what == "dependency"}
    assert needed == LINUX_WEBGPU_DEPS
    tree = project.root / "work" / "prepared" / "webgpu"
    # 1.21 reads its mirror from <tree>/mirror, and its own patches are named per dependency.
    assert all(
        value.startswith(f"mirror {tree / 'mirror'}") for (what, _), value in rows.items() if what == "dependency"
    )
    assert "applies onnx.patch" in rows[("dependency", "onnx")]
    assert "applies protobuf_cmake.patch" in rows[("dependency", "protobuf")]


def test_a_build_without_the_dependencies_stops_before_configuring_and_names_them(project: RealProject) -> None:
    line = one_error(project.run("build", "--variant", "webgpu"), 4)
    assert f"{len(LINUX_WEBGPU_DEPS)} deps.txt entries this configure needs are not in the mirror" in line
    for name in ("abseil_cpp", "onnx", "protobuf", "re2"):
        assert name in line
    for unused in ("cutlass", "coremltools", "protoc_win64", "directx_headers", "googletest"):
        assert unused not in line
    assert not (project.root / "work" / "cmake" / "webgpu" / "ort").exists()  # nothing configured


@pytest.mark.parametrize("platform", ["linux", "windows"])
def test_the_dawn_options_and_patches_of_the_real_tree(project: RealProject, platform: str) -> None:
    """What 1.21's cmake/external/onnxruntime_external_deps.cmake forces on Dawn and patches into it.

    (Dawn's own CMake and DEPS at 1.21's pin are not test data here; the miniature Dawn covers them.)
    """
    tree = project.root / "work" / "prepared" / "webgpu"
    stack = config.load(project.stack)
    defines = ort_tree.plan(tree, stack.variant("webgpu"), platform).defines
    custom = dawn_plan.ort_evaluation(tree, defines, platform, custom=True).cache
    assert {name: custom.get(name) for name in ("DAWN_BUILD_TESTS", "DAWN_USE_X11", "TINT_BUILD_SPV_READER")} == {
        "DAWN_BUILD_TESTS": "OFF",
        "DAWN_USE_X11": "OFF",
        "TINT_BUILD_SPV_READER": "OFF",
    }
    # 1.21 forces Dawn's configure-time clones even for a complete custom tree: ortstack's
    # assembled tree replaces the clone script (see test_dawn.py, the same shape in miniature).
    assert custom["DAWN_FETCH_DEPENDENCIES"] == "ON"
    if platform == "windows":
        assert (custom["DAWN_USE_BUILT_DXC"], custom["DAWN_ENABLE_D3D12"], custom["DAWN_ENABLE_VULKAN"]) == (
            "ON",
            "ON",
            "OFF",
        )
    else:
        assert "DAWN_ENABLE_VULKAN" not in custom  # Dawn's own default: ON on Linux
    own = dawn_plan.ort_evaluation(tree, defines, platform, custom=False)
    assert dawn_plan.ort_patches(tree, own) == (("cmake/patches/dawn/dawn.patch",), ())


def test_every_cmake_file_of_the_tree_is_read(project: RealProject) -> None:
    # Escaped quotes in unquoted arguments (cmd /c … \"path\"), bracket comments and arguments:
    # one reader serves the options, dependencies and Dawn decisions, so it must read them all.
    cmake = project.root / "cache" / "sources" / V1_21_0 / "cmake"
    files = [cmake / "CMakeLists.txt", *sorted(cmake.rglob("*.cmake"))]
    commands = {p.relative_to(cmake).as_posix(): cmake_eval.parse(p.read_text(encoding="utf-8"), str(p)) for p in files}
    assert len(commands) > 80  # the whole cmake/ folder, external/ included
    arm64x = commands["arm64x.cmake"]
    custom = next(c for c in arm64x if c.name == "add_custom_target")
    assert any('\\"' in arg.text for arg in custom.args)  # the escape stays inside its word
    assert [c.name for c in arm64x].count("endforeach") == [c.name for c in arm64x].count("foreach")
