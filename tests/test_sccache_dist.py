"""sccache-dist settings: which scheduler, which token, local compiles or not, and the client config."""

from __future__ import annotations

import tomllib
from typing import TYPE_CHECKING

import pytest

from ortstack.build import sccache_dist
from ortstack.build.toolchain import Toolchain
from ortstack.config import BuildOptions
from ortstack.errors import ConfigError

if TYPE_CHECKING:
    from pathlib import Path


def test_the_command_line_wins_over_the_environment_over_stack_toml() -> None:
    options = BuildOptions(sccache_scheduler="http://toml:10600", sccache_scheduler_token="from-toml")
    env = {sccache_dist.ENV_SCHEDULER: "http://env:10600/", sccache_dist.ENV_LOCAL_FALLBACK: "1"}
    from_env = sccache_dist.resolve(options, env)
    assert from_env == sccache_dist.Scheduler(url="http://env:10600", token="from-toml", local_fallback=True)
    cli = sccache_dist.resolve(options, env, url="https://cli.example:443", local_fallback=False)
    assert cli == sccache_dist.Scheduler(url="https://cli.example:443", token="from-toml", local_fallback=False)
    env_token = sccache_dist.resolve(options, {sccache_dist.ENV_TOKEN: "from-env"})
    assert env_token is not None
    assert env_token.token == "from-env"
    assert "from-env" not in repr(env_token)  # a token never reaches a log through repr
    assert sccache_dist.resolve(BuildOptions(), {}) is None


@pytest.mark.parametrize("url", ["127.0.0.1:10600", "ftp://host:10600", "http://", "http://host:99999", "http://h?x=1"])
def test_a_malformed_scheduler_url_is_a_config_error(url: str) -> None:
    with pytest.raises(ConfigError, match="is not an http:// or https:// URL with a host"):
        sccache_dist.resolve(BuildOptions(sccache_scheduler=url), {})


def test_the_client_config_carries_url_and_token_and_keeps_the_users_own(tmp_path: Path) -> None:
    token = 'a "quoted" token\\ with ünïcode'
    scheduler = sccache_dist.Scheduler(url="http://127.0.0.1:10600", token=token, local_fallback=False)
    own = tmp_path / "own.toml"
    own.write_text('[cache.disk]\ndir = "/somewhere"\n', encoding="utf-8")
    config = tomllib.loads(sccache_dist.client_config(scheduler, {"SCCACHE_CONF": str(own)}))
    assert config["dist"] == {
        "scheduler_url": "http://127.0.0.1:10600",
        "toolchains": [],
        "auth": {"type": "token", "token": token},
    }
    assert config["cache"] == {"disk": {"dir": "/somewhere"}}
    without_token = sccache_dist.Scheduler(url="http://127.0.0.1:10600", token="", local_fallback=False)
    assert "auth" not in tomllib.loads(sccache_dist.client_config(without_token, {}))["dist"]
    own.write_text('[dist]\nscheduler_url = "http://other:10600"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"has its own \[dist\] table"):
        sccache_dist.client_config(scheduler, {"SCCACHE_CONF": str(own)})


@pytest.mark.parametrize(
    ("cache", "compiler", "message"),
    [
        ("ccache", "/usr/bin/g++", "the compiler cache is ccache"),
        ("", "/usr/bin/g++", "the compiler cache is none"),
        ("sccache", "C:/VS/bin/Hostx64/x64/cl.exe", r"MSVC \(cl\) compiles cannot run"),
    ],
)
def test_distributed_compiles_need_sccache_and_a_compiler_linux_servers_run(
    cache: str, compiler: str, message: str
) -> None:
    tools = Toolchain(
        cmake="cmake",
        ninja="ninja",
        c_compiler=compiler,
        cxx_compiler=compiler,
        compiler_version="",
        cmake_version="",
        cache=cache,
        cache_program=cache,
    )
    with pytest.raises(ConfigError, match=message):
        sccache_dist.check_toolchain(tools)
