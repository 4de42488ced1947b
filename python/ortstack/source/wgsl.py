"""onnxruntime's WGSL template generator needs npm packages: ``fetch --deps`` caches them.

Trees that read ``onnxruntime_WGSL_TEMPLATE`` run ``npm ci`` in ``WGSL_TEMPLATES`` while they
build (a custom command in cmake/onnxruntime_providers_webgpu.cmake at
microsoft/onnxruntime@735e69a396afe7e1bdfbc6b38c1d43eeb68b8484). A copied ``node_modules`` does
not stop that step, but npm's own cache does: ``fetch --deps`` fills ``<cache>/npm`` from the
tree's package-lock.json, and the build points npm at it, offline once it holds that lock file's
packages. The packages are the lock file's, checked by npm against its integrity hashes.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from ortstack import _run
from ortstack.errors import FetchError
from ortstack.lockfile import write_atomic

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ortstack.settings import Settings

WGSL_TEMPLATES = PurePosixPath("onnxruntime/core/providers/webgpu/wgsl_templates")


def _lock_digest(tree: Path) -> str | None:
    lock = tree / WGSL_TEMPLATES / "package-lock.json"
    return hashlib.sha256(lock.read_bytes()).hexdigest() if lock.is_file() else None


def cache_dir(settings: Settings) -> Path:
    return settings.cache_dir / "npm"


def _marker(settings: Settings, digest: str) -> Path:
    return cache_dir(settings) / f"ortstack-lock-{digest[:16]}"


def fill_cache(tree: Path, settings: Settings) -> str | None:
    """Put the generator's packages into the npm cache (network once); None when the tree has none."""
    digest = _lock_digest(tree)
    if digest is None:
        return None
    if _marker(settings, digest).is_file():
        return f"WGSL generator packages already in {cache_dir(settings)}"
    npm = _run.which("npm", settings.env)
    if npm is None:
        msg = f"npm not found, and {WGSL_TEMPLATES} needs its packages for the build"
        raise FetchError(msg, tip="install Node.js with npm, then run `ortstack fetch --deps` again")
    with tempfile.TemporaryDirectory(prefix="ortstack-npm-") as scratch:
        for name in ("package.json", "package-lock.json"):
            shutil.copyfile(tree / WGSL_TEMPLATES / name, Path(scratch) / name)
        argv = [npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--cache", str(cache_dir(settings))]
        try:
            _run.run(argv, cwd=Path(scratch), env=settings.env, capture=True, quiet=True)
        except subprocess.CalledProcessError as exc:
            said = (exc.stderr or "").strip().splitlines()
            msg = f"npm ci for {WGSL_TEMPLATES} failed: {said[-1] if said else exc}"
            raise FetchError(
                msg, tip="check that the npm registry is reachable, then run `ortstack fetch --deps` again"
            ) from None
    write_atomic(_marker(settings, digest), f"{tree / WGSL_TEMPLATES / 'package-lock.json'}\n".encode())
    return f"WGSL generator packages cached in {cache_dir(settings)}"


def build_env(tree: Path, settings: Settings) -> Mapping[str, str]:
    """npm settings for the build: the cache, and no network once it holds this tree's packages."""
    digest = _lock_digest(tree)
    if digest is None:
        return {}
    offline = _marker(settings, digest).is_file()
    return {
        "npm_config_cache": str(cache_dir(settings)),
        "npm_config_offline" if offline else "npm_config_prefer_offline": "true",
    }
