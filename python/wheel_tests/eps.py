"""Execution providers: what the installed wheel offers, and sessions pinned to one of them.

``cpu``: the CPU EP. ``webgpu``: the WebGPU EP built into the ``onnxruntime`` module (the
``onnxruntime-webgpu`` shape). ``plugin``: the WebGPU plugin EP library from the
``onnxruntime_ep_webgpu`` package, registered with ``register_execution_provider_library``.
"""

from __future__ import annotations

import importlib.util
from functools import cache
from typing import TYPE_CHECKING, Any, Literal, get_args

import onnxruntime as ort

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

EpKind = Literal["cpu", "webgpu", "plugin"]
EP_KINDS: tuple[EpKind, ...] = get_args(EpKind)
PROVIDER_NAME: dict[EpKind, str] = {
    "cpu": "CPUExecutionProvider",
    "webgpu": "WebGpuExecutionProvider",
    "plugin": "WebGpuExecutionProvider",
}
FALLBACK_SWITCH = "session.disable_cpu_ep_fallback"
PLUGIN_PACKAGE = "onnxruntime_ep_webgpu"
PLUGIN_REGISTRATION_NAME = "webgpu"


class SilentFallbackError(AssertionError):
    """A session ran on another execution provider than the one asked for."""


def has_builtin_webgpu() -> bool:
    return "WebGpuExecutionProvider" in ort.get_available_providers()


def has_plugin_package() -> bool:
    return importlib.util.find_spec(PLUGIN_PACKAGE) is not None


def why_absent(ep: EpKind) -> str | None:
    """None when the wheel set offers ``ep``, else why not (no device probe: see capabilities)."""
    if ep == "webgpu" and not has_builtin_webgpu():
        return f"onnxruntime {ort.__version__} has no built-in WebGpuExecutionProvider"
    if ep == "plugin":
        if not has_plugin_package():
            return f"the {PLUGIN_PACKAGE} package is not installed"
        if not hasattr(ort, "register_execution_provider_library"):
            return f"onnxruntime {ort.__version__} cannot register plugin EP libraries"
    return None


@cache
def plugin_devices() -> tuple[Any, ...]:
    """Register the plugin EP library once per process and return its WebGPU devices."""
    plugin = importlib.import_module(PLUGIN_PACKAGE)
    ort.register_execution_provider_library(PLUGIN_REGISTRATION_NAME, plugin.get_library_path())
    return tuple(d for d in ort.get_ep_devices() if d.ep_name == PROVIDER_NAME["plugin"])


# onnxruntime's Python binding builds the built-in WebGPU EP from the session's config entries and, in
# 1.30.0, drops its provider options without a word: {"enableGraphCapture": "1"} alone captures nothing.
BUILTIN_WEBGPU_CONFIG_PREFIX = "ep.webgpuexecutionprovider."


def session_options(ep: EpKind, config: Mapping[str, str] | None = None) -> ort.SessionOptions:
    """Options every suite session on ``ep`` starts from: no silent CPU fallback, no log noise.

    ORT refuses the fallback switch together with the CPU EP itself, so CPU sessions go without it.
    """
    options = ort.SessionOptions()
    options.log_severity_level = 3
    if ep != "cpu":
        options.add_session_config_entry(FALLBACK_SWITCH, "1")
    for key, value in (config or {}).items():
        options.add_session_config_entry(key, value)
    return options


def make_session(
    model: bytes,
    ep: EpKind,
    *,
    options: ort.SessionOptions | None = None,
    provider_options: Mapping[str, str] | None = None,
    disabled_optimizers: Sequence[str] = (),
) -> ort.InferenceSession:
    """A session on ``ep`` alone; raises SilentFallbackError if ORT put it anywhere else.

    ``disabled_optimizers`` names graph transformers to leave out (an ``InferenceSession`` keyword
    that every onnxruntime these suites support takes).
    """
    options = options or session_options(ep)
    if ep != "cpu" and options.get_session_config_entry(FALLBACK_SWITCH) != "1":
        msg = f"suite sessions must set {FALLBACK_SWITCH}=1"
        raise SilentFallbackError(msg)
    if ep == "plugin":
        devices = plugin_devices()
        if not devices:
            msg = "the WebGPU plugin EP lists no device"
            raise SilentFallbackError(msg)
        options.add_provider_for_devices(list(devices[:1]), dict(provider_options or {}))
        session = ort.InferenceSession(model, options, disabled_optimizers=list(disabled_optimizers))
    else:
        if ep == "webgpu":
            for key, value in (provider_options or {}).items():
                options.add_session_config_entry(BUILTIN_WEBGPU_CONFIG_PREFIX + key, value)
        session = ort.InferenceSession(
            model,
            options,
            providers=[PROVIDER_NAME[ep]],
            provider_options=[dict(provider_options or {})],
            disabled_optimizers=list(disabled_optimizers),
        )
    assert_runs_on(session, ep)
    return session


def assert_runs_on(session: ort.InferenceSession, ep: EpKind) -> None:
    providers = session.get_providers()
    if not providers or providers[0] != PROVIDER_NAME[ep]:
        msg = f"asked for {ep} ({PROVIDER_NAME[ep]}) but the session runs on {providers}"
        raise SilentFallbackError(msg)
