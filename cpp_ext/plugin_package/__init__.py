"""The WebGPU plugin execution provider for a stock onnxruntime (built by ortstack).

Register it with ``onnxruntime.register_execution_provider_library(get_ep_name(), get_library_path())``.
"""

import sys
from pathlib import Path

_LIBRARY = {
    "win32": "onnxruntime_providers_webgpu.dll",
    "darwin": "libonnxruntime_providers_webgpu.dylib",
}.get(sys.platform, "libonnxruntime_providers_webgpu.so")


def get_library_path() -> str:
    """Absolute path of the plugin EP library inside this package."""
    return str(Path(__file__).with_name(_LIBRARY))


def get_ep_name() -> str:
    """The execution provider's name, as onnxruntime lists its devices."""
    return "WebGpuExecutionProvider"


def get_ep_names() -> list[str]:
    """Every execution provider name the library registers."""
    return [get_ep_name()]


__all__ = ["get_ep_name", "get_ep_names", "get_library_path"]
