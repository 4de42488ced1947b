"""Making patch series on the miniature upstream: commits made with git, patches written by git."""

from __future__ import annotations

import io
import subprocess
import tarfile
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import tomli_w

from ortstack import config
from ortstack.cache import make_read_only
from ortstack.patches import patchfile
from upstream import GIT_ENV_FIXED

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

    from upstream import Upstream

MATMUL = "onnxruntime/contrib_ops/cpu/quantization/matmul_nbits.cc"
PAGED = "onnxruntime/contrib_ops/webgpu/bert/paged_attention.cc"
TELEMETRY = "onnxruntime/core/platform/telemetry_1ds.cc"

EMPTY_WEIGHTS = (
    MATMUL,
    "  if (k <= 0 || n <= 0) {\n    return 0;",
    "  if (k <= 0 || n <= 0) {\n    return 0;  // empty",
)
QK_NORM = (PAGED, '  shader += "fn score', '  shader += "// q_norm_weight\\n";\n  shader += "fn score')
TELEMETRY_SKIP = (TELEMETRY, "void Shutdown() { g_enabled = false; }", "void Shutdown() {\n  g_enabled = false;\n}")


def git_out(upstream: Upstream, *args: str) -> str:
    result = subprocess.run(
        ["git", *args], cwd=upstream.work, env={**upstream.env, **GIT_ENV_FIXED}, capture_output=True, check=True
    )
    return result.stdout.decode()


def commit_edits(
    upstream: Upstream, edits: list[tuple[str, str, str]], message: str, parent: str, *, touch_end: bool = True
) -> str:
    """A commit on top of ``parent`` replacing ``old`` by ``new`` in each file; ``touch_end`` also adds
    a line at the end of each file (so that two edits of one file never apply as the same change)."""
    files: dict[str, str | None] = {}
    for path, old, new in edits:
        text = files.get(path) or upstream.file_at(parent, path).decode() + ("\n" if touch_end else "")
        assert old in text, f"{old!r} not in {path}"
        files[path] = text.replace(old, new, 1)
    return upstream.add_commit(files, message, parent=parent)


def format_patch(upstream: Upstream, commit: str) -> str:
    return git_out(upstream, "format-patch", "-1", "--full-index", "--stdout", commit)


def tree_of(upstream: Upstream, commit: str) -> str:
    return git_out(upstream, "rev-parse", f"{commit}^{{tree}}").strip()


def extract(upstream: Upstream, commit: str, dest: Path) -> Path:
    """The source of ``commit`` as a read-only folder, the way the cache holds it."""
    data = subprocess.run(
        ["git", "archive", "--format=tar", commit],
        cwd=upstream.work,
        env={**upstream.env, **GIT_ENV_FIXED},
        capture_output=True,
        check=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        archive.extractall(dest, filter="data")
    make_read_only(dest)
    return dest


@dataclass(kw_only=True)
class Project:
    """A stack.toml and its patches/ folder in a temporary directory."""

    root: Path
    repository: str
    commit: str

    @property
    def stack_file(self) -> Path:
        return self.root / "stack.toml"

    def vendor(self, name: str, text: str) -> tuple[str, str]:
        """Write ``patches/<name>``; returns (file, sha256)."""
        path = self.root / "patches" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode())
        return f"patches/{name}", patchfile.sha256_hex(text.encode())

    def write(self, entries: Sequence[Mapping[str, Any]], *, commit: str | None = None) -> config.Stack:
        document: dict[str, Any] = {
            "ort": {"repository": self.repository, "commit": commit or self.commit},
            "patch": [dict(e) for e in entries],
        }
        self.root.mkdir(parents=True, exist_ok=True)
        self.stack_file.write_text(tomli_w.dumps(document), encoding="utf-8")
        return config.load(self.stack_file)

    def entry(self, patch_id: str, name: str, text: str, **extra: Any) -> dict[str, Any]:
        file, sha256 = self.vendor(name, text)
        return {"id": patch_id, "file": file, "sha256": sha256, **extra}


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (``.git`` included) by relative path."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
