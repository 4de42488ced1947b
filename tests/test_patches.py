"""The prepared tree on the miniature upstream, with real git: order, 3-way, upstreamed, conflicts, corruption."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import pytest
from filelock import FileLock

from ortstack import _git
from ortstack.errors import DiskSpaceError, LockBusyError, PatchError
from ortstack.lockfile import Lock
from ortstack.patches import patchfile, prepare
from series_kit import (
    EMPTY_WEIGHTS,
    MATMUL,
    PAGED,
    QK_NORM,
    TELEMETRY,
    TELEMETRY_SKIP,
    Project,
    commit_edits,
    extract,
    format_patch,
    snapshot,
    tree_of,
)

if TYPE_CHECKING:
    from pathlib import Path

    from ortstack.config import Stack
    from upstream import Upstream


@pytest.fixture
def project(tmp_path: Path, upstream: Upstream) -> Project:
    return Project(root=tmp_path / "project", repository=upstream.url, commit=upstream.commit)


@pytest.fixture
def source(tmp_path: Path, upstream: Upstream) -> Path:
    return extract(upstream, upstream.commit, tmp_path / "source")


def run_prepare(
    stack: Stack, source: Path, tmp_path: Path, env: dict[str, str], platform: str = "linux", *, force: bool = False
) -> prepare.Prepared:
    lock = Lock.load(stack.path.with_suffix(".lock"))
    target = prepare.tree_path(tmp_path / "work", "webgpu")
    return prepare.prepare(stack, lock, source=source, target=target, platform=platform, env=env, force=force)


def log_subjects(tree: Path, env: dict[str, str]) -> list[str]:
    return _git.out(["log", "--reverse", "--format=%s"], cwd=tree, env=env).splitlines()


def test_three_patches_apply_in_order_one_commit_each(
    upstream: Upstream, project: Project, source: Path, tmp_path: Path, base_env: dict[str, str]
) -> None:
    first = commit_edits(upstream, [EMPTY_WEIGHTS], "Accept empty packed weights", upstream.commit)
    second = upstream.add_commit(
        {"onnxruntime/contrib_ops/webgpu/qlora.cc": "// fused LoRA\n"}, "Add QLoRA", parent=first
    )
    third = commit_edits(upstream, [QK_NORM], "Normalize Q and K per head", second)
    stack = project.write(
        [
            project.entry("empty-weights", "0001-empty.patch", format_patch(upstream, first)),
            project.entry("qlora", "0002-qlora.patch", format_patch(upstream, second)),
            project.entry("qk-norm", "0003-qk-norm.patch", format_patch(upstream, third)),
        ]
    )

    prepared = run_prepare(stack, source, tmp_path, base_env)

    tree = prepared.path
    assert log_subjects(tree, base_env) == [
        f"onnxruntime {upstream.commit}",
        "Accept empty packed weights",
        "Add QLoRA",
        "Normalize Q and K per head",
    ]
    assert [o.state for o in prepared.outcomes] == ["applied", "applied", "applied"]
    commits = _git.out(["rev-list", "--reverse", "HEAD"], cwd=tree, env=base_env).split()
    assert [o.commit for o in prepared.outcomes] == commits[1:]
    # Each commit holds exactly its patch: the tree after the series is upstream's own tree.
    assert _git.out(["rev-parse", "HEAD^{tree}"], cwd=tree, env=base_env) == tree_of(upstream, third)
    assert _git.out(["rev-parse", "HEAD~2^{tree}"], cwd=tree, env=base_env) == tree_of(upstream, first)
    assert _git.out(["rev-parse", f"{prepared.base}^{{tree}}"], cwd=tree, env=base_env) == tree_of(
        upstream, upstream.commit
    )


def test_patch_repeating_an_earlier_change_merges_three_way(
    upstream: Upstream,
    project: Project,
    source: Path,
    tmp_path: Path,
    base_env: dict[str, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    split_out = commit_edits(upstream, [EMPTY_WEIGHTS], "Accept empty packed weights", upstream.commit)
    # The larger change still carries the split-out hunk, plus its own hunks in the same file and another.
    carrying = commit_edits(
        upstream,
        [
            EMPTY_WEIGHTS,
            (MATMUL, "  return n * blocks_per_column", "  // lora\n  return n * blocks_per_column"),
            QK_NORM,
        ],
        "Fuse QLoRA (still carrying empty weights)",
        upstream.commit,
    )
    stack = project.write(
        [
            project.entry("empty-weights", "0001-empty.patch", format_patch(upstream, split_out)),
            project.entry("qlora", "0002-qlora.patch", format_patch(upstream, carrying)),
        ]
    )

    prepared = run_prepare(stack, source, tmp_path, base_env)

    assert [o.state for o in prepared.outcomes] == ["applied", "applied"]
    assert "0002-qlora.patch: applied with a 3-way merge" in capsys.readouterr().err
    assert _git.out(["rev-parse", "HEAD^{tree}"], cwd=prepared.path, env=base_env) == tree_of(upstream, carrying)
    assert _git.out(["ls-files", "--unmerged"], cwd=prepared.path, env=base_env) == ""


def test_patch_already_in_base_is_reported_upstreamed_and_skipped(
    upstream: Upstream, project: Project, tmp_path: Path, base_env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    change = commit_edits(upstream, [EMPTY_WEIGHTS], "Accept empty packed weights", upstream.commit)
    later = commit_edits(upstream, [QK_NORM], "Normalize Q and K per head", upstream.commit)
    new_base = commit_edits(upstream, [EMPTY_WEIGHTS], "Upstream merged empty weights", upstream.commit)
    stack = project.write(
        [
            project.entry("empty-weights", "0001-empty.patch", format_patch(upstream, change)),
            project.entry("qk-norm", "0002-qk-norm.patch", format_patch(upstream, later)),
        ],
        commit=new_base,
    )

    prepared = run_prepare(stack, extract(upstream, new_base, tmp_path / "src"), tmp_path, base_env)

    assert [(o.id, o.state) for o in prepared.outcomes] == [("empty-weights", "upstreamed"), ("qk-norm", "applied")]
    assert log_subjects(prepared.path, base_env) == [f"onnxruntime {new_base}", "Normalize Q and K per head"]
    err = " ".join(capsys.readouterr().err.split())
    assert "patch empty-weights (patches/0001-empty.patch) is upstreamed" in err
    assert "Drop it from stack.toml" in err


def test_conflict_names_patch_file_and_hunk_and_keeps_previous_tree(
    upstream: Upstream, project: Project, source: Path, tmp_path: Path, base_env: dict[str, str]
) -> None:
    ours = commit_edits(upstream, [EMPTY_WEIGHTS], "Accept empty packed weights", upstream.commit)
    theirs = commit_edits(
        upstream,
        [(MATMUL, "  if (k <= 0 || n <= 0) {\n    return 0;", "  if (k < 0 || n < 0) {\n    return -1;")],
        "Reject negative sizes",
        upstream.commit,
    )
    good = [project.entry("empty-weights", "0001-empty.patch", format_patch(upstream, ours))]
    prepared = run_prepare(project.write(good), source, tmp_path, base_env)
    before = snapshot(prepared.path)

    stack = project.write([*good, project.entry("negative", "0002-negative.patch", format_patch(upstream, theirs))])
    with pytest.raises(PatchError) as failure:
        run_prepare(stack, source, tmp_path, base_env)

    message = failure.value.message
    assert "patch 0002-negative.patch (negative) does not apply" in message
    assert f"{MATMUL}: hunk #1 @@ -9,8 +9,8 @@ constexpr" in message
    assert snapshot(prepared.path) == before
    assert sorted(p.name for p in prepared.path.parent.iterdir()) == ["webgpu", "webgpu.failed.json", "webgpu.lock"]
    assert prepare.read_failure(prepared.path) == {
        "fingerprint": prepare.fingerprint(stack, {e.id: e.sha256 for e in stack.patches}, "linux"),
        "id": "negative",
        "state": "conflicts",
        "message": message,
    }


@pytest.mark.parametrize("damage", ["sha256", "hunk-header", "hunk-length", "outside"])
def test_corrupt_patch_is_rejected_before_anything_is_applied(
    upstream: Upstream, project: Project, source: Path, tmp_path: Path, base_env: dict[str, str], damage: str
) -> None:
    good = format_patch(upstream, commit_edits(upstream, [EMPTY_WEIGHTS], "Empty weights", upstream.commit))
    second = format_patch(upstream, commit_edits(upstream, [QK_NORM], "QK norm", upstream.commit))
    if damage == "hunk-header":
        second = re.sub(r"^(@@ -\S+ \+\S+) @@", r"\1", second, count=1, flags=re.MULTILINE)
    elif damage == "hunk-length":
        second = re.sub(r"^@@ -(\d+),(\d+) ", r"@@ -\1,40 ", second, count=1, flags=re.MULTILINE)
    elif damage == "outside":
        second = second.replace(PAGED, "../outside")
    bad = project.entry("qk-norm", "0002-qk.patch", second)
    if damage == "sha256":
        bad["sha256"] = "0" * 64
    stack = project.write([project.entry("empty", "0001-empty.patch", good), bad])

    with pytest.raises(PatchError) as failure:
        run_prepare(stack, source, tmp_path, base_env)

    expected = {
        "sha256": f"has sha256 {patchfile.sha256_hex(second.encode())}, but the series pins {'0' * 64}",
        "hunk-header": "0002-qk.patch is corrupt: broken hunk header",
        "hunk-length": "0002-qk.patch is corrupt: Hunk",
        "outside": "0002-qk.patch touches '../outside', outside the source tree",
    }[damage]
    assert expected in failure.value.message
    # Nothing was written: no prepared tree, no temporary tree, nothing outside.
    assert not prepare.tree_path(tmp_path / "work", "webgpu").exists()
    assert not (tmp_path / "work").exists()
    assert not (tmp_path / "outside").exists()


def test_platform_filter_and_guards(
    upstream: Upstream, project: Project, source: Path, tmp_path: Path, base_env: dict[str, str]
) -> None:
    skip = commit_edits(upstream, [TELEMETRY_SKIP], "Skip telemetry teardown at process exit", upstream.commit)
    entries = [
        project.entry("telemetry", "0001-telemetry.patch", format_patch(upstream, skip), platforms=["windows"]),
        {"id": "paged-kernel", "mode": "in-base", "guard": {"files": [PAGED], "patterns": [r"PagedAttentionShader\("]}},
    ]
    stack = project.write(entries)

    on_linux = run_prepare(stack, source, tmp_path, base_env)
    assert [(o.id, o.state) for o in on_linux.outcomes] == [("telemetry", "skipped"), ("paged-kernel", "in-base")]
    assert "g_enabled = false; }" in (on_linux.path / TELEMETRY).read_text()

    on_windows = run_prepare(stack, source, tmp_path, base_env, platform="windows")
    assert [o.state for o in on_windows.outcomes] == ["applied", "in-base"]
    assert on_windows.fingerprint != on_linux.fingerprint

    missing = {"id": "qk-norm", "mode": "in-base", "guard": {"files": [PAGED], "patterns": ["q_norm_weight"]}}
    with pytest.raises(PatchError, match=r"guard of patch qk-norm failed: /q_norm_weight/ not found in"):
        run_prepare(project.write([*entries, missing]), source, tmp_path, base_env, platform="windows")


def test_unchanged_tree_is_reused_and_hand_work_is_protected(
    upstream: Upstream,
    project: Project,
    source: Path,
    tmp_path: Path,
    base_env: dict[str, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    change = commit_edits(upstream, [EMPTY_WEIGHTS], "Accept empty packed weights", upstream.commit)
    stack = project.write([project.entry("empty-weights", "0001-empty.patch", format_patch(upstream, change))])
    first = run_prepare(stack, source, tmp_path, base_env)
    marker = first.path / "hand-made.txt"

    again = run_prepare(stack, source, tmp_path, base_env)
    assert again == first
    assert "is up to date" in capsys.readouterr().err

    marker.write_text("hand edit\n")
    with pytest.raises(PatchError, match=r"has uncommitted changes \(1 paths\); rebuilding it would lose them"):
        run_prepare(project.write([]), source, tmp_path, base_env)
    assert marker.exists()
    rebuilt = run_prepare(project.write([]), source, tmp_path, base_env, force=True)
    assert not marker.exists()
    assert rebuilt.outcomes == ()


def test_a_busy_prepared_tree_fails_at_once_without_waiting(
    upstream: Upstream, project: Project, source: Path, tmp_path: Path, base_env: dict[str, str]
) -> None:
    stack = project.write([])
    target = prepare.tree_path(tmp_path / "work", "webgpu")
    target.parent.mkdir(parents=True)
    with FileLock(f"{target}.lock"), pytest.raises(LockBusyError, match="another ortstack run is preparing"):
        prepare.prepare(
            stack,
            Lock.load(tmp_path / "x.lock"),
            source=source,
            target=target,
            platform="linux",
            env=base_env,
            wait=False,
        )
    assert not target.exists()


def test_too_little_disk_space_stops_before_copying(
    upstream: Upstream, project: Project, source: Path, tmp_path: Path, base_env: dict[str, str]
) -> None:
    first = run_prepare(project.write([]), source, tmp_path, base_env)
    before = snapshot(first.path)
    change = commit_edits(upstream, [EMPTY_WEIGHTS], "Accept empty packed weights", upstream.commit)
    stack = project.write([project.entry("empty-weights", "0001-empty.patch", format_patch(upstream, change))])

    with pytest.raises(DiskSpaceError, match=r"patch needs 1000000\.0 GiB free under"):
        run_prepare(stack, source, tmp_path, {**base_env, "ORTSTACK_MIN_FREE_GIB_PATCH": "1e6"})
    assert snapshot(first.path) == before
