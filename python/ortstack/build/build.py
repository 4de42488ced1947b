"""Build one variant's wheel from its prepared tree: incremental, cached, with provenance.

Order of work, cheapest first, so that nothing expensive starts before everything is known good:
tools found -> variant validated against the pin -> fingerprint compared (a no-op returns here) ->
deps mirror and Dawn checked -> project rendered -> ``python -m build`` (scikit-build-core + cpp_ext) in
the stable build dir -> contents checked -> auditwheel -> wheels moved into dist/.

The build dir (``<work>/cmake/<variant>``) is kept between builds: onnxruntime's cmake configures
again only when the variant's options change (cpp_ext makes the options file a configure
dependency), and ninja recompiles only what a patch touched.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from ortstack import __version__, _git, _run, diskspace, log
from ortstack.build import native_tests, sccache_dist, toolchain, variants, wheel
from ortstack.build.buildinfo import BuildInfo, PatchInfo
from ortstack.cache import remove_tree
from ortstack.errors import BuildError, FetchError, UsageError
from ortstack.patches import prepare, series
from ortstack.source import dawn, dawn_plan, dep_sources, deps, fetch, ort_tree, wgsl

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ortstack.config import Stack, Variant
    from ortstack.settings import Settings

STAMP = "ortstack-stamp.json"


@dataclass(frozen=True, kw_only=True)
class BuildRequest:
    jobs: int | None = None
    """Parallel jobs asked for on the command line (still capped by memory)."""
    build_dir: Path | None = None
    """Another build dir than ``<work>/cmake/<variant>``."""
    allow_dawn_fetch: bool = False
    """Let ORT download Dawn and Dawn clone its third-party sources during configure (needs network)."""
    dep_sources: dict[str, Path] = dataclasses.field(default_factory=dict)
    """Local source dirs by deps.txt name (``--dep-source``); they win over ``[deps.NAME]``."""
    sccache_scheduler: str | None = None
    """An sccache-dist scheduler URL from the command line (over env and stack.toml)."""
    sccache_local_fallback: bool | None = None
    """Allow (or forbid) compiling here when the scheduler cannot take compiles; ``None``: env, stack.toml."""


@dataclass(frozen=True, kw_only=True)
class BuildResult:
    variant: str
    wheels: tuple[Path, ...]
    up_to_date: bool
    seconds: float
    log_file: Path | None = None


def prepared_tree(settings: Settings, variant: Variant) -> tuple[Path, str]:
    """The variant's prepared tree and its commit."""
    tree = prepare.tree_path(settings.work_dir, variant.name)
    try:
        commit = _run.run(["git", "rev-parse", "HEAD"], cwd=tree, env=settings.env, capture=True, quiet=True)
    except (subprocess.CalledProcessError, FileNotFoundError, NotADirectoryError):
        msg = f"no prepared tree for variant {variant.name!r} at {tree}: an earlier step has not run"
        raise UsageError(msg, tip=f"run `ortstack patch --variant {variant.name}` first") from None
    return tree, commit.stdout.strip()


def uncommitted_tree(tree: Path, env: Mapping[str, str]) -> str | None:
    """The id of a git tree of the prepared tree's files as they are, when they differ from its HEAD.

    Edits made there and not committed yet are what a user tries before exporting them: the build must
    see them (HEAD alone would call the last wheel up to date) and the wheel must not pass for HEAD's.
    A scratch copy of the index takes the files, so the tree's own index and files stay as they are.
    """
    if not _git.out(["status", "--porcelain"], cwd=tree, env=env, error=BuildError):
        return None
    git_dir = Path(_git.out(["rev-parse", "--absolute-git-dir"], cwd=tree, env=env, error=BuildError))
    with tempfile.TemporaryDirectory() as scratch:
        index = Path(scratch) / "index"
        index.write_bytes((git_dir / "index").read_bytes())
        scratch_env = {**env, "GIT_INDEX_FILE": str(index)}
        _git.out(["add", "-A"], cwd=tree, env=scratch_env, error=BuildError)
        return _git.out(["write-tree"], cwd=tree, env=scratch_env, error=BuildError)


def applied_patches(stack: Stack, platform: str) -> tuple[PatchInfo, ...]:
    """Patches that apply on ``platform``, with the sha256 of each vendored file."""
    found = []
    for entry in stack.patches:
        if entry.mode != "apply" or (entry.platforms and platform not in entry.platforms):
            continue
        path = stack.root / entry.file
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else entry.sha256
        found.append(PatchInfo(id=entry.id, sha256=digest))
    return tuple(found)


def _ort_options_file(options: dict[str, str]) -> bytes:
    # An initial cache for `cmake -C`: bracket arguments need no escaping; FORCE so a changed value wins.
    lines = ["# onnxruntime's cmake options for this variant, written by ortstack."]
    lines += [f'set({name} [==[{value}]==] CACHE STRING "" FORCE)' for name, value in sorted(options.items())]
    return ("\n".join(lines) + "\n").encode("utf-8")


def _last_compiler_error(log_file: Path) -> str:
    """The line a person needs: the last compiler error, else cmake's error, else the last failed step."""
    text = log_file.read_text(encoding="utf-8", errors="replace")
    patterns = (
        r"^.*:\d+:(?:\d+:)? (?:fatal )?error: .*$",  # gcc, clang
        r"^.*\berror [A-Z]+\d+: .*$",  # MSVC
        r"^\s*CMake Error.*\n.*\S.*$",  # cmake, with the line that says what
        r"^\s*FAILED: .*$",  # ninja
    )
    for pattern in patterns:
        matches = re.findall(pattern, text, flags=re.MULTILINE)
        if matches:
            return " ".join(str(matches[-1]).split())
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip() if lines else "(no output)"


def provided_features(stack: Stack, platform: str) -> list[str]:
    """What the applied patches and the in-base entries (proven by their guards) say the wheel provides."""
    found: set[str] = set()
    for entry in stack.patches:
        if not entry.platforms or platform in entry.platforms:
            found.update(entry.provides)
    return sorted(found)


_LINK_OR_SUBMODULE = ("120000", "160000")
TREE_RECORD_FORMAT = 2  # ortstack-tree.json with each file's blob and mtime


def _tree_blobs(tree: Path, env: Mapping[str, str], treeish: str) -> dict[str, tuple[str, bool]]:
    """Each file of ``treeish`` in ``tree``: its blob id, and whether it is a plain file."""
    listing = _run.run(["git", "ls-tree", "-r", "-z", treeish], cwd=tree, env=env, capture=True, quiet=True).stdout
    blobs = {}
    for entry in filter(None, listing.split("\0")):
        meta, _, path = entry.partition("\t")
        mode, _, blob = meta.split()
        blobs[path] = (blob, mode not in _LINK_OR_SUBMODULE)
    return blobs


def _read_tree_record(record: Path) -> dict[str, tuple[str, int | None]]:
    """The last build's files: blob id and the mtime (ns) its compile saw (none in an older record)."""
    try:
        data = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if data.get("format") == TREE_RECORD_FORMAT:
        return {path: (blob, mtime) for path, (blob, mtime) in data["files"].items()}
    return {path: (blob, None) for path, blob in data.items()}  # ortstack before the mtimes were kept


def _set_mtime(file: Path, wanted: int | None, *, plain: bool) -> int | None:
    """Give ``file`` the mtime ``wanted`` (None: leave it); returns the mtime the file system kept (None
    for a link or a submodule, whose own mtime ninja never reads)."""
    mtime = file.stat().st_mtime_ns if plain else None
    if wanted is None or wanted == mtime:
        return mtime
    os.utime(file, ns=(wanted, wanted))
    return file.stat().st_mtime_ns if plain else None  # possibly coarser than asked


def sync_mtimes(tree: Path, build_dir: Path, env: Mapping[str, str], treeish: str = "HEAD") -> int:
    """Make each file's mtime tell ninja whether its content changed since the last build; returns how
    many did. ``treeish`` names the files as they are (HEAD, or a tree of the uncommitted edits).

    A file whose content changed gets a fresh mtime: the prepared tree is rebuilt by copying with the
    source's mtimes, so a file whose patch was dropped would come back older than its object file. A file
    whose content is the same gets back the mtime the last build saw: re-preparing rewrites every patched
    file, and one changed patch would otherwise recompile all that include any patched header.
    """
    record = build_dir / "ortstack-tree.json"
    current = _tree_blobs(tree, env, treeish)
    previous = _read_tree_record(record)
    now = time.time_ns()
    changed = 0
    files: dict[str, tuple[str, int | None]] = {}
    for path, (blob, plain) in current.items():
        seen_blob, seen_mtime = previous.get(path, ("", None))
        content_changed = bool(previous) and seen_blob != blob
        with contextlib.suppress(FileNotFoundError):
            files[path] = (blob, _set_mtime(tree / path, now if content_changed else seen_mtime, plain=plain))
            changed += content_changed
    data = {"format": TREE_RECORD_FORMAT, "files": files}
    wheel.write_if_changed(record, json.dumps(data, sort_keys=True).encode())
    return changed


# cpp_ext/CMakeLists.txt: onnxruntime's own build dir, and ExternalProject's stamps for it.
ORT_BINARY_DIR = "ort"
ORT_PREFIX_DIR = "ort-prefix"
_CACHED_COMPILER = re.compile(r"^(CMAKE_CXX?_COMPILER):[A-Z]+=(.*)$", re.MULTILINE)


_CACHED_DIRS = re.compile(r"^(CMAKE_CACHEFILE_DIR|CMAKE_HOME_DIRECTORY):INTERNAL=(.*)$", re.MULTILINE)


def _cmake_cache(cache_dir: Path) -> str | None:
    """The text of ``cache_dir``'s CMakeCache.txt; None before its first configure."""
    try:
        return (cache_dir / "CMakeCache.txt").read_text("utf-8")
    except OSError:
        return None


def _start_ort_afresh(build_dir: Path) -> None:
    """Remove onnxruntime's build dir and ExternalProject's stamps for it: the next build configures it anew."""
    remove_tree(build_dir / ORT_BINARY_DIR)
    remove_tree(build_dir / ORT_PREFIX_DIR)


def _configured_elsewhere(cache_dir: Path, source: Path) -> str | None:
    """Why cmake would refuse ``cache_dir`` for ``source``: its cache names another build or source dir."""
    if (text := _cmake_cache(cache_dir)) is None:
        return None
    cached = dict(_CACHED_DIRS.findall(text))
    for name, wanted in (("CMAKE_CACHEFILE_DIR", cache_dir), ("CMAKE_HOME_DIRECTORY", source)):
        # normcase: cmake writes C:/x where Python may say c:\x
        if name in cached and os.path.normcase(Path(cached[name]).resolve()) != os.path.normcase(wanted.resolve()):
            return f"configured as {cached[name]}"
    return None


def _forget_moved_build_dir(build_dir: Path, project: Path, tree: Path) -> None:
    """Start the build dir afresh when its caches were written for other paths: a work dir moved or copied,
    or ``--build-dir`` given a variant's old build dir. cmake refuses such a cache ("does not match the source
    ... used to generate cache") and its objects name the old paths anyway."""
    reason = _configured_elsewhere(build_dir, project)
    reason = reason or _configured_elsewhere(build_dir / ORT_BINARY_DIR, tree / "cmake")
    if reason is None:
        return
    log.info(f"cmake state starts afresh: build dir {build_dir} was {reason}")
    (build_dir / "CMakeCache.txt").unlink(missing_ok=True)
    remove_tree(build_dir / "CMakeFiles")
    _start_ort_afresh(build_dir)


def _forget_other_compilers(build_dir: Path, tools: toolchain.Toolchain) -> None:
    """Empty onnxruntime's build dir when its cache names other compilers than this build's. cmake would
    see the change, delete that cache and configure again without the initial cache (-C) the options
    come in: every option lost, offline dependency sources among them. Its objects are of the other
    compilers anyway."""
    if (text := _cmake_cache(build_dir / ORT_BINARY_DIR)) is None:
        return
    cached = dict(_CACHED_COMPILER.findall(text))
    wanted = {"CMAKE_C_COMPILER": tools.c_compiler, "CMAKE_CXX_COMPILER": tools.cxx_compiler}
    changed = [f"{cached[name]} -> {path}" for name, path in wanted.items() if cached.get(name, path) != path]
    if changed:
        log.info(f"compilers changed ({', '.join(changed)}): onnxruntime's build dir starts afresh")
        _start_ort_afresh(build_dir)


def _write_ort_options(build_dir: Path, options: dict[str, str]) -> Path:
    """The initial cache onnxruntime's configure step reads. That step runs again only when the file changes,
    but ``--native-tests`` configures the build dir again with the unit tests on, which the wheel's options turn
    off: then the file is touched, or the wheel's build would build the unit tests too (and onnxruntime's Python
    target would copy their test data, which a source archive may not hold)."""
    options_file = build_dir / "ort-options.cmake"
    if wheel.write_if_changed(options_file, _ort_options_file(options)):
        return options_file
    cache = _cmake_cache(build_dir / ORT_BINARY_DIR)
    if cache is not None and re.search(rf"^{native_tests.UNIT_TESTS}:\w+=ON$", cache, re.MULTILINE):
        log.info("onnxruntime's build dir has its unit tests on (--native-tests): configuring it for the wheel")
        options_file.touch()
    return options_file


_CACHED_PYTHON = re.compile(r"^Python_EXECUTABLE:[A-Z]+=(.*)$", re.MULTILINE)
# An entry with the comment lines above it: a comment left without its entry breaks the cache.
_FIND_PYTHON_STATE = re.compile(r"(?:^//.*\n)*^_Python3?_\w+:INTERNAL=.*\n?", re.MULTILINE)


def _forget_other_python(build_dir: Path, python: str) -> None:
    """Drop FindPython's state from onnxruntime's cache when it was configured for another interpreter, as
    ``cmake -U`` would. FindPython takes the new interpreter but keeps the headers and NumPy it found for the
    old one, and then refuses them ("Could NOT find Python (missing: Development.Module NumPy)"): a wheel for
    a second Python could not be built in the same work dir."""
    if (text := _cmake_cache(build_dir / ORT_BINARY_DIR)) is None:
        return
    cached = _CACHED_PYTHON.search(text)
    if cached is None or cached.group(1) == python:
        return
    log.info(f"Python changed ({cached.group(1)} -> {python}): onnxruntime's configure looks for it afresh")
    (build_dir / ORT_BINARY_DIR / "CMakeCache.txt").write_text(_FIND_PYTHON_STATE.sub("", text), "utf-8")


def _fingerprint(parts: Mapping[str, object]) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def _stamped_wheels(build_dir: Path, fingerprint: str, dist: Path) -> tuple[Path, ...] | None:
    """The wheels of the last build when it had this fingerprint and they are still in dist/ unchanged."""
    try:
        stamp = json.loads((build_dir / STAMP).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if stamp.get("fingerprint") != fingerprint:
        return None
    wheels = []
    for name, digest in stamp.get("wheels", {}).items():
        path = dist / name
        if not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            return None
        wheels.append(path)
    return tuple(wheels) or None


def plan_rows(settings: Settings, stack: Stack, variant: Variant, request: BuildRequest) -> list[list[str]]:
    """What building ``variant`` would pass and take, decided from its prepared tree; nothing is built.

    Refusals are raised as the build would raise them, so ``--plan`` fails where the build would.
    """
    tree, _ = prepared_tree(settings, variant)
    tree_plan = ort_tree.plan(tree, variant, series.host_platform())
    local = dep_sources.declared_sources(stack, request.dep_sources)
    mirror = (tree / ort_tree.TREE_MIRROR_DIR) if not tree_plan.mirror_define else deps.mirror_path(settings)
    rows = [["option", name, value] for name, value in sorted(tree_plan.defines.items())]
    rows += [["not read by this tree", *item.split("=", 1)] for item in tree_plan.left_out]
    for need in tree_plan.needed:  # in the order of precedence dep_sources.plan_sources applies
        if dep_sources.is_installed(stack, need.name):
            origin = "installed package (find_package)"
        elif need.name in local:
            origin = (
                f"local {local[need.name]} ({dep_sources.check_pin(need.dependency, local[need.name], settings.env)})"
            )
        else:
            origin = f"mirror {mirror}"
        decided = "" if need.decided else "; configure decides, kept"
        patches = f"; applies {', '.join(Path(p).name for p in need.patches)}" if need.patches else ""
        rows.append(["dependency", need.name, f"{origin}{patches}{decided}"])
    return rows + _dawn_rows(settings, tree, tree_plan, local.get("dawn"))


def _dawn_rows(settings: Settings, tree: Path, tree_plan: ort_tree.TreePlan, local: Path | None) -> list[list[str]]:
    """The third-party folders Dawn's build uses, at their DEPS commits, once Dawn's sources are at hand."""
    dependency = next((d for d in tree_plan.dependencies if d.name == "dawn"), None)
    if dependency is None or not dawn.uses_dawn(tree_plan.defines):
        return []
    try:
        source = dawn.source_of(dependency, deps.mirror_path(settings), local)
    except FetchError as exc:
        return [["Dawn folder", "(not read yet)", exc.message]]
    found = dawn_plan.plan(tree, tree_plan.defines, series.host_platform(), source, dawn.revision_of(dependency))
    return [["Dawn folder", entry.path, entry.commit] for entry in found.third_party]


def _variant_build_dir(settings: Settings, variant: Variant, request: BuildRequest) -> Path:
    """``--build-dir``, else the variant's stable build dir under the work dir."""
    return request.build_dir or settings.work_dir / "cmake" / variant.name


def build_variant(settings: Settings, stack: Stack, variant: Variant, request: BuildRequest) -> BuildResult:
    """Build ``variant``'s wheel into dist/, or return the wheels there when nothing changed."""
    binding = variants.is_on(variants.resolve_defines(variant, series.host_platform()).get("onnxruntime_ENABLE_PYTHON"))
    tools = toolchain.detect(stack.build, settings.env, python_binding=binding)  # before anything is touched
    scheduler = sccache_dist.resolve(
        stack.build, settings.env, url=request.sccache_scheduler, local_fallback=request.sccache_local_fallback
    )
    if scheduler is not None:
        sccache_dist.check_toolchain(tools)
    build_dir = _variant_build_dir(settings, variant, request)
    with prepare.locked(build_dir, wait=settings.wait_for_lock, what="building in"):
        return _build(settings, stack, variant, request, tools=tools, build_dir=build_dir, scheduler=scheduler)


def _build(
    settings: Settings,
    stack: Stack,
    variant: Variant,
    request: BuildRequest,
    *,
    tools: toolchain.Toolchain,
    build_dir: Path,
    scheduler: sccache_dist.Scheduler | None,
) -> BuildResult:
    start = datetime.now(UTC)
    platform = series.host_platform()
    tree, tree_commit = prepared_tree(settings, variant)
    if (edited := uncommitted_tree(tree, settings.env)) is not None:
        log.warn(f"{tree} has uncommitted edits: building them (tree {edited[:12]}); export them to keep them")
        tree_commit = f"{tree_commit} + uncommitted tree {edited}"
    toolchain.check_cmake_version(tools, tree / "cmake" / "CMakeLists.txt")
    tree_plan = ort_tree.plan(tree, variant, platform)
    variant_defines = tree_plan.defines
    if "onnxruntime_WGSL_TEMPLATE" in variant_defines:
        toolchain.check_wgsl_generator(tree, settings.env)
    plan = variants.KINDS[variant.kind].wheel(variant, platform)
    dependencies = list(tree_plan.dependencies)
    mirror = deps.mirror_path(settings)
    jobs = toolchain.parallel_jobs(stack.build, request.jobs)
    local = dep_sources.declared_sources(stack, request.dep_sources)
    sources = dep_sources.plan_sources(
        stack, tree_plan, local, tree=tree, cache=fetch.cache_for(settings), env=settings.env
    )
    dawn_tree = dawn.for_build(
        tree=tree,
        defines=variant_defines,
        platform=platform,
        dependency=next((d for d in dependencies if d.name == "dawn"), None),
        mirror=mirror,
        local=local.get("dawn"),
        work_dir=settings.work_dir,
        allow_fetch=request.allow_dawn_fetch,
        env=settings.env,
    )
    ort_options = {
        "CMAKE_BUILD_TYPE": stack.build.build_type,
        "CMAKE_C_COMPILER": tools.c_compiler,
        "CMAKE_CXX_COMPILER": tools.cxx_compiler,
        "CMAKE_MAKE_PROGRAM": tools.ninja,
        "Python_EXECUTABLE": sys.executable,
        # Pinned, checksummed sources only, unless the user opts into installed libraries.
        "FETCHCONTENT_TRY_FIND_PACKAGE_MODE": "NEVER",
        **({deps.MIRROR_DEFINE: mirror.as_posix()} if tree_plan.mirror_define else {}),
        **toolchain.policy_defines(tools),
        **toolchain.linker_defines(platform),
        **tools.launcher_defines(),
        **sources.defines,
        **variant_defines,
        **(dawn_tree.cmake_defines if dawn_tree else {}),
    }
    patches = applied_patches(stack, platform)
    ort_version = (tree / "VERSION_NUMBER").read_text(encoding="utf-8").strip()
    provenance = {"tree": tree_commit, "options": variant_defines, "patches": [p.sha256 for p in patches]}
    version = f"{ort_version}+stack.{_fingerprint(provenance)[:10]}"
    template_root = wheel.project_template_root(settings.project_root)
    fingerprint = _fingerprint(
        {
            "version": version,
            "variant": dataclasses.asdict(variant),
            "ort_options": ort_options,
            "toolchain": [tools.compiler_version, tools.cmake_version, tools.cache],
            "python": sys.version_info[:2],
            "ortstack": __version__,
            "project": [
                hashlib.sha256(p.read_bytes()).hexdigest()
                for p in sorted((template_root / "cpp_ext").rglob("*"))
                if p.is_file() and "__pycache__" not in p.parts
            ],
            "template": hashlib.sha256((template_root / "pyproject.toml").read_bytes()).hexdigest(),
        }
    )
    existing = _stamped_wheels(build_dir, fingerprint, settings.dist_dir)
    if existing is not None:
        seconds = (datetime.now(UTC) - start).total_seconds()
        return BuildResult(variant=variant.name, wheels=existing, up_to_date=True, seconds=seconds)

    diskspace.check("build", build_dir, settings.env)
    _check_sources(list(sources.from_mirror), mirror)
    if not tree_plan.mirror_define:
        deps.link_tree_mirror(list(sources.from_mirror), mirror, tree)
    if dawn_tree is not None:
        dawn_tree.ensure(fetch.cache_for(settings), settings.env)
    log_file = settings.work_dir / "logs" / f"build-{variant.name}.log"
    env, distributed = _compile_env(settings, tools, scheduler, tree, log_file)
    info = BuildInfo(
        ort_version=ort_version,
        ort_commit=stack.ort.commit,
        tree_commit=tree_commit,
        dawn_revision=deps.dawn_revision(dependencies),
        patches=patches,
        variant=variant.name,
        kind=variant.kind,
        wheel_name=plan.name,
        version=version,
        cmake_options=ort_options,
        compiler=tools.compiler_version,
        platform=platform,
        date=start.isoformat(timespec="seconds"),
        ortstack_version=__version__,
        extra={
            "features": provided_features(stack, platform),
            "options_not_read_by_tree": list(tree_plan.left_out),
            "local_sources": {source.name: source.pin for source in sources.local},
            "installed_dependencies": list(sources.installed),
            "compiler_cache": {"tool": tools.cache, "distributed": distributed is not None and distributed.remote},
        },
    )
    staging = settings.work_dir / "project" / variant.name
    package_files, capi_files = wheel.render_project(
        template_root,
        staging,
        plan,
        version=version,
        description=f"onnxruntime {ort_version} ({variant.name} variant), built by ortstack",
        build_info=info.to_json(),
    )
    options_file = _write_ort_options(build_dir, ort_options)
    defines = {
        "ORTSTACK_ORT_SOURCE_DIR": tree.as_posix(),
        "ORTSTACK_ORT_OPTIONS": options_file.as_posix(),
        "ORTSTACK_KIND": variant.kind,
        "ORTSTACK_PACKAGE": plan.package,
        "ORTSTACK_LIBRARIES": ";".join(plan.libraries),
        "ORTSTACK_PACKAGE_FILES": ";".join(p.as_posix() for p in package_files),
        "ORTSTACK_CAPI_FILES": ";".join(p.as_posix() for p in capi_files),
        "ORTSTACK_JOBS": str(jobs),
        "ORTSTACK_WARNINGS_AS_ERRORS": "ON" if stack.build.warnings_as_errors else "OFF",
    }
    _forget_moved_build_dir(build_dir, staging / "cpp_ext", tree)
    sync_mtimes(tree, build_dir, settings.env, edited or "HEAD")
    _forget_other_compilers(build_dir, tools)
    _forget_other_python(build_dir, sys.executable)
    log.info(f"{plan.name} {version}: {jobs} jobs, compiler cache: {tools.cache or 'none'}, build dir {build_dir}")
    landed = _compile(
        settings,
        variant=variant,
        plan=plan,
        staging=staging,
        build_dir=build_dir,
        defines=defines,
        env=env,
        log_file=log_file,
        distributed=distributed,
    )
    stamp = {"fingerprint": fingerprint, "wheels": {w.name: hashlib.sha256(w.read_bytes()).hexdigest() for w in landed}}
    wheel.write_if_changed(build_dir / STAMP, json.dumps(stamp, indent=2).encode())
    seconds = (datetime.now(UTC) - start).total_seconds()
    return BuildResult(variant=variant.name, wheels=tuple(landed), up_to_date=False, seconds=seconds, log_file=log_file)


def run_native_tests(
    settings: Settings, stack: Stack, variant: Variant, request: BuildRequest
) -> list[native_tests.NativeResult]:
    """The stack's own native tests (``native_tests``), built and run in ``variant``'s build dir."""
    platform = series.host_platform()
    tests = native_tests.stack_tests(stack, platform)
    if not tests:
        log.info("the stack's patches add no native tests")
        return []
    tools = toolchain.detect(stack.build, settings.env, python_binding=False)  # the wheel's build checked it
    build_dir = _variant_build_dir(settings, variant, request)
    tree, _ = prepared_tree(settings, variant)
    # What the configure needs with the unit tests on (googletest, for one), from the same places as the wheel's.
    testing = dataclasses.replace(variant, cmake_defines={**variant.cmake_defines, native_tests.UNIT_TESTS: "ON"})
    tree_plan = ort_tree.plan(tree, testing, platform)
    local = dep_sources.declared_sources(stack, request.dep_sources)
    sources = dep_sources.plan_sources(
        stack, tree_plan, local, tree=tree, cache=fetch.cache_for(settings), env=settings.env
    )
    if missing := deps.missing_from_mirror(list(sources.from_mirror), deps.mirror_path(settings)):
        names = ", ".join(d.name for d in missing)
        msg = f"onnxruntime's unit tests need {names}, which the deps mirror does not hold"
        tip = "give each as a local source: --dep-source NAME=PATH, or [deps.NAME] source_dir"
        raise FetchError(msg, tip=tip)
    log_prefix = settings.work_dir / "logs" / f"native-tests-{variant.name}"
    with prepare.locked(build_dir, wait=settings.wait_for_lock, what="building in"):
        env, _ = _compile_env(settings, tools, None, tree, log_prefix.with_name(f"{log_prefix.name}-build.log"))
        return native_tests.build_and_run(
            tests,
            ort_build_dir=build_dir / "ort",
            defines=sources.defines,
            warnings_as_errors=stack.build.warnings_as_errors,
            cmake=tools.cmake,
            ninja=tools.ninja,
            jobs=toolchain.parallel_jobs(stack.build, request.jobs),
            env=env,
            log_prefix=log_prefix,
        )


def _compile_env(
    settings: Settings,
    tools: toolchain.Toolchain,
    scheduler: sccache_dist.Scheduler | None,
    tree: Path,
    log_file: Path,
) -> tuple[dict[str, str], sccache_dist.DistributedBuild | None]:
    """The compile's environment, with the cache server running; through ``scheduler``, checked first."""
    env = {**settings.env, **tools.cache_env, **wgsl.build_env(tree, settings)}
    if scheduler is None:
        toolchain.start_cache_server(tools, env, log_file.with_name("sccache-server.log"))
        return env, None
    distributed, dist_env = sccache_dist.prepare(tools, scheduler, env, settings.work_dir)
    return {**env, **dist_env}, distributed


def _compile(
    settings: Settings,
    *,
    variant: Variant,
    plan: variants.WheelPlan,
    staging: Path,
    build_dir: Path,
    defines: dict[str, str],
    env: dict[str, str],
    log_file: Path,
    distributed: sccache_dist.DistributedBuild | None,
) -> list[Path]:
    """Build the staging project's wheel into a temporary folder; dist/ changes only if all went well."""
    with tempfile.TemporaryDirectory(prefix=f"ortstack-{variant.name}-", dir=settings.work_dir) as tmp:
        raw_dir, repaired_dir = Path(tmp) / "raw", Path(tmp) / "repaired"
        # build calls the backend's build_wheel once (pip would ask for metadata first: a second run).
        argv = [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--skip-dependency-check"]
        argv += [str(staging), "--outdir", str(raw_dir), f"--config-setting=build-dir={build_dir.as_posix()}"]
        argv += [f"--config-setting=cmake.define.{k}={v}" for k, v in defines.items()]
        try:
            # Unbuffered, so the log and the terminal follow the compile as it runs, not when it ends.
            stop_when = distributed.should_stop if distributed is not None else None
            _run.run(argv, env={**env, "PYTHONUNBUFFERED": "1"}, log_file=log_file, stop_when=stop_when)
        except subprocess.CalledProcessError:
            if distributed is not None and distributed.stop_reason is not None:
                raise distributed.stop_reason from None
            msg = f"building variant {variant.name!r} failed: {_last_compiler_error(log_file)}"
            raise BuildError(msg, tip=f"full log: {log_file}; wheels already in dist/ are untouched") from None
        built = sorted(raw_dir.glob("*.whl"))
        if len(built) != 1:
            msg = f"expected one wheel from the build, got {len(built)} (log: {log_file})"
            raise BuildError(msg)
        wheel.check_contents(built[0], plan)
        repaired = wheel.repair(built[0], repaired_dir, env)
        if distributed is not None:
            distributed.finish()  # before dist/ changes: compiles that fell back fail the build here
        return wheel.replace_in_dist([repaired], settings.dist_dir, plan.name, variant.name)


def _check_sources(dependencies: list[deps.Dependency], mirror: Path) -> None:
    """Every deps.txt entry the configure takes from the mirror is there."""
    missing = deps.missing_from_mirror(dependencies, mirror)
    if missing:
        names = ", ".join(d.name for d in missing)
        msg = f"{len(missing)} deps.txt entries this configure needs are not in the mirror {mirror}: {names}"
        tip = "run `ortstack fetch --deps` (needs network once), or give local sources: [deps.NAME] source_dir"
        raise FetchError(msg, tip=tip)
