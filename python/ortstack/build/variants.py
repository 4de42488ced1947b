"""Variants: what each kind of wheel asks of onnxruntime's cmake, what its wheel holds, what it rejects.

One class per kind behind the ``VariantKind`` protocol, picked from ``KINDS`` by ``Variant.kind``.
Everything here runs before a compile starts: a variant that onnxruntime's cmake would refuse is
refused here first, with the reason.

onnxruntime sources the option names come from (cited where used):

- ``cmake/external/onnxruntime_external_deps.cmake`` at microsoft/onnxruntime@0112dcfd6221ea75dccac96585881c81ae0a67ea:
  ``onnxruntime_BUILD_DAWN_SHARED_LIBRARY`` (Dawn as ``webgpu_dawn``), ``onnxruntime_USE_EXTERNAL_DAWN``,
  their FATAL_ERROR together, ``onnxruntime_USE_TELEMETRY`` (the 1DS SDK on non-Windows),
  ``onnxruntime_CMAKE_DEPS_MIRROR_DIR`` and ``onnxruntime_CUSTOM_DAWN_SRC_PATH``.
- ``cmake/CMakeLists.txt`` at microsoft/onnxruntime@07e724c4c7546dceca1789884b18ce2d585841f9 (and
  @1a93e0a09c1984b95617f5a044bde317be140c0a): ``onnxruntime_USE_WEBGPU``, ``onnxruntime_USE_EP_API_ADAPTERS``,
  ``onnxruntime_ENABLE_PYTHON``, ``onnxruntime_BUILD_SHARED_LIB``, ``onnxruntime_BUILD_UNIT_TESTS``, and the
  FATAL_ERROR for the plugin EP with a shared Dawn: the plugin variant links Dawn statically.
- ``cmake/onnxruntime_providers_webgpu.cmake`` at microsoft/onnxruntime@001d12d2623fd411ce0f83d05abb5e82304a3389:
  ``onnxruntime_USE_EP_API_ADAPTERS`` builds the WebGPU EP as the shared plugin library
  ``onnxruntime_providers_webgpu`` (Dawn copied next to it when shared; ``dxil.dll``/``dxcompiler.dll``
  next to it on Windows with D3D12).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from packaging.version import InvalidVersion, Version

from ortstack.errors import ConfigError

if TYPE_CHECKING:
    from ortstack.config import Variant

ON, OFF = "ON", "OFF"

# Pairs of options onnxruntime's cmake refuses together, with where it says so.
KNOWN_CONFLICTS: tuple[tuple[str, str, str], ...] = (
    (
        "onnxruntime_USE_EP_API_ADAPTERS",
        "onnxruntime_BUILD_DAWN_SHARED_LIBRARY",
        "cmake/CMakeLists.txt at microsoft/onnxruntime@07e724c4c7546dceca1789884b18ce2d585841f9 (FATAL_ERROR)",
    ),
    (
        "onnxruntime_USE_EXTERNAL_DAWN",
        "onnxruntime_BUILD_DAWN_SHARED_LIBRARY",
        "cmake/external/onnxruntime_external_deps.cmake (FATAL_ERROR: cannot be enabled at the same time)",
    ),
)

DAWN_DEFINES = {
    # dawn = ...: (onnxruntime_BUILD_DAWN_SHARED_LIBRARY, onnxruntime_USE_EXTERNAL_DAWN)
    "static": (OFF, OFF),
    "shared": (ON, OFF),
    "external": (OFF, ON),
}


@dataclass(frozen=True, kw_only=True)
class WheelPlan:
    """What the wheel of a variant is: its name, import package, tag shape, dependencies, libraries."""

    name: str
    """Distribution name, e.g. ``onnxruntime-webgpu``."""
    package: str
    """The import package the libraries land in."""
    py_api: str
    """``py3`` for a wheel without a Python extension (tagged ``py3-none-<platform>``), else empty."""
    dependencies: tuple[str, ...]
    """Requirements written into the wheel's metadata."""
    libraries: tuple[str, ...]
    """Files cmake takes from onnxruntime's build folder into ``package`` (the plugin's libraries)."""
    required: tuple[str, ...]
    """File names that must be inside ``package`` once built (checked before the wheel is kept)."""
    exports: tuple[tuple[str, str], ...] = ()
    """(library, symbol) pairs each library must export: the entry points its loader calls."""


PLUGIN_ENTRY_POINTS = ("CreateEpFactories", "ReleaseEpFactory")


class VariantKind(Protocol):
    """What one kind of variant asks of the build."""

    def cmake_defines(self, variant: Variant, platform: str) -> dict[str, str]: ...

    def wheel(self, variant: Variant, platform: str) -> WheelPlan: ...

    def check(self, variant: Variant) -> None: ...


def _shared_library(stem: str, platform: str) -> str:
    return {"windows": f"{stem}.dll", "macos": f"lib{stem}.dylib"}.get(platform, f"lib{stem}.so")


def _base_defines(variant: Variant, platform: str) -> dict[str, str]:
    return {
        "onnxruntime_BUILD_UNIT_TESTS": OFF,
        # Telemetry is a Windows feature here: elsewhere it would pull the 1DS SDK and a private curl.
        "onnxruntime_USE_TELEMETRY": ON if variant.telemetry and platform == "windows" else OFF,
    }


def _common_defines(variant: Variant, platform: str) -> dict[str, str]:
    shared_dawn, external_dawn = DAWN_DEFINES[variant.dawn]
    return {
        **_base_defines(variant, platform),
        "onnxruntime_USE_WEBGPU": ON,
        "onnxruntime_BUILD_DAWN_SHARED_LIBRARY": shared_dawn,
        "onnxruntime_USE_EXTERNAL_DAWN": external_dawn,
        # build.py's only choice and default (tools/ci_build/build_args.py at
        # microsoft/onnxruntime@03876adc28b33270e71f12697c068a6deb7207a1); the WGSL kernels are then
        # generated while building, with npm in trees that hold its package.json (see
        # toolchain.check_wgsl_generator), else with onnxruntime's own Python script.
        "onnxruntime_WGSL_TEMPLATE": "static",
    }


def _dxc_libraries(platform: str) -> tuple[str, ...]:
    # Dawn's D3D12 backend loads these at run time; without them users see "No supported adapters".
    # Untested here (no Windows builder): the list follows onnxruntime's plugin EP wheel script.
    return ("dxil.dll", "dxcompiler.dll") if platform == "windows" else ()


def _onnxruntime_package(name: str, *, extra_files: tuple[str, ...] = ()) -> WheelPlan:
    """The onnxruntime Python package its build assembles, whole, as the wheel ``name``.

    _pybind_state.py is its binding's loader, present in every onnxruntime Python package."""
    return WheelPlan(
        name=name,
        package="onnxruntime",
        py_api="",
        dependencies=("numpy>=1.21.6", "packaging", "protobuf", "flatbuffers", "coloredlogs", "sympy"),
        libraries=(),
        required=("_pybind_state.py", "build_and_package_info.py", *extra_files),
    )


class Core:
    """onnxruntime without the WebGPU EP (the ``onnxruntime`` shape): the core a plugin EP loads into.

    The stack's patches to the core (operator schemas, graph fusions, the session) reach a plugin EP only
    through a core built from the same tree; a core with the WebGPU EP built in would be a second WebGPU
    runtime in the process, and pip would put the stock ``onnxruntime`` the plugin requires over it.
    """

    def cmake_defines(self, variant: Variant, platform: str) -> dict[str, str]:
        return {
            **_base_defines(variant, platform),
            "onnxruntime_USE_WEBGPU": OFF,
            "onnxruntime_ENABLE_PYTHON": ON,
            "onnxruntime_BUILD_SHARED_LIB": ON,
        }

    def wheel(self, variant: Variant, platform: str) -> WheelPlan:  # noqa: ARG002 - no platform's files differ
        return _onnxruntime_package(variant.wheel_name or "onnxruntime")

    def check(self, variant: Variant) -> None:
        if variant.dawn != "static":
            _fail(variant, f"dawn = {variant.dawn!r}: a core variant has no WebGPU EP, so no Dawn to link")
        if variant.min_onnxruntime:
            _fail(variant, "min_onnxruntime is for plugin variants; a core wheel is onnxruntime itself")


class BuiltinWebGpu:
    """onnxruntime with the WebGPU EP compiled in (the ``onnxruntime-webgpu`` shape)."""

    def cmake_defines(self, variant: Variant, platform: str) -> dict[str, str]:
        return {
            **_common_defines(variant, platform),
            "onnxruntime_USE_EP_API_ADAPTERS": OFF,
            "onnxruntime_ENABLE_PYTHON": ON,
            "onnxruntime_BUILD_SHARED_LIB": ON,
        }

    def wheel(self, variant: Variant, platform: str) -> WheelPlan:
        dawn = (_shared_library("webgpu_dawn", platform),) if variant.dawn == "shared" else ()
        return _onnxruntime_package(
            variant.wheel_name or "onnxruntime-webgpu", extra_files=(*dawn, *_dxc_libraries(platform))
        )

    def check(self, variant: Variant) -> None:
        if variant.min_onnxruntime:
            _fail(variant, "min_onnxruntime is for plugin variants; a webgpu wheel is onnxruntime itself")


class PluginEp:
    """The WebGPU plugin EP library for a stock onnxruntime (the ``onnxruntime-ep-webgpu`` shape).

    Dawn is linked into the plugin library: onnxruntime's cmake refuses the plugin with a shared Dawn.
    """

    def cmake_defines(self, variant: Variant, platform: str) -> dict[str, str]:
        return {
            **_common_defines(variant, platform),
            "onnxruntime_USE_EP_API_ADAPTERS": ON,
            "onnxruntime_ENABLE_PYTHON": OFF,
            "onnxruntime_BUILD_SHARED_LIB": OFF,
        }

    def wheel(self, variant: Variant, platform: str) -> WheelPlan:
        libraries = (_shared_library("onnxruntime_providers_webgpu", platform), *_dxc_libraries(platform))
        return WheelPlan(
            name=variant.wheel_name or "onnxruntime-ep-webgpu",
            package="onnxruntime_ep_webgpu",
            py_api="py3",
            dependencies=(f"onnxruntime>={variant.min_onnxruntime}",),
            libraries=libraries,
            required=libraries,
            # What onnxruntime's RegisterExecutionProviderLibrary looks up in a plugin EP library.
            exports=tuple((libraries[0], symbol) for symbol in PLUGIN_ENTRY_POINTS),
        )

    def check(self, variant: Variant) -> None:
        if not variant.min_onnxruntime:
            _fail(variant, "a plugin variant needs min_onnxruntime, the oldest onnxruntime it loads into")
        try:
            Version(variant.min_onnxruntime)
        except InvalidVersion:
            _fail(variant, f"min_onnxruntime {variant.min_onnxruntime!r} is not a version")


KINDS: dict[str, VariantKind] = {"webgpu": BuiltinWebGpu(), "plugin": PluginEp(), "core": Core()}


def _fail(variant: Variant, message: str, tip: str | None = None) -> None:
    msg = f"variant {variant.name!r}: {message}"
    raise ConfigError(msg, tip=tip)


def resolve_defines(variant: Variant, platform: str) -> dict[str, str]:
    """The kind's defines, then the variant's own ``cmake_defines`` on top (they win)."""
    return {**KINDS[variant.kind].cmake_defines(variant, platform), **variant.cmake_defines}


def is_on(value: str | None) -> bool:
    return value is not None and value.upper() in {"ON", "1", "TRUE", "YES", "Y"}


def check_known_conflicts(variant: Variant, defines: dict[str, str]) -> None:
    """Refuse option pairs onnxruntime's cmake refuses together (the tree's own FATAL_ERRORs are
    found by ``ort_tree`` once a tree is at hand; these need none)."""
    for first, second, source in KNOWN_CONFLICTS:
        if is_on(defines.get(first)) and is_on(defines.get(second)):
            _fail(
                variant,
                f"{first} and {second} cannot both be ON; onnxruntime's cmake refuses it ({source})",
                tip="pick one dawn mode: static, shared or external",
            )


def validate(variant: Variant, platform: str) -> dict[str, str]:
    """Check ``variant`` before any tree is at hand; return its cmake defines as the kind writes them."""
    KINDS[variant.kind].check(variant)
    defines = resolve_defines(variant, platform)
    check_known_conflicts(variant, defines)
    return defines
