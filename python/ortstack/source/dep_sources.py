"""Dependencies taken from a local source directory or from installed packages, not from the mirror.

This is what air-gapped and pre-cloned setups need: ``[deps.NAME] source_dir = "…"`` in stack.toml
(or ``--dep-source NAME=PATH``) gives onnxruntime's FetchContent a local tree
(``FETCHCONTENT_SOURCE_DIR_<NAME>``); ``installed = true`` leaves a dependency to cmake's
``find_package`` (``FETCHCONTENT_TRY_FIND_PACKAGE_MODE=OPT_IN``).

FetchContent skips a dependency's PATCH_COMMAND when its source dir is given, so onnxruntime's own
``cmake/patches/<dep>/…`` would be lost; ortstack applies them itself, to a copy in the cache (the
user's directory is never written). When the source is a git checkout, its commit is checked
against the deps.txt pin (a commit in the URL, or a tag); anything else is used as it is, and said so.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ortstack import _run, diskspace, log
from ortstack.bounds import size_limit
from ortstack.cache import make_read_only, remove_tree
from ortstack.errors import ConfigError, FetchError, PatchError
from ortstack.lockfile import write_atomic
from ortstack.patches import series
from ortstack.source import deps, fetch, ort_tree

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    from ortstack.cache import Cache
    from ortstack.config import Stack
    from ortstack.settings import Settings
    from ortstack.source.deps import Dependency
    from ortstack.source.ort_tree import NeededDependency, TreePlan

COMMIT_IN_URL = re.compile(r"/archive/([0-9a-f]{40})(?:[/.]|$)")
TAG_IN_URL = re.compile(r"/(?:archive/refs/tags|releases/download)/([^/]+?)(?:\.zip|\.tar\.gz|/|$)")
MARKER = ".ortstack-source.json"


@dataclass(frozen=True, kw_only=True)
class PreparedSource:
    name: str
    path: Path
    """What cmake is given: the copy with onnxruntime's patches applied, or the user's dir itself."""
    pin: str
    """How the pin was checked, for the build info and the log."""


def parse_cli(pairs: list[str]) -> dict[str, Path]:
    """``NAME=PATH`` items of ``--dep-source``."""
    found: dict[str, Path] = {}
    for pair in pairs:
        name, sep, path = pair.partition("=")
        if not sep or not name or not path:
            msg = f"--dep-source takes NAME=PATH, got {pair!r}"
            raise ConfigError(msg, tip="for example --dep-source abseil_cpp=../abseil-cpp")
        found[name] = Path(path).expanduser()
    return found


def pinned_ref(dependency: Dependency) -> tuple[str, str]:
    """``("commit", id)`` or ``("tag", name)`` from the deps.txt URL, or ``("", "")``."""
    if match := COMMIT_IN_URL.search(dependency.url):
        return "commit", match.group(1)
    if match := TAG_IN_URL.search(dependency.url):
        return "tag", match.group(1)
    return "", ""


def _git_out(args: list[str], cwd: Path, env: Mapping[str, str]) -> str | None:
    try:
        result = _run.run(["git", *args], cwd=cwd, env=env, capture=True, quiet=True, check=False)
    except OSError:
        return None
    return result.stdout.strip() if result.returncode == 0 else None


def check_pin(dependency: Dependency, source: Path, env: Mapping[str, str]) -> str:
    """Compare a git checkout's commit with the pin; returns what was checked, raises on a mismatch."""
    top = _git_out(["rev-parse", "--show-toplevel"], source, env)
    if top is None or Path(top).resolve() != source.resolve():
        return "not a git checkout: used as it is, pin not checked"
    head = _git_out(["rev-parse", "HEAD"], source, env) or ""
    kind, ref = pinned_ref(dependency)
    expected = ref if kind == "commit" else _git_out(["rev-parse", "--verify", "-q", f"{ref}^{{commit}}"], source, env)
    if kind == "tag" and expected is None:
        return f"git checkout at {head[:12]}; tag {ref} is not in it, so the pin was not checked"
    if not kind:
        return f"git checkout at {head[:12]}; the deps.txt URL names no commit or tag"
    if head != expected:
        msg = f"dependency {dependency.name}: {source} is at {head[:12]}, but deps.txt pins {kind} {ref}"
        raise FetchError(
            msg, tip=f"check out {ref} there (git -C {source} checkout {ref}), or point at another checkout"
        )
    if _git_out(["status", "--porcelain", "--untracked-files=no"], source, env):
        return f"{kind} {ref} ({head[:12]}), with local changes"
    return f"{kind} {ref} ({head[:12]})"


def _identity(source: Path, env: Mapping[str, str]) -> str:
    """What the copy depends on: the commit and local diff of a checkout, else every file's size and mtime."""
    head = _git_out(["rev-parse", "HEAD"], source, env)
    if head is not None:
        return head + (_git_out(["diff", "HEAD"], source, env) or "")
    return "\n".join(sorted(_file_stamps(source)))


def _file_stamps(root: Path) -> Iterator[str]:
    """``relative/path:size:mtime_ns`` of every file under ``root``, symlinked folders not entered.

    os.scandir, not pathlib: a build that changes nothing walks each plain source folder (15,719 files for
    onnxruntime 1.30's), and pathlib's per-file objects made that most of a no-op build's time.
    """
    prefix = len(str(root)) + len(os.sep)
    folders = [str(root)]
    while folders:
        with os.scandir(folders.pop()) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    folders.append(entry.path)
                elif entry.is_file():
                    found = entry.stat()
                    yield f"{entry.path[prefix:].replace(os.sep, '/')}:{found.st_size}:{found.st_mtime_ns}"


def apply_ort_patch(patch: Path, target: Path, env: Mapping[str, str]) -> str:
    """Apply one of onnxruntime's dependency patches the way its cmake does; the reason it failed, or "".

    onnxruntime runs ``patch --binary --ignore-whitespace -p1`` (its PATCH_COMMANDs), and GNU patch
    takes a hunk whose outer context lines moved a little (fuzz): Dawn v20260817's tree needs that for
    onnxruntime 1.30's dawn_binskim.patch. git apply, which refuses fuzz, is the fallback where no
    ``patch`` is installed.
    """
    gnu_patch = _run.which("patch", env)
    if gnu_patch is not None:
        argv = [gnu_patch, "--binary", "--ignore-whitespace", "-p1", "--batch", "--no-backup-if-mismatch"]
        argv += ["--silent", "-i", str(patch)]
    else:
        # The ceiling keeps git from finding a repository around the target: it is a plain folder.
        env = {**env, "GIT_CEILING_DIRECTORIES": str(target.parent)}
        argv = ["git", "apply", "--ignore-whitespace", "--whitespace=nowarn", "-p1", str(patch)]
    applied = _run.run(argv, cwd=target, env=env, capture=True, check=False, quiet=True)
    if applied.returncode == 0:
        return ""
    said = [line for line in (applied.stderr + applied.stdout).splitlines() if line.strip()]
    return said[-1] if said else f"exit status {applied.returncode}"


def _apply(patch: Path, target: Path, dependency: str, env: Mapping[str, str]) -> None:
    if reason := apply_ort_patch(patch, target, env):
        msg = f"onnxruntime's patch {patch.name} does not apply to the local {dependency} source: {reason}"
        raise PatchError(msg, tip="is the local source at the pinned version? its directory was not changed")


def prepare(
    need: NeededDependency, source: Path, *, tree: Path, cache: Cache, env: Mapping[str, str]
) -> PreparedSource:
    """The source dir cmake gets for ``need``: the user's own when no patch applies, else a patched copy."""
    if not source.is_dir():
        msg = f"dependency {need.name}: source dir {source} does not exist"
        raise ConfigError(msg, tip=f"fix [deps.{need.name}] source_dir in stack.toml or --dep-source")
    pin = check_pin(need.dependency, source, env)
    patches = [tree / "cmake" / p for p in need.patches]
    if not patches:
        return PreparedSource(name=need.name, path=source.resolve(), pin=pin)
    missing = [p for p in patches if not p.is_file()]
    if missing:
        msg = f"dependency {need.name}: onnxruntime's cmake applies {missing[0]}, which the tree lacks"
        raise PatchError(msg, tip="the prepared tree is incomplete: run `ortstack patch` again")
    key = hashlib.sha256(
        json.dumps(
            [need.name, _identity(source, env), [hashlib.sha256(p.read_bytes()).hexdigest() for p in patches]]
        ).encode()
    ).hexdigest()[:16]
    final = cache.root / "dep-sources" / f"{need.name}-{key}"
    with cache.lock(f"dep-source-{need.name}-{key}", what=f"the patched {need.name} source"):
        if (final / MARKER).is_file():
            return PreparedSource(name=need.name, path=final, pin=pin)
        cache.remove_stale_temps(final.parent, final.name)
        staged = cache.temp_dir(final.parent, final.name)
        try:
            shutil.copytree(source, staged, symlinks=True, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".git"))
            for patch in patches:
                _apply(patch, staged, need.name, env)
            record = {"dependency": need.name, "source": str(source), "patches": [p.name for p in patches]}
            write_atomic(staged / MARKER, json.dumps(record, indent=2).encode())
            make_read_only(staged)
            remove_tree(final)
            staged.rename(final)
        except BaseException:
            remove_tree(staged)
            raise
    return PreparedSource(name=need.name, path=final, pin=pin)


def declared_sources(stack: Stack, cli: Mapping[str, Path]) -> dict[str, Path]:
    """Local source dirs by deps.txt name: ``[deps.NAME] source_dir`` (relative to the stack file), CLI wins."""
    found = {
        name: (stack.root / Path(entry.source_dir).expanduser()).resolve()
        for name, entry in stack.deps.items()
        if entry.source_dir
    }
    return {**found, **{name: path.resolve() for name, path in cli.items()}}


def is_installed(stack: Stack, name: str) -> bool:
    """``[deps.NAME] installed = true``: cmake's find_package takes it (before any local source)."""
    entry = stack.deps.get(name)
    return entry is not None and entry.installed


@dataclass(frozen=True, kw_only=True)
class SourcePlan:
    """Where each dependency a variant's configure needs comes from."""

    defines: dict[str, str]
    """``FETCHCONTENT_SOURCE_DIR_<NAME>`` for local sources, and the find_package mode."""
    from_mirror: tuple[Dependency, ...]
    local: tuple[PreparedSource, ...]
    installed: tuple[str, ...]


def plan_sources(
    stack: Stack, tree_plan: TreePlan, local: Mapping[str, Path], *, tree: Path, cache: Cache, env: Mapping[str, str]
) -> SourcePlan:
    """Prepare local sources (pin checked, onnxruntime's patches applied) and list what the mirror must hold.

    Dawn is left to ``dawn``: onnxruntime takes a local Dawn through its own option, not FetchContent's.
    """
    defines: dict[str, str] = {}
    from_mirror: list[Dependency] = []
    prepared: list[PreparedSource] = []
    installed: list[str] = []
    for need in tree_plan.needed:
        if is_installed(stack, need.name):
            installed.append(need.name)
        elif need.name in local and need.name != "dawn":
            source = prepare(need, local[need.name], tree=tree, cache=cache, env=env)
            prepared.append(source)
            defines[ort_tree.fetchcontent_source_define(need.content_name)] = source.path.as_posix()
        elif need.name not in local:
            from_mirror.append(need.dependency)
    # A name deps.txt lacks is a mistake; one that only another variant uses is not (one set of
    # --dep-source serves every variant of a stack).
    used = {need.name for need in tree_plan.needed}
    unknown = sorted(set(local) - {d.name for d in deps.read(tree)} - used)
    if unknown:
        names = ", ".join(sorted(used))
        msg = f"local source given for {', '.join(unknown)}, which is not an entry of {deps.DEPS_FILE}"
        raise ConfigError(msg, tip=f"the deps.txt entries this variant's configure uses: {names}")
    if unused := sorted(set(local) - used):
        log.info(f"local sources not used by this variant's configure: {', '.join(unused)}")
    if installed or stack.build.system_libraries:
        defines["FETCHCONTENT_TRY_FIND_PACKAGE_MODE"] = "OPT_IN"
    return SourcePlan(
        defines=defines, from_mirror=tuple(from_mirror), local=tuple(prepared), installed=tuple(installed)
    )


def wanted_from_mirror(settings: Settings, stack: Stack, tree: Path, local: Mapping[str, Path]) -> list[Dependency]:
    """deps.txt entries some variant's configure needs on this host and no local source replaces."""
    wanted: dict[str, Dependency] = {}
    for variant in stack.variants:
        prepared = settings.work_dir / "prepared" / variant.name
        variant_tree = prepared if (prepared / deps.DEPS_FILE).is_file() else tree
        try:
            tree_plan = ort_tree.plan(variant_tree, variant, series.host_platform())
        except ConfigError as exc:
            log.warn(f"not mirroring for {exc.message} (`ortstack build` refuses it)")
            continue
        for need in tree_plan.needed:
            if need.name not in local and not is_installed(stack, need.name):
                wanted[need.dependency.url] = need.dependency
    return list(wanted.values())


def mirror_for(settings: Settings, source_dir: Path, stack: Stack, local: Mapping[str, Path]) -> str:
    """Mirror what the variants' configures need from the pin's deps.txt and each prepared tree's."""
    wanted = wanted_from_mirror(settings, stack, source_dir, local)
    mirror = deps.mirror_path(settings)
    if deps.missing_from_mirror(wanted, mirror):
        diskspace.check("deps", mirror, settings.env)
    max_bytes = size_limit(settings.bounds.download_mib)
    outcomes = deps.mirror_all(wanted, mirror, fetch.cache_for(settings), max_bytes=max_bytes)
    fetched = sum(1 for outcome in outcomes.values() if outcome == "downloaded")
    return f"{len(outcomes)} deps.txt entries the configure needs are in {mirror} ({fetched} downloaded now)"
