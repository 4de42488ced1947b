"""Untrusted values and inputs that cost without bound: each refused with one line naming the input.

A value read from ``stack.lock`` or a wheel is checked for its shape before it is used; a stack
file, lock file, build info or download is read no further than its bound; a name from a user file
reaches the terminal with its control characters escaped.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import struct
import time
import zipfile
from typing import TYPE_CHECKING

import pytest

from clirun import RunOrtstack, errors_and_tips, one_error
from faultkit import fault, patch_args
from ortstack.build.buildinfo import BUILD_INFO_NAME, BuildInfo, PatchInfo
from ortstack.suites import venv
from series_kit import EMPTY_WEIGHTS, commit_edits, format_patch
from test_faults_patches import new_link
from test_fetch import archive_stack, assert_intact, git_stack, good_cache
from upstream import git

if TYPE_CHECKING:
    from pathlib import Path

    from series_kit import Project
    from upstream import LoopbackServer, Upstream

pytestmark = pytest.mark.network

COMMIT = "c971ca2f8a1b2c3d4e5f60718293a4b5c6d7e8f9"
HEAD = f'[ort]\nrepository = "https://example.invalid/ort"\ncommit = "{COMMIT}"\n'


def fetch(run_ortstack: RunOrtstack, stack: Path, cache: Path, **env: str) -> str:
    """``ortstack fetch`` of ``stack`` refused with a configuration error: its one line."""
    return one_error(run_ortstack("fetch", "--stack", stack, "--cache-dir", cache, env=env), 3)


def write_stack(tmp_path: Path, text: str) -> Path:
    stack = tmp_path / "stack.toml"
    stack.write_text(text, encoding="utf-8")
    return stack


# --------------------------------------------------------------------------------------------------
# The lock file.


@fault("lock-digest-path")
def test_a_lock_digest_that_is_a_path_deletes_nothing(
    run_ortstack: RunOrtstack, upstream: Upstream, clean_server: LoopbackServer, tmp_path: Path
) -> None:
    victim = tmp_path / "victim.tar.gz"
    victim.write_bytes(b"not the cache's to delete\n")
    url = clean_server.add("/tampered/onnxruntime.tar.gz", upstream.archive)
    stack = archive_stack(tmp_path, upstream, url=url, commit="d" * 40)
    cache = tmp_path / "cache"
    # archives/<digest>.tar.gz with this digest is the victim.
    digest = os.path.relpath(tmp_path / "victim", cache / "archives")
    stack.with_suffix(".lock").write_text(f"[resolved]\n{json.dumps(url)} = {json.dumps(digest)}\n")

    line = fetch(run_ortstack, stack, cache)
    assert line == (f"ortstack: error: {stack.with_suffix('.lock')}: {url!r} must be a 64-hex sha256, got {digest!r}")
    assert victim.read_bytes() == b"not the cache's to delete\n"
    assert clean_server.requests() == 0


@fault("lock-version-path")
def test_a_locked_version_that_is_a_path_is_refused(
    run_ortstack: RunOrtstack, upstream: Upstream, tmp_path: Path
) -> None:
    stack = archive_stack(tmp_path, upstream, url=upstream.archive_url, commit="d" * 40)
    key = f"VERSION_NUMBER of {'d' * 40}"
    stack.with_suffix(".lock").write_text(f'[resolved]\n"{key}" = "../../1.31.0"\n')

    line = fetch(run_ortstack, stack, tmp_path / "cache")
    lock = stack.with_suffix(".lock")
    assert line == f"ortstack: error: {lock}: {key!r} must be a version such as 1.30.0, got '../../1.31.0'"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param(b"[resolved]\n\xff\xfe = 1\n", "not UTF-8 text", marks=fault("lock-not-utf8"), id="not-utf8"),
        pytest.param(
            b"[resolved]\nx = " + b"[" * 50_000 + b"]" * 50_000 + b"\n",
            "arrays or tables nest more than 32 deep",
            marks=fault("lock-nested-deep"),
            id="nested",
        ),
        pytest.param(None, "cannot read the lock file", marks=fault("lock-is-folder"), id="folder"),
    ],
)
def test_a_lock_file_that_cannot_be_one_is_one_line(
    run_ortstack: RunOrtstack, upstream: Upstream, tmp_path: Path, content: bytes | None, message: str
) -> None:
    stack = git_stack(tmp_path, upstream)
    lock = stack.with_suffix(".lock")
    if content is None:
        lock.mkdir()
    else:
        lock.write_bytes(content)
    line = fetch(run_ortstack, stack, tmp_path / "cache")
    assert line.startswith(f"ortstack: error: {lock}")
    assert message in line
    assert not (tmp_path / "cache" / "sources").exists()


@fault("lock-too-large")
def test_a_lock_file_over_its_bound_is_not_read(run_ortstack: RunOrtstack, upstream: Upstream, tmp_path: Path) -> None:
    stack = git_stack(tmp_path, upstream)
    stack.with_suffix(".lock").write_text("# padding\n" * 300 + "[resolved]\n")
    line = fetch(run_ortstack, stack, tmp_path / "cache", ORTSTACK_LOCK_FILE_MAX_MIB="0.001")
    assert (
        line
        == f"ortstack: error: {stack.with_suffix('.lock')} is larger than 0.001 MiB: not a lock file ortstack wrote"
    )


# --------------------------------------------------------------------------------------------------
# The stack file.


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("[" * 50_000 + "]" * 50_000, marks=fault("config-nested-arrays"), id="arrays"),
        pytest.param("{ a = " * 20_000 + "1" + " }" * 20_000, marks=fault("config-nested-inline-tables"), id="tables"),
    ],
)
def test_a_stack_file_nested_without_end_is_one_line(run_ortstack: RunOrtstack, tmp_path: Path, value: str) -> None:
    stack = write_stack(tmp_path, f"{HEAD}deep = {value}\n")
    line = fetch(run_ortstack, stack, tmp_path / "cache")
    assert line == f"ortstack: error: {stack}: arrays or tables nest more than 32 deep: not a stack file"


@pytest.mark.parametrize(
    ("text", "where"),
    [
        pytest.param(
            f'[ort]\nrepository = "https://example.invalid/o\\u0000rt"\ncommit = "{COMMIT}"\n',
            ":2: ort.repository",
            marks=fault("config-nul-repository"),
            id="repository",
        ),
        pytest.param(
            f'{HEAD}\n[deps.abseil_cpp]\nsource_dir = "../abseil\\u0000"\n',
            ":6: deps.abseil_cpp.source_dir",
            marks=fault("config-nul-source-dir"),
            id="source-dir",
        ),
    ],
)
def test_a_nul_in_a_value_is_refused_where_it_is_written(
    run_ortstack: RunOrtstack, tmp_path: Path, text: str, where: str
) -> None:
    stack = write_stack(tmp_path, text)
    line = fetch(run_ortstack, stack, tmp_path / "cache")
    assert line == f"ortstack: error: {stack}{where}: holds a NUL character (\\u0000)"


@fault("config-unknown-keys-linear")
def test_twenty_thousand_unknown_keys_are_refused_at_once(run_ortstack: RunOrtstack, tmp_path: Path) -> None:
    keys = "".join(f"unknown_key_{i} = {i}\n" for i in range(20_000))
    stack = write_stack(tmp_path, HEAD + keys)
    start = time.monotonic()
    result = run_ortstack("fetch", "--stack", stack, "--cache-dir", tmp_path / "cache")
    elapsed = time.monotonic() - start
    problems = errors_and_tips(result, 3)
    # Validation is linear in the file: seconds on a shared machine (it once grew as the square of the keys).
    assert elapsed < 60, elapsed
    assert problems[0] == (
        f"ortstack: error: {stack}:4: ort.unknown_key_0: unknown key",
        "tip: valid keys here: repository, commit, archive_url, archive_sha256, version",
    )
    assert len(problems) == 51
    assert problems[-1] == (
        f"ortstack: error: {stack}: 19950 more problems",
        "tip: fix the problems above and run again to see the rest",
    )


@fault("config-two-problems-one-table")
def test_two_problems_in_one_patch_table_are_both_reported(run_ortstack: RunOrtstack, tmp_path: Path) -> None:
    text = f'{HEAD}\n[[patch]]\nid = "a"\nfile = "patches/0001-a.patch"\nsha256 = "xyz"\nplatforms = ["beos"]\n'
    stack = write_stack(tmp_path, text)
    problems = errors_and_tips(run_ortstack("fetch", "--stack", stack, "--cache-dir", tmp_path / "cache"), 3)
    assert [line for line, _ in problems] == [
        f"ortstack: error: {stack}:8: patch[0].sha256: must be a full 64-hex sha256, got 'xyz'",
        f"ortstack: error: {stack}:9: patch[0].platforms: unknown platform 'beos'",
    ]


@pytest.mark.parametrize(
    ("table", "line"),
    [
        pytest.param(
            '[variant."../../escaped"]\nkind = "webgpu"\n',
            "5: variant.'../../escaped': is not a plain name",
            marks=fault("config-variant-path"),
            id="variant",
        ),
        pytest.param(
            '[[patch]]\nid = "a"\nmode = "in-base"\nguard = { files = ["../../etc/passwd"] }\n',
            "8: patch[0].guard: file '../../etc/passwd' is not a path inside the source tree",
            marks=fault("config-guard-outside"),
            id="guard-file",
        ),
        pytest.param(
            '[[patch]]\nid = "a"\nmode = "in-base"\nguard = { files = ["VERSION_NUMBER"], patterns = ["f("] }\n',
            "8: patch[0].guard: pattern 'f(' is not a regular expression: "
            "missing ), unterminated subpattern at position 1",
            marks=fault("config-guard-regex"),
            id="guard-regex",
        ),
    ],
)
def test_a_name_or_pattern_used_as_a_path_or_regex_is_checked_first(
    run_ortstack: RunOrtstack, tmp_path: Path, table: str, line: str
) -> None:
    stack = write_stack(tmp_path, f"{HEAD}\n{table}")
    assert fetch(run_ortstack, stack, tmp_path / "cache") == f"ortstack: error: {stack}:{line}"
    assert not (tmp_path.parent / "escaped").exists()


@fault("config-too-large")
def test_a_stack_file_over_its_bound_is_not_read(run_ortstack: RunOrtstack, upstream: Upstream, tmp_path: Path) -> None:
    stack = git_stack(tmp_path, upstream)
    stack.write_text(stack.read_text() + "# padding\n" * 300)
    line = fetch(run_ortstack, stack, tmp_path / "cache", ORTSTACK_STACK_FILE_MAX_MIB="0.001")
    assert line == f"ortstack: error: {stack} is larger than 0.001 MiB: not a stack file"
    assert not (tmp_path / "cache" / "sources").exists()


@fault("name-escape-sequence")
def test_a_patch_id_cannot_drive_the_terminal(run_ortstack: RunOrtstack, tmp_path: Path) -> None:
    evil = "\\u001b]0;pwned\\u0007\\u001b[2J"
    stack = write_stack(tmp_path, f'{HEAD}\n[[patch]]\nid = "x{evil}"\nfile = "patches/0001-x.patch"\n')
    result = run_ortstack("status", "--stack", stack, "--cache-dir", tmp_path / "cache")
    assert result.returncode == 0, result.stderr
    assert "\x1b" not in result.stderr + result.stdout
    assert "\x07" not in result.stderr + result.stdout
    assert "x\\x1b]0;pwned\\x07\\x1b[2J" in result.stderr


# --------------------------------------------------------------------------------------------------
# A wheel's build info, read by `ortstack inspect`.

GOOD_INFO = BuildInfo(
    ort_version="1.21.0",
    ort_commit=COMMIT,
    tree_commit=COMMIT,
    dawn_revision="",
    patches=(PatchInfo(id="a", sha256="0" * 64),),
    variant="webgpu",
    kind="webgpu",
    wheel_name="onnxruntime-webgpu",
    version="1.21.0+stack.0",
    cmake_options={},
    compiler="c++ 1",
    platform="linux",
    date="2026-01-01T00:00:00+00:00",
)
GOOD_JSON = GOOD_INFO.to_json().encode()
MEMBER = f"onnxruntime/{BUILD_INFO_NAME}"
DEFLATE64 = 9
"""A zip compression method Python's zipfile cannot read."""


def wheel_with(
    tmp_path: Path, data: bytes, *, mode: int = stat.S_IFREG | 0o644, flags: int = 0, method: int = 0
) -> Path:
    """A one-member wheel holding ``data`` as its build info; ``flags`` and ``method`` patched into its headers."""
    wheel = tmp_path / "onnxruntime_webgpu-1.21.0-py3-none-any.whl"
    info = zipfile.ZipInfo(MEMBER, date_time=(2026, 1, 1, 0, 0, 0))
    info.external_attr = mode << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    with zipfile.ZipFile(wheel, "w") as bundle:
        bundle.writestr(info, data)
    raw = bytearray(wheel.read_bytes())
    local, central = raw.index(b"PK\x03\x04"), raw.index(b"PK\x01\x02")
    for flag_at, method_at in ((local + 6, local + 8), (central + 8, central + 10)):
        raw[flag_at : flag_at + 2] = struct.pack("<H", struct.unpack("<H", raw[flag_at : flag_at + 2])[0] | flags)
        if method:
            raw[method_at : method_at + 2] = struct.pack("<H", method)
    wheel.write_bytes(bytes(raw))
    return wheel


@pytest.mark.parametrize(
    ("shape", "message"),
    [
        pytest.param(
            {"data": b'{"ort_version": "\xff"}'}, "not UTF-8 text", marks=fault("buildinfo-not-utf8"), id="utf8"
        ),
        pytest.param({"data": b"ort_version = 1"}, "not JSON (", marks=fault("buildinfo-not-json"), id="not-json"),
        pytest.param({"data": b"[1, 2]"}, "a JSON array, not an object", marks=fault("buildinfo-json-list"), id="list"),
        pytest.param(
            {"data": json.dumps({**json.loads(GOOD_JSON), "evil": 1}).encode()},
            "unknown key 'evil'",
            marks=fault("buildinfo-unknown-key"),
            id="unknown-key",
        ),
        pytest.param(
            {"data": b"[" * 100_000 + b"]" * 100_000},
            "arrays or objects nested more than 32 deep",
            marks=fault("buildinfo-deep-nesting"),
            id="nested",
        ),
        pytest.param(
            {"data": b"../../../etc/passwd", "mode": stat.S_IFLNK | 0o777},
            "a link or a folder, not a file",
            marks=fault("buildinfo-symlink-member"),
            id="symlink",
        ),
        pytest.param(
            {"data": b" " * (2 << 20) + GOOD_JSON},
            "larger than 1 MiB (raise ORTSTACK_BUILD_INFO_MAX_MIB to read it)",
            marks=fault("buildinfo-too-large"),
            id="too-large",
        ),
    ],
)
def test_inspect_refuses_build_info_it_did_not_write(
    run_ortstack: RunOrtstack, tmp_path: Path, shape: dict[str, bytes | int], message: str
) -> None:
    data = shape["data"]
    assert isinstance(data, bytes)
    wheel = wheel_with(tmp_path, data, mode=int(shape.get("mode", stat.S_IFREG | 0o644)))
    result = run_ortstack("inspect", wheel)
    line = one_error(result, 6)
    assert line.startswith(f"ortstack: error: {wheel.name}: {MEMBER}: ")
    assert message in line
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        pytest.param({"flags": 0x1}, "is encrypted", marks=fault("buildinfo-encrypted"), id="encrypted"),
        pytest.param({"method": DEFLATE64}, "compression method", marks=fault("buildinfo-compression"), id="deflate64"),
    ],
)
def test_inspect_refuses_build_info_it_cannot_decode(
    run_ortstack: RunOrtstack, tmp_path: Path, headers: dict[str, int], message: str
) -> None:
    wheel = wheel_with(tmp_path, GOOD_JSON, **headers)
    line = one_error(run_ortstack("inspect", wheel), 6)
    assert line.startswith(f"ortstack: error: {wheel.name} holds build info ortstack cannot read (")
    assert message in line


def test_inspect_still_prints_good_build_info(run_ortstack: RunOrtstack, tmp_path: Path) -> None:
    result = run_ortstack("inspect", wheel_with(tmp_path, GOOD_JSON))
    assert result.returncode == 0, result.stderr
    assert BuildInfo.from_json(result.stdout) == GOOD_INFO


# --------------------------------------------------------------------------------------------------
# Downloads, source folders.


@fault("download-over-cap")
def test_a_download_over_its_bound_stops_there(
    run_ortstack: RunOrtstack, upstream: Upstream, clean_server: LoopbackServer, tmp_path: Path, cache_dir: Path
) -> None:
    before = good_cache(cache_dir, tmp_path, upstream, {k: v for k, v in os.environ.items() if "ORTSTACK" not in k})
    big = os.urandom(3 << 20)
    url = clean_server.add("/big/onnxruntime.tar.gz", big)
    stack = archive_stack(tmp_path, upstream, url=url, sha256=hashlib.sha256(big).hexdigest(), commit="b" * 40)
    result = run_ortstack("fetch", "--stack", stack, "--cache-dir", cache_dir, env={"ORTSTACK_DOWNLOAD_MAX_MIB": "1"})
    line = one_error(result, 4)
    assert line == f"ortstack: error: {url} is larger than 1 MiB: refused before its digest is checked"
    assert clean_server.requests() == 1  # not retried: asking again gets the same answer
    assert_intact(cache_dir, before)
    assert not list((cache_dir / "archives").glob("*.part"))


@fault("source-dir-symlink-loop")
def test_a_source_dir_that_is_a_loop_of_links(run_ortstack: RunOrtstack, upstream: Upstream, tmp_path: Path) -> None:
    loop = link_loop(tmp_path, "loop")
    stack = git_stack(tmp_path, upstream)
    result = run_ortstack("fetch", "--stack", stack, "--cache-dir", tmp_path / "cache", "--source-dir", loop)
    assert one_error(result, 4) == f"ortstack: error: --source-dir {loop} cannot be followed (a loop of links)"


def link_loop(tmp_path: Path, name: str) -> Path:
    loop = tmp_path / name
    loop.symlink_to(tmp_path / f"{name}.other")
    (tmp_path / f"{name}.other").symlink_to(loop)
    return loop


@fault("stack-path-symlink-loop")
def test_a_stack_path_that_is_a_loop_of_links(run_ortstack: RunOrtstack, tmp_path: Path) -> None:
    loop = link_loop(tmp_path, "stack.toml")
    line = fetch(run_ortstack, loop, tmp_path / "cache")
    assert line == f"ortstack: error: {loop} cannot be followed: a loop of links (--stack or ORTSTACK_STACK)"


@fault("wheel-path-symlink-loop")
@pytest.mark.parametrize("verb", [("inspect",), ("test", "--preflight", "--wheel"), ("bench", "--wheel")])
def test_a_wheel_path_that_is_a_loop_of_links(run_ortstack: RunOrtstack, tmp_path: Path, verb: tuple[str, ...]) -> None:
    loop = link_loop(tmp_path, "onnxruntime-1.0-py3-none-any.whl")
    line = one_error(run_ortstack(*verb, loop, "--cache-dir", tmp_path / "cache"), 2)
    assert line == f"ortstack: error: {loop} cannot be followed: a loop of links, not a wheel"


@fault("source-dir-link-outside")
def test_a_source_dir_holding_a_link_out_is_blamed_not_the_first_patch(
    run_ortstack: RunOrtstack, upstream: Upstream, project: Project, tmp_path: Path, base_env: dict[str, str]
) -> None:
    checkout = tmp_path / "checkout"
    git("clone", "--quiet", upstream.url, str(checkout), cwd=tmp_path, env=base_env)
    (checkout / "etc").symlink_to("/etc")
    good = format_patch(upstream, commit_edits(upstream, [EMPTY_WEIGHTS], "Empty weights", upstream.commit))
    project.write([project.entry("empty", "0001-empty.patch", good)])
    result = run_ortstack(*patch_args(project, tmp_path), "--source-dir", checkout)
    line = one_error(result, 4)
    assert line == f"ortstack: error: --source-dir {checkout} holds 'etc', a link to '/etc' outside the checkout"
    assert "0001-empty" not in result.stderr
    assert not (tmp_path / "work" / "prepared" / "default").exists()


# --------------------------------------------------------------------------------------------------
# Wheels for the suites, trust-on-first-use.


@fault("wheel-other-platform")
def test_a_wheel_for_another_platform_is_refused_before_any_venv(run_ortstack: RunOrtstack, tmp_path: Path) -> None:
    wheel = tmp_path / "onnxruntime_webgpu-1.21.0-cp311-cp311-win_amd64.whl"
    with zipfile.ZipFile(wheel, "w") as bundle:
        bundle.writestr(MEMBER, GOOD_JSON)
    cache = tmp_path / "cache"
    result = run_ortstack("test", "--wheel", wheel, "--ep", "cpu", "--cache-dir", cache)
    line = one_error(result, 2)
    assert line.startswith(f"ortstack: error: {wheel.name} is built for win_amd64, which this machine (")
    assert not (cache / "venvs").exists()


@fault("venv-key-tags")
def test_the_venv_key_holds_the_wheel_tags(tmp_path: Path) -> None:
    names = ["onnxruntime-1.0-cp311-cp311-linux_x86_64.whl", "onnxruntime-1.0-cp311-cp311-win_amd64.whl"]
    data = wheel_with(tmp_path, GOOD_JSON).read_bytes()
    for name in names:
        (tmp_path / name).write_bytes(data)  # the same bytes under two names
    keys = {venv.cache_key([str(tmp_path / name)], [], tmp_path / "python") for name in names}
    assert len(keys) == 2


@fault("tofu-refused-patch")
def test_a_refused_patch_leaves_no_digest_in_the_lock(
    run_ortstack: RunOrtstack, upstream: Upstream, project: Project, tmp_path: Path
) -> None:
    entry = project.entry("hostile", "0001-hostile.patch", new_link("out", "../../escaped"))
    project.write([{k: v for k, v in entry.items() if k != "sha256"}])  # no digest pinned: trust on first use
    line = one_error(run_ortstack(*patch_args(project, tmp_path)), 5)
    assert "outside the source tree" in line
    lock = project.stack_file.with_suffix(".lock")
    assert "patch.hostile.sha256" not in (lock.read_text() if lock.exists() else "")
    assert "trust on first use" not in line
