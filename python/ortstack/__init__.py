"""ortstack: pinned onnxruntime source + a patch stack -> verified WebGPU wheels."""

from __future__ import annotations

__version__ = "0.1.0"
