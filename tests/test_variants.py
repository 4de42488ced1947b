"""Variants are checked before any compile: defines per kind, rejections as the pin's cmake makes them."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from ortstack import config
from ortstack.build import build, variants
from ortstack.config import Variant
from ortstack.errors import ConfigError
from ortstack.source import cmake_scan, deps, ort_tree
from upstream import PACKAGES

if TYPE_CHECKING:
    from pathlib import Path

PLUGIN = Variant(name="plugin", kind="plugin", dawn="static", min_onnxruntime="1.24.4")
SHARED_DAWN_PLUGIN = Variant(name="plugin", kind="plugin", dawn="shared", min_onnxruntime="1.24.4")
WEBGPU = Variant(name="webgpu", kind="webgpu", dawn="static")


def test_builtin_webgpu_defines_and_wheel() -> None:
    defines = ort_tree.plan(PACKAGES / "mini_ort", WEBGPU, "linux").defines
    assert defines["onnxruntime_USE_WEBGPU"] == "ON"
    assert defines["onnxruntime_USE_EP_API_ADAPTERS"] == "OFF"
    assert defines["onnxruntime_BUILD_DAWN_SHARED_LIBRARY"] == "OFF"
    assert defines["onnxruntime_USE_TELEMETRY"] == "OFF"
    plan = variants.KINDS["webgpu"].wheel(WEBGPU, "linux")
    assert (plan.name, plan.package, plan.py_api) == ("onnxruntime-webgpu", "onnxruntime", "")
    assert plan.libraries == ()
    assert plan.required == ("_pybind_state.py", "build_and_package_info.py")


def test_plugin_defines_and_wheel() -> None:
    defines = ort_tree.plan(PACKAGES / "mini_ort", PLUGIN, "linux").defines
    assert defines["onnxruntime_USE_EP_API_ADAPTERS"] == "ON"
    assert defines["onnxruntime_BUILD_DAWN_SHARED_LIBRARY"] == "OFF"
    plan = variants.KINDS["plugin"].wheel(PLUGIN, "linux")
    assert plan.name == "onnxruntime-ep-webgpu"
    assert plan.dependencies == ("onnxruntime>=1.24.4",)
    assert plan.libraries == plan.required == ("libonnxruntime_providers_webgpu.so",)


def test_core_defines_and_wheel() -> None:
    core = Variant(name="core", kind="core")
    defines = ort_tree.plan(PACKAGES / "mini_ort", core, "linux").defines
    assert defines["onnxruntime_USE_WEBGPU"] == "OFF"
    assert defines["onnxruntime_ENABLE_PYTHON"] == defines["onnxruntime_BUILD_SHARED_LIB"] == "ON"
    assert not any("DAWN" in name or "EP_API_ADAPTERS" in name for name in defines)
    plan = variants.KINDS["core"].wheel(core, "linux")
    assert (plan.name, plan.package, plan.py_api) == ("onnxruntime", "onnxruntime", "")
    assert plan.required == ("_pybind_state.py", "build_and_package_info.py")
    assert variants.KINDS["plugin"].wheel(PLUGIN, "linux").dependencies[0].startswith(plan.name + ">=")


def test_builtin_webgpu_may_share_dawn() -> None:
    shared = Variant(name="webgpu", kind="webgpu", dawn="shared")
    defines = ort_tree.plan(PACKAGES / "mini_ort", shared, "linux").defines
    assert defines["onnxruntime_BUILD_DAWN_SHARED_LIBRARY"] == "ON"
    assert variants.KINDS["webgpu"].wheel(shared, "linux").required == (
        "_pybind_state.py",
        "build_and_package_info.py",
        "libwebgpu_dawn.so",
    )


def test_plugin_with_shared_dawn_is_refused_as_the_pin_refuses_it() -> None:
    with pytest.raises(ConfigError, match="onnxruntime_USE_EP_API_ADAPTERS and onnxruntime_BUILD_DAWN_SHARED_LIBRARY"):
        variants.validate(SHARED_DAWN_PLUGIN, "linux")
    with pytest.raises(ConfigError, match=r"onnxruntime_webgpu\.cmake:\d+: the plugin EP .* cannot use a shared Dawn"):
        ort_tree.plan(PACKAGES / "mini_ort", SHARED_DAWN_PLUGIN, "linux")


def test_windows_wheels_carry_dxc_and_may_keep_telemetry() -> None:
    plan = variants.KINDS["plugin"].wheel(PLUGIN, "windows")
    assert plan.libraries == ("onnxruntime_providers_webgpu.dll", "dxil.dll", "dxcompiler.dll")
    builtin = variants.KINDS["webgpu"].wheel(WEBGPU, "windows")
    assert builtin.required == ("_pybind_state.py", "build_and_package_info.py", "dxil.dll", "dxcompiler.dll")
    telemetry = Variant(name="webgpu", kind="webgpu", telemetry=True)
    assert variants.resolve_defines(telemetry, "windows")["onnxruntime_USE_TELEMETRY"] == "ON"
    assert variants.resolve_defines(telemetry, "linux")["onnxruntime_USE_TELEMETRY"] == "OFF"


def test_variant_defines_win_over_the_kind() -> None:
    custom = Variant(name="webgpu", kind="webgpu", cmake_defines={"onnxruntime_USE_TELEMETRY": "ON"})
    assert variants.resolve_defines(custom, "linux")["onnxruntime_USE_TELEMETRY"] == "ON"


def test_external_and_shared_dawn_are_refused_before_compiling() -> None:
    shared = {"onnxruntime_BUILD_DAWN_SHARED_LIBRARY": "ON"}
    both = Variant(name="x", kind="webgpu", dawn="external", cmake_defines=shared)
    with pytest.raises(ConfigError, match="onnxruntime_USE_EXTERNAL_DAWN and onnxruntime_BUILD_DAWN_SHARED_LIBRARY"):
        variants.validate(both, "linux")


def test_a_rejection_in_the_pinned_cmake_is_found(tmp_path: Path) -> None:
    # A pin that refuses the plugin EP in a release build: found by reading the pin, not from a table.
    cmake = tmp_path / "cmake"
    cmake.mkdir()
    (cmake / "deps.txt").write_text("", encoding="utf-8")
    (cmake / "CMakeLists.txt").write_text(
        'set(onnxruntime_CMAKE_DEPS_MIRROR_DIR "" CACHE PATH "mirror")\n'
        'option(onnxruntime_BUILD_SHARED_LIB "shared" ON)\n'
        "if(onnxruntime_USE_EP_API_ADAPTERS)\n"
        "  set(x 1)\n"
        "  if(onnxruntime_BUILD_UNIT_TESTS)\n"
        "  else()\n"
        "    if(NOT onnxruntime_USE_WEBGPU)\n"
        "    else()\n"
        '      message(FATAL_ERROR "the plugin EP needs its unit tests")\n'
        "    endif()\n"
        "  endif()\n"
        "endif()\n"
        "if((NOT onnxruntime_ENABLE_PYTHON) AND (NOT onnxruntime_USE_WEBGPU))\n"
        '  message(FATAL_ERROR "negated: never reached by these variants")\n'
        "endif()\n"
        "if(onnxruntime_USE_WEBGPU)\n"
        "endif()\n"
        "if(onnxruntime_ENABLE_PYTHON)\n"
        "else()\n"
        '  message(FATAL_ERROR "else branch of a positive test: Python is OFF there")\n'
        "endif()\n",
        encoding="utf-8",
    )
    with pytest.raises(ConfigError, match=r"CMakeLists\.txt:9: the plugin EP needs its unit tests"):
        ort_tree.plan(tmp_path, PLUGIN, "linux")
    assert ort_tree.plan(tmp_path, WEBGPU, "linux").defines["onnxruntime_USE_WEBGPU"] == "ON"


def test_the_miniature_pin_refuses_external_with_shared_dawn() -> None:
    # Past the known-conflicts table (cmake_defines set both): the pin's own FATAL_ERROR is found.
    both = {"onnxruntime_USE_EXTERNAL_DAWN": "ON", "onnxruntime_BUILD_DAWN_SHARED_LIBRARY": "ON"}
    reading = cmake_scan.TreeCMake(PACKAGES / "mini_ort")
    configure = reading.read_configure(reading.facts({"onnxruntime_USE_WEBGPU": "ON", **both}, "linux"))
    assert len(configure.fatal_errors) == 1
    assert configure.fatal_errors[0].startswith("cmake/onnxruntime_webgpu.cmake:")


@pytest.mark.parametrize(
    ("variant", "message"),
    [
        (Variant(name="p", kind="plugin"), "needs min_onnxruntime"),
        (Variant(name="p", kind="plugin", min_onnxruntime="one"), "is not a version"),
        (Variant(name="w", kind="webgpu", min_onnxruntime="1.24"), "min_onnxruntime is for plugin variants"),
        (Variant(name="c", kind="core", min_onnxruntime="1.24"), "min_onnxruntime is for plugin variants"),
        (Variant(name="c", kind="core", dawn="shared"), "no WebGPU EP, so no Dawn"),
    ],
)
def test_kind_rules(variant: Variant, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        variants.validate(variant, "linux")


def test_deps_txt_parsing_and_mirror_layout(tmp_path: Path) -> None:
    sha = "a" * 40
    text = f"#name;url;sha1\nre2;https://github.com/google/re2/archive/x.zip;{sha}\nlocal;../third_party/x;{sha}\n"
    found = deps.parse(text)
    assert [d.name for d in found] == ["re2"]
    assert found[0].mirror_path(tmp_path) == tmp_path / "github.com/google/re2/archive/x.zip"
    assert deps.dawn_revision(found) == ""
    with pytest.raises(ConfigError, match=r"deps\.txt:2: re2: sha1 'nothex' is not 40 hex digits"):
        deps.parse("#\nre2;https://h/x.zip;nothex\n")


def test_build_info_features_come_from_the_series(tmp_path: Path) -> None:
    stack_file = tmp_path / "stack.toml"
    stack_file.write_text(
        '[ort]\nrepository = "https://example.invalid/ort.git"\ncommit = "' + "a" * 40 + '"\n'
        '[[patch]]\nid = "qlora"\nfile = "patches/0001-qlora.patch"\nprovides = ["qlora"]\n'
        '[[patch]]\nid = "win"\nfile = "patches/0002-win.patch"\nplatforms = ["windows"]\nprovides = ["win_only"]\n'
        '[[patch]]\nid = "norm"\nmode = "in-base"\nprovides = ["qk_norm"]\n'
        'guard = { files = ["a.cc"], patterns = ["x"] }\n',
        encoding="utf-8",
    )
    stack = config.load(stack_file)
    assert build.provided_features(stack, "linux") == ["qk_norm", "qlora"]
    assert build.provided_features(stack, "windows") == ["qk_norm", "qlora", "win_only"]
