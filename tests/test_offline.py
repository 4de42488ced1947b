"""Offline: a dependency whose host cannot be reached is one line naming it, after a short bounded retry."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import pytest

from ortstack.cache import Cache
from ortstack.errors import FetchError
from ortstack.source import deps

if TYPE_CHECKING:
    from pathlib import Path

    from upstream import LoopbackServer

SHA1 = "0" * 40


def test_entries_on_an_unreachable_host_are_one_error_line_naming_them(
    tmp_path: Path, clean_server: LoopbackServer
) -> None:
    # .invalid never resolves (RFC 6761): what every host is to a machine without a network.
    offline = [
        deps.Dependency(name=f"dep{n}", url=f"https://deps.invalid/dep{n}-1.0.zip", sha1=SHA1, line=n)
        for n in range(12)
    ]
    served = clean_server.add("/deps/here-1.0.zip", b"bytes")
    reachable = deps.Dependency(name="here", url=served, sha1=SHA1, line=13)
    mirror = tmp_path / "mirror"
    started = time.monotonic()
    with pytest.raises(FetchError) as caught:
        deps.mirror_all([*offline, reachable], mirror, Cache(root=tmp_path / "cache"))
    assert time.monotonic() - started < 30  # bounded: two lookups per host, one second apart
    message = caught.value.message
    assert "\n" not in message
    assert message.startswith("offline: cannot reach deps.invalid (")
    assert f"so 12 deps.txt entries are missing: {', '.join(d.name for d in offline)}" in message
    assert "here" not in message.split("missing:")[1]
    assert caught.value.tip is not None
    assert "ortstack fetch --deps" in caught.value.tip
    assert f"put each archive at {mirror}/<its URL without https://>" in caught.value.tip
    assert clean_server.requests() == 0, "nothing downloaded before the whole list was known to be reachable"
