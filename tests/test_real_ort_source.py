"""How the real-tree tests get their onnxruntime 1.21.0: the variable, the cache, a download, or a stop at once."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import real_ort

if TYPE_CHECKING:
    from upstream import LoopbackServer

REPO = Path(__file__).parents[1]


def _tarball(files: dict[str, bytes], top: str = "onnxruntime-1.21.0") -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for relative, data in sorted(files.items()):
            info = tarfile.TarInfo(f"{top}/{relative}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.fixture(scope="module")
def relied_on_files() -> dict[str, bytes]:
    """The files of the real 1.21.0 archive that the digests cover (about a hundred, all small)."""
    archive = real_ort.session_archive(os.environ)
    return dict(real_ort._members(archive))


def test_an_archive_with_the_relied_on_files_passes_and_another_version_is_named(
    tmp_path: Path, relied_on_files: dict[str, bytes]
) -> None:
    good = tmp_path / "good.tar.gz"
    good.write_bytes(_tarball(relied_on_files))
    real_ort.verify(good)
    other = tmp_path / "other.tar.gz"
    other.write_bytes(_tarball({**relied_on_files, "VERSION_NUMBER": b"1.22.0\n"}))
    with pytest.raises(real_ort.RealTreeUnavailableError, match=r"not onnxruntime 1\.21\.0 .*: VERSION_NUMBER differ"):
        real_ort.verify(other)
    edited = {**relied_on_files, "cmake/CMakeLists.txt": relied_on_files["cmake/CMakeLists.txt"] + b"# edited\n"}
    (tmp_path / "edited.tar.gz").write_bytes(_tarball(edited))
    with pytest.raises(real_ort.RealTreeUnavailableError, match=r"cmake/\*\*/\{\*\.cmake,CMakeLists\.txt\} differ"):
        real_ort.verify(tmp_path / "edited.tar.gz")


def test_without_the_variable_the_archive_is_downloaded_once_into_the_cache(
    tmp_path: Path, clean_server: LoopbackServer, relied_on_files: dict[str, bytes], base_env: dict[str, str]
) -> None:
    url = clean_server.add("/mirror/v1.21.0.tar.gz", _tarball(relied_on_files))
    env = {**base_env, real_ort.ENV_URL: url, "ORTSTACK_CACHE_DIR": str(tmp_path / "cache")}
    archive = real_ort.locate(env)
    assert archive == tmp_path / "cache" / "test-data" / real_ort.DOWNLOAD_NAME
    assert real_ort.locate(env) == archive
    assert clean_server.requests("/mirror/v1.21.0.tar.gz") == 1


def test_a_download_of_another_tree_is_not_kept(
    tmp_path: Path, clean_server: LoopbackServer, relied_on_files: dict[str, bytes], base_env: dict[str, str]
) -> None:
    url = clean_server.add("/mirror/other.tar.gz", _tarball({**relied_on_files, "cmake/deps.txt": b""}))
    env = {**base_env, real_ort.ENV_URL: url, "ORTSTACK_CACHE_DIR": str(tmp_path / "cache")}
    with pytest.raises(real_ort.RealTreeUnavailableError, match=r"cmake/deps\.txt differ"):
        real_ort.locate(env)
    assert list((tmp_path / "cache" / "test-data").iterdir()) == []


def test_with_neither_way_the_session_stops_at_once_naming_both(
    tmp_path: Path, clean_server: LoopbackServer, base_env: dict[str, str]
) -> None:
    offline = clean_server.url + "/no-such/v1.21.0.tar.gz"  # 404, as an unreachable host fails
    env = {**base_env, real_ort.ENV_URL: offline, "ORTSTACK_CACHE_DIR": str(tmp_path / "cache")}
    started = time.monotonic()
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "tests/test_real_tree.py", "-q"]
    result = subprocess.run(argv, check=False, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert time.monotonic() - started < 60
    assert result.returncode == pytest.ExitCode.USAGE_ERROR, result.stdout + result.stderr
    output = result.stdout + result.stderr
    assert "the real-tree tests cannot run" in output
    assert f"set {real_ort.ENV_ARCHIVE} to an onnxruntime 1.21.0 source archive" in output
    assert f"let the tests download {offline} into {tmp_path / 'cache' / 'test-data'}" in output
    assert not re.search(r"\d+ (passed|failed|error)", output)  # stopped before any test ran
