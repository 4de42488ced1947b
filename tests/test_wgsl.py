"""The WGSL generator's npm packages: cached by fetch --deps, then installed with no network at all.

A real npm against a real package served on 127.0.0.1: the lock file resolves to the loopback URL,
so the cache is filled from there, and the install after it runs with the server gone.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
from typing import TYPE_CHECKING

import pytest

from ortstack.settings import Settings
from ortstack.source import wgsl
from upstream import LoopbackServer

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

PACKAGE = {"name": "wgsl-gen-mini", "version": "1.0.0", "bin": {"wgsl-gen-mini": "cli.js"}}


def _package_tarball() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, text in {
            "package/package.json": json.dumps(PACKAGE),
            "package/cli.js": "#!/usr/bin/env node\nconsole.log('generated');\n",
        }.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o755, 0
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.fixture
def registry() -> Iterator[LoopbackServer]:
    server = LoopbackServer()
    yield server
    server.close()


def _tree(root: Path, tarball_url: str, tarball: bytes) -> Path:
    templates = root / "tree" / wgsl.WGSL_TEMPLATES
    templates.mkdir(parents=True)
    integrity = "sha512-" + base64.b64encode(hashlib.sha512(tarball).digest()).decode()
    manifest = {"name": "wgsl-templates", "version": "1.0.0", "dependencies": {PACKAGE["name"]: "1.0.0"}}
    lock = {
        "name": "wgsl-templates",
        "version": "1.0.0",
        "lockfileVersion": 3,
        "requires": True,
        "packages": {
            "": {"name": "wgsl-templates", "version": "1.0.0", "dependencies": {PACKAGE["name"]: "1.0.0"}},
            f"node_modules/{PACKAGE['name']}": {
                "version": "1.0.0",
                "resolved": tarball_url,
                "integrity": integrity,
                "bin": PACKAGE["bin"],
            },
        },
    }
    (templates / "package.json").write_text(json.dumps(manifest), encoding="utf-8")
    (templates / "package-lock.json").write_text(json.dumps(lock), encoding="utf-8")
    return root / "tree"


def _settings(root: Path) -> Settings:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("npm_config_", "NPM_CONFIG_"))}
    return Settings(
        stack_file=root / "stack.toml",
        cache_dir=root / "cache",
        work_dir=root / "work",
        dist_dir=root / "dist",
        env=env,
    )


def test_fetch_caches_the_packages_and_the_build_needs_no_network(tmp_path: Path, registry: LoopbackServer) -> None:
    if shutil.which("npm") is None:
        pytest.fail("npm is needed for this test (onnxruntime's WGSL generator needs it too): install Node.js")
    tarball = _package_tarball()
    tree = _tree(tmp_path, registry.add("/wgsl-gen-mini-1.0.0.tgz", tarball), tarball)
    settings = _settings(tmp_path)
    assert wgsl.build_env(tree, settings) == {
        "npm_config_cache": str(tmp_path / "cache" / "npm"),
        "npm_config_prefer_offline": "true",
    }
    assert wgsl.fill_cache(tree, settings) == f"WGSL generator packages cached in {tmp_path / 'cache' / 'npm'}"
    assert registry.requests("/wgsl-gen-mini-1.0.0.tgz") == 1
    assert wgsl.fill_cache(tree, settings) == f"WGSL generator packages already in {tmp_path / 'cache' / 'npm'}"
    registry.close()  # from here on, nothing answers

    env = {**settings.env, **wgsl.build_env(tree, settings)}
    assert env["npm_config_offline"] == "true"
    templates = tree / wgsl.WGSL_TEMPLATES
    subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=templates, env=env, check=True, capture_output=True)
    generated = subprocess.run(
        [str(templates / "node_modules" / ".bin" / "wgsl-gen-mini")],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    assert generated.stdout.strip() == "generated"


def test_a_tree_without_the_generator_needs_nothing(tmp_path: Path) -> None:
    (tmp_path / "tree").mkdir()
    assert wgsl.fill_cache(tmp_path / "tree", _settings(tmp_path)) is None
    assert wgsl.build_env(tmp_path / "tree", _settings(tmp_path)) == {}
