"""Distributed compiles for real: an sccache-dist scheduler and one build server on 127.0.0.1.

The build server runs each compile in a bubblewrap sandbox, so it needs root and ``bwrap``
(``ci/install-system-deps.sh`` installs bubblewrap). The miniature upstream is built once locally,
then again through the scheduler into a fresh build dir: the scheduler's log must show one finished
job per object file, and the wheels must be the local build's, file for file. Then the failures a
team meets: a malformed URL, a scheduler nobody answers on, a wrong token, the scheduler going away
in the middle of a build: one error line each, and dist/ keeps its wheels.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

import pytest

import dist_cluster
from clirun import one_error
from dist_cluster import CLIENT_TOKEN, WAIT_SECONDS, Cluster, free_port
from ortstack.build import sccache_dist
from ortstack.build.buildinfo import BUILD_INFO_NAME
from test_build import VARIANTS, assert_ok
from upstream import stack_toml

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    from upstream import Upstream


pytestmark = [pytest.mark.compile, pytest.mark.network, pytest.mark.slow]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    try:
        with dist_cluster.running(tmp_path / "cluster") as running:
            yield running
    except dist_cluster.ClusterError as exc:
        pytest.fail(str(exc))


@dataclass(frozen=True, kw_only=True)
class Build:
    """The miniature project, with a private sccache server (its own port and local cache)."""

    root: Path
    env: Mapping[str, str]
    upstream: Upstream

    def argv(self, *args: str, cache: str, scheduler: str) -> list[str]:
        stack = stack_toml(repository=self.upstream.url, commit=self.upstream.commit)
        text = stack + VARIANTS.replace('compiler_cache = "none"', f'compiler_cache = "{cache}"')
        (self.root / "stack.toml").write_text(text, encoding="utf-8")
        common = ["--stack", str(self.root / "stack.toml"), "--cache-dir", str(self.root / "cache")]
        common += ["--work-dir", str(self.root / "work"), "--dist-dir", str(self.root / "dist")]
        through = ["--sccache-scheduler", scheduler] if scheduler else []
        return [sys.executable, "-m", "ortstack", *args, *through, *common]

    def ortstack(
        self, *args: str, cache: str = "sccache", scheduler: str = "", token: str = CLIENT_TOKEN
    ) -> subprocess.CompletedProcess[str]:
        argv = self.argv(*args, cache=cache, scheduler=scheduler)
        env = {**self.env, sccache_dist.ENV_TOKEN: token}
        return subprocess.run(argv, check=False, cwd=self.root, env=env, capture_output=True, text=True, timeout=300)

    def sccache(self, *args: str) -> str:
        argv = [dist_cluster.tool("sccache"), *args]
        return subprocess.run(argv, check=False, env=dict(self.env), capture_output=True, text=True, timeout=60).stdout

    def dist(self) -> dict[str, str]:
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted((self.root / "dist").glob("*.whl"))}

    def objects(self) -> list[Path]:
        return sorted((self.root / "work" / "cmake").rglob("*.o"))


@pytest.fixture(scope="module")
def built_locally(tmp_path_factory: pytest.TempPathFactory, upstream: Upstream, cli_env: dict[str, str]) -> Build:
    """Fetched, patched and built once locally (no compiler cache); its wheels kept in ``local-wheels``."""
    root = tmp_path_factory.mktemp("distributed") / "project"
    root.mkdir()
    env = {**cli_env, "SCCACHE_SERVER_PORT": str(free_port()), "SCCACHE_DIR": str(root.parent / "sccache-local")}
    for name in ("SCCACHE_REDIS_ENDPOINT", "SCCACHE_REDIS", "SCCACHE_BUCKET", "SCCACHE_GCS_BUCKET", "SCCACHE_CONF"):
        env.pop(name, None)
    build = Build(root=root, env=env, upstream=upstream)
    assert_ok(build.ortstack("fetch", "--deps", cache="none"))
    assert_ok(build.ortstack("patch", cache="none"))
    assert_ok(build.ortstack("build", cache="none"))
    shutil.copytree(root / "dist", root / "local-wheels")
    return build


@pytest.fixture
def project(built_locally: Build) -> Iterator[Build]:
    """The locally built project with no build dirs and an empty sccache: every build compiles all again."""
    shutil.rmtree(built_locally.root / "work" / "cmake", ignore_errors=True)
    built_locally.sccache("--stop-server")  # its statistics start from zero
    shutil.rmtree(built_locally.env["SCCACHE_DIR"], ignore_errors=True)
    try:
        yield built_locally
    finally:
        built_locally.sccache("--stop-server")


def wheel_contents(wheel: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(wheel) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def without_cache_fields(info: dict[str, object]) -> dict[str, object]:
    """Build info minus what may differ between a distributed and a local build: cache fields, date."""
    options = {k: v for k, v in dict(info["cmake_options"]).items() if not k.endswith("_COMPILER_LAUNCHER")}  # type: ignore[call-overload]
    extra = {k: v for k, v in dict(info["extra"]).items() if k != "compiler_cache"}  # type: ignore[call-overload]
    return {**info, "cmake_options": options, "extra": extra, "date": ""}


def test_compiles_run_on_the_build_server_and_give_the_local_wheels(project: Build, cluster: Cluster) -> None:
    local = {path.name: wheel_contents(path) for path in sorted((project.root / "local-wheels").glob("*.whl"))}
    before = cluster.finished_jobs()
    stderr = assert_ok(project.ortstack("build", scheduler=cluster.url))
    assert f"compiles go to the build servers of sccache scheduler {cluster.url}" in stderr

    objects = project.objects()
    assert len(objects) >= 8, objects  # all three variants compiled again
    stats = json.loads(project.sccache("--show-stats", "--stats-format=json"))["stats"]
    # Every compile ran on the build server: the scheduler finished a job for each (and for each
    # variant's test compile), sccache counted each as distributed to that server, none as local.
    assert stats["compilations"] == len(objects) + 3, (stats, objects)
    assert stats["dist_compiles"] == {cluster.server_address: stats["compilations"]}, stats
    assert stats["dist_errors"] == 0, stats
    deadline = time.monotonic() + WAIT_SECONDS  # the build server reports a job done as its result goes out
    while cluster.finished_jobs() - before < stats["compilations"] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert cluster.finished_jobs() - before == stats["compilations"], cluster.log("scheduler")

    distributed = {path.name: wheel_contents(path) for path in sorted((project.root / "dist").glob("*.whl"))}
    assert distributed.keys() == local.keys()
    for name, files in distributed.items():
        assert files.keys() == local[name].keys(), name  # the same file list
        info_name = next(n for n in files if PurePosixPath(n).name == BUILD_INFO_NAME)
        remote_info, local_info = json.loads(files[info_name]), json.loads(local[name][info_name])
        assert remote_info["extra"]["compiler_cache"] == {"tool": "sccache", "distributed": True}
        assert local_info["extra"]["compiler_cache"] == {"tool": "", "distributed": False}
        assert without_cache_fields(remote_info) == without_cache_fields(local_info), name
        libraries = [n for n in files if ".so" in PurePosixPath(n).name]
        assert libraries, sorted(files)
        for library in libraries:  # the same object code, whichever machine compiled it
            assert files[library] == local[name][library], library


def test_a_malformed_scheduler_url_stops_before_anything_runs(project: Build) -> None:
    kept = project.dist()
    line = one_error(project.ortstack("build", scheduler="127.0.0.1:10600"), 3)
    assert "sccache scheduler '127.0.0.1:10600' is not an http:// or https:// URL with a host" in line
    assert project.dist() == kept


def test_a_scheduler_nobody_answers_on_is_one_error_and_dist_is_kept(project: Build) -> None:
    kept = project.dist()
    nobody = f"http://127.0.0.1:{free_port()}"
    line = one_error(project.ortstack("build", scheduler=nobody), 6)
    assert f"sccache scheduler {nobody} cannot be reached" in line
    assert project.dist() == kept
    assert not project.objects()  # it stopped before compiling


def test_a_wrong_token_is_one_error_and_dist_is_kept(project: Build, cluster: Cluster) -> None:
    kept = project.dist()
    line = one_error(project.ortstack("build", scheduler=cluster.url, token="not-the-token"), 3)
    assert f"sccache scheduler {cluster.url} rejected the client token" in line
    assert project.dist() == kept
    assert not project.objects()


def test_local_compiles_when_allowed_are_announced(project: Build) -> None:
    nobody = f"http://127.0.0.1:{free_port()}"
    stderr = assert_ok(project.ortstack("build", "--sccache-local-fallback", scheduler=nobody))
    assert f"sccache scheduler {nobody} cannot be reached" in stderr
    assert "compiling on this machine, as sccache_local_fallback allows" in stderr
    assert len(project.objects()) >= 8


def test_the_scheduler_going_away_mid_build_stops_it_and_keeps_dist(project: Build, cluster: Cluster) -> None:
    kept = project.dist()
    before = cluster.finished_jobs()
    argv = project.argv("build", cache="sccache", scheduler=cluster.url)
    env = {**project.env, sccache_dist.ENV_TOKEN: CLIENT_TOKEN}
    with subprocess.Popen(argv, cwd=project.root, env=env, stderr=subprocess.PIPE, text=True) as build:
        try:
            # The first finished job is ortstack's test compile; cmake configures after it, so the
            # scheduler is gone before the first object is compiled.
            deadline = time.monotonic() + WAIT_SECONDS
            while cluster.finished_jobs() == before and build.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            cluster.stop("scheduler")
            _, stderr = build.communicate(timeout=300)
        finally:
            if build.poll() is None:
                build.kill()
    result = subprocess.CompletedProcess(argv, build.returncode, "", stderr)
    line = one_error(result, 6)
    assert f"compiles stopped reaching the build servers of sccache scheduler {cluster.url}: " in line
    assert "Connection refused" in line
    assert project.dist() == kept
