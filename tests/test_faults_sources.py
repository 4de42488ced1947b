"""Sources that are not a source tree, archives that expand without end, and what the cache keeps of them.

Each refused archive leaves the cache as it was (the good tree of the upstream stays), keeps no copy
of itself under any digest, and records nothing in ``stack.lock``.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import random
import tarfile
import zlib
from typing import TYPE_CHECKING

import pytest

from clirun import RunOrtstack, one_error
from faultkit import fault, patch_args
from test_fetch import archive_stack, assert_intact, git_stack, good_cache
from upstream import git

if TYPE_CHECKING:
    from pathlib import Path

    from series_kit import Project
    from upstream import LoopbackServer, Upstream

pytestmark = pytest.mark.network

TOP = "onnxruntime-x"
GIB = 1024**3


def tar_of(members: dict[str, bytes | None]) -> bytes:
    """A .tar.gz of ``members`` (name -> bytes; ``None`` makes a folder)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def zero_bomb(size: int) -> bytes:
    """A .tar.gz of one file of ``size`` zero bytes, compressed as far as deflate goes (about 1:1000)."""
    header = tarfile.TarInfo(f"{TOP}/zeros")
    header.size = size
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)  # gzip framing
    chunk = bytes(2**20)
    parts = [packer.compress(header.tobuf())]
    parts += [packer.compress(chunk) for _ in range(size // len(chunk))]
    return b"".join([*parts, packer.flush()])


NOT_A_TREE = "is not an onnxruntime source tree: VERSION_NUMBER, cmake/CMakeLists.txt missing at its root"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        pytest.param(
            bytes(random.Random(13).randrange(256) for _ in range(8192)),
            "is truncated or corrupt (",
            marks=fault("archive-corrupt-pinned"),
            id="corrupt",
        ),
        pytest.param(tar_of({}), "holds no files", marks=fault("archive-empty-tar"), id="empty"),
        pytest.param(tar_of({f"{TOP}/": None}), "holds no files", marks=fault("archive-only-top-folder"), id="top"),
        pytest.param(gzip.compress(bytes(10240)), "holds no files", marks=fault("archive-gzip-of-zeros"), id="zeros"),
        pytest.param(
            tar_of({f"{TOP}/README.md": b"# something else\n"}),
            NOT_A_TREE,
            marks=fault("archive-not-onnxruntime"),
            id="other-project",
        ),
    ],
)
@pytest.mark.parametrize("pinned", [True, False], ids=["pinned", "first-use"])
def test_archive_that_is_not_a_source_tree_is_refused_and_dropped(
    data: bytes,
    message: str,
    pinned: bool,  # noqa: FBT001 - a parameter
    run_ortstack: RunOrtstack,
    upstream: Upstream,
    clean_server: LoopbackServer,
    tmp_path: Path,
    cache_dir: Path,
    base_env: dict[str, str],
) -> None:
    before = good_cache(cache_dir, tmp_path, upstream, base_env)
    digest = hashlib.sha256(data).hexdigest()
    url = clean_server.add(f"/not-a-tree/{digest[:12]}.tar.gz", data)
    pinned_commit = "d" * 40
    stack = archive_stack(tmp_path, upstream, url=url, sha256=digest if pinned else "", commit=pinned_commit)

    line = one_error(run_ortstack("fetch", "--stack", stack, "--cache-dir", cache_dir), 4)
    assert line.startswith(f"ortstack: error: {url} ")
    assert message in line
    assert_intact(cache_dir, before)
    assert not [p.name for p in (cache_dir / "archives").iterdir()]  # no copy kept, under any digest
    assert not (cache_dir / "sources" / pinned_commit).exists()
    assert not stack.with_suffix(".lock").exists()  # nothing trusted on first use
    # The next run is refused the same way: nothing of the first one is reused.
    assert one_error(run_ortstack("fetch", "--stack", stack, "--cache-dir", cache_dir), 4) == line


@fault("archive-bomb-ratio")
def test_small_archive_expanding_to_a_gibibyte_is_refused_before_writing(
    run_ortstack: RunOrtstack, upstream: Upstream, clean_server: LoopbackServer, tmp_path: Path, cache_dir: Path
) -> None:
    bomb = zero_bomb(GIB)
    assert len(bomb) < 1.1 * 2**20  # about 1 MB
    digest = hashlib.sha256(bomb).hexdigest()
    url = clean_server.add("/bomb/onnxruntime.tar.gz", bomb)
    stack = archive_stack(tmp_path, upstream, url=url, sha256=digest, commit="b" * 40)
    line = one_error(run_ortstack("fetch", "--stack", stack, "--cache-dir", cache_dir), 4)
    assert f"{url} expands to more than 100 times its 1.0 MiB (reached at '{TOP}/zeros')" in line
    written = sum(p.stat().st_size for p in cache_dir.rglob("*") if p.is_file())
    assert written < 2 * 2**20  # the download, then nothing: it was never extracted
    assert not (cache_dir / "archives" / f"{digest}.tar.gz").exists()


@fault("archive-bomb-size")
def test_archive_larger_than_the_configured_limit_is_refused(
    run_ortstack: RunOrtstack, upstream: Upstream, clean_server: LoopbackServer, tmp_path: Path, cache_dir: Path
) -> None:
    noise = random.Random(6).randbytes(3 * 2**20)  # does not compress: only the size limit can stop it
    data = tar_of({f"{TOP}/VERSION_NUMBER": b"1.31.0\n", f"{TOP}/noise.bin": noise})
    url = clean_server.add("/large/onnxruntime.tar.gz", data)
    stack = archive_stack(tmp_path, upstream, url=url, sha256=hashlib.sha256(data).hexdigest(), commit="a" * 40)
    args = ("fetch", "--stack", stack, "--cache-dir", cache_dir)
    result = run_ortstack(*args, env={"ORTSTACK_ARCHIVE_MAX_MIB": "2"})
    line = one_error(result, 4)
    assert f"{url} expands to more than 2 MiB (reached at '{TOP}/noise.bin')" in line
    assert "ORTSTACK_ARCHIVE_MAX_MIB" in result.stderr
    assert not (cache_dir / "sources" / ("a" * 40)).exists()
    assert not list((cache_dir / "archives").iterdir())

    bad = one_error(run_ortstack(*args, env={"ORTSTACK_ARCHIVE_MAX_RATIO": "lots"}), 3)
    assert "ORTSTACK_ARCHIVE_MAX_RATIO='lots' is not a positive number" in bad
    assert run_ortstack(*args, env={"ORTSTACK_ARCHIVE_MAX_MIB": "8"}).returncode == 4  # fetched, then: no cmake/


@fault("source-dir-not-onnxruntime")
def test_checkout_that_is_not_onnxruntime_is_refused(
    run_ortstack: RunOrtstack, upstream: Upstream, tmp_path: Path, base_env: dict[str, str]
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "README.md").write_text("another project\n")
    env = {**base_env, "GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@example.invalid"}
    env |= {"GIT_COMMITTER_NAME": "a", "GIT_COMMITTER_EMAIL": "a@example.invalid"}
    git("init", "--quiet", cwd=other, env=env)
    git("add", ".", cwd=other, env=env)
    git("commit", "--quiet", "-m", "other", cwd=other, env=env)
    commit = git("rev-parse", "HEAD", cwd=other, env=env)
    stack = git_stack(tmp_path, upstream, commit=commit)
    result = run_ortstack("fetch", "--stack", stack, "--cache-dir", tmp_path / "cache", "--source-dir", other)
    line = one_error(result, 4)
    assert line == f"ortstack: error: --source-dir {other} {NOT_A_TREE}"
    assert "tip: pass the folder of an onnxruntime checkout" in result.stderr


@fault("status-after-source-dir")
def test_status_after_a_source_dir_run_says_where_the_source_came_from(
    run_ortstack: RunOrtstack, upstream: Upstream, project: Project, tmp_path: Path, base_env: dict[str, str]
) -> None:
    checkout = tmp_path / "checkout"
    git("clone", "--quiet", upstream.url, str(checkout), cwd=tmp_path, env=base_env)
    project.write([])
    patched = run_ortstack(*patch_args(project, tmp_path), "--source-dir", checkout)
    assert patched.returncode == 0, patched.stderr
    status = run_ortstack(
        "status", "--stack", project.stack_file, "--cache-dir", tmp_path / "cache", "--work-dir", tmp_path / "work"
    )
    assert status.returncode == 0, status.stderr
    assert "fetched by git" not in status.stdout
    assert "not fetched" not in status.stdout
    assert status.stdout.count(f"the last run used --source-dir {checkout}") == 2  # pin and cache sections
