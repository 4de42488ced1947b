"""The test upstream itself: the server's routes, faults and counters, the git publication, the build."""

from __future__ import annotations

import hashlib
import io
import tarfile
import urllib.error
import urllib.request
from typing import TYPE_CHECKING

import pytest

from ortstack import _run
from upstream import GIT_ENV_FIXED, Fault, LoopbackServer, Upstream, git

if TYPE_CHECKING:
    from pathlib import Path


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status, response.read()


def test_archive_is_github_shaped(upstream: Upstream, clean_server: LoopbackServer) -> None:
    status, body = _get(upstream.archive_url)
    assert status == 200
    assert body == upstream.archive
    assert hashlib.sha256(body).hexdigest() == upstream.archive_sha256
    with tarfile.open(fileobj=io.BytesIO(body), mode="r:gz") as archive:
        names = archive.getnames()
    prefix = f"onnxruntime-{upstream.commit}/"
    assert all(name.startswith(prefix) or name == prefix.rstrip("/") for name in names)
    assert f"{prefix}VERSION_NUMBER" in names
    assert f"{prefix}onnxruntime/contrib_ops/webgpu/bert/paged_attention.cc" in names
    assert clean_server.requests(upstream.archive_url.removeprefix(clean_server.url)) == 1


def test_deps_txt_points_at_the_server(upstream: Upstream) -> None:
    deps = upstream.file_at(upstream.commit, "cmake/deps.txt").decode()
    assert f"mini_dep;{upstream.mini_dep_url};{upstream.mini_dep_sha1}" in deps.splitlines()
    _, body = _get(upstream.mini_dep_url)
    assert hashlib.sha1(body).hexdigest() == upstream.mini_dep_sha1


def test_range_and_faults(clean_server: LoopbackServer) -> None:
    url = clean_server.add("/blob", bytes(range(200)))
    status, body = _get(url, {"Range": "bytes=150-"})
    assert (status, body) == (206, bytes(range(150, 200)))
    clean_server.fault("/blob", Fault.NOT_FOUND, times=1)
    with pytest.raises(urllib.error.HTTPError) as info:
        _get(url)
    assert info.value.code == 404
    info.value.close()
    assert _get(url)[1] == bytes(range(200))
    assert clean_server.requests("/blob") == 3
    assert clean_server.ranges() == [("/blob", "bytes=150-")]


def test_any_commit_is_fetchable_by_id(upstream: Upstream, tmp_path: Path, base_env: dict[str, str]) -> None:
    head = upstream.add_pull_request(7, {"NOTES.txt": "a pull request\n"}, "Add notes")
    clone = tmp_path / "clone"
    clone.mkdir()
    git("init", "--quiet", cwd=clone, env=base_env)
    git("fetch", "--quiet", "--depth", "1", upstream.url, head, cwd=clone, env=base_env)
    assert git("rev-parse", "FETCH_HEAD", cwd=clone, env=base_env) == head
    refs = git("ls-remote", upstream.url, "refs/pull/7/head", cwd=clone, env=base_env)
    assert refs.split()[0] == head


@pytest.mark.compile
def test_mini_ort_builds_and_loads(upstream: Upstream, tmp_path: Path, base_env: dict[str, str]) -> None:
    source = tmp_path / "src"
    git("clone", "--quiet", upstream.url, str(source), cwd=tmp_path, env=base_env)
    build, prefix = tmp_path / "build", tmp_path / "prefix"
    env = {**base_env, **GIT_ENV_FIXED}
    _run.run(["cmake", "-S", source / "cmake", "-B", build, "-G", "Ninja"], env=env, capture=True)
    _run.run(["cmake", "--build", build, "-j", "2"], env=env, capture=True)
    _run.run(["cmake", "--install", build, "--prefix", prefix], env=env, capture=True)
    code = "import onnxruntime as o; print(o.__version__, o.get_available_providers(), o.dependency_checksum())"
    out = _run.run(["python3", "-c", code], env={**env, "PYTHONPATH": str(prefix)}, capture=True).stdout
    assert out.split(" ", 1)[0] == "1.31.0"
    assert "CPUExecutionProvider" in out
