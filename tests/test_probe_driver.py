"""Which Vulkan driver answered a WebGPU lane: named from the libraries the probe's process mapped."""

from __future__ import annotations

import ctypes
import ctypes.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from wheel_tests import probes

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="read from /proc/self/maps (Linux)")


def _library_named(tmp_path: Path, name: str) -> Path:
    """A real shared library (zlib's) under a driver's file name."""
    found = ctypes.util.find_library("z")
    assert found is not None, "zlib is part of every Linux system this runs on"
    source = next(p for d in ("/lib", "/usr/lib", "/lib64", "/usr/lib64") for p in Path(d).rglob(found))
    return Path(shutil.copy(source, tmp_path / name))


def test_a_mapped_driver_library_is_named_and_others_are_not(tmp_path: Path) -> None:
    driver = _library_named(tmp_path, "libvulkan_lvp.so")
    _library_named(tmp_path, "libvulkan_unused.so")  # on disk, never loaded
    other = _library_named(tmp_path, "libnot_a_driver.so")
    code = (
        "import ctypes, sys; from wheel_tests import probes; "
        f"ctypes.CDLL({str(driver)!r}); ctypes.CDLL({str(other)!r}); print(probes.vulkan_drivers_loaded())"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert done.stdout.strip() == "['libvulkan_lvp.so']"


def test_a_process_without_vulkan_names_no_driver() -> None:
    assert probes.vulkan_drivers_loaded() == []
