"""Execution-provider setup inside a worker venv: CPU, built-in WebGPU, or the WebGPU plugin EP.

Runs under whichever onnxruntime the venv holds. The plugin EP is used when its package is installed;
otherwise ``webgpu`` means the EP built into the wheel. A WebGPU session never falls back to the CPU
silently: CPU fallback is disabled and the first provider is checked.
"""

from __future__ import annotations

import importlib.util
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnxruntime as ort

from wheel_tests.eps import BUILTIN_WEBGPU_CONFIG_PREFIX

WEBGPU = "WebGpuExecutionProvider"
# A plugin library may be registered once per process (with onnxruntime and with genai each).
registered: set[str] = set()
PLUGIN_REGISTRATION_NAME = "webgpu"


@dataclass(kw_only=True)
class EpSetup:
    ep: str
    """``cpu`` or ``webgpu``, as asked."""
    kind: str
    """``cpu``, ``builtin`` or ``plugin``."""
    devices: list[dict[str, Any]] = field(default_factory=list)
    """What ``get_ep_devices`` says about the chosen device(s)."""
    options: dict[str, str] = field(default_factory=dict)
    """WebGPU EP options every session gets (``ortstack bench --webgpu-option``), e.g. storageBufferCacheMode."""
    _plugin_device: Any = None

    def webgpu_options(self, *, graph_capture: bool) -> dict[str, str]:
        return {**self.options, **({"enableGraphCapture": "1"} if graph_capture else {})}

    def session_options(self, *, graph_capture: bool = False) -> ort.SessionOptions:
        options = ort.SessionOptions()
        options.log_severity_level = 3
        if self.kind == "cpu":
            return options
        if graph_capture:  # a captured graph replays fixed buffers: no memory pattern planning
            options.enable_mem_pattern = False
        options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
        if self.kind == "builtin":
            # The built-in EP reads its options from the config entries; 1.30.0 drops provider options.
            for name, value in self.webgpu_options(graph_capture=graph_capture).items():
                options.add_session_config_entry(BUILTIN_WEBGPU_CONFIG_PREFIX + name, value)
        if self.kind == "plugin":
            options.add_provider_for_devices([self._plugin_device], self.webgpu_options(graph_capture=graph_capture))
        return options

    def providers(self, *, graph_capture: bool = False) -> list[Any] | None:
        if self.kind == "cpu":
            return ["CPUExecutionProvider"]
        if self.kind == "builtin":
            return [(WEBGPU, self.webgpu_options(graph_capture=graph_capture))]
        return None  # the plugin device is set on the session options

    def session(
        self,
        model: bytes | str,
        *,
        graph_capture: bool = False,
        disabled_optimizers: list[str] | None = None,
        profile_prefix: str | None = None,
    ) -> ort.InferenceSession:
        """A session on the chosen EP; ``disabled_optimizers`` names graph transformers to leave out;
        ``profile_prefix``: onnxruntime's profiler on, its file named from that prefix."""
        options = self.session_options(graph_capture=graph_capture)
        if profile_prefix is not None:
            options.enable_profiling = True
            options.profile_file_prefix = profile_prefix
        session = ort.InferenceSession(
            model,
            sess_options=options,
            providers=self.providers(graph_capture=graph_capture),
            disabled_optimizers=disabled_optimizers or [],
        )
        expected = "CPUExecutionProvider" if self.kind == "cpu" else WEBGPU
        actual = session.get_providers()[0]
        if actual != expected:
            msg = f"session runs on {actual}, not {expected}"
            raise RuntimeError(msg)
        return session


def _describe(device: Any) -> dict[str, Any]:
    hw = device.device
    return {
        "ep_name": device.ep_name,
        "ep_vendor": device.ep_vendor,
        "ep_metadata": dict(device.ep_metadata),
        "device_type": str(hw.type),
        "vendor": hw.vendor,
        "vendor_id": hw.vendor_id,
        "device_id": hw.device_id,
        "device_metadata": dict(hw.metadata),
    }


def _webgpu_devices() -> list[Any]:
    if not hasattr(ort, "get_ep_devices"):
        return []
    return [d for d in ort.get_ep_devices() if d.ep_name == WEBGPU]


def plugin_library() -> str | None:
    """The plugin EP's shared library when its package is installed."""
    if importlib.util.find_spec("onnxruntime_ep_webgpu") is None:
        return None
    import onnxruntime_ep_webgpu  # noqa: PLC0415 - optional package

    return str(onnxruntime_ep_webgpu.get_library_path())


def setup(ep: str, options: dict[str, str] | None = None) -> EpSetup:
    """``options``: WebGPU EP options for every session (none on the CPU EP)."""
    if ep == "cpu":
        return EpSetup(ep=ep, kind="cpu")
    options = dict(options or {})
    if ep != "webgpu":
        msg = f"unknown ep {ep!r}: use cpu or webgpu"
        raise ValueError(msg)
    library = plugin_library()
    if library is not None:
        ort.register_execution_provider_library(PLUGIN_REGISTRATION_NAME, library)
        registered.add("ort")
        devices = _webgpu_devices()
        if not devices:
            msg = (
                "the WebGPU plugin EP lists no device (a software adapter needs ORT_WEBGPU_EP_ALLOW_SOFTWARE_ADAPTER=1)"
            )
            raise RuntimeError(msg)
        return EpSetup(
            ep=ep, kind="plugin", devices=[_describe(devices[0])], options=options, _plugin_device=devices[0]
        )
    if WEBGPU not in ort.get_available_providers():
        msg = "this onnxruntime has no WebGPU EP and the plugin package is not installed"
        raise RuntimeError(msg)
    try:
        devices = [_describe(d) for d in _webgpu_devices()]
    except RuntimeError:
        devices = []
    return EpSetup(ep=ep, kind="builtin", devices=devices, options=options)


def environment(setup_: EpSetup) -> dict[str, Any]:
    """What a result needs to say about the runtime it measured."""
    build_info: list[Any] = []
    for package in ("onnxruntime", "onnxruntime_ep_webgpu"):
        spec = importlib.util.find_spec(package)
        locations = (spec.submodule_search_locations or []) if spec is not None else []
        # A wheel built by ortstack carries its provenance as a build-info JSON file in the package.
        build_info += [
            json.loads(found.read_text(encoding="utf-8"))
            for location in locations
            for found in sorted(Path(location).glob("*build*info*.json"))
        ]
    plugin_version = None
    if setup_.kind == "plugin":
        from importlib.metadata import version  # noqa: PLC0415

        plugin_version = version("onnxruntime-ep-webgpu")
    vk_driver_files = os.environ.get("VK_DRIVER_FILES", "")
    return {
        "ort_version": ort.__version__,
        "ort_file": ort.__file__,
        "ep": setup_.ep,
        "ep_kind": setup_.kind,
        "plugin_version": plugin_version,
        "devices": setup_.devices,
        "webgpu_options": setup_.options or None,
        "software_adapter": "lvp" in vk_driver_files,
        "vk_driver_files": vk_driver_files or None,
        "build_info": build_info or None,
        "has_qlora_schema": has_schema("MatMulNBitsQLoRA"),
    }


def has_schema(op_type: str, domain: str = "com.microsoft") -> bool:
    from onnxruntime.capi import onnxruntime_pybind11_state as state  # noqa: PLC0415

    return any(s.name == op_type and s.domain == domain for s in state.get_all_operator_schema())
