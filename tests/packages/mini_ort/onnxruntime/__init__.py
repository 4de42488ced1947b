"""mini_ort: a miniature onnxruntime-shaped package (for ortstack's tests)."""

from onnxruntime.capi._pybind_state import (
    dependency_checksum,
    get_available_providers,
    get_version_string,
    matmul_nbits_packed_size,
)

__version__ = get_version_string()

__all__ = [
    "__version__",
    "dependency_checksum",
    "get_available_providers",
    "get_version_string",
    "matmul_nbits_packed_size",
]
