"""A source without git: ``--source-dir`` of an extracted tarball, and archives that name no commit.

Nothing in such a tree ties it to the pin but its ``VERSION_NUMBER``: it is checked against
``[ort] version`` (or, for ``--source-dir``, the pin's tree fetched earlier into the cache), and where
nothing says the version the run says what it assumed.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
import tomllib
from typing import TYPE_CHECKING

from clirun import one_error
from upstream import stack_toml

if TYPE_CHECKING:
    from pathlib import Path

    from clirun import RunOrtstack
    from upstream import LoopbackServer, Upstream


def _extracted(upstream: Upstream, dest: Path) -> Path:
    """The pinned commit's tree as a tarball user has it: extracted, no .git."""
    with tarfile.open(fileobj=io.BytesIO(upstream.archive_of(upstream.commit))) as tar:
        tar.extractall(dest, filter="data")
    (top,) = dest.iterdir()
    return top


def _repacked(tree: Path) -> bytes:
    """``tree`` as a .tar.gz that names no commit (no pax header: a distribution's repack)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", format=tarfile.GNU_FORMAT) as tar:
        tar.add(tree, arcname=f"{tree.name}-repack")
    return buffer.getvalue()


def _stack(tmp_path: Path, upstream: Upstream, *, version: str = "", url: str = "", sha256: str = "") -> Path:
    text = stack_toml(repository=upstream.url, commit=upstream.commit, archive_url=url, archive_sha256=sha256)
    stack = tmp_path / "stack.toml"
    stack.write_text(text + (f'version = "{version}"\n' if version else ""), encoding="utf-8")
    return stack


def test_an_extracted_tarball_is_a_source_dir_recorded_as_such(
    run_ortstack: RunOrtstack, upstream: Upstream, tmp_path: Path
) -> None:
    tree = _extracted(upstream, tmp_path / "extracted")
    version = (tree / "VERSION_NUMBER").read_text(encoding="utf-8").strip()
    dirs = ("--cache-dir", tmp_path / "cache", "--work-dir", tmp_path / "work")
    plain = _stack(tmp_path, upstream)
    first = run_ortstack("fetch", "--stack", plain, *dirs, "--source-dir", tree)
    assert first.returncode == 0, first.stderr
    assert f"using onnxruntime {upstream.commit[:12]} (local archive, {tree})" in first.stderr
    assert "trust on first use" in first.stderr  # nothing said the version: kept from this first fetch
    lock = tomllib.loads(plain.with_suffix(".lock").read_text(encoding="utf-8"))
    assert lock["resolved"] == {f"VERSION_NUMBER of {upstream.commit}": version}
    status = run_ortstack("status", "--stack", plain, *dirs)
    assert f"the last run used --source-dir {tree} (an extracted source archive)" in status.stdout

    (tree / "VERSION_NUMBER").write_text("1.21.0\n", encoding="utf-8")
    line = one_error(run_ortstack("fetch", "--stack", plain, *dirs, "--source-dir", tree), 4)
    assert f"is onnxruntime 1.21.0, but the pinned commit {upstream.commit[:12]} is {version}" in line
    assert "kept in stack.lock at the first fetch" in line

    plain.with_suffix(".lock").unlink()
    stated = _stack(tmp_path, upstream, version=version)
    line = one_error(run_ortstack("fetch", "--stack", stated, *dirs, "--source-dir", tree), 4)
    assert f"is onnxruntime 1.21.0, but the pinned commit {upstream.commit[:12]} is {version}" in line
    assert "[ort] version in the stack file" in line
    (tree / "VERSION_NUMBER").write_text(f"{version}\n", encoding="utf-8")
    quiet = run_ortstack("fetch", "--stack", stated, *dirs, "--source-dir", tree)
    assert quiet.returncode == 0, quiet.stderr
    assert "trust on first use" not in quiet.stderr  # [ort] version said it, and it matched
    assert not stated.with_suffix(".lock").exists()


def test_a_source_dir_of_another_version_than_the_pins_cached_tree_is_refused(
    run_ortstack: RunOrtstack, upstream: Upstream, tmp_path: Path
) -> None:
    stack = _stack(tmp_path, upstream)
    cache = ("--cache-dir", tmp_path / "cache")
    assert run_ortstack("fetch", "--stack", stack, *cache).returncode == 0  # by git: the pin's own tree
    tree = _extracted(upstream, tmp_path / "extracted")
    (tree / "VERSION_NUMBER").write_text("1.21.0\n", encoding="utf-8")
    line = one_error(run_ortstack("fetch", "--stack", stack, *cache, "--source-dir", tree), 4)
    assert "is onnxruntime 1.21.0" in line
    assert f"the tree of {upstream.commit[:12]} fetched earlier into the cache" in line


def test_an_archive_naming_no_commit_whose_version_contradicts_the_pin_is_refused(
    run_ortstack: RunOrtstack, upstream: Upstream, clean_server: LoopbackServer, tmp_path: Path
) -> None:
    tree = _extracted(upstream, tmp_path / "extracted")
    version = (tree / "VERSION_NUMBER").read_text(encoding="utf-8").strip()
    (tree / "VERSION_NUMBER").write_text("1.21.0\n", encoding="utf-8")
    repack = _repacked(tree)
    url = clean_server.add("/repacks/onnxruntime_1.21.0.orig.tar.gz", repack)
    stack = _stack(tmp_path, upstream, version=version, url=url, sha256=hashlib.sha256(repack).hexdigest())
    cache = tmp_path / "cache"
    line = one_error(run_ortstack("fetch", "--stack", stack, "--cache-dir", cache), 4)
    assert f"{url} is onnxruntime 1.21.0, but the pinned commit {upstream.commit[:12]} is {version}" in line
    assert not list((cache / "sources").glob("*.json")), "nothing filed under the pin"
