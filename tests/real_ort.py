"""Where the real-tree tests get onnxruntime 1.21.0, and how they know it is 1.21.0.

Two ways, in this order: ``ORTSTACK_REAL_ORT_ARCHIVE`` names an archive of the tree (Debian's
``onnxruntime_1.21.0+dfsg.orig.tar.xz`` or GitHub's archive of the tag, any format ortstack reads);
else GitHub's archive of ``v1.21.0`` is downloaded once into ``<ortstack cache>/test-data/``
(``ORTSTACK_REAL_ORT_URL`` points the download at a mirror). The archive's own sha256 differs
between those sources and cannot be known in advance, so what is checked is what the tests rely on:
the digests of the tree's ``VERSION_NUMBER``, ``cmake/deps.txt``, every cmake file and the source
file the tests patch. With neither way available the session stops before any test runs.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tarfile
import urllib.error
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

from ortstack import settings

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

ENV_ARCHIVE = "ORTSTACK_REAL_ORT_ARCHIVE"
ENV_URL = "ORTSTACK_REAL_ORT_URL"
UPSTREAM_URL = "https://github.com/microsoft/onnxruntime/archive/refs/tags/v1.21.0.tar.gz"
DOWNLOAD_NAME = "onnxruntime-1.21.0.tar.gz"
PATCHED_FILE = "onnxruntime/contrib_ops/webgpu/quantization/matmul_nbits.cc"
CMAKE_FILES = "cmake/**/{*.cmake,CMakeLists.txt}"
# sha256 of each file; for CMAKE_FILES, of the `sha256sum` lines ("<digest>  <path>\n", sorted by path).
EXPECTED = {
    "VERSION_NUMBER": "65a6bd97a4a6b72911ae6c3d45991f4326c95f792e196f8bf74857a557b27585",
    "cmake/deps.txt": "0e85bb7b600db1cc1af5c2f239787dcb2ee7580833f8169b65168675c3fad400",
    PATCHED_FILE: "1872c97c662faeb0f7be6495c9bb3f48e6ca0080fc41a0c42f070a0f27b1f3dc",
    CMAKE_FILES: "fcd8cc7d2af6e8a3e29103b04335512a89677747116689ac11085e0417deb917",
}
DOWNLOAD_TIMEOUT_S = 30


class RealTreeUnavailableError(Exception):
    """No archive of the real tree could be had, or the one at hand is not 1.21.0."""


def _is_cmake_file(relative: str) -> bool:
    return relative.startswith("cmake/") and relative.endswith((".cmake", "/CMakeLists.txt"))


def _members(archive: Path) -> Iterator[tuple[str, bytes]]:
    """(path below the archive's one top folder, bytes) of the files the digests cover."""
    with tarfile.open(archive) as tar:
        for member in tar:
            relative = member.name.partition("/")[2]
            if member.isfile() and (relative in EXPECTED or _is_cmake_file(relative)):
                handle = tar.extractfile(member)
                assert handle is not None
                yield relative, handle.read()


def digests(archive: Path) -> dict[str, str]:
    """The digests ``EXPECTED`` names, read from ``archive`` (a tarball with one top folder)."""
    found: dict[str, str] = {}
    cmake_lines: list[tuple[str, str]] = []
    try:
        for relative, data in _members(archive):
            digest = hashlib.sha256(data).hexdigest()
            if relative in EXPECTED:
                found[relative] = digest
            else:
                cmake_lines.append((relative, f"{digest}  {relative}\n"))
    except (tarfile.TarError, EOFError, OSError) as error:
        msg = f"{archive} is not a readable source tarball ({error})"
        raise RealTreeUnavailableError(msg) from error
    if cmake_lines:
        found[CMAKE_FILES] = hashlib.sha256("".join(line for _, line in sorted(cmake_lines)).encode()).hexdigest()
    return found


def verify(archive: Path) -> None:
    """Raise unless ``archive`` holds onnxruntime 1.21.0's files as the tests know them."""
    found = digests(archive)
    wrong = [name for name, digest in EXPECTED.items() if found.get(name) != digest]
    if wrong:
        known = "onnxruntime 1.21.0 as the real-tree tests know it"
        msg = f"{archive} is not {known}: {', '.join(wrong)} differ or are missing"
        raise RealTreeUnavailableError(msg)


def download(url: str, cache: Path) -> Path:
    """``url`` into ``cache/DOWNLOAD_NAME``, kept only once verified."""
    target = cache / DOWNLOAD_NAME
    partial = target.with_name(target.name + ".part")
    cache.mkdir(parents=True, exist_ok=True)
    try:
        with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response, partial.open("wb") as out:
            while chunk := response.read(1 << 20):
                out.write(chunk)
    except (urllib.error.URLError, OSError) as error:
        partial.unlink(missing_ok=True)
        msg = f"downloading {url} failed ({getattr(error, 'reason', error)})"
        raise RealTreeUnavailableError(msg) from error
    try:
        verify(partial)
    except RealTreeUnavailableError:
        partial.unlink()
        raise
    partial.replace(target)
    return target


def cache_dir(env: Mapping[str, str]) -> Path:
    return settings.resolve(env).cache_dir / "test-data"


def locate(env: Mapping[str, str]) -> Path:
    """The verified archive: the variable's, else the cached download, else a fresh download."""
    ways = (
        f"set {ENV_ARCHIVE} to an onnxruntime 1.21.0 source archive "
        "(e.g. Debian's onnxruntime_1.21.0+dfsg.orig.tar.xz), "
        f"or let the tests download {env.get(ENV_URL) or UPSTREAM_URL} into {cache_dir(env)} (needs the network)"
    )
    if env.get(ENV_ARCHIVE):
        archive = Path(env[ENV_ARCHIVE]).expanduser()
        if not archive.is_file():
            msg = f"{ENV_ARCHIVE}={archive} is not a file; {ways}"
            raise RealTreeUnavailableError(msg)
        verify(archive)
        return archive.resolve()
    cached = cache_dir(env) / DOWNLOAD_NAME
    if cached.is_file():
        verify(cached)
        return cached
    try:
        return download(env.get(ENV_URL) or UPSTREAM_URL, cache_dir(env))
    except RealTreeUnavailableError as error:
        msg = f"the real onnxruntime 1.21.0 tree is needed and {error}; {ways}"
        raise RealTreeUnavailableError(msg) from error


def session_archive(env: Mapping[str, str]) -> Path:
    """The archive this test session found (conftest.py sets the variable), else found now."""
    return Path(env[ENV_ARCHIVE]) if env.get(ENV_ARCHIVE) else locate(env)


USED_BY = ("test_real_tree.py", "test_real_ort_source.py")
"""The test modules that read the archive."""


def selected(args: list[str], invocation_dir: Path, tests_dir: Path) -> bool:
    """Whether pytest's path arguments reach a module of ``USED_BY``."""
    modules = [(tests_dir / name).resolve() for name in USED_BY]
    for arg in args:
        path = (invocation_dir / arg.split("::", 1)[0]).resolve()
        if any(path == module or (path.is_dir() and module.is_relative_to(path)) for module in modules):
            return True
    return False


def main() -> int:
    """``python tests/real_ort.py``: find (or download) and check the archive now, as `nox -s test` does first."""
    try:
        archive = locate(dict(os.environ))
    except RealTreeUnavailableError as error:
        sys.stderr.write(f"the real-tree tests cannot run: {error}\n")
        return 2
    sys.stderr.write(f"real onnxruntime 1.21.0 tree for tests/test_real_tree.py: {archive}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
