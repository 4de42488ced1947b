"""Hostile inputs through the CLI: archives, downloads and patches that must be refused with one line.

Each test starts from a cache (or prepared tree) holding good work and asserts that it is byte for
byte the same afterwards, and that nothing was written outside the destination.
"""

from __future__ import annotations

import hashlib
import io
import stat
import tarfile
import zipfile
from typing import TYPE_CHECKING

import pytest

from clirun import RunOrtstack, one_error
from faultkit import fault, patch_args
from ortstack.cache import remove_tree
from series_kit import EMPTY_WEIGHTS, commit_edits, format_patch, snapshot
from test_fetch import archive_stack, assert_intact, assert_tree_is, good_cache
from upstream import Fault, LoopbackServer, Upstream

if TYPE_CHECKING:
    from pathlib import Path

    from series_kit import Project

pytestmark = pytest.mark.network

TOP = "onnxruntime-x"

# (name, kind, data): kind is "file", "symlink" (data: target), "hardlink" (data: target), "fifo", "block".
Member = tuple[str, str, str]


def hostile_tar(members: list[Member]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        good = tarfile.TarInfo(f"{TOP}/VERSION_NUMBER")
        good.size = 7
        tar.addfile(good, io.BytesIO(b"1.31.0\n"))
        for name, kind, data in members:
            member = tarfile.TarInfo(name)
            member.type = {
                "file": tarfile.REGTYPE,
                "symlink": tarfile.SYMTYPE,
                "hardlink": tarfile.LNKTYPE,
                "fifo": tarfile.FIFOTYPE,
                "block": tarfile.BLKTYPE,
            }[kind]
            if kind == "file":
                member.size = len(data)
                tar.addfile(member, io.BytesIO(data.encode()))
            else:
                member.linkname = data
                tar.addfile(member)
    return buffer.getvalue()


def hostile_zip(members: list[Member]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as bundle:
        bundle.writestr(f"{TOP}/VERSION_NUMBER", "1.31.0\n")
        for name, kind, data in members:
            info = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
            info.external_attr = ((stat.S_IFLNK | 0o777) if kind == "symlink" else (stat.S_IFREG | 0o644)) << 16
            bundle.writestr(info, data)
    return buffer.getvalue()


CHAIN = [  # each link stays inside on its own; followed one after the other they climb out
    (f"{TOP}/a", "symlink", "."),
    (f"{TOP}/a/b", "symlink", ".."),
    (f"{TOP}/a/b/c", "symlink", ".."),
    (f"{TOP}/a/b/c/d", "symlink", ".."),
    (f"{TOP}/a/b/c/d/escaped.txt", "file", "evil"),
]
LATER_LINK = [  # x is inside when it is made; once a -> . is there too, a/a/.. is the destination's parent
    (f"{TOP}/x", "symlink", "a/a/.."),
    (f"{TOP}/a", "symlink", "."),
]
THROUGH_LINK = [(f"{TOP}/VERSION", "symlink", "VERSION_NUMBER"), (f"{TOP}/VERSION", "file", "overwritten\n")]
LONG = "x" * 300
DEEP = f"{TOP}/" + "d/" * 1900 + "f"

CASES = [
    pytest.param(
        "tar",
        [(f"{TOP}/h", "hardlink", f"{TOP}/../../escaped.txt")],
        f"'{TOP}/../../escaped.txt': '..' climbs out",
        marks=fault("tar-hardlink-dotdot"),
        id="tar-hardlink-dotdot",
    ),
    pytest.param(
        "tar",
        [(f"{TOP}/h", "hardlink", "/etc/passwd")],
        "'/etc/passwd': absolute path",
        marks=fault("tar-hardlink-absolute"),
        id="tar-hardlink-absolute",
    ),
    pytest.param("tar", [(f"{TOP}/pipe", "fifo", "")], "device file or FIFO", marks=fault("tar-fifo"), id="tar-fifo"),
    pytest.param(
        "tar", [(f"{TOP}/sda", "block", "")], "device file or FIFO", marks=fault("tar-block-device"), id="tar-block"
    ),
    pytest.param(
        "tar",
        [(f"{TOP}\\..\\..\\escaped.txt", "file", "evil")],
        "'..' climbs out of the destination",
        marks=fault("tar-backslash-dotdot"),
        id="tar-backslash",
    ),
    pytest.param(
        "tar",
        [("C:/escaped.txt", "file", "evil")],
        "'C:/escaped.txt': absolute path",
        marks=fault("tar-drive-letter"),
        id="tar-drive",
    ),
    pytest.param("tar", CHAIN, "which is outside the destination", marks=fault("tar-symlink-chain"), id="tar-chain"),
    pytest.param(
        "tar",
        [(f"{TOP}/out/", "symlink", "../../escaped.txt")],  # tarfile's own filter reads it from inside out/
        f"'{TOP}/out/': a file or link named like a folder (a trailing /)",
        marks=fault("tar-symlink-trailing-slash"),
        id="tar-trailing-slash",
    ),
    pytest.param(
        "tar",
        [(f"{TOP}/a/.", "symlink", "./.")],  # found by test_properties: tarfile's fallback copy recursed
        f"'{TOP}/a/.': a file or link named like a folder (a trailing /.)",
        marks=fault("tar-symlink-dot-name"),
        id="tar-dot-name",
    ),
    pytest.param(
        "tar",
        LATER_LINK,
        f"'{TOP}/x': it leads outside the destination through a link extracted after it",
        marks=fault("tar-symlink-out-through-a-later-link"),
        id="tar-later-link",
    ),
    pytest.param(
        "tar",
        THROUGH_LINK,
        f"'{TOP}/VERSION': the archive holds this name twice",
        marks=fault("tar-duplicate-through-link"),
        id="tar-duplicate",
    ),
    pytest.param(
        "tar",
        [(f"{TOP}/{LONG}", "file", "long")],
        f"cannot extract '{LONG[:80]}': ",  # then the system's reason (ENAMETOOLONG's text differs by OS)
        marks=fault("tar-long-name"),
        id="tar-long-name",
    ),
    pytest.param(
        "tar",
        [(DEEP, "file", "deep")],
        "1902 folders deep, more than 64 (ORTSTACK_ARCHIVE_MAX_DEPTH)",
        marks=fault("tar-deep-folders"),
        id="tar-deep",
    ),
    pytest.param(
        "zip",
        [(DEEP, "file", "deep")],
        "1902 folders deep, more than 64 (ORTSTACK_ARCHIVE_MAX_DEPTH)",
        marks=fault("zip-deep-folders"),
        id="zip-deep",
    ),
    pytest.param(
        "zip",
        [(f"{TOP}/link", "symlink", "../../escaped.txt")],
        "symlink to '../../escaped.txt' points outside the destination",
        marks=fault("zip-symlink-escape"),
        id="zip-symlink",
    ),
    pytest.param(
        "zip",
        CHAIN,
        f"'{TOP}/a/b': it leads outside the destination through a link",
        marks=fault("zip-symlink-chain"),
        id="zip-chain",
    ),
    pytest.param(
        "zip",
        THROUGH_LINK,
        f"'{TOP}/VERSION': the archive holds this name twice",
        marks=fault("zip-duplicate-through-link"),
        id="zip-duplicate",
    ),
    pytest.param(
        "zip",
        LATER_LINK,
        f"'{TOP}/x': it leads outside the destination through a link extracted after it",
        marks=fault("zip-symlink-out-through-a-later-link"),
        id="zip-later-link",
    ),
    pytest.param(
        "zip",
        [(f"{TOP}/a/.", "file", "evil")],
        f"'{TOP}/a/.': a file or link named like a folder (a trailing /.)",
        marks=fault("zip-dot-name"),
        id="zip-dot-name",
    ),
    pytest.param(
        "zip",
        [("/escaped.txt", "file", "evil")],
        "'/escaped.txt': absolute path",
        marks=fault("zip-absolute"),
        id="zip-absolute",
    ),
]


@pytest.mark.filterwarnings("ignore:Duplicate name:UserWarning")  # zipfile warns while the test writes one
@pytest.mark.parametrize(("form", "members", "message"), CASES)
def test_hostile_archive_is_refused(
    form: str,
    members: list[Member],
    message: str,
    run_ortstack: RunOrtstack,
    upstream: Upstream,
    clean_server: LoopbackServer,
    tmp_path: Path,
    cache_dir: Path,
    base_env: dict[str, str],
) -> None:
    before = good_cache(cache_dir, tmp_path, upstream, base_env)
    data = hostile_tar(members) if form == "tar" else hostile_zip(members)
    suffix = ".tar.gz" if form == "tar" else ".zip"
    url = clean_server.add(f"/hostile/{hashlib.sha256(data).hexdigest()[:12]}{suffix}", data)
    pinned = "e" * 40
    stack = archive_stack(tmp_path, upstream, url=url, sha256=hashlib.sha256(data).hexdigest(), commit=pinned)

    line = one_error(run_ortstack("fetch", "--stack", stack, "--cache-dir", cache_dir), 4)
    assert line.startswith(f"ortstack: error: {url}: ")
    assert message in line
    assert not (cache_dir / "sources" / pinned).exists()
    assert not (cache_dir / "sources" / f"{pinned}.json").exists()
    assert_intact(cache_dir, before)
    assert not list(tmp_path.rglob("escaped.txt"))
    assert (cache_dir / "sources" / upstream.commit / "VERSION_NUMBER").read_bytes() == upstream.file_at(
        upstream.commit, "VERSION_NUMBER"
    )


# --------------------------------------------------------------------------------------------------
# Hostile downloads.


@fault("sha256-one-byte")
def test_one_flipped_byte(
    run_ortstack: RunOrtstack,
    upstream: Upstream,
    clean_server: LoopbackServer,
    tmp_path: Path,
    cache_dir: Path,
    base_env: dict[str, str],
) -> None:
    before = good_cache(cache_dir, tmp_path, upstream, base_env)
    flipped = bytearray(upstream.archive)
    flipped[len(flipped) // 2] ^= 0x01
    url = clean_server.add("/flipped/onnxruntime.tar.gz", bytes(flipped))
    pinned = "f" * 40
    stack = archive_stack(tmp_path, upstream, url=url, sha256=upstream.archive_sha256, commit=pinned)
    line = one_error(run_ortstack("fetch", "--stack", stack, "--cache-dir", cache_dir), 4)
    got = hashlib.sha256(flipped).hexdigest()
    assert f"sha256 mismatch for {url}: expected {upstream.archive_sha256}, got {got} ({len(flipped)} bytes)" in line
    assert_intact(cache_dir, before)
    assert not [p for p in (cache_dir / "archives").iterdir() if p.name not in before]  # nothing kept
    assert not (cache_dir / "sources" / pinned).exists()


@pytest.mark.parametrize(
    "ranges",
    [
        pytest.param(True, marks=fault("drop-always-ranged"), id="ranged"),
        pytest.param(False, marks=fault("drop-always-unranged"), id="unranged"),
    ],
)
def test_server_that_always_drops_half_way(
    ranges: bool,  # noqa: FBT001 - a parameter
    run_ortstack: RunOrtstack,
    upstream: Upstream,
    clean_server: LoopbackServer,
    tmp_path: Path,
    cache_dir: Path,
) -> None:
    path = upstream.archive_url.removeprefix(clean_server.url)
    clean_server.set_range_support(enabled=ranges)
    clean_server.fault(path, Fault.DROP)
    stack = archive_stack(tmp_path, upstream, url=upstream.archive_url, sha256=upstream.archive_sha256)
    line = one_error(run_ortstack("fetch", "--stack", stack, "--cache-dir", cache_dir), 4)
    assert f"could not download {upstream.archive_url}: connection closed after" in line
    assert "(tried 4 times)" in line
    assert clean_server.requests(path) == 4
    part = cache_dir / "archives" / f"{upstream.archive_sha256}.tar.gz.part"
    assert upstream.archive.startswith(part.read_bytes())  # what arrived is kept for the next run
    kept = len(part.read_bytes())
    # With Range each attempt continued where the last one stopped; without, each started over.
    size = len(upstream.archive)
    assert kept > size * 0.9 if ranges else kept == size // 2
    assert not (cache_dir / "sources" / upstream.commit).exists()

    clean_server.clear_faults()
    clean_server.reset_counts()
    again = run_ortstack("fetch", "--stack", stack, "--cache-dir", cache_dir)
    assert again.returncode == 0, again.stderr
    assert [header for _, header in clean_server.ranges()] == [f"bytes={kept}-"]
    assert_tree_is(cache_dir / "sources" / upstream.commit, upstream, upstream.commit)


# --------------------------------------------------------------------------------------------------
# Hostile patches: refused before anything is written.


def patch_run(run_ortstack: RunOrtstack, project: Project, tmp_path: Path) -> tuple[int, str]:
    result = run_ortstack(*patch_args(project, tmp_path))
    return result.returncode, result.stderr


def hostile_diff(kind: str) -> str:
    if kind == "delete-outside":
        return (
            "diff --git a/../victim.txt b/../victim.txt\ndeleted file mode 100644\n"
            "--- a/../victim.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-precious\n"
        )
    if kind == "absolute":
        return (
            "diff --git /tmp/ortstack-escaped.txt /tmp/ortstack-escaped.txt\nnew file mode 100644\n"
            "--- /dev/null\n+++ /tmp/ortstack-escaped.txt\n@@ -0,0 +1 @@\n+evil\n"
        )
    if kind == "git-dir":
        return (
            "diff --git a/.git/hooks/post-commit b/.git/hooks/post-commit\nnew file mode 100755\n"
            "--- /dev/null\n+++ b/.git/hooks/post-commit\n@@ -0,0 +1,2 @@\n+#!/bin/sh\n+touch ../escaped.txt\n"
        )
    msg = kind
    raise AssertionError(msg)


@pytest.mark.parametrize(
    ("kind", "named"),
    [
        pytest.param("delete-outside", "../victim.txt", marks=fault("patch-delete-outside"), id="delete-outside"),
        pytest.param("absolute", "/tmp/ortstack-escaped.txt", marks=fault("patch-absolute"), id="absolute"),
        pytest.param("git-dir", ".git/hooks/post-commit", marks=fault("patch-into-git-dir"), id="git-dir"),
    ],
)
def test_patch_reaching_outside_is_refused_before_anything_is_written(
    kind: str, named: str, run_ortstack: RunOrtstack, upstream: Upstream, project: Project, tmp_path: Path
) -> None:
    good = format_patch(upstream, commit_edits(upstream, [EMPTY_WEIGHTS], "Empty weights", upstream.commit))
    first = project.entry("empty", "0001-empty.patch", good)
    project.write([first])
    code, stderr = patch_run(run_ortstack, project, tmp_path)
    assert code == 0, stderr
    tree = tmp_path / "work" / "prepared" / "default"
    before = snapshot(tree)
    victim = tmp_path / "work" / "prepared" / "victim.txt"  # what ../victim.txt names from the tree
    victim.write_text("precious\n")

    project.write([first, project.entry("hostile", "0002-hostile.patch", hostile_diff(kind))])
    result = run_ortstack(
        "patch", "--platform", "linux", "--stack", project.stack_file, "--cache-dir", tmp_path / "cache",
        "--work-dir", tmp_path / "work",
    )  # fmt: skip
    line = one_error(result, 5)
    assert f"patch 0002-hostile.patch touches {named!r}, outside the source tree" in line
    assert snapshot(tree) == before
    assert victim.read_text() == "precious\n"
    assert sorted(p.name for p in tree.parent.iterdir()) == ["default", "default.lock", "victim.txt"]
    assert not list(tmp_path.rglob("escaped.txt"))


@fault("patch-through-symlink")
def test_patch_writing_through_a_link_out_of_the_tree(
    run_ortstack: RunOrtstack, upstream: Upstream, project: Project, tmp_path: Path
) -> None:
    project.write([])
    code, stderr = patch_run(run_ortstack, project, tmp_path)
    assert code == 0, stderr
    tree = tmp_path / "work" / "prepared" / "default"
    before = snapshot(tree)

    link = (
        "diff --git a/onnxruntime/out b/onnxruntime/out\nnew file mode 120000\n"
        "--- /dev/null\n+++ b/onnxruntime/out\n@@ -0,0 +1 @@\n+../../..\n\\ No newline at end of file\n"
    )
    through = (
        "diff --git a/onnxruntime/out/escaped.txt b/onnxruntime/out/escaped.txt\nnew file mode 100644\n"
        "--- /dev/null\n+++ b/onnxruntime/out/escaped.txt\n@@ -0,0 +1 @@\n+evil\n"
    )
    project.write(
        [
            project.entry("link", "0001-link.patch", link),
            project.entry("through", "0002-through.patch", through),
        ]
    )
    line = one_error(run_ortstack(
        "patch", "--platform", "linux", "--stack", project.stack_file, "--cache-dir", tmp_path / "cache",
        "--work-dir", tmp_path / "work",
    ), 5)  # fmt: skip
    assert "patch 0001-link.patch makes 'onnxruntime/out' a link to '../../..', outside the source tree" in line
    assert snapshot(tree) == before
    assert not list(tmp_path.rglob("escaped.txt"))
    assert sorted(p.name for p in tree.parent.iterdir()) == ["default", "default.lock"]


# --------------------------------------------------------------------------------------------------
# Disk space.


@fault("disk-patch")
def test_not_enough_space_to_prepare(
    run_ortstack: RunOrtstack, upstream: Upstream, project: Project, tmp_path: Path
) -> None:
    project.write([])
    code, stderr = patch_run(run_ortstack, project, tmp_path)  # fetches and prepares: enough space
    assert code == 0, stderr
    tree = tmp_path / "work" / "prepared" / "default"
    before = snapshot(tree)
    good = format_patch(upstream, commit_edits(upstream, [EMPTY_WEIGHTS], "Empty weights", upstream.commit))
    project.write([project.entry("empty", "0001-empty.patch", good)])
    result = run_ortstack(
        "patch", "--platform", "linux", "--stack", project.stack_file, "--cache-dir", tmp_path / "cache",
        "--work-dir", tmp_path / "work", env={"ORTSTACK_MIN_FREE_GIB_PATCH": "1e9"},
    )  # fmt: skip
    line = one_error(result, 9)
    assert f"patch needs 1000000000.0 GiB free under {tree.parent}" in line
    assert "ORTSTACK_MIN_FREE_GIB_PATCH" in result.stderr
    assert snapshot(tree) == before
    assert sorted(p.name for p in tree.parent.iterdir()) == ["default", "default.lock"]


@fault("cache-archive-damaged")
def test_damaged_archive_in_the_cache_is_downloaded_again(
    run_ortstack: RunOrtstack, upstream: Upstream, clean_server: LoopbackServer, tmp_path: Path, cache_dir: Path
) -> None:
    stack = archive_stack(tmp_path, upstream, url=upstream.archive_url, sha256=upstream.archive_sha256)
    assert run_ortstack("fetch", "--stack", stack, "--cache-dir", cache_dir).returncode == 0
    kept = cache_dir / "archives" / f"{upstream.archive_sha256}.tar.gz"
    damaged = bytearray(kept.read_bytes())
    damaged[len(damaged) // 2] ^= 0x01
    kept.write_bytes(bytes(damaged))
    for entry in (cache_dir / "sources").iterdir():  # the tree is gone too: it must come from the archive
        remove_tree(entry)

    clean_server.reset_counts()
    result = run_ortstack("fetch", "--stack", stack, "--cache-dir", cache_dir)
    assert result.returncode == 0, result.stderr
    assert f"{kept} no longer has sha256 {upstream.archive_sha256} (damaged in the cache)" in result.stderr
    assert clean_server.requests() == 1
    assert kept.read_bytes() == upstream.archive
    assert_tree_is(cache_dir / "sources" / upstream.commit, upstream, upstream.commit)
