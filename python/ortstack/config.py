"""``stack.toml``: the one file a user edits, parsed into frozen, validated dataclasses.

Every error names the key and the line it stands on, and an unknown key gets a "did you mean" (or
the list of valid keys). A file is read to its end: all its problems are reported at once.
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
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import tomli_w

from ortstack.bounds import Bounds, nesting_of, read_at_most, size_limit
from ortstack.errors import ConfigError, ConfigProblemsError

HEX40 = re.compile(r"[0-9a-f]{40}")
HEX64 = re.compile(r"[0-9a-f]{64}")
HEX_PREFIX = re.compile(r"[0-9a-f]{4,39}")
SHORT_OR_FULL_COMMIT = re.compile(r"(?:[0-9a-f]{7,40})?")
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
"""A name that is also a folder name: a variant's."""
PLATFORMS = ("linux", "windows", "macos")
SHOWN_PROBLEMS = 50
"""Problems of one file reported by one run; a count stands for the rest."""

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

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
    version: str = ""
    """Optional: onnxruntime's ``VERSION_NUMBER`` at that commit. An archive or ``--source-dir`` tree that
    names no commit (a repack, an extracted tarball) and says another version is refused; without it the
    first such tree's version is kept in the lock and checked against."""


@dataclass(frozen=True, kw_only=True)
class Variant:
    """One kind of wheel to build from the prepared tree."""

    name: str
    """The table's name, e.g. ``webgpu`` or ``plugin``."""
    kind: Literal["webgpu", "plugin", "core"] = "webgpu"
    """``webgpu``: ORT with the built-in WebGPU EP; ``plugin``: the WebGPU plugin EP library; ``core``: ORT
    without the WebGPU EP, the core a plugin EP wheel loads into."""
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
        raise ConfigError(msg, tip=_hint(name, [v.name for v in self.variants], "variants in this stack"))


# --------------------------------------------------------------------------------------------------
# Locating keys in the source text, so errors can name a line.


_HEADER = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")


def _header_keys(name: str) -> tuple[str, ...]:
    """The keys of a table header's dotted name, quoted ones (``variant."a.b"``) unquoted as TOML reads them."""
    if '"' not in name and "'" not in name:
        return tuple(part.strip() for part in name.split("."))
    try:
        table = tomllib.loads(f"[{name}]")
    except tomllib.TOMLDecodeError:
        return tuple(name.split("."))
    keys: list[str] = []
    level: object = table
    while isinstance(level, dict) and len(level) == 1:
        key, level = next(iter(level.items()))
        keys.append(key)
    return tuple(keys)


@dataclass(frozen=True)
class _KeyLines:
    """Where keys and tables stand in the source text, read in one pass so a lookup costs nothing.

    A location is the first line that is the table itself (or the first of its sub-tables) or the
    key in its table; failing both, the table's first line.
    """

    tables: dict[tuple[str | int, ...], int]
    """Every prefix of every table header, to its first line."""
    keys: dict[tuple[tuple[str | int, ...], str], int]
    """(table, key written as ``key =``) to its first line."""
    first_lines: dict[tuple[str | int, ...], int]
    """Each table to the first line under its header (the top level's first line for ``()``)."""

    @classmethod
    def of(cls, text: str) -> _KeyLines:
        tables: dict[tuple[str | int, ...], int] = {}
        keys: dict[tuple[tuple[str | int, ...], str], int] = {}
        first_lines: dict[tuple[str | int, ...], int] = {}
        table: tuple[str | int, ...] = ()
        counts: dict[str, int] = {}
        for number, line in enumerate(text.splitlines(), start=1):
            match = _HEADER.match(line)
            if match:
                name = match.group(2)
                parts: tuple[str | int, ...] = _header_keys(name)
                if match.group(1) == "[[":
                    counts[name] = counts.get(name, -1) + 1
                    parts = (*parts, counts[name])
                table = parts
                for end in range(1, len(parts) + 1):
                    tables.setdefault(parts[:end], number)
                continue
            first_lines.setdefault(table, number)
            key, equals, _ = line.partition("=")
            if equals:
                keys.setdefault((table, key.strip()), number)
        return cls(tables=tables, keys=keys, first_lines=first_lines)

    def line_of(self, where: tuple[str | int, ...]) -> int | None:
        """Best-effort line number (1-based) of the key at ``where``, e.g. ``("patch", 2, "sha256")``."""
        table, key = where[:-1], where[-1]
        found = [self.tables.get(where), self.keys.get((table, key)) if isinstance(key, str) else None]
        return min((line for line in found if line is not None), default=self.first_lines.get(table))


def _closest(word: str, candidates: list[str]) -> str | None:
    """A close match, or a name that starts with ``word``; None when there is none."""
    close = difflib.get_close_matches(word, candidates, n=1)
    if not close and len(word) >= 3:  # noqa: PLR2004 - "repo" for "repository", not "r" for everything
        close = [c for c in candidates if c.startswith(word)][:1]
    return close[0] if close else None


def _suggest(word: str, candidates: list[str]) -> str | None:
    close = _closest(word, candidates)
    return f"did you mean {close!r}?" if close else None


def _hint(word: str, candidates: list[str], what: str = "valid keys here") -> str:
    """A "did you mean", or else every valid name, so the user never has to guess."""
    return _suggest(word, candidates) or f"{what}: {', '.join(candidates) or 'none'}"


_TYPE_TIPS = {
    str: 'write a string in double quotes, e.g. key = "value"',
    int: "write a whole number without quotes, e.g. key = 4",
    bool: "write true or false, without quotes",
}
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_TOML_AT = re.compile(r"\s*\(at line (\d+), column (\d+)\)$")


# --------------------------------------------------------------------------------------------------
# Mapping TOML tables onto dataclasses.


def _toml_string(text: str) -> str:
    """``text`` as a TOML basic string, one line whatever it holds."""
    return tomli_w.dumps({"x": text}).partition(" = ")[2].strip()


def _dotted(where: tuple[str | int, ...]) -> str:
    """``("patch", 0, "origin")`` -> ``patch[0].origin``; an odd key (a newline in it) in quotes."""
    parts = [f"[{p}]" if isinstance(p, int) else p if _BARE_KEY.fullmatch(p) else repr(p) for p in where]
    return ".".join(parts).replace(".[", "[")


class _Invalid(Exception):  # noqa: N818 - not an error to report: the problems are already recorded
    """A value could not be built because of problems already recorded."""


@dataclass(frozen=True)
class _Reader:
    path: Path
    text: str
    problems: list[ConfigError] = field(default_factory=list)
    """Every problem found so far; the file is read to its end so all are reported at once."""

    @cached_property
    def lines(self) -> _KeyLines:
        return _KeyLines.of(self.text)

    def fail(self, where: tuple[str | int, ...], message: str, tip: str | None = None) -> ConfigError:
        line = self.lines.line_of(where)
        location = f"{self.path}:{line}" if line else str(self.path)
        return ConfigError(f"{location}: {_dotted(where)}: {message}", tip=tip)

    @contextmanager
    def attempt(self) -> Iterator[None]:
        """Record a problem raised inside and carry on with the next key."""
        try:
            yield
        except ConfigError as exc:
            self.problems.append(exc)
        except _Invalid:
            pass

    def value(self, make: Callable[[], T]) -> T | None:
        """``make()``, or None with its problem recorded."""
        try:
            return make()
        except ConfigError as exc:
            self.problems.append(exc)
        except _Invalid:
            pass
        return None

    def _line(self, problem: ConfigError) -> int:
        where = problem.message.removeprefix(f"{self.path}:").split(":", 1)[0]
        return int(where) if where.isdigit() else 0

    def raise_problems(self) -> None:
        """Raise what was found, in the order of the file's lines."""
        if len(self.problems) == 1:
            raise self.problems[0]
        if self.problems:
            ordered = sorted(self.problems, key=self._line)
            if len(ordered) > SHOWN_PROBLEMS:  # a screenful says what is wrong; thousands more hide it
                hidden = len(ordered) - SHOWN_PROBLEMS
                tip = "fix the problems above and run again to see the rest"
                ordered = [*ordered[:SHOWN_PROBLEMS], ConfigError(f"{self.path}: {hidden} more problems", tip=tip)]
            raise ConfigProblemsError(tuple(ordered))

    def build(self, cls: type[T], table: object, where: tuple[str | int, ...], **extra: Any) -> T:
        if not isinstance(table, dict):
            tip = f"write it as a table: [{_dotted(where)}] with key = value lines under it"
            raise self.fail(where, f"expected a table, got {type(table).__name__}", tip=tip)
        hints = typing.get_type_hints(cls)
        fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        settable = [name for name in fields if name not in extra and name != "path"]
        values: dict[str, Any] = dict(extra)
        before = len(self.problems)
        misspelt = set()  # a required key missing because it is misspelt is one problem, not two
        for key, raw in table.items():
            with self.attempt():
                if key not in settable:
                    close = _closest(key, settable)
                    misspelt.add(close or "")
                    tip = f"did you mean {close!r}?" if close else _hint(key, settable)
                    raise self.fail((*where, key), "unknown key", tip=tip)
                values[key] = self.convert(hints[key], raw, (*where, key))
        for name in settable:
            f = fields[name]
            required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            if required and name not in table and name not in misspelt:
                self.problems.append(self.fail(where, f"missing required key {name!r}", tip=f"add {name} = ..."))
        if len(self.problems) > before:
            raise _Invalid
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
                tip = _hint(str(raw), [str(a) for a in args], "valid values")
                raise self.fail(where, f"must be one of {allowed}, got {raw!r}", tip=tip)
            return raw
        if origin is tuple:
            if not isinstance(raw, list):
                tip = 'write an array in square brackets, e.g. key = ["a", "b"]'
                raise self.fail(where, f"expected an array, got {type(raw).__name__}", tip=tip)
            return tuple(self.convert(args[0], item, (*where, i)) for i, item in enumerate(raw))
        if origin is dict:
            if not isinstance(raw, dict):
                tip = 'write an inline table, e.g. key = { NAME = "value" }'
                raise self.fail(where, f"expected a table, got {type(raw).__name__}", tip=tip)
            for k in raw:
                self.check_text(k, (*where, k))
            return {str(k): self.convert(args[1], v, (*where, str(k))) for k, v in raw.items()}
        if dataclasses.is_dataclass(hint):
            return self.build(typing.cast("type[Any]", hint), raw, where)
        return self.scalar(hint, raw, where)

    def scalar(self, hint: type, raw: object, where: tuple[str | int, ...]) -> Any:
        expected = {str: str, int: int, bool: bool}[hint]
        # bool is an int in Python; keep them apart in the config.
        if not isinstance(raw, expected) or (expected is int and isinstance(raw, bool)):
            shown = repr(raw) if not isinstance(raw, (dict, list)) else type(raw).__name__
            message = f"expected {expected.__name__}, got {type(raw).__name__} {shown}"
            raise self.fail(where, message, tip=_TYPE_TIPS[expected])
        if isinstance(raw, str):
            self.check_text(raw, where)
        return raw

    def check_text(self, text: str, where: tuple[str | int, ...]) -> None:
        """A NUL can be neither a path, an argument nor a name: refuse it where it is written."""
        if "\0" in text:
            raise self.fail(where, "holds a NUL character (\\u0000)", tip="remove the \\u0000 from the value")


def _check_hex(reader: _Reader, value: str, pattern: re.Pattern[str], where: tuple[str | int, ...], what: str) -> None:
    if value and not pattern.fullmatch(value):
        detail = "a short commit id" if pattern is HEX40 and re.fullmatch(r"[0-9a-f]{4,39}", value) else repr(value)
        raise reader.fail(where, f"must be a full {what}, got {detail}", tip="write the full lowercase hex id")


def _validate(reader: _Reader, stack: Stack, indices: tuple[int, ...]) -> None:
    """Check what types alone cannot; ``indices`` are the patches' places in the file (some may not have built)."""
    with reader.attempt():
        _check_hex(reader, stack.ort.commit, HEX40, ("ort", "commit"), "40-hex commit id")
    with reader.attempt():
        _check_hex(reader, stack.ort.archive_sha256, HEX64, ("ort", "archive_sha256"), "64-hex sha256")
    if stack.ort.archive_sha256 and not stack.ort.archive_url:
        tip = "set archive_url to the archive that digest is of, or remove archive_sha256"
        reader.problems.append(reader.fail(("ort", "archive_sha256"), "is set but archive_url is not", tip=tip))
    seen: set[str] = set()
    for index, patch in zip(indices, stack.patches, strict=True):
        if patch.id in seen:
            tip = "give each [[patch]] its own id"
            reader.problems.append(reader.fail(("patch", index, "id"), f"duplicate patch id {patch.id!r}", tip=tip))
        seen.add(patch.id)
        with reader.attempt():
            _validate_patch(reader, patch, ("patch", index))
    for variant in stack.variants:
        if not NAME.fullmatch(variant.name):  # it names folders under the work dir
            tip = "name it with letters, digits, '.', '_' and '-', starting with a letter or digit"
            reader.problems.append(reader.fail(("variant", variant.name), "is not a plain name", tip=tip))


def _validate_mode(reader: _Reader, patch: PatchEntry, where: tuple[str | int, ...]) -> None:
    if patch.mode == "in-base":
        if patch.guard is None:
            tip = 'add guard = { files = ["PATH"], patterns = ["REGEX"] } naming what the base must hold'
            raise reader.fail(where, "an in-base entry needs a guard that proves the change is in the base", tip=tip)
    elif not patch.file:
        number = int(where[-1]) + 1 if isinstance(where[-1], int) else 1
        file = f"patches/{number:04d}-{patch.id}.patch"
        tip = f"add file = {_toml_string(file)} (refresh-patches vendors it there)"
        raise reader.fail(where, "a patch entry needs its file under patches/", tip=tip)
    elif PurePosixPath(patch.file).parent != PurePosixPath("patches"):
        tip = f"write file = {_toml_string('patches/' + PurePosixPath(patch.file).name)}"
        raise reader.fail((*where, "file"), f"patch files live directly under patches/, got {patch.file!r}", tip=tip)


def _validate_patch(reader: _Reader, patch: PatchEntry, where: tuple[str | int, ...]) -> None:
    """Each check on its own: two problems in one entry are two lines of one run."""
    checks = (_check_commits, _check_platforms, _validate_mode, _check_origin, _check_guard)
    for check in checks:
        with reader.attempt():
            check(reader, patch, where)


def _check_commits(reader: _Reader, patch: PatchEntry, where: tuple[str | int, ...]) -> None:
    with reader.attempt():
        _check_hex(reader, patch.sha256, HEX64, (*where, "sha256"), "64-hex sha256")
    if not SHORT_OR_FULL_COMMIT.fullmatch(patch.origin.head):
        tip = "write the commit's hex id (7 to 40 lowercase characters), or leave head empty"
        raise reader.fail((*where, "origin", "head"), f"must be a commit id, got {patch.origin.head!r}", tip=tip)
    if HEX_PREFIX.fullmatch(patch.origin.base):
        _check_hex(reader, patch.origin.base, HEX40, (*where, "origin", "base"), "40-hex commit id or a branch")


def _check_platforms(reader: _Reader, patch: PatchEntry, where: tuple[str | int, ...]) -> None:
    for platform in patch.platforms:
        if platform not in PLATFORMS:
            tip = _hint(platform, list(PLATFORMS), "valid platforms")
            raise reader.fail((*where, "platforms"), f"unknown platform {platform!r}", tip=tip)


def _check_guard(reader: _Reader, patch: PatchEntry, where: tuple[str | int, ...]) -> None:
    if patch.guard is None:
        return
    for name in patch.guard.files:
        path = PurePosixPath(name)
        if not name or path.is_absolute() or ".." in path.parts or "\\" in name:
            tip = "name a file inside the source tree, relative to its root, e.g. cmake/CMakeLists.txt"
            raise reader.fail((*where, "guard"), f"file {name!r} is not a path inside the source tree", tip=tip)
    for pattern in patch.guard.patterns:
        try:
            re.compile(pattern)
        except re.error as exc:
            tip = "write a Python regular expression; escape ( [ . * + ? with a backslash to match them as text"
            raise reader.fail(
                (*where, "guard"), f"pattern {pattern!r} is not a regular expression: {exc}", tip=tip
            ) from None


def _check_origin(reader: _Reader, patch: PatchEntry, where: tuple[str | int, ...]) -> None:
    if patch.origin.kind == "pr" and not patch.origin.pr:
        raise reader.fail((*where, "origin"), "a pr origin needs its number (pr = N)", tip="add pr = N to the origin")
    if patch.origin.kind != "local" and not patch.origin.repository:
        tip = 'add repository = "https://github.com/OWNER/REPO" to the origin'
        raise reader.fail((*where, "origin"), f"a {patch.origin.kind} origin needs a repository URL", tip=tip)


def _read(path: Path, bounds: Bounds) -> tuple[str, dict[str, Any]]:
    """The text and the TOML document of ``path``, or one line saying why there is none."""
    try:
        data = read_at_most(path, size_limit(bounds.stack_file_mib))
    except FileNotFoundError:
        msg = f"no stack file at {path}"
        raise ConfigError(msg, tip="run from the project root or pass --stack PATH") from None
    except OSError as exc:
        msg = f"cannot read {path}: {exc.strerror or exc}"
        raise ConfigError(msg, tip="pass --stack the path of a readable stack.toml") from None
    if data is None:
        msg = f"{path} is larger than {bounds.stack_file_mib:g} MiB: not a stack file"
        raise ConfigError(msg, tip="check --stack; for a larger stack file raise ORTSTACK_STACK_FILE_MAX_MIB")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        msg = f"{path}:{line}: not UTF-8 text"
        raise ConfigError(msg, tip="save the file as UTF-8") from None
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        said = " ".join(str(exc).split())
        at = _TOML_AT.search(said)
        where = f"{path}:{at.group(1)}" if at else str(path)
        reason = _TOML_AT.sub("", said)
        msg = f"{where}: not valid TOML: {reason}" + (f" (column {at.group(2)})" if at else "")
        tip = "TOML wants key = value, strings in double quotes, tables as [name] and arrays as [1, 2]"
        raise ConfigError(msg, tip=tip) from None
    except RecursionError:  # deeper than the parser can follow: far past the bound
        raise _too_deep(path, bounds) from None
    if nesting_of(document, bounds.nesting) > bounds.nesting:
        raise _too_deep(path, bounds)
    return text, document


def _too_deep(path: Path, bounds: Bounds) -> ConfigError:
    msg = f"{path}: arrays or tables nest more than {bounds.nesting} deep: not a stack file"
    return ConfigError(msg, tip="check --stack; for deeper nesting raise ORTSTACK_MAX_NESTING")


def _named_tables(reader: _Reader, data: dict[str, Any], key: str, cls: type[T], *, named: bool) -> dict[str, T]:
    """The ``[key.NAME]`` tables, each built as ``cls`` (given its ``name`` when ``named``); problems recorded."""
    raw = data.get(key, {})
    if not isinstance(raw, dict):
        tip = f"write each as its own [{key}.NAME] table"
        reader.problems.append(reader.fail((key,), f"must be tables ([{key}.NAME])", tip=tip))
        return {}
    built: dict[str, T] = {}
    for name, table in raw.items():
        with reader.attempt():
            reader.check_text(name, (key, name))
            built[name] = reader.build(cls, table, (key, name), **({"name": name} if named else {}))
    return built


def load(path: Path, bounds: Bounds | None = None) -> Stack:
    """Read and validate ``path`` (no more of it than ``bounds`` allow); every problem the file has is
    reported, each with its line."""
    text, data = _read(path, bounds or Bounds())
    reader = _Reader(path=path, text=text)
    allowed = ["ort", "patch", "variant", "build", "deps"]
    for key in data:
        if key not in allowed:
            reader.problems.append(reader.fail((key,), "unknown table", tip=_hint(key, allowed, "valid tables")))
    if "ort" not in data:
        tip = 'add [ort] with repository = "URL" and commit = "40-hex id"'
        reader.problems.append(reader.fail(("ort",), "missing required table [ort]", tip=tip))
    ort = reader.value(lambda: reader.build(OrtPin, data.get("ort", {}), ("ort",)))
    raw_patches = data.get("patch", [])
    if not isinstance(raw_patches, list):
        tip = "write each patch as its own [[patch]] table"
        reader.problems.append(reader.fail(("patch",), "must be an array of tables ([[patch]])", tip=tip))
        raw_patches = []
    entries: dict[int, PatchEntry] = {}
    for i, raw in enumerate(raw_patches):
        with reader.attempt():
            entries[i] = reader.build(PatchEntry, raw, ("patch", i))
    patches = tuple(entries.values())
    variants = tuple(_named_tables(reader, data, "variant", Variant, named=True).values())
    build = reader.value(lambda: reader.build(BuildOptions, data.get("build", {}), ("build",)))
    dep_sources = _named_tables(reader, data, "deps", DepSource, named=False)
    # Entries that failed to build are left out; the rest are still validated, so nothing is hidden.
    stack = None
    if ort is not None and build is not None:
        stack = Stack(ort=ort, patches=patches, variants=variants, build=build, deps=dep_sources, path=path)
        _validate(reader, stack, tuple(entries))
    reader.raise_problems()
    assert stack is not None  # no problem was found, so every table was built
    return stack
