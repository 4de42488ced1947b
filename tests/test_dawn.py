"""Dawn's third-party sources: read from the pinned CMake and DEPS, fetched by commit, assembled.

The miniature Dawn (tests/packages/mini_dawn) has Dawn's DEPS and CMake shape; each of its
third-party sources is a real git repository (file://), and DEPS entries a build does not use point
at repositories that do not exist, so fetching one of them fails. deps.txt is served on 127.0.0.1.
"""

from __future__ import annotations

import hashlib
import json
import urllib.request
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from clirun import error_lines, one_error
from ortstack.build import variants
from ortstack.config import Variant
from ortstack.errors import ConfigError
from ortstack.source import cmake_eval, dawn, dawn_plan
from test_build import assert_ok, make_project
from upstream import DAWN_LINUX_NEEDS, MINI_DAWN_PATH, deterministic_zip, git, render_mini_dawn

if TYPE_CHECKING:
    from collections.abc import Mapping

    from test_build import Project
    from upstream import Upstream

WEBGPU = '\n[variant.webgpu]\nkind = "webgpu"\n\n[build]\ncompiler_cache = "none"\njobs = 2\n'
NO_WEBGPU = '\n[variant.cpu]\nkind = "webgpu"\ncmake_defines = { onnxruntime_USE_WEBGPU = "OFF" }\n'
WINDOWS_NEEDS = [
    "third_party/dxc",
    "third_party/jinja2",
    "third_party/markupsafe",
    "third_party/spirv-headers/src",
    "third_party/spirv-tools/src",
]


def _served_dawn(upstream: Upstream, tmp_path: Path) -> dawn_plan.DawnSource:
    with urllib.request.urlopen(upstream.server.url + MINI_DAWN_PATH, timeout=30) as response:
        (tmp_path / "dawn.zip").write_bytes(response.read())
    return dawn_plan.DawnSource(location=tmp_path / "dawn.zip")


def _plan(upstream: Upstream, tmp_path: Path, platform: str, **defines: str) -> dawn_plan.Plan:
    variant = Variant(name="webgpu", cmake_defines=defines)
    resolved = variants.resolve_defines(variant, platform)
    return dawn_plan.plan(upstream.work, resolved, platform, _served_dawn(upstream, tmp_path), "mini")


@pytest.mark.network
def test_a_vulkan_linux_build_uses_four_khronos_repos_and_the_generator_packages(
    upstream: Upstream, tmp_path: Path
) -> None:
    linux = _plan(upstream, tmp_path, "linux")
    assert [t.path for t in linux.third_party] == DAWN_LINUX_NEEDS
    assert {t.path: t.commit for t in linux.third_party} == {p: upstream.dawn_third_party[p] for p in DAWN_LINUX_NEEDS}
    assert {t.path: t.python_package for t in linux.third_party if t.python_package} == {
        "third_party/jinja2": "jinja2",
        "third_party/markupsafe": "markupsafe",
    }
    # ORT's patch step for its own Dawn download, which it skips for a custom tree: ortstack does it.
    assert linux.patches == ("cmake/patches/dawn/mini_dawn_enable.patch",)
    assert linux.removed == ("test",)
    assert not linux.configure_fetches


@pytest.mark.network
def test_a_d3d12_windows_build_uses_dxc_and_spirv_but_no_vulkan(upstream: Upstream, tmp_path: Path) -> None:
    assert [t.path for t in _plan(upstream, tmp_path, "windows").third_party] == WINDOWS_NEEDS
    with_vulkan = _plan(upstream, tmp_path, "windows", onnxruntime_ENABLE_DAWN_BACKEND_VULKAN="ON")
    assert [t.path for t in with_vulkan.third_party] == sorted(
        [*WINDOWS_NEEDS, "third_party/vulkan-headers/src", "third_party/vulkan-utility-libraries/src"]
    )


def test_deps_entries_urls_commits_and_conditions() -> None:
    text = (
        "vars = {'git': 'https://h', 'on': True}\n"
        "deps = {\n"
        "  'third_party/a': {'url': '{git}/a' + '@' + '1111111111111111111111111111111111111111', 'condition': 'on'},\n"
        "  'third_party/b': '{git}/b@2222222222222222222222222222222222222222',\n"
        "  'tools/c': {'packages': [{'package': 'c', 'version': Var('on')}], 'dep_type': 'cipd'},\n"
        "}\n"
    )
    found = dawn_plan.parse_deps(text, "DEPS")
    assert sorted(found) == ["third_party/a", "third_party/b"]
    assert found["third_party/a"].repository == "https://h/a"
    assert found["third_party/a"].commit == "1" * 40
    assert found["third_party/a"].condition == "on"
    assert found["third_party/b"].commit == "2" * 40


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("deps = {\n", r"DEPS:\d+: Dawn's DEPS file cannot be read"),
        ("vars = {}\n", r"DEPS: Dawn's DEPS file has no deps = \{\.\.\.\} table"),
        ("deps = {'a': open('x')}\n", r"DEPS:1: Dawn's DEPS file has an expression ortstack does not read"),
    ],
)
def test_a_deps_file_that_cannot_be_read_is_one_config_error(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        dawn_plan.parse_deps(text, "DEPS")
    assert caught.value.tip
    assert "\n" not in caught.value.message


def test_cmake_evaluation_follows_cache_options_branches_and_functions() -> None:
    text = """
    set(FORCED ON CACHE BOOL "" FORCE)
    set(FORCED OFF CACHE BOOL "")
    option(FORCED "kept: already in the cache" OFF)
    option(DEFAULTED "doc" ${FORCED})
    set(LOCAL "a;b")
    if (NOT FORCED)
      add_subdirectory(never)
    elseif ((DEFAULTED AND NOT TARGET missing) OR "${UNSET}" STREQUAL "x")
      list(APPEND LOCAL c)
      add_library(made INTERFACE)
    endif()
    function(Helper)
      add_subdirectory(helper)
      return()
      add_subdirectory(after_return)
    endfunction()
    if (TARGET made)
      Helper()
    endif()
    """
    evaluation = cmake_eval.Evaluation(variables={"CMAKE_CURRENT_SOURCE_DIR": "/src"})
    evaluation.run(cmake_eval.parse(text, "t.cmake"), "t.cmake")
    assert evaluation.cache == {"FORCED": "ON", "DEFAULTED": "ON"}
    assert evaluation.variables["LOCAL"] == "a;b;c"
    assert [v[0] for n, v in evaluation.ran if n == "add_subdirectory"] == ["/src/helper"]


# --------------------------------------------------------------------------------------------------
# End to end: fetch --deps, patch, build, on the miniature upstream.


def _push(upstream: Upstream, commit: str, name: str) -> str:
    git("push", "--quiet", upstream.url, f"{commit}:refs/heads/{name}", cwd=upstream.work, env=upstream.env)
    return commit


def _pin_dawn_zip(upstream: Upstream, data: bytes, path: str) -> str:
    """An upstream commit whose deps.txt names ``data``, served at ``path``, as Dawn."""
    url = upstream.server.add(path, data)
    deps_txt = upstream.file_at(upstream.commit, "cmake/deps.txt").decode()
    sha1 = hashlib.sha1(data).hexdigest()
    lines = [f"dawn;{url};{sha1}" if line.startswith("dawn;") else line for line in deps_txt.splitlines()]
    commit = upstream.add_commit({"cmake/deps.txt": "\n".join(lines) + "\n"}, f"Dawn from {path}")
    return _push(upstream, commit, f"dawn-{sha1[:12]}")


def _project(
    tmp_path: Path, upstream: Upstream, env: Mapping[str, str], *, commit: str = "", extra: str = WEBGPU
) -> Project:
    project = make_project(tmp_path / "project", upstream, env, extra)
    if commit:
        stack = project.root / "stack.toml"
        stack.write_text(stack.read_text(encoding="utf-8").replace(upstream.commit, commit), encoding="utf-8")
    return project


def _assembled(project: Project) -> Path:
    info = json.loads(_wheel_file(project, "ortstack_build_info.json"))
    return Path(info["cmake_options"]["onnxruntime_CUSTOM_DAWN_SRC_PATH"])


def _wheel_file(project: Project, name: str) -> str:
    (wheel,) = project.dist.glob("*.whl")
    with zipfile.ZipFile(wheel) as bundle:
        return bundle.read(next(n for n in bundle.namelist() if n.endswith(name))).decode()


@pytest.mark.compile
@pytest.mark.network
@pytest.mark.slow
def test_fetch_deps_gets_what_the_build_uses_and_the_build_fetches_nothing(
    tmp_path: Path, upstream: Upstream, cli_env: dict[str, str]
) -> None:
    project = _project(tmp_path, upstream, cli_env)
    fetched = assert_ok(project.ortstack("fetch", "--deps"))
    assert (
        "jinja2, markupsafe, spirv-headers/src, spirv-tools/src, vulkan-headers/src, vulkan-utility-libraries/src"
        in (fetched)
    )
    # jinja2/markupsafe installed where ortstack runs stand in for their DEPS checkouts (not fetched then).
    stand_ins = {f"third_party/{name}" for name in dawn_plan.PYTHON_PACKAGES.values() if dawn.installed_package(name)}
    for path in DAWN_LINUX_NEEDS:
        cached = (project.root / "cache" / "sources" / f"{upstream.dawn_third_party[path]}.json").is_file()
        assert cached == (path not in stand_ins), path
    assert_ok(project.ortstack("patch"))
    planned = project.ortstack("build", "--plan")
    assert planned.returncode == 0, planned.stderr
    folders = {line.split("│")[1].strip() for line in planned.stdout.splitlines() if line.startswith("Dawn folder")}
    assert folders == set(DAWN_LINUX_NEEDS)  # what the build will use, listed before it runs
    # The build may not reach the third-party repositories: take them away while it runs.
    git_root = upstream.work.parent / "dawn-deps" / "git"
    hidden = git_root.with_name("git-hidden")
    git_root.rename(hidden)
    try:
        built = assert_ok(project.ortstack("build"))
    finally:
        hidden.rename(git_root)
    assert "--allow-dawn-fetch" not in built
    tree = _assembled(project)
    assert (tree / "third_party" / "vulkan-headers" / "src" / "include" / "vulkan_headers" / "mini.h").is_file()
    assert not (tree / "third_party" / "dxc").exists()
    assert not (tree / "FETCH_DEPENDENCIES_RAN").exists()
    assert "#define MINI_DAWN_ORT_PATCHED 1" in (tree / "src" / "dawn.cc").read_text(encoding="utf-8")
    assert project.ortstack("build").returncode == 0  # a no-op now, the assembled tree reused


@pytest.mark.compile
@pytest.mark.network
@pytest.mark.slow
def test_a_dawn_mirror_entry_that_is_no_zip_is_one_error_and_a_variant_without_webgpu_never_reads_it(
    tmp_path: Path, upstream: Upstream, cli_env: dict[str, str]
) -> None:
    project = _project(tmp_path, upstream, cli_env, extra=WEBGPU + NO_WEBGPU)
    assert_ok(project.ortstack("fetch", "--deps"))
    assert_ok(project.ortstack("patch"))
    (mirrored,) = (project.root / "cache" / "deps-mirror").rglob("mini_dawn-1.0.zip")
    mirrored.unlink()  # a link to the cache's copy: replace it, do not write through it
    mirrored.write_bytes(b"<html>a proxy's error page, not a zip</html>")
    line = one_error(project.ortstack("build", "--variant", "webgpu"), 4)
    assert f"the Dawn archive {mirrored} is not a zip file" in line
    assert_ok(project.ortstack("build", "--variant", "cpu"))


@pytest.mark.network
def test_a_third_party_commit_the_repository_lacks_is_one_fetch_error(
    tmp_path: Path, upstream: Upstream, cli_env: dict[str, str]
) -> None:
    commits = {**upstream.dawn_third_party, "third_party/spirv-headers/src": "f" * 40}
    data = deterministic_zip(render_mini_dawn(tmp_path / "dawn", upstream.dawn_git, commits), "mini_dawn-1.0")
    project = _project(tmp_path, upstream, cli_env, commit=_pin_dawn_zip(upstream, data, "/deps/dawn-bad-commit.zip"))
    line = one_error(project.ortstack("fetch", "--deps"), 4)
    assert (
        f"git could not fetch commit {'f' * 40} from {upstream.dawn_git}/external/github.com/KhronosGroup/SPIRV-Headers"
        in line
    )


@pytest.mark.network
def test_a_dawn_deps_file_that_cannot_be_read_is_one_config_error(
    tmp_path: Path, upstream: Upstream, cli_env: dict[str, str]
) -> None:
    rendered = render_mini_dawn(tmp_path / "dawn", upstream.dawn_git, upstream.dawn_third_party)
    (rendered / "DEPS").write_text("deps = {\n  'third_party/x': {\n", encoding="utf-8")
    data = deterministic_zip(rendered, "mini_dawn-1.0")
    project = _project(tmp_path, upstream, cli_env, commit=_pin_dawn_zip(upstream, data, "/deps/dawn-bad-deps.zip"))
    assert "Dawn's DEPS file cannot be read" in one_error(project.ortstack("fetch", "--deps"), 3)


@pytest.mark.compile
@pytest.mark.network
@pytest.mark.slow
def test_a_dawn_patch_the_pinned_cmake_names_but_the_tree_lacks_is_one_build_error(
    tmp_path: Path, upstream: Upstream, cli_env: dict[str, str]
) -> None:
    commit = upstream.add_commit({"cmake/patches/dawn/mini_dawn_enable.patch": None}, "drop the Dawn patch")
    project = _project(tmp_path, upstream, cli_env, commit=_push(upstream, commit, "dawn-no-patch"))
    assert_ok(project.ortstack("fetch", "--deps"))
    assert_ok(project.ortstack("patch"))
    line = one_error(project.ortstack("build"), 6)
    assert "onnxruntime's cmake applies mini_dawn_enable.patch to Dawn, but the prepared tree has no" in line


@pytest.mark.compile
@pytest.mark.network
@pytest.mark.slow
def test_an_ort_that_forces_dawn_fetch_for_a_custom_tree_clones_nothing(
    tmp_path: Path, upstream: Upstream, cli_env: dict[str, str]
) -> None:
    # ORT 1.21's shape: DAWN_FETCH_DEPENDENCIES forced ON whether or not a custom Dawn tree is given.
    path = "cmake/external/onnxruntime_external_deps.cmake"
    text = upstream.file_at(upstream.commit, path).decode()
    text = text.replace('    set(DAWN_FETCH_DEPENDENCIES OFF CACHE BOOL "" FORCE)\n', "")
    text = text.replace(
        "if (onnxruntime_USE_WEBGPU)\n",
        'if (onnxruntime_USE_WEBGPU)\n  set(DAWN_FETCH_DEPENDENCIES ON CACHE BOOL "" FORCE)\n',
    )
    commit = _push(upstream, upstream.add_commit({path: text}, "force Dawn's clones"), "dawn-forced-fetch")
    project = _project(tmp_path, upstream, cli_env, commit=commit)
    assert_ok(project.ortstack("fetch", "--deps"))
    assert_ok(project.ortstack("patch"))
    assert_ok(project.ortstack("build"))
    tree = _assembled(project)
    assert not (tree / "FETCH_DEPENDENCIES_RAN").exists()
    assert "Put here by ortstack" in (tree / "tools" / "fetch_dawn_dependencies.py").read_text(encoding="utf-8")


@pytest.mark.compile
@pytest.mark.network
@pytest.mark.slow
def test_a_local_dawn_checkout_is_used_at_the_pinned_commit_and_refused_at_another(
    tmp_path: Path, upstream: Upstream, cli_env: dict[str, str]
) -> None:
    checkout = render_mini_dawn(tmp_path / "dawn-checkout", upstream.dawn_git, upstream.dawn_third_party)
    for args in (("init", "--quiet", "-b", "main"), ("add", "-A"), ("commit", "--quiet", "-m", "mini dawn")):
        git(*args, cwd=checkout, env=upstream.env)
    dawn_commit = git("rev-parse", "HEAD", cwd=checkout, env=upstream.env)
    copy = render_mini_dawn(tmp_path / "dawn-archive", upstream.dawn_git, upstream.dawn_third_party)
    served = deterministic_zip(copy, f"dawn-{dawn_commit}")  # what GitHub's archive of that commit holds
    commit = _pin_dawn_zip(upstream, served, f"/google/dawn/archive/{dawn_commit}.zip")
    project = _project(
        tmp_path,
        upstream,
        cli_env,
        commit=commit,
        extra=f'{WEBGPU}\n[deps.dawn]\nsource_dir = "{checkout.as_posix()}"\n',
    )
    (checkout / "LOCAL_ONLY").write_text("only in the checkout\n", encoding="utf-8")
    assert_ok(project.ortstack("fetch", "--deps"))
    assert_ok(project.ortstack("patch"))
    assert_ok(project.ortstack("build"))
    assert (_assembled(project) / "LOCAL_ONLY").is_file()
    (checkout / "README").write_text("a later commit\n", encoding="utf-8")
    git("add", "README", cwd=checkout, env=upstream.env)
    git("commit", "--quiet", "-m", "later", cwd=checkout, env=upstream.env)
    line = one_error(project.ortstack("build"), 4)
    assert f"dependency dawn: {checkout} is at " in line
    assert f"but deps.txt pins commit {dawn_commit}" in line


@pytest.mark.compile
@pytest.mark.network
@pytest.mark.slow
def test_allow_dawn_fetch_leaves_dawn_to_onnxruntime_and_says_so(
    tmp_path: Path, upstream: Upstream, cli_env: dict[str, str]
) -> None:
    project = _project(tmp_path, upstream, cli_env)
    assert_ok(project.ortstack("fetch", "--deps"))
    assert_ok(project.ortstack("patch"))
    result = project.ortstack("build", "--allow-dawn-fetch")
    assert "--allow-dawn-fetch: onnxruntime builds Dawn from its archive and Dawn clones its third-party" in (
        result.stderr
    )
    assert not (project.work / "dawn").exists()
    # ORT's own Dawn download ran Dawn's clone script while configuring; mini_dawn's clones nothing,
    # so the configure then fails on the missing sources, as a real one does offline.
    assert list((project.work / "cmake" / "webgpu").rglob("dawn-src/FETCH_DEPENDENCIES_RAN"))
    assert result.returncode == 6
    assert [line for line in error_lines(result.stderr) if "building variant 'webgpu' failed" in line]


@pytest.mark.compile
@pytest.mark.network
@pytest.mark.slow
def test_a_dawn_patch_whose_outer_context_moved_applies_with_fuzz_as_onnxruntime_applies_it(
    tmp_path: Path, upstream: Upstream, cli_env: dict[str, str]
) -> None:
    # onnxruntime's cmake runs GNU patch, which ignores a stale outer context line (fuzz 1); git
    # apply refuses the hunk. onnxruntime 1.30's dawn_binskim.patch meets Dawn v20260817 that way.
    path = "cmake/patches/dawn/mini_dawn_enable.patch"
    text = upstream.file_at(upstream.commit, path).decode()
    stale = text.replace(" #endif\n \n", " #endif  // a line that moved on in Dawn\n \n", 1)
    assert stale != text
    commit = _push(upstream, upstream.add_commit({path: stale}, "a Dawn patch with stale context"), "dawn-fuzz")
    project = _project(tmp_path, upstream, cli_env, commit=commit)
    assert_ok(project.ortstack("fetch", "--deps"))
    assert_ok(project.ortstack("patch"))
    assert_ok(project.ortstack("build"))
    tree = _assembled(project)
    assert "#define MINI_DAWN_ORT_PATCHED 1" in (tree / "src" / "dawn.cc").read_text(encoding="utf-8")
    assert not list(tree.rglob("*.orig"))
    assert not list(tree.rglob("*.rej"))
