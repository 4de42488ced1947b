"""Shared fixtures: one loopback HTTP server and one published miniature upstream per session."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest

from upstream import LoopbackServer, Upstream, publish_upstream

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


@pytest.fixture(scope="session")
def base_env() -> dict[str, str]:
    """The environment tests hand to ortstack and git: the process's, without ORTSTACK_* settings."""
    return {k: v for k, v in os.environ.items() if not k.startswith("ORTSTACK_")}


@pytest.fixture(scope="session")
def server() -> Iterator[LoopbackServer]:
    """A real HTTP server on 127.0.0.1 (port chosen by the OS)."""
    loopback = LoopbackServer()
    yield loopback
    loopback.close()


@pytest.fixture(scope="session")
def upstream(tmp_path_factory: pytest.TempPathFactory, server: LoopbackServer, base_env: dict[str, str]) -> Upstream:
    """mini_ort committed once and published by git (file://) and as a tarball on ``server``."""
    return publish_upstream(tmp_path_factory.mktemp("upstream"), server, base_env)


@pytest.fixture
def clean_server(server: LoopbackServer) -> Iterator[LoopbackServer]:
    """``server`` with zeroed counters and no faults, restored after the test."""
    server.reset_counts()
    server.clear_faults()
    yield server
    server.clear_faults()
    server.set_range_support(enabled=True)


@pytest.fixture
def cache_dir(tmp_path: Path) -> Path:
    return tmp_path / "cache"
