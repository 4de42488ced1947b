"""WebGPU's driver on Linux: Dawn runs on Vulkan, through a GPU's driver or Mesa's lavapipe on the CPU.

The suites and the bench ask here before building any venv: is there a Vulkan driver at all (an ICD
manifest the loader can find), and is lavapipe the only one? Then the environment is set as
``ci/lavapipe.sh`` documents, so a user who installed lavapipe needs to export nothing. Windows and
macOS reach WebGPU through D3D12 and Metal, which need no check here.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

ICD_ENV = ("VK_DRIVER_FILES", "VK_ICD_FILENAMES")
LAVAPIPE_TIP = (
    "WebGPU needs a Vulkan driver: `sudo bash ci/lavapipe.sh` (as root: without sudo) installs Mesa's lavapipe "
    "(a CPU driver, no GPU "
    "needed), or install your GPU's driver; to test only the CPU EP, narrow the lanes with `--ep cpu`"
)


def checked_here() -> bool:
    """Only Linux reaches WebGPU through Vulkan; elsewhere there is nothing to check."""
    return sys.platform.startswith("linux")


def icd_dirs(env: Mapping[str, str]) -> list[Path]:
    """Where the Vulkan loader looks for driver manifests on Linux, in its order: the XDG config
    folders, /etc, then the XDG data folders (which hold /usr/share, where Mesa puts lavapipe's)."""
    home = Path(env.get("HOME", "~")).expanduser()
    config = [env.get("XDG_CONFIG_HOME") or str(home / ".config"), *env.get("XDG_CONFIG_DIRS", "/etc/xdg").split(":")]
    data = [env.get("XDG_DATA_HOME") or str(home / ".local/share")]
    data += (env.get("XDG_DATA_DIRS") or "/usr/local/share:/usr/share").split(":")
    return [Path(p) / "vulkan" / "icd.d" for p in [*config, "/etc", *data] if p]


def driver_manifests(env: Mapping[str, str]) -> list[Path]:
    """The Vulkan driver manifests the loader would use: the env's list, else those in its folders."""
    for name in ICD_ENV:
        if env.get(name):
            return [Path(p) for p in env[name].split(":") if p and Path(p).is_file()]
    return sorted({p for folder in icd_dirs(env) if folder.is_dir() for p in folder.glob("*.json")})


def missing_driver(env: Mapping[str, str]) -> str | None:
    """None when WebGPU has a driver to run on here, else why not (one line)."""
    if not checked_here() or driver_manifests(env):
        return None
    told = next((name for name in ICD_ENV if env.get(name)), None)
    if told is not None:
        return f"{told}={env[told]} names no existing Vulkan driver manifest"
    return "no Vulkan driver is installed (no driver manifest in the Vulkan loader's vulkan/icd.d folders)"


def gpu_present() -> bool:
    """A GPU the kernel exposes: a DRM render node (Mesa's hardware drivers) or NVIDIA's device."""
    return any(Path("/dev/dri").glob("renderD*")) or Path("/dev/nvidiactl").exists()


def lavapipe_manifest(env: Mapping[str, str]) -> Path | None:
    """lavapipe's manifest when WebGPU can run only there: it is installed and no GPU is present.

    Mesa's package installs the manifests of its hardware drivers too; without a GPU they find no
    device, and the plugin EP lists a software adapter only when told to.
    """
    if gpu_present():
        return None
    return next((p for p in driver_manifests(env) if p.name.startswith("lvp")), None)


def webgpu_env(env: Mapping[str, str], shader_cache: Path) -> dict[str, str]:
    """``env`` for WebGPU runs: with lavapipe as the only driver, what ``ci/lavapipe.sh`` would export."""
    out = dict(env)
    lavapipe = lavapipe_manifest(env) if checked_here() else None
    if lavapipe is not None:
        out.setdefault("VK_DRIVER_FILES", str(lavapipe))
        # The plugin EP lists no software adapter unless told to, silently.
        out.setdefault("ORT_WEBGPU_EP_ALLOW_SOFTWARE_ADAPTER", "1")
        out.setdefault("MESA_SHADER_CACHE_DIR", str(shader_cache))
        out.setdefault("MESA_SHADER_CACHE_MAX_SIZE", "1G")
    return out
