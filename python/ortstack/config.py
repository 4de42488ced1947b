"""``stack.toml``: the one file a user edits, parsed into frozen, validated dataclasses.

Every error names the key and the line it stands on, and an unknown key gets a "did you mean".
Tables map onto dataclasses field by field; a field's type is the schema, its docstring the
documentation (``ortstack schema`` prints both).
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Literal, TypeVar

from ortstack.errors import ConfigError

HEX40 = re.compile(r"[0-9a-f]{40}")
HEX64 = re.compile(r"[0-9a-f]{64}")
HEX_PREFIX = re.compile(r"[0-9a-f]{4,39}")
SHORT_OR_FULL_COMMIT = re.compile(r"(?:[0-9a-f]{7,40})?")
PLATFORMS = ("linux", "windows", "macos")

T = TypeVar("T")


@dataclass(frozen=True, kw_only=True)
class Guard:
    """Files and patterns that must be present in the prepared tree."""

    files: tuple[str, ...] = ()
    """Paths (relative to the source root) that must exist."""
    patterns: tuple[str, ...] = ()
    """Regular expressions; each must match in at least one of ``files``."""


@dataclass(frozen=True, kw_only=True)
class Origin:
    """Where a patch comes from. ``kind = "local"`` patches are edited in this repository."""

    kind: Literal["local", "pr", "commit", "compare"] = "local"
    """``local``, ``pr`` (a pull request), ``commit`` (one commit) or ``compare`` (a range)."""
    repository: str = ""
    """The repository URL the PR or commits live in, e.g. ``https://github.com/microsoft/onnxruntime``."""
    pr: int = 0
    """Pull-request number, for ``kind = "pr"``."""
    head: str = ""
    """Commit the patch is taken at (PR head, the commit, or the range end): a full 40-hex id.
    A short id records what is known; the first refresh resolves it and locks the full id.
    Empty for a PR: its head at the first refresh is pinned."""
    base: str = ""
    """Where the range starts: a full 40-hex commit or a branch (``compare``; for ``pr`` the branch
    the PR targets, ``main`` when empty)."""


@dataclass(frozen=True, kw_only=True)
class PatchEntry:
    """One entry of the patch series; series order is application order."""

    id: str
    """Short unique name, used in commit subjects, status and the lock file."""
    file: str = ""
    """Patch file under ``patches/`` (``NNNN-short-subject.patch``). Empty for ``in-base`` entries."""
    sha256: str = ""
    """sha256 of the vendored file; empty until the file is vendored (then recorded in the lock)."""
    origin: Origin = field(default_factory=Origin)
    """Where the change comes from."""
    mode: Literal["apply", "in-base"] = "apply"
    """``apply`` a vendored file, or ``in-base``: the change is upstream and ``guard`` proves it."""
    platforms: tuple[str, ...] = ()
    """Platforms this patch applies on (``linux``, ``windows``, ``macos``); empty means all."""
    guard: Guard | None = None
    """Files and patterns that must be present after applying (or in the base, for ``in-base``)."""
    description: str = ""
    """Why the patch is carried."""
    provides: tuple[str, ...] = ()
    """Features a wheel has once this change is in (e.g. ``qlora``); recorded in the build info so the
    wheel suites hold the wheel to them."""


@dataclass(frozen=True, kw_only=True)
class OrtPin:
    """The pinned onnxruntime source."""

    repository: str
    """Git URL of onnxruntime (or a mirror)."""
    commit: str
    """Full 40-hex commit id: the source is fetched at exactly this commit."""
    archive_url: str = ""
    """Optional source archive of that commit (``.tar.gz``/``.zip``); fetched instead of git."""
    archive_sha256: str = ""
    """sha256 of ``archive_url``; when empty it is resolved on first use and kept in the lock."""


@dataclass(frozen=True, kw_only=True)
class Variant:
    """One kind of wheel to build from the prepared tree."""

    name: str
    """The table's name, e.g. ``webgpu`` or ``plugin``."""
    kind: Literal["webgpu", "plugin"] = "webgpu"
    """``webgpu``: ORT with the built-in WebGPU EP; ``plugin``: the WebGPU plugin EP library."""
    wheel_name: str = ""
    """Distribution name of the wheel, e.g. ``onnxruntime-webgpu``."""
    dawn: Literal["static", "shared", "external"] = "static"
    """How Dawn is linked: built statically, as a shared library, or taken from the system."""
    telemetry: bool = False
    """Build ORT's telemetry (Windows only; always off on other platforms)."""
    cmake_defines: dict[str, str] = field(default_factory=dict)
    """Extra ``-D`` definitions passed to ORT's cmake, after the variant's own."""
    min_onnxruntime: str = ""
    """For plugin wheels: the oldest stock ``onnxruntime`` the plugin loads into."""


@dataclass(frozen=True, kw_only=True)
class DepSource:
    """Where one deps.txt entry comes from instead of the deps mirror (``[deps.NAME]``)."""

    source_dir: str = ""
    """A local source tree (relative to the stack file's folder, or absolute); a git checkout is
    checked against the deps.txt pin, and onnxruntime's own patches for it are applied to a copy."""
    installed: bool = False
    """Take it from installed packages (cmake's ``find_package``) instead."""


@dataclass(frozen=True, kw_only=True)
class BuildOptions:
    """How wheels are compiled (``[build]``); the environment may override the cache backend."""

    compiler_cache: Literal["auto", "ccache", "sccache", "none"] = "auto"
    """``auto`` takes sccache, then ccache, whichever is on PATH; ``none`` compiles without a cache."""
    sccache_redis: str = ""
    """A shared sccache backend: Redis URL (``redis://host:6379``); env ``SCCACHE_REDIS_ENDPOINT`` wins."""
    sccache_bucket: str = ""
    """A shared sccache backend: ``s3://bucket`` or ``gs://bucket``; env ``SCCACHE_BUCKET`` wins."""
    sccache_scheduler: str = ""
    """An sccache-dist scheduler (``http://host:10600``): compiles run on its build servers (needs sccache);
    env ``ORTSTACK_SCCACHE_SCHEDULER`` and ``ortstack build --sccache-scheduler`` win."""
    sccache_scheduler_token: str = ""
    """The client token that scheduler expects (its ``client_auth``); env ``ORTSTACK_SCCACHE_SCHEDULER_TOKEN``
    wins and keeps a secret out of this file."""
    sccache_local_fallback: bool = False
    """Compile on this machine when the scheduler cannot take the compiles (ortstack says so); off, the
    build stops. Env ``ORTSTACK_SCCACHE_LOCAL_FALLBACK``, ``--sccache-local-fallback`` win."""
    jobs: int = 0
    """Parallel compile jobs; 0 picks cores, capped by memory (``memory_per_job_mb``)."""
    memory_per_job_mb: int = 2048
    """Memory one compile job needs; onnxruntime's heavy files need about 2 GB."""
    system_libraries: bool = False
    """Let cmake's FetchContent take installed libraries (``FETCHCONTENT_TRY_FIND_PACKAGE_MODE``)."""
    build_type: Literal["Release", "RelWithDebInfo", "Debug", "MinSizeRel"] = "Release"
    """``CMAKE_BUILD_TYPE`` for onnxruntime."""
    warnings_as_errors: bool = False
    """Keep onnxruntime's warnings-as-errors (its developer mode). Off by default, as onnxruntime's
    ``build.py --compile_no_warning_as_error``: a newer compiler than onnxruntime's CI warns anew."""


@dataclass(frozen=True, kw_only=True)
class Stack:
    """Everything ``stack.toml`` says, plus where it was read from."""

    ort: OrtPin
    patches: tuple[PatchEntry, ...] = ()
    variants: tuple[Variant, ...] = ()
    build: BuildOptions = field(default_factory=BuildOptions)
    deps: dict[str, DepSource] = field(default_factory=dict)
    """``[deps.NAME]``: dependencies taken from local sources or installed packages."""
    path: Path = Path("stack.toml")
    """The file this was read from; patch files resolve relative to its folder."""

    @property
    def root(self) -> Path:
        return self.path.parent

    def variant(self, name: str) -> Variant:
        for variant in self.variants:
            if variant.name == name:
                return variant
        known = ", ".join(v.name for v in self.variants) or "none"
        msg = f"no variant named {name!r} in {self.path} (known: {known})"
        raise ConfigError(msg, tip=_suggest(name, [v.name for v in self.variants]))


# --------------------------------------------------------------------------------------------------
# Locating keys in the source text, so errors can name a line.


def _line_of(text: str, where: tuple[str | int, ...]) -> int | None:
    """Best-effort line number (1-based) of the key at ``where``, e.g. ``("patch", 2, "sha256")``."""
    header = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
    table: tuple[str | int, ...] = ()
    counts: dict[str, int] = {}
    target_table = tuple(p for p in where[:-1])
    key = where[-1]
    best: int | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        match = header.match(line)
        if match:
            name = match.group(2)
            parts: tuple[str | int, ...] = tuple(name.split("."))
            if match.group(1) == "[[":
                counts[name] = counts.get(name, -1) + 1
                parts = (*parts, counts[name])
            table = parts
            if table[: len(where)] == where:  # the table itself, or the first of its sub-tables
                return number
            continue
        if table == target_table and isinstance(key, str) and re.match(rf"^\s*{re.escape(key)}\s*=", line):
            return number
        if table == target_table and best is None:
            best = number
    return best


def _suggest(word: str, candidates: list[str]) -> str | None:
    close = difflib.get_close_matches(word, candidates, n=1)
    return f"did you mean {close[0]!r}?" if close else None


# --------------------------------------------------------------------------------------------------
# Mapping TOML tables onto dataclasses.


@dataclass(frozen=True)
class _Reader:
    path: Path
    text: str

    def fail(self, where: tuple[str | int, ...], message: str, tip: str | None = None) -> ConfigError:
        line = _line_of(self.text, where)
        location = f"{self.path}:{line}" if line else str(self.path)
        dotted = ".".join(f"[{p}]" if isinstance(p, int) else p for p in where).replace(".[", "[")
        return ConfigError(f"{location}: {dotted}: {message}", tip=tip)

    def build(self, cls: type[T], table: object, where: tuple[str | int, ...], **extra: Any) -> T:
        if not isinstance(table, dict):
            raise self.fail(where, f"expected a table, got {type(table).__name__}")
        hints = typing.get_type_hints(cls)
        fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        settable = [name for name in fields if name not in extra and name != "path"]
        values: dict[str, Any] = dict(extra)
        for key, raw in table.items():
            if key not in settable:
                raise self.fail((*where, key), "unknown key", tip=_suggest(key, settable))
            values[key] = self.convert(hints[key], raw, (*where, key))
        for name in settable:
            f = fields[name]
            required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            if required and name not in values:
                raise self.fail(where, f"missing required key {name!r}")
        return cls(**values)

    def convert(self, hint: Any, raw: object, where: tuple[str | int, ...]) -> Any:
        origin = typing.get_origin(hint)
        args = typing.get_args(hint)
        if origin in (types.UnionType, typing.Union):
            inner = [a for a in args if a is not type(None)]
            return self.convert(inner[0], raw, where)
        if origin is Literal:
            if raw not in args:
                allowed = ", ".join(repr(a) for a in args)
                raise self.fail(
                    where, f"must be one of {allowed}, got {raw!r}", tip=_suggest(str(raw), [str(a) for a in args])
                )
            return raw
        if origin is tuple:
            if not isinstance(raw, list):
                raise self.fail(where, f"expected an array, got {type(raw).__name__}")
            return tuple(self.convert(args[0], item, (*where, i)) for i, item in enumerate(raw))
        if origin is dict:
            if not isinstance(raw, dict):
                raise self.fail(where, f"expected a table, got {type(raw).__name__}")
            return {str(k): self.convert(args[1], v, (*where, str(k))) for k, v in raw.items()}
        if dataclasses.is_dataclass(hint):
            return self.build(typing.cast("type[Any]", hint), raw, where)
        expected = {str: str, int: int, bool: bool}[hint]
        # bool is an int in Python; keep them apart in the config.
        if not isinstance(raw, expected) or (expected is int and isinstance(raw, bool)):
            raise self.fail(where, f"expected {expected.__name__}, got {type(raw).__name__} {raw!r}")
        return raw


def _check_hex(reader: _Reader, value: str, pattern: re.Pattern[str], where: tuple[str | int, ...], what: str) -> None:
    if value and not pattern.fullmatch(value):
        detail = "a short commit id" if pattern is HEX40 and re.fullmatch(r"[0-9a-f]{4,39}", value) else repr(value)
        raise reader.fail(where, f"must be a full {what}, got {detail}", tip="write the full lowercase hex id")


def _validate(reader: _Reader, stack: Stack) -> None:
    _check_hex(reader, stack.ort.commit, HEX40, ("ort", "commit"), "40-hex commit id")
    _check_hex(reader, stack.ort.archive_sha256, HEX64, ("ort", "archive_sha256"), "64-hex sha256")
    if stack.ort.archive_sha256 and not stack.ort.archive_url:
        raise reader.fail(("ort", "archive_sha256"), "is set but archive_url is not")
    seen: set[str] = set()
    for index, patch in enumerate(stack.patches):
        if patch.id in seen:
            raise reader.fail(("patch", index, "id"), f"duplicate patch id {patch.id!r}")
        seen.add(patch.id)
        _validate_patch(reader, patch, ("patch", index))


def _validate_mode(reader: _Reader, patch: PatchEntry, where: tuple[str | int, ...]) -> None:
    if patch.mode == "in-base":
        if patch.guard is None:
            raise reader.fail(where, "an in-base entry needs a guard that proves the change is in the base")
    elif not patch.file:
        number = int(where[-1]) + 1 if isinstance(where[-1], int) else 1
        tip = f'add file = "patches/{number:04d}-{patch.id}.patch" (refresh-patches vendors it there)'
        raise reader.fail(where, "a patch entry needs its file under patches/", tip=tip)
    elif PurePosixPath(patch.file).parent != PurePosixPath("patches"):
        raise reader.fail((*where, "file"), f"patch files live directly under patches/, got {patch.file!r}")


def _validate_patch(reader: _Reader, patch: PatchEntry, where: tuple[str | int, ...]) -> None:
    _check_hex(reader, patch.sha256, HEX64, (*where, "sha256"), "64-hex sha256")
    if not SHORT_OR_FULL_COMMIT.fullmatch(patch.origin.head):
        raise reader.fail((*where, "origin", "head"), f"must be a commit id, got {patch.origin.head!r}")
    if HEX_PREFIX.fullmatch(patch.origin.base):
        _check_hex(reader, patch.origin.base, HEX40, (*where, "origin", "base"), "40-hex commit id or a branch")
    for platform in patch.platforms:
        if platform not in PLATFORMS:
            tip = _suggest(platform, list(PLATFORMS))
            raise reader.fail((*where, "platforms"), f"unknown platform {platform!r}", tip=tip)
    _validate_mode(reader, patch, where)
    if patch.origin.kind == "pr" and not patch.origin.pr:
        raise reader.fail((*where, "origin"), "a pr origin needs its number (pr = N)")
    if patch.origin.kind != "local" and not patch.origin.repository:
        raise reader.fail((*where, "origin"), f"a {patch.origin.kind} origin needs a repository URL")


def load(path: Path) -> Stack:
    """Read and validate ``path``."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        msg = f"no stack file at {path}"
        raise ConfigError(msg, tip="run from the project root or pass --stack PATH") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = f"{path}: not valid TOML: {exc}"
        raise ConfigError(msg) from None
    reader = _Reader(path=path, text=text)
    allowed = ["ort", "patch", "variant", "build", "deps"]
    for key in data:
        if key not in allowed:
            raise reader.fail((key,), "unknown table", tip=_suggest(key, allowed))
    if "ort" not in data:
        raise reader.fail(("ort",), "missing required table [ort]")
    ort = reader.build(OrtPin, data["ort"], ("ort",))
    raw_patches = data.get("patch", [])
    if not isinstance(raw_patches, list):
        raise reader.fail(("patch",), "must be an array of tables ([[patch]])")
    patches = tuple(reader.build(PatchEntry, raw, ("patch", i)) for i, raw in enumerate(raw_patches))
    raw_variants = data.get("variant", {})
    if not isinstance(raw_variants, dict):
        raise reader.fail(("variant",), "must be tables ([variant.NAME])")
    variants = tuple(reader.build(Variant, raw, ("variant", name), name=name) for name, raw in raw_variants.items())
    build = reader.build(BuildOptions, data.get("build", {}), ("build",))
    raw_deps = data.get("deps", {})
    if not isinstance(raw_deps, dict):
        raise reader.fail(("deps",), "must be tables ([deps.NAME])")
    dep_sources = {name: reader.build(DepSource, raw, ("deps", name)) for name, raw in raw_deps.items()}
    stack = Stack(ort=ort, patches=patches, variants=variants, build=build, deps=dep_sources, path=path)
    _validate(reader, stack)
    return stack
