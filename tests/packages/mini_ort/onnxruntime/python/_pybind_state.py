"""Loads the mini_ort shared library that sits next to this file (ctypes, no compiled extension)."""

import ctypes
import sys
from pathlib import Path

_NAMES = {"win32": "onnxruntime.dll", "darwin": "libonnxruntime.dylib"}
_library = ctypes.CDLL(str(Path(__file__).with_name(_NAMES.get(sys.platform, "libonnxruntime.so"))))
_library.OrtMiniGetVersionString.restype = ctypes.c_char_p
_library.OrtMiniGetAvailableProviders.restype = ctypes.c_char_p
_library.OrtMiniDependencyChecksum.restype = ctypes.c_int
_library.OrtMiniMatMulNBitsPackedSize.restype = ctypes.c_longlong
_library.OrtMiniMatMulNBitsPackedSize.argtypes = [ctypes.c_longlong, ctypes.c_longlong, ctypes.c_int, ctypes.c_int]


def get_version_string() -> str:
    return _library.OrtMiniGetVersionString().decode()


def get_available_providers() -> list[str]:
    return _library.OrtMiniGetAvailableProviders().decode().split(",")


def dependency_checksum() -> int:
    return int(_library.OrtMiniDependencyChecksum())


def matmul_nbits_packed_size(k: int, n: int, bits: int, block_size: int) -> int:
    return int(_library.OrtMiniMatMulNBitsPackedSize(k, n, bits, block_size))
