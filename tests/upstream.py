"""A miniature onnxruntime upstream for the tests: a real git repository and a real HTTP server.

``LoopbackServer`` is a ``ThreadingHTTPServer`` on 127.0.0.1 that serves registered routes, counts
requests per path, honours ``Range`` (206) and can be told to misbehave (wrong bytes, a truncated
file, a dropped connection, 404, 503, a slow trickle). ``publish_upstream`` renders ``tests/packages/mini_ort`` into
a folder, commits it with a fixed author and date, and publishes it as a bare repository reachable by
``file://`` (``uploadpack.allowAnySHA1InWant``, the way GitHub serves any commit by id) and as a
GitHub-style ``.tar.gz`` (top folder ``onnxruntime-<commit>/``) on the server.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import gzip
import hashlib
import http.server
import io
import os
import re
import shutil
import subprocess
import threading
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, TypeAlias

from ortstack import _run

if TYPE_CHECKING:
    from collections.abc import Mapping

PACKAGES = Path(__file__).parent / "packages"
ARCHIVE_PREFIX = "/microsoft/onnxruntime/archive"
MINI_DEP_PATH = "/deps/mini_dep-1.0.zip"
MINI_DAWN_PATH = "/deps/mini_dawn-1.0.zip"
MINI_GTEST_PATH = "/deps/mini_gtest-1.0.zip"

# A fixed identity and clock, and no user or system git config: commit ids depend on content only.
GIT_ENV_FIXED = {
    "GIT_AUTHOR_NAME": "Mini Upstream",
    "GIT_AUTHOR_EMAIL": "mini@example.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+00:00",
    "GIT_COMMITTER_NAME": "Mini Upstream",
    "GIT_COMMITTER_EMAIL": "mini@example.invalid",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+00:00",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_TERMINAL_PROMPT": "0",
}

Route: TypeAlias = bytes | Callable[[str], bytes | None]
"""What a path serves: fixed bytes, or a function of the request path (query included) that
returns the body, or ``None`` for 404."""


class Fault(enum.Enum):
    """Ways the server can misbehave on a path."""

    WRONG_BYTES = "wrong-bytes"
    """Same length, different content (a checksum mismatch)."""
    TRUNCATED = "truncated"
    """Only the first half, announced as the whole file (a truncated archive)."""
    DROP = "drop"
    """The full length announced, half the body sent, then the connection closed."""
    NOT_FOUND = "not-found"
    """404."""
    SERVER_ERROR = "server-error"
    """503, which clients should retry."""
    SLOW = "slow"
    """The right bytes, a small piece at a time (``SLOW_PIECE`` every ``SLOW_PAUSE`` seconds), so a
    test can interrupt the client in the middle of the transfer."""


SLOW_PIECE = 512
SLOW_PAUSE = 0.05


@dataclass(kw_only=True)
class _FaultPlan:
    fault: Fault
    remaining: int | None
    """How many more requests it applies to; ``None`` for all of them."""


@dataclass(kw_only=True)
class ServerState:
    routes: dict[str, Route] = field(default_factory=dict)
    fallbacks: list[Callable[[str], bytes | None]] = field(default_factory=list)
    faults: dict[str, _FaultPlan] = field(default_factory=dict)
    requests: collections.Counter[str] = field(default_factory=collections.Counter)
    ranges: list[tuple[str, str]] = field(default_factory=list)
    range_support: bool = True
    lock: threading.Lock = field(default_factory=threading.Lock)


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        """Quiet: the tests assert on counts, not on logs."""

    def do_GET(self) -> None:
        state = self.server.state
        path = self.path.split("?", 1)[0]
        with state.lock:
            state.requests[path] += 1
            plan = state.faults.get(path)
            fault = plan.fault if plan is not None else None
            if plan is not None and plan.remaining is not None:
                plan.remaining -= 1
                if plan.remaining <= 0:
                    del state.faults[path]
            range_header = self.headers.get("Range")
            if range_header:
                state.ranges.append((path, range_header))
        if fault is Fault.NOT_FOUND:
            self._plain(404, b"not found\n")
            return
        if fault is Fault.SERVER_ERROR:
            self._plain(503, b"try again later\n")
            return
        body = self._body(path)
        if body is None:
            self._plain(404, b"not found\n")
            return
        if fault is Fault.WRONG_BYTES:
            body = bytes(b ^ 0x5A for b in body)
        elif fault is Fault.TRUNCATED:
            body = body[: len(body) // 2]
        self._send(
            body, range_header if state.range_support else None, drop=fault is Fault.DROP, slow=fault is Fault.SLOW
        )

    def _body(self, path: str) -> bytes | None:
        route = self.server.state.routes.get(path)
        if isinstance(route, bytes):
            return route
        if route is not None:
            return route(self.path)
        for fallback in self.server.state.fallbacks:
            body = fallback(self.path)
            if body is not None:
                return body
        return None

    def _plain(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _send(self, body: bytes, range_header: str | None, *, drop: bool, slow: bool = False) -> None:
        start = 0
        match = re.fullmatch(r"bytes=(\d+)-", range_header or "")
        if match and int(match.group(1)) < len(body):
            start = int(match.group(1))
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        elif match:
            self.send_response(416)
            self.send_header("Content-Range", f"bytes */{len(body)}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        else:
            self.send_response(200)
        payload = body[start:]
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(payload)))
        if self.server.state.range_support:
            self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        if drop:
            self.wfile.write(payload[: len(payload) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        if slow:
            self._trickle(payload)
            return
        self.wfile.write(payload)

    def _trickle(self, payload: bytes) -> None:
        try:
            for start in range(0, len(payload), SLOW_PIECE):
                self.wfile.write(payload[start : start + SLOW_PIECE])
                self.wfile.flush()
                time.sleep(SLOW_PAUSE)
        except (BrokenPipeError, ConnectionResetError):  # the client was interrupted: what the test wants
            self.close_connection = True


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, state: ServerState) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.state = state


class LoopbackServer:
    """A real HTTP server on 127.0.0.1 in a thread; routes are pluggable."""

    def __init__(self) -> None:
        self.state = ServerState()
        self._server = _Server(self.state)
        self._thread = threading.Thread(target=self._server.serve_forever, name="loopback-http", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def add(self, path: str, route: Route) -> str:
        """Serve ``route`` at ``path``; returns the full URL."""
        with self.state.lock:
            self.state.routes[path] = route
        return self.url + path

    def add_fallback(self, handler: Callable[[str], bytes | None]) -> None:
        """Ask ``handler`` about paths no route matches (e.g. ``/owner/repo/pull/N.diff``)."""
        with self.state.lock:
            self.state.fallbacks.append(handler)

    def fault(self, path: str, fault: Fault, *, times: int | None = None) -> None:
        """Misbehave on ``path`` for the next ``times`` requests (all of them when ``None``)."""
        with self.state.lock:
            self.state.faults[path] = _FaultPlan(fault=fault, remaining=times)

    def clear_faults(self) -> None:
        with self.state.lock:
            self.state.faults.clear()

    def set_range_support(self, *, enabled: bool) -> None:
        with self.state.lock:
            self.state.range_support = enabled

    def requests(self, path: str | None = None) -> int:
        """Requests seen for ``path``, or for all paths."""
        with self.state.lock:
            return self.state.requests[path] if path else sum(self.state.requests.values())

    def ranges(self) -> list[tuple[str, str]]:
        """``(path, Range header)`` of every ranged request, in order."""
        with self.state.lock:
            return list(self.state.ranges)

    def reset_counts(self) -> None:
        with self.state.lock:
            self.state.requests.clear()
            self.state.ranges.clear()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def git(*args: str, cwd: Path, env: Mapping[str, str]) -> str:
    """Run git quietly with the fixed identity; returns stdout stripped."""
    return _run.run(["git", *args], cwd=cwd, env={**env, **GIT_ENV_FIXED}, capture=True, quiet=True).stdout.strip()


def deterministic_zip(root: Path, prefix: str) -> bytes:
    """Zip the files under ``root`` below ``prefix/`` with fixed dates and modes (same bytes every time)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            info = zipfile.ZipInfo(f"{prefix}/{path.relative_to(root).as_posix()}", date_time=(2026, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, path.read_bytes())
    return buffer.getvalue()


def render_package(name: str, dest: Path, tokens: Mapping[str, str]) -> Path:
    """Copy ``tests/packages/<name>`` to ``dest``, replacing ``@KEY@`` tokens in text files."""
    shutil.copytree(PACKAGES / name, dest, ignore=shutil.ignore_patterns("__pycache__", "build"))
    for path in dest.rglob("*"):
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8")
        rendered = text
        for key, value in tokens.items():
            rendered = rendered.replace(f"@{key}@", value)
        if rendered != text:
            path.write_text(rendered, encoding="utf-8")
    return dest


@dataclass(frozen=True, kw_only=True)
class Upstream:
    """The published miniature upstream."""

    work: Path
    """A non-bare clone used to make commits (do not edit its files from tests that share it)."""
    bare: Path
    """The published bare repository."""
    url: str
    """``file://`` URL of ``bare``."""
    commit: str
    """The commit on ``main`` that tests pin."""
    server: LoopbackServer
    archive_url: str
    """GitHub-style archive of ``commit`` on the server."""
    archive: bytes
    archive_sha256: str
    mini_dep_url: str
    mini_dep_sha1: str
    env: Mapping[str, str]
    dawn_third_party: Mapping[str, str] = field(default_factory=dict)
    """mini_dawn's DEPS: path -> commit of each published third-party repository."""
    dawn_git: str = ""
    """``file://`` root of those repositories (DEPS's ``chromium_git``)."""

    def archive_of(self, commit: str) -> bytes:
        """A GitHub-style ``.tar.gz`` of ``commit``: one top folder ``onnxruntime-<commit>/``."""
        tar = self.work.parent / f"onnxruntime-{commit}.tar"
        git(
            "archive",
            "--format=tar",
            f"--prefix=onnxruntime-{commit}/",
            "-o",
            str(tar),
            commit,
            cwd=self.work,
            env=self.env,
        )
        data = gzip.compress(tar.read_bytes(), mtime=0)
        tar.unlink()
        return data

    def publish_archive(self, commit: str) -> str:
        """Serve the archive of ``commit``; returns its URL."""
        return self.server.add(f"{ARCHIVE_PREFIX}/{commit}.tar.gz", self.archive_of(commit))

    def add_commit(self, files: Mapping[str, str | None], message: str, *, parent: str | None = None) -> str:
        """Commit ``files`` (path -> text, ``None`` deletes) on top of ``parent`` (default ``commit``).

        The commit is made on a detached HEAD and pushed nowhere (``add_pull_request`` publishes one);
        the work tree is back on ``main`` afterwards. Returns the new commit's id.
        """
        git("checkout", "--quiet", "--detach", parent or self.commit, cwd=self.work, env=self.env)
        for relative, text in files.items():
            target = self.work / relative
            if text is None:
                git("rm", "--quiet", relative, cwd=self.work, env=self.env)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
            git("add", relative, cwd=self.work, env=self.env)
        git("commit", "--quiet", "-m", message, cwd=self.work, env=self.env)
        made = git("rev-parse", "HEAD", cwd=self.work, env=self.env)
        git("checkout", "--quiet", "main", cwd=self.work, env=self.env)  # the work tree shows ``commit`` again
        return made

    def add_pull_request(self, number: int, files: Mapping[str, str | None], message: str) -> str:
        """A PR head commit on top of ``commit``, published as ``refs/pull/<number>/head``."""
        head = self.add_commit(files, message)
        git("push", "--quiet", self.url, f"{head}:refs/pull/{number}/head", cwd=self.work, env=self.env)
        return head

    def file_at(self, commit: str, relative: str) -> bytes:
        """The exact bytes of ``relative`` at ``commit``."""
        argv = ["git", "cat-file", "blob", f"{commit}:{relative}"]
        env = {**self.env, **GIT_ENV_FIXED}
        return subprocess.run(argv, cwd=self.work, env=env, capture_output=True, check=True).stdout

    def tree_files(self, commit: str) -> list[str]:
        return git("ls-tree", "-r", "--name-only", commit, cwd=self.work, env=self.env).splitlines()


# mini_dawn's third-party sources, each a git repository of its own as Dawn's DEPS names them:
# DEPS path -> (repository path under the git root, token of its commit in DEPS, CMake target, header).
DAWN_THIRD_PARTY = {
    "third_party/spirv-headers/src": (
        "external/github.com/KhronosGroup/SPIRV-Headers",
        "SPIRV_HEADERS",
        "spirv_headers",
    ),
    "third_party/spirv-tools/src": ("external/github.com/KhronosGroup/SPIRV-Tools", "SPIRV_TOOLS", "spirv_tools"),
    "third_party/vulkan-headers/src": (
        "external/github.com/KhronosGroup/Vulkan-Headers",
        "VULKAN_HEADERS",
        "vulkan_headers",
    ),
    "third_party/vulkan-utility-libraries/src": (
        "external/github.com/KhronosGroup/Vulkan-Utility-Libraries",
        "VULKAN_UTILITY_LIBRARIES",
        "vulkan_utility_libraries",
    ),
    "third_party/dxc": ("external/github.com/microsoft/DirectXShaderCompiler", "DXC", "dxc"),
    "third_party/jinja2": ("chromium/src/third_party/jinja2", "JINJA2", ""),
    "third_party/markupsafe": ("chromium/src/third_party/markupsafe", "MARKUPSAFE", ""),
}
DAWN_LINUX_NEEDS = sorted(set(DAWN_THIRD_PARTY) - {"third_party/dxc"})
"""What a Linux (Vulkan) build of mini_dawn uses, as its CMake says."""


def _third_party_files(path: str, target: str) -> dict[str, str]:
    if not target:  # a Python package folder, like Chromium's copies of jinja2 and markupsafe
        return {"__init__.py": f'"""mini {PurePosixPath(path).name}: a stand-in package for the code generator."""\n'}
    return {
        "CMakeLists.txt": (
            f"add_library(mini_{target} INTERFACE)\n"
            f'target_include_directories(mini_{target} INTERFACE "${{CMAKE_CURRENT_SOURCE_DIR}}/include")\n'
            f"add_library(mini::{target} ALIAS mini_{target})\n"
        ),
        f"include/{target}/mini.h": f"#pragma once\n#define MINI_{target.upper()} 1\n",
    }


def publish_dawn_third_party(root: Path, env: Mapping[str, str]) -> tuple[str, dict[str, str]]:
    """One bare repository per DAWN_THIRD_PARTY entry under ``root``; returns (base URL, DEPS path -> commit)."""
    commits: dict[str, str] = {}
    for path, (repository, _, target) in DAWN_THIRD_PARTY.items():
        work = root / "work" / repository
        for name, text in _third_party_files(path, target).items():
            (work / name).parent.mkdir(parents=True, exist_ok=True)
            (work / name).write_text(text, encoding="utf-8")
        git("init", "--quiet", "-b", "main", cwd=work, env=env)
        git("add", "-A", cwd=work, env=env)
        git("commit", "--quiet", "-m", f"mini {repository}", cwd=work, env=env)
        commits[path] = git("rev-parse", "HEAD", cwd=work, env=env)
        bare = root / "git" / repository
        bare.mkdir(parents=True)
        git("init", "--quiet", "--bare", "-b", "main", str(bare), cwd=root, env=env)
        git("config", "uploadpack.allowAnySHA1InWant", "true", cwd=bare, env=env)
        git("push", "--quiet", bare.as_uri(), "main", cwd=work, env=env)
    return (root / "git").as_uri(), commits


def render_mini_dawn(dest: Path, git_base: str, commits: Mapping[str, str]) -> Path:
    """mini_dawn under ``dest`` with its DEPS naming ``commits`` (DEPS path -> commit) under ``git_base``."""
    tokens = {"THIRD_PARTY_GIT": git_base} | {f"{DAWN_THIRD_PARTY[p][1]}_COMMIT": c for p, c in commits.items()}
    return render_package("mini_dawn", dest, tokens)


def publish_upstream(root: Path, server: LoopbackServer, env: Mapping[str, str]) -> Upstream:
    """Render mini_ort under ``root``, commit it and publish it by git and over HTTP."""
    mini_dep = deterministic_zip(PACKAGES / "mini_dep", "mini_dep-1.0")
    mini_dep_sha1 = hashlib.sha1(mini_dep).hexdigest()
    mini_dep_url = server.add(MINI_DEP_PATH, mini_dep)
    dawn_git, dawn_commits = publish_dawn_third_party(root / "dawn-deps", env)
    mini_dawn = deterministic_zip(render_mini_dawn(root / "mini_dawn", dawn_git, dawn_commits), "mini_dawn-1.0")
    server.add(MINI_DAWN_PATH, mini_dawn)
    # The unit tests' dependency, as googletest is onnxruntime's: a wheel's configure never needs it.
    mini_gtest = deterministic_zip(PACKAGES / "mini_gtest", "mini_gtest-1.0")
    server.add(MINI_GTEST_PATH, mini_gtest)
    tokens = {
        "DEPS_BASE_URL": server.url,
        "MINI_DEP_SHA1": mini_dep_sha1,
        "MINI_DAWN_SHA1": hashlib.sha1(mini_dawn).hexdigest(),
        "MINI_GTEST_SHA1": hashlib.sha1(mini_gtest).hexdigest(),
    }
    work = render_package("mini_ort", root / "work", tokens)
    git("init", "--quiet", "-b", "main", cwd=work, env=env)
    git("add", "-A", cwd=work, env=env)
    git("commit", "--quiet", "-m", "mini_ort 1.31.0", cwd=work, env=env)
    commit = git("rev-parse", "HEAD", cwd=work, env=env)
    bare = root / "onnxruntime.git"
    git("init", "--quiet", "--bare", "-b", "main", str(bare), cwd=root, env=env)
    git("config", "uploadpack.allowAnySHA1InWant", "true", cwd=bare, env=env)
    url = bare.as_uri()
    git("push", "--quiet", url, "main", cwd=work, env=env)
    upstream = Upstream(
        work=work,
        bare=bare,
        url=url,
        commit=commit,
        server=server,
        archive_url="",
        archive=b"",
        archive_sha256="",
        mini_dep_url=mini_dep_url,
        mini_dep_sha1=mini_dep_sha1,
        env=env,
        dawn_third_party=dawn_commits,
        dawn_git=dawn_git,
    )
    archive = upstream.archive_of(commit)
    return dataclasses.replace(
        upstream,
        archive_url=upstream.publish_archive(commit),
        archive=archive,
        archive_sha256=hashlib.sha256(archive).hexdigest(),
    )


def stack_toml(*, repository: str, commit: str, archive_url: str = "", archive_sha256: str = "") -> str:
    """A minimal ``stack.toml`` pinning ``commit``; extend the text for patches and variants."""
    lines = ["[ort]", f'repository = "{repository}"', f'commit = "{commit}"']
    if archive_url:
        lines.append(f'archive_url = "{archive_url}"')
    if archive_sha256:
        lines.append(f'archive_sha256 = "{archive_sha256}"')
    return "\n".join(lines) + "\n"
