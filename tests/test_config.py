"""stack.toml, the lock file and the settings chain: typed values, errors that name the key and line."""

from __future__ import annotations

import os
import stat
from typing import TYPE_CHECKING

import pytest

from clirun import RunOrtstack, one_error
from ortstack import config, lockfile, settings
from ortstack.errors import ConfigError

if TYPE_CHECKING:
    from pathlib import Path

COMMIT = "c971ca2f8a1b2c3d4e5f60718293a4b5c6d7e8f9"
SHA256 = "ab" * 32

FULL = f"""\
[ort]
repository = "https://github.com/microsoft/onnxruntime"
commit = "{COMMIT}"

[[patch]]
id = "qk-norm"
mode = "in-base"
description = "per-head Q/K RMSNorm"
origin = {{ kind = "pr", repository = "https://github.com/microsoft/onnxruntime", pr = 32808 }}
guard = {{ files = ["onnxruntime/contrib_ops/webgpu/bert/paged_attention.cc"], patterns = ["norm"] }}

[[patch]]
id = "packed-empty"
file = "patches/0001-packed-empty.patch"
sha256 = "{SHA256}"
platforms = ["linux", "windows"]

[variant.webgpu]
kind = "webgpu"
wheel_name = "onnxruntime-webgpu"
cmake_defines = {{ onnxruntime_USE_WEBGPU = "ON" }}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "stack.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_full_stack_parses_into_typed_values(tmp_path: Path) -> None:
    stack = config.load(write(tmp_path, FULL))
    assert stack.ort.commit == COMMIT
    assert stack.ort.archive_url == ""
    assert [p.id for p in stack.patches] == ["qk-norm", "packed-empty"]
    first, second = stack.patches
    assert first.origin.kind == "pr"
    assert first.origin.pr == 32808
    assert first.guard is not None
    assert first.guard.patterns == ("norm",)
    assert second.platforms == ("linux", "windows")
    assert stack.variant("webgpu").cmake_defines == {"onnxruntime_USE_WEBGPU": "ON"}
    with pytest.raises(ConfigError, match=r"no variant named 'webgp'.*known: webgpu"):
        stack.variant("webgp")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("commit =", "comit ="), r"stack.toml:3: ort.comit: unknown key"),
        ((f'commit = "{COMMIT}"', "commit = 5"), r"stack.toml:3: ort.commit: expected str, got int 5"),
        (
            (f'commit = "{COMMIT}"', 'commit = "c971ca2"'),
            r"stack.toml:3: ort.commit: must be a full 40-hex commit id, got a short commit id",
        ),
        (("[variant.webgpu]", "[variants.webgpu]"), r"stack.toml:\d+: variants: unknown table"),
        (
            ('platforms = ["linux", "windows"]', 'platforms = ["linux", "windoes"]'),
            r"patch\[1\].platforms: unknown platform 'windoes'",
        ),
        (('kind = "webgpu"', 'kind = "webgpu-plugin"'), r"variant.webgpu.kind: must be one of 'webgpu', 'plugin'"),
        (('id = "packed-empty"', 'id = "qk-norm"'), r"patch\[1\].id: duplicate patch id 'qk-norm'"),
    ],
)
def test_errors_name_key_and_line(tmp_path: Path, edit: tuple[str, str], message: str) -> None:
    old, new = edit
    assert old in FULL
    with pytest.raises(ConfigError, match=message):
        config.load(write(tmp_path, FULL.replace(old, new, 1)))


def test_unknown_key_suggests_the_right_one(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        config.load(write(tmp_path, FULL.replace("commit =", "comit =", 1)))
    assert info.value.tip == "did you mean 'commit'?"


def test_missing_and_invalid_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no stack file at"):
        config.load(tmp_path / "absent.toml")
    with pytest.raises(ConfigError, match="not valid TOML"):
        config.load(write(tmp_path, "[ort\n"))
    with pytest.raises(ConfigError, match="missing required table"):
        config.load(write(tmp_path, "[[patch]]\nid = 'x'\n"))


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("commit =", "comit =", "ort.comit: unknown key"),
        (f'commit = "{COMMIT}"', 'commit = ["x"]', "ort.commit: expected str, got list"),
        (f'commit = "{COMMIT}"', 'commit = "c971ca2"', "ort.commit: must be a full 40-hex commit id, got a short"),
    ],
)
def test_cli_reports_config_errors(
    run_ortstack: RunOrtstack, tmp_path: Path, old: str, new: str, expected: str
) -> None:
    stack = write(tmp_path, FULL.replace(old, new, 1))
    line = one_error(run_ortstack("fetch", "--stack", stack, "--cache-dir", tmp_path / "cache"), 3, tip=False)
    assert f"{stack}:3: {expected}" in line
    assert not (tmp_path / "cache").exists()  # nothing touched before the stack file is valid


def test_lock_trust_on_first_use(tmp_path: Path) -> None:
    path = tmp_path / "stack.lock"
    lock = lockfile.Lock.load(path)
    lock.resolve("https://example.invalid/a.tar.gz", SHA256, what="sha256 of a.tar.gz")
    again = lockfile.Lock.load(path)
    assert again.get("https://example.invalid/a.tar.gz") == SHA256
    again.resolve("https://example.invalid/a.tar.gz", SHA256, what="same value: nothing to do")
    with pytest.raises(ConfigError, match="is locked to"):
        again.resolve("https://example.invalid/a.tar.gz", "cd" * 32, what="sha256 of a.tar.gz")
    locked = lockfile.Lock.load(path, locked=True)
    with pytest.raises(ConfigError, match="--locked forbids resolving it"):
        locked.resolve("https://example.invalid/b.tar.gz", SHA256, what="sha256 of b.tar.gz")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stack.lock"]  # no temporary files left


@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")
def test_files_written_atomically_keep_their_mode_and_new_ones_follow_the_umask(tmp_path: Path) -> None:
    """The temporary file a write goes through is 0600: the file it replaces must not become so."""
    shared = tmp_path / "stack.lock"
    shared.write_text("", encoding="utf-8")
    shared.chmod(0o640)
    lockfile.write_atomic(shared, b"x = 1\n")
    assert stat.S_IMODE(shared.stat().st_mode) == 0o640
    old_mask = os.umask(0o027)
    try:
        lockfile.write_atomic(tmp_path / "new.lock", b"")
    finally:
        os.umask(old_mask)
    assert stat.S_IMODE((tmp_path / "new.lock").stat().st_mode) == 0o640
    assert shared.read_bytes() == b"x = 1\n"


def test_settings_chain(tmp_path: Path) -> None:
    env = {"ORTSTACK_CACHE_DIR": str(tmp_path / "env-cache"), "ORTSTACK_LOCKED": "1"}
    resolved = settings.resolve(env, stack_file=tmp_path / "stack.toml")
    assert resolved.cache_dir == tmp_path / "env-cache"
    assert resolved.locked
    assert resolved.work_dir == tmp_path / "build"
    assert resolved.lock_file == tmp_path / "stack.lock"
    cli = settings.resolve(env, stack_file=tmp_path / "stack.toml", cache_dir=tmp_path / "cli-cache", locked=False)
    assert cli.cache_dir == tmp_path / "cli-cache"
    assert not cli.locked
    with pytest.raises(ConfigError, match="ORTSTACK_LOCKED='maybe' is not a boolean"):
        settings.resolve({"ORTSTACK_LOCKED": "maybe"})
