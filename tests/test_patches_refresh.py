"""refresh-patches against GitHub-shaped endpoints and refs/pull/N/head on the loopback upstream."""

from __future__ import annotations

import difflib
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import github_like
from ortstack import _git, cli, config
from ortstack.errors import ConfigError, PatchError
from ortstack.lockfile import Lock
from ortstack.patches import patchfile, prepare, refresh
from series_kit import EMPTY_WEIGHTS, MATMUL, QK_NORM, Project, commit_edits, extract, git_out, tree_of

if TYPE_CHECKING:
    from upstream import LoopbackServer, Upstream

QLORA_HUNK = (MATMUL, "  return n * blocks_per_column", "  // lora\n  return n * blocks_per_column")


@pytest.fixture(scope="module")
def github(upstream: Upstream) -> str:
    return github_like.serve(upstream)


@pytest.fixture
def project(tmp_path: Path, upstream: Upstream, github: str, monkeypatch: pytest.MonkeyPatch) -> Project:
    # git reaches the server's repository URL through insteadOf, as a user's mirror configuration would.
    for key, value in github_like.git_redirect(upstream, {}).items():
        monkeypatch.setenv(key, value)
    return Project(root=tmp_path / "project", repository=github, commit=upstream.commit)


def refresh_cli(project: Project, tmp_path: Path, *args: str) -> int:
    return cli.main(["refresh-patches", *args, "--stack", str(project.stack_file), "--cache-dir", str(tmp_path / "c")])


def pinned(project: Project) -> list[dict[str, object]]:
    entries: list[dict[str, object]] = tomllib.loads(project.stack_file.read_text())["patch"]
    return entries


def pr_entry(github: str, number: int, patch_id: str, name: str, **origin: str) -> dict[str, object]:
    return {
        "id": patch_id,
        "file": f"patches/{name}",
        "origin": {"kind": "pr", "repository": github, "pr": number, **origin},
    }


def test_refresh_from_pull_ref_writes_file_and_pins_its_sha256(
    upstream: Upstream, project: Project, github: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = upstream.file_at(upstream.commit, MATMUL).decode() + "\n"
    head = upstream.add_pull_request(101, {MATMUL: text.replace(EMPTY_WEIGHTS[1], EMPTY_WEIGHTS[2])}, "Empty weights")
    project.write([pr_entry(github, 101, "empty-weights", "0001-empty-weights.patch")])
    (project.root / "stack.toml").write_text("# the series\n" + project.stack_file.read_text())

    assert refresh_cli(project, tmp_path, "--via", "git") == 0
    assert "ok: 1 entries pinned in stack.toml" in capsys.readouterr().err

    vendored = project.root / "patches" / "0001-empty-weights.patch"
    data = vendored.read_bytes()
    entry = pinned(project)[0]
    assert entry["sha256"] == patchfile.sha256_hex(data)
    assert entry["origin"] == {"kind": "pr", "repository": github, "pr": 101, "head": head}
    assert project.stack_file.read_text().startswith("# the series\n")
    parsed = patchfile.split(data.decode(), vendored.name)
    assert parsed.header.fields["Origin"] == f"upstream, {github}/pull/101, commit {head}"
    assert parsed.header.fields["Bug"] == f"{github}/pull/101"
    # Full blob ids, which git apply --3way needs to find pre-images.
    assert [len(line.split()[1]) for line in parsed.diff.splitlines() if line.startswith("index ")] == [82]


def test_http_and_git_transports_vendor_the_same_bytes(
    upstream: Upstream, project: Project, github: str, tmp_path: Path, clean_server: LoopbackServer
) -> None:
    text = upstream.file_at(upstream.commit, MATMUL).decode() + "\n"
    upstream.add_pull_request(102, {MATMUL: text.replace(EMPTY_WEIGHTS[1], EMPTY_WEIGHTS[2])}, "Empty weights")
    project.write([pr_entry(github, 102, "empty-weights", "0001-empty-weights.patch")])

    assert refresh_cli(project, tmp_path) == 0
    by_http = (project.root / "patches" / "0001-empty-weights.patch").read_bytes()
    assert clean_server.requests("/microsoft/onnxruntime/pull/102.diff") == 1

    project.write([pr_entry(github, 102, "empty-weights", "0001-empty-weights.patch")])
    (project.root / "patches" / "0001-empty-weights.patch").unlink()
    assert refresh_cli(project, tmp_path, "--via", "git") == 0
    assert (project.root / "patches" / "0001-empty-weights.patch").read_bytes() == by_http


def test_pr_still_carrying_a_split_out_change_merges_cleanly(
    upstream: Upstream,
    project: Project,
    github: str,
    tmp_path: Path,
    base_env: dict[str, str],
    clean_server: LoopbackServer,
) -> None:
    split_out = commit_edits(upstream, [EMPTY_WEIGHTS], "Accept empty packed weights", upstream.commit)
    carrying = commit_edits(upstream, [EMPTY_WEIGHTS, QLORA_HUNK, QK_NORM], "Fuse QLoRA", upstream.commit)
    for number, commit in ((201, split_out), (202, carrying)):
        git_out(upstream, "push", "--quiet", upstream.url, f"{commit}:refs/pull/{number}/head")
    project.write(
        [
            pr_entry(github, 201, "empty-weights", "0001-empty-weights.patch", head=split_out),
            pr_entry(github, 202, "qlora", "0002-qlora.patch", head=carrying),
        ]
    )

    assert refresh_cli(project, tmp_path) == 0
    # Pinned heads are taken through /compare/main...HEAD, never the PR's moving /pull/N.diff.
    assert clean_server.requests(f"/microsoft/onnxruntime/compare/main...{carrying}.diff") == 1
    assert clean_server.requests("/microsoft/onnxruntime/pull/202.diff") == 0

    stack = config.load(project.stack_file)
    lock = Lock.load(project.stack_file.with_suffix(".lock"))
    source = extract(upstream, upstream.commit, tmp_path / "source")
    target = prepare.tree_path(tmp_path / "work", "webgpu")
    prepared = prepare.prepare(stack, lock, source=source, target=target, platform="linux", env=base_env)
    assert [o.state for o in prepared.outcomes] == ["applied", "applied"]
    assert _git.out(["rev-parse", "HEAD^{tree}"], cwd=target, env=base_env) == tree_of(upstream, carrying)

    # Refreshing an unchanged pin rewrites nothing: same bytes, same digest.
    before = [p.read_bytes() for p in sorted((project.root / "patches").iterdir())]
    assert refresh_cli(project, tmp_path) == 0
    assert [p.read_bytes() for p in sorted((project.root / "patches").iterdir())] == before


def test_commit_and_compare_origins_short_head_resolved(
    upstream: Upstream, project: Project, github: str, tmp_path: Path, clean_server: LoopbackServer
) -> None:
    commit = commit_edits(upstream, [QK_NORM], "Normalize Q and K per head", upstream.commit)
    git_out(upstream, "push", "--quiet", upstream.url, f"{commit}:refs/heads/qk-norm")
    project.write(
        [
            {
                "id": "qk",
                "file": "patches/0001-qk.patch",
                "origin": {"kind": "commit", "repository": github, "head": commit[:10]},
            },
            {
                "id": "qk-range",
                "file": "patches/0002-qk-range.patch",
                "origin": {"kind": "compare", "repository": github, "base": upstream.commit, "head": commit},
            },
        ]
    )

    assert refresh_cli(project, tmp_path) == 0

    entries = pinned(project)
    assert [e["origin"]["head"] for e in entries] == [commit, commit]  # type: ignore[index]
    assert clean_server.requests(f"/microsoft/onnxruntime/commit/{commit[:10]}.patch") == 1
    assert clean_server.requests(f"/microsoft/onnxruntime/commit/{commit}.diff") == 1
    assert clean_server.requests(f"/microsoft/onnxruntime/compare/{upstream.commit}...{commit}.diff") == 1
    first, second = (patchfile.split(p.read_text(), p.name) for p in sorted((project.root / "patches").iterdir()))
    assert first.diff == second.diff


def test_update_moves_a_pr_to_its_current_head(
    upstream: Upstream, project: Project, github: str, tmp_path: Path
) -> None:
    first = commit_edits(upstream, [EMPTY_WEIGHTS], "Empty weights", upstream.commit)
    git_out(upstream, "push", "--quiet", upstream.url, f"{first}:refs/pull/301/head")
    project.write([pr_entry(github, 301, "empty-weights", "0001-empty-weights.patch")])
    assert refresh_cli(project, tmp_path, "--via", "git") == 0
    pinned_sha = pinned(project)[0]["sha256"]

    second = commit_edits(upstream, [QK_NORM], "Also QK norm", first)
    git_out(upstream, "push", "--quiet", upstream.url, f"{second}:refs/pull/301/head")
    assert refresh_cli(project, tmp_path, "--via", "git") == 0
    assert pinned(project)[0]["sha256"] == pinned_sha  # the pin holds while the PR moves

    assert refresh_cli(project, tmp_path, "--update") == 0
    entry = pinned(project)[0]
    assert entry["origin"]["head"] == second  # type: ignore[index]
    assert entry["sha256"] != pinned_sha


def test_build_vendors_missing_patch_once_and_locked_refuses(
    upstream: Upstream,
    project: Project,
    github: str,
    tmp_path: Path,
    base_env: dict[str, str],
    clean_server: LoopbackServer,
) -> None:
    head = commit_edits(upstream, [EMPTY_WEIGHTS], "Empty weights", upstream.commit)
    git_out(upstream, "push", "--quiet", upstream.url, f"{head}:refs/pull/401/head")
    stack = project.write([pr_entry(github, 401, "empty-weights", "0001-empty-weights.patch")])
    env = github_like.git_redirect(upstream, base_env)
    lock_file = project.stack_file.with_suffix(".lock")

    with pytest.raises(PatchError, match=r"is not vendored .* --locked forbids downloading it"):
        refresh.vendor_missing(
            stack, Lock.load(lock_file, locked=True), platform="linux", env=env, cache_dir=tmp_path / "c"
        )
    assert not (project.root / "patches").exists()

    refresh.vendor_missing(stack, Lock.load(lock_file), platform="linux", env=env, cache_dir=tmp_path / "c")
    data = (project.root / "patches" / "0001-empty-weights.patch").read_bytes()
    lock = Lock.load(lock_file, locked=True)
    assert lock.get("patch.empty-weights.sha256") == patchfile.sha256_hex(data)
    assert lock.get("patch.empty-weights.head") == head
    assert "sha256" not in pinned(project)[0]  # a build records in the lock, never in stack.toml

    clean_server.reset_counts()
    refresh.vendor_missing(
        stack, lock, platform="linux", env=env, cache_dir=tmp_path / "c"
    )  # vendored now: no download
    assert clean_server.requests() == 0
    (project.root / "patches" / "0001-empty-weights.patch").write_bytes(data + b"\n")
    with pytest.raises(PatchError, match=r"has sha256 .* but the series pins"):
        prepare.prepare(
            stack,
            lock,
            source=extract(upstream, upstream.commit, tmp_path / "src"),
            target=tmp_path / "work" / "prepared" / "x",
            platform="linux",
            env=base_env,
        )
    with pytest.raises(ConfigError):
        lock.resolve("patch.empty-weights.sha256", "f" * 64, what="a changed digest")


def test_recording_pins_edits_the_pull_request_stack_minimally(tmp_path: Path) -> None:
    original = (Path(__file__).parents[1] / "stacks" / "pr-06f88ea6" / "stack.toml").read_text()
    copy = tmp_path / "stack.toml"
    copy.write_text(original)
    pins = {"matmulnbits-qlora": {"sha256": "a" * 64, "head": "507021fd21" + "0" * 30}}

    refresh.record_in_stack(config.load(copy), pins)

    changed = [
        line for line in difflib.ndiff(original.splitlines(), copy.read_text().splitlines()) if line[:2] in ("- ", "+ ")
    ]
    origin = 'origin = { kind = "pr", repository = "https://github.com/microsoft/onnxruntime", pr = 33370, head = '
    assert changed == [
        f'- {origin}"507021fd21" }}',
        f'+ {origin}"507021fd21{"0" * 30}" }}',
        f'+ sha256 = "{"a" * 64}"',
    ]
    entry = config.load(copy).patches[2]
    assert (entry.sha256, entry.origin.head) == ("a" * 64, "507021fd21" + "0" * 30)


def test_one_failing_entry_does_not_lose_the_others(
    upstream: Upstream, project: Project, github: str, tmp_path: Path
) -> None:
    head = commit_edits(upstream, [EMPTY_WEIGHTS], "Empty weights", upstream.commit)
    git_out(upstream, "push", "--quiet", upstream.url, f"{head}:refs/pull/501/head")
    headless = {"id": "telemetry", "file": "patches/0002-t.patch", "origin": {"kind": "commit", "repository": github}}
    project.write([pr_entry(github, 501, "empty-weights", "0001-empty-weights.patch"), headless])

    assert refresh_cli(project, tmp_path) == 5

    first, second = pinned(project)
    assert first["origin"]["head"] == head  # type: ignore[index]
    assert first["sha256"] == patchfile.sha256_hex((project.root / "patches" / "0001-empty-weights.patch").read_bytes())
    assert "sha256" not in second

    # --rehash records the digest of a file edited by hand.
    edited = project.root / "patches" / "0001-empty-weights.patch"
    edited.write_bytes(edited.read_bytes().replace(b"Forwarded: not-needed", b"Forwarded: yes"))
    assert refresh_cli(project, tmp_path, "--rehash") == 0
    assert pinned(project)[0]["sha256"] == patchfile.sha256_hex(edited.read_bytes())


def test_a_diff_without_full_blob_ids_is_refused(
    upstream: Upstream, project: Project, github: str, tmp_path: Path
) -> None:
    head = commit_edits(upstream, [EMPTY_WEIGHTS], "Empty weights", upstream.commit)
    git_out(upstream, "push", "--quiet", upstream.url, f"{head}:refs/pull/601/head")
    # A server that ignores full_index=1 and answers with short blob ids.
    upstream.server.add(
        "/microsoft/onnxruntime/pull/601.diff", git_out(upstream, "diff", f"{upstream.commit}...{head}").encode()
    )
    project.write([pr_entry(github, 601, "empty-weights", "0001-empty-weights.patch")])

    assert refresh_cli(project, tmp_path) == 5
    assert not (project.root / "patches").exists()
    assert refresh_cli(project, tmp_path, "--via", "git") == 0


def test_first_networked_patch_run_vendors_loudly_and_locks(
    upstream: Upstream,
    project: Project,
    github: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    base_env: dict[str, str],
) -> None:
    head = commit_edits(upstream, [EMPTY_WEIGHTS], "Empty weights", upstream.commit)
    git_out(upstream, "push", "--quiet", upstream.url, f"{head}:refs/pull/701/head")
    project.write([pr_entry(github, 701, "empty-weights", "0001-empty-weights.patch")])
    stack_text = project.stack_file.read_text()
    dirs = ["--stack", str(project.stack_file), "--cache-dir", str(tmp_path / "c"), "--work-dir", str(tmp_path / "w")]

    assert cli.main(["patch", "--platform", "linux", *dirs]) == 0

    err = " ".join(capsys.readouterr().err.split())
    assert "patch empty-weights is not vendored: downloading it once from" in err
    assert "trust on first use: sha256 of patches/0001-empty-weights.patch" in err
    lock = Lock.load(project.stack_file.with_suffix(".lock"))
    data = (project.root / "patches" / "0001-empty-weights.patch").read_bytes()
    assert lock.values == {"patch.empty-weights.head": head, "patch.empty-weights.sha256": patchfile.sha256_hex(data)}
    assert project.stack_file.read_text() == stack_text
    tree = tmp_path / "w" / "prepared" / "default"
    assert _git.out(["log", "-1", "--format=%s"], cwd=tree, env=base_env) == "empty-weights"

    # Later runs, --locked ones too, use the vendored file and download nothing.
    upstream.server.reset_counts()
    assert cli.main(["patch", "--platform", "linux", "--locked", *dirs]) == 0
    assert upstream.server.requests() == 0
