"""GitHub's patch endpoints on the loopback server, answered by real git from the miniature upstream.

``/OWNER/REPO/pull/N.diff``, ``/commit/SHA.diff``, ``/commit/SHA.patch`` and ``/compare/A...B.diff``
behave like GitHub's: ``?full_index=1`` gives full blob ids, a pull request's diff runs from its
merge base with ``main`` to ``refs/pull/N/head``. ``git_redirect`` points git's ``insteadOf`` at the
bare repository, so ``git fetch <repository URL>`` reaches the same upstream, as a mirror would.
"""

from __future__ import annotations

import re
import subprocess
from typing import TYPE_CHECKING

from upstream import GIT_ENV_FIXED

if TYPE_CHECKING:
    from collections.abc import Mapping

    from upstream import Upstream

REPOSITORY_PATH = "/microsoft/onnxruntime"
_ROUTE = re.compile(
    r"^/microsoft/onnxruntime/(?:pull/(?P<pr>\d+)\.diff|commit/(?P<commit>[0-9a-f]{7,40})\.(?P<ext>diff|patch)"
    r"|compare/(?P<base>[^.]+)\.\.\.(?P<head>[0-9a-zA-Z/_-]+)\.diff)$"
)


def _git(upstream: Upstream, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        ["git", f"--git-dir={upstream.bare}", *args],
        env={**upstream.env, **GIT_ENV_FIXED},
        capture_output=True,
        check=False,
    )


def _answer(upstream: Upstream, request: str) -> bytes | None:
    path, _, query = request.partition("?")
    match = _ROUTE.match(path)
    if match is None:
        return None
    index = ["--full-index"] if "full_index=1" in query.split("&") else []
    if match.group("pr"):
        result = _git(upstream, "diff", *index, f"main...refs/pull/{match.group('pr')}/head")
    elif match.group("commit") and match.group("ext") == "patch":
        result = _git(upstream, "format-patch", "-1", *index, "--stdout", match.group("commit"))
    elif match.group("commit"):
        result = _git(upstream, "diff", *index, f"{match.group('commit')}^", match.group("commit"))
    else:
        result = _git(upstream, "diff", *index, f"{match.group('base')}...{match.group('head')}")
    return result.stdout if result.returncode == 0 else None


def serve(upstream: Upstream) -> str:
    """Answer GitHub-style patch URLs for ``upstream``; returns the repository URL to put in origins."""
    upstream.server.add_fallback(lambda request: _answer(upstream, request))
    return upstream.server.url + REPOSITORY_PATH


def git_redirect(upstream: Upstream, env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with git told that the server's repository URL is the bare repository."""
    return {
        **env,
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": f"url.{upstream.url}.insteadOf",
        "GIT_CONFIG_VALUE_0": upstream.server.url + REPOSITORY_PATH,
    }
