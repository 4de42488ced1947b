"""Dawn's third-party sources fetched by commit and assembled with Dawn into one complete tree.

onnxruntime builds Dawn from its deps.txt archive, which lacks Dawn's third-party folders: unless
``onnxruntime_CUSTOM_DAWN_SRC_PATH`` names a complete tree, ORT forces ``DAWN_FETCH_DEPENDENCIES`` and
Dawn clones them while cmake configures (failing silently offline). ortstack instead fetches what
``dawn_plan`` says the build uses (``fetch --deps``: into the cache, at the commits in Dawn's DEPS),
assembles Dawn + those folders + ORT's Dawn patches (which ORT skips for a custom tree) into
``<work>/dawn/<key>``, and hands that to ORT with ``DAWN_JINJA2_DIR``/``DAWN_MARKUPSAFE_DIR`` taken from
installed packages when they import. ``--allow-dawn-fetch`` keeps ORT's own way, loudly.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ortstack import __version__, _run, log
from ortstack.cache import remove_tree
from ortstack.errors import BuildError, ConfigError, FetchError, PatchError
from ortstack.lockfile import write_atomic
from ortstack.source import archive, dep_sources, deps, fetch
from ortstack.source.dawn_plan import (
    CUSTOM_DAWN_DEFINE,
    ORT_DEPS_CMAKE,
    PYTHON_PACKAGES,
    DawnSource,
    Plan,
    ThirdParty,
    plan,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ortstack.cache import Cache
    from ortstack.source.deps import Dependency

# --------------------------------------------------------------------------------------------------
# Fetching the third-party sources, and assembling one complete Dawn tree.


def installed_package(name: str) -> Path | None:
    """The folder of an importable package (what ``--jinja2-path`` wants), or None."""
    spec = importlib.util.find_spec(name)
    locations = spec.submodule_search_locations if spec is not None else None
    return Path(next(iter(locations))) if locations else None


def _has_files(folder: Path) -> bool:
    """A third-party folder a checkout really holds (an empty one is a submodule never cloned)."""
    return folder.is_dir() and any(folder.iterdir())


def to_fetch(plans: list[Plan]) -> list[ThirdParty]:
    """The DEPS entries of ``plans`` that must come from git (an installed package stands in for the rest)."""
    wanted = {(t.path, t.commit): t for p in plans for t in p.third_party}
    return [t for t in wanted.values() if not (t.python_package and installed_package(t.python_package))]


FETCH_TIP = (
    "check that the commit exists in that repository (Dawn's DEPS names it) and that the URL is reachable; "
    "without network to it, declare a Dawn checkout that has its third-party folders: [deps.dawn] source_dir"
)


def fetch_all(cache: Cache, entries: list[ThirdParty], env: Mapping[str, str]) -> int:
    """Fetch each entry at its DEPS commit into the cache; returns how many were fetched now."""
    fetched = 0
    for entry in entries:
        if cache.source_record(entry.commit) is None:
            fetched += 1
        fetch.git_tree(cache, entry.repository, entry.commit, env, what=f"Dawn's {entry.path}", tip=FETCH_TIP)
    return fetched


@dataclass(frozen=True, kw_only=True)
class Assembly:
    """One variant's complete Dawn tree: where it goes, and what it is made from.

    Its folder is named by a digest of every input (Dawn's pin, ORT's Dawn cmake and patches, the
    variant's options, the platform, a local checkout's commit), so deciding it reads no archive: a
    no-op build stays fast, and what is missing is reported in the order the build needs it.
    """

    ort_tree: Path
    defines: Mapping[str, str]
    """The variant's cmake options (what ORT forces on Dawn depends on them)."""
    platform: str
    dependency: Dependency
    mirror: Path
    local: Path | None
    destination: Path
    packages: dict[str, Path]
    """``DAWN_JINJA2_DIR``-style defines -> installed package folders."""

    @property
    def cmake_defines(self) -> dict[str, str]:
        found = {CUSTOM_DAWN_DEFINE: self.destination.as_posix()}
        return found | {name: path.as_posix() for name, path in self.packages.items()}

    def ensure(self, cache: Cache, env: Mapping[str, str]) -> Path:
        """Build the tree once (Dawn + third-party folders + ORT's Dawn patches); later calls reuse it."""
        marker = self.destination.with_name(f"{self.destination.name}.json")
        if marker.is_file() and self.destination.is_dir():
            return self.destination
        source = source_of(self.dependency, self.mirror, self.local)
        found = plan(self.ort_tree, self.defines, self.platform, source, revision_of(self.dependency))
        with cache.lock(f"dawn-{self.destination.name}", what="the assembled Dawn tree"):
            if marker.is_file() and self.destination.is_dir():
                return self.destination
            cache.remove_stale_temps(self.destination.parent, self.destination.name)
            staged = cache.temp_dir(self.destination.parent, self.destination.name)
            try:
                self._fill(staged, found, source, cache, env)
                remove_tree(self.destination)
                staged.rename(self.destination)
            finally:
                remove_tree(staged)
            record = {"revision": found.revision, "third_party": {t.path: t.commit for t in found.third_party}}
            write_atomic(marker, (json.dumps(record, indent=2) + "\n").encode())  # last: the tree is complete
        log.info(f"assembled Dawn with {len(found.third_party)} third-party folders in {self.destination}")
        return self.destination

    def _fill(self, staged: Path, found: Plan, source: DawnSource, cache: Cache, env: Mapping[str, str]) -> None:
        if source.location.is_dir():
            # ORT removes these folders at Dawn's top (its `test/`); a third-party source's own
            # `test/` is part of that source's build, so the match is by path, not by name.
            skipped = {(source.location / folder).resolve() for folder in found.removed}

            def ignore(directory: str, names: list[str]) -> set[str]:
                return {n for n in names if n == ".git" or (Path(directory) / n).resolve() in skipped}

            shutil.copytree(source.location, staged, dirs_exist_ok=True, ignore=ignore, symlinks=True)
        else:
            archive.extract(source.location, staged, label=str(source.location))
            for folder in found.removed:
                remove_tree(staged / folder)
        for entry in found.third_party:
            if entry.python_package and any(p.name == entry.python_package for p in self.packages.values()):
                continue
            target = staged / entry.path
            if _has_files(target):
                _check_local(entry, source.location / entry.path, env)
                continue
            record = cache.source_record(entry.commit)
            if record is None:
                msg = f"Dawn's {entry.path} at commit {entry.commit} is not in the cache"
                raise FetchError(msg, tip="run `ortstack fetch --deps` (needs network once)")
            remove_tree(target)
            shutil.copytree(cache.source_dir(entry.commit), target, symlinks=True)
        for patch in found.patches:
            _apply(self.ort_tree / patch, staged, env)
        if found.configure_fetches:
            # This ORT forces DAWN_FETCH_DEPENDENCIES even for a complete tree: make the clone script a no-op.
            (staged / "tools" / "fetch_dawn_dependencies.py").write_text(FETCH_SCRIPT_STANDIN, encoding="utf-8")


FETCH_SCRIPT_STANDIN = '''"""Put here by ortstack: this Dawn tree holds its third-party sources already."""

print("fetch_dawn_dependencies: nothing to fetch, ortstack assembled Dawn's third-party sources")
'''


def _check_local(entry: ThirdParty, folder: Path, env: Mapping[str, str]) -> None:
    """A third-party folder of a local Dawn checkout: at the DEPS commit when it is a git checkout."""
    at = _head(folder, env)
    if at and (folder / ".git").exists() and at != entry.commit:
        msg = f"{folder} is at commit {at}, not at {entry.commit} as Dawn's DEPS pins it"
        raise FetchError(msg, tip=f"run `git -C {folder} checkout {entry.commit}`, or remove the folder")


def _apply(patch: Path, tree: Path, env: Mapping[str, str]) -> None:
    if not patch.is_file():
        msg = f"onnxruntime's cmake applies {patch.name} to Dawn, but the prepared tree has no {patch}"
        raise BuildError(msg, tip="run `ortstack patch` again; a patch of the series may have removed it")
    if reason := dep_sources.apply_ort_patch(patch, tree, env):
        msg = f"onnxruntime's Dawn patch {patch.name} does not apply to the Dawn tree: {reason}"
        raise PatchError(msg, tip="check that deps.txt's dawn entry and cmake/patches/dawn/ are of the same ORT commit")


# --------------------------------------------------------------------------------------------------
# The two callers: `fetch --deps` and `build`.


def uses_dawn(defines: Mapping[str, str]) -> bool:
    """The variant builds Dawn from source through ortstack (not WebGPU-less, not an external or own Dawn)."""
    on = {"ON", "1", "TRUE", "YES"}
    return (
        defines.get("onnxruntime_USE_WEBGPU", "").upper() in on
        and defines.get("onnxruntime_USE_EXTERNAL_DAWN", "").upper() not in on
        and not defines.get(CUSTOM_DAWN_DEFINE)
    )


def source_of(dependency: Dependency, mirror: Path, local: Path | None) -> DawnSource:
    """A local Dawn checkout when one is declared, else the mirrored archive."""
    if local is None:
        zipped = dependency.mirror_path(mirror)
        if not zipped.is_file():
            msg = f"Dawn ({dependency.url}) is not in the deps mirror {mirror}"
            raise FetchError(msg, tip="run `ortstack fetch --deps` (needs network once)")
        return DawnSource(location=zipped)
    if not local.is_dir():
        msg = f"the Dawn checkout {local} does not exist"
        raise ConfigError(msg, tip="fix [deps.dawn] source_dir in stack.toml (or --dep-source dawn=PATH)")
    return DawnSource(location=local)


def checked_local(dependency: Dependency, local: Path | None, env: Mapping[str, str]) -> str:
    """How a declared Dawn checkout matches the deps.txt pin ('' without one); raises on another commit."""
    if local is None:
        return ""
    source_of(dependency, Path(), local)
    return dep_sources.check_pin(dependency, local, env)


def revision_of(dependency: Dependency) -> str:
    return f"{dependency.url}#sha1={dependency.sha1}"


def for_build(
    *,
    tree: Path,
    defines: Mapping[str, str],
    platform: str,
    dependency: Dependency | None,
    mirror: Path,
    local: Path | None,
    work_dir: Path,
    allow_fetch: bool,
    env: Mapping[str, str],
) -> Assembly | None:
    """The Dawn tree this variant's build gets, or None when ORT should not be given one."""
    if dependency is None or not uses_dawn(defines):
        return None
    if allow_fetch:
        log.warn(
            "--allow-dawn-fetch: onnxruntime builds Dawn from its archive and Dawn clones its third-party "
            "sources while cmake configures (DAWN_FETCH_DEPENDENCIES); offline those clones fail silently"
        )
        return None
    packages = {var: folder for var, name in PYTHON_PACKAGES.items() if (folder := installed_package(name))}
    inputs: dict[str, object] = {"dawn": revision_of(dependency), "defines": dict(defines), "platform": platform}
    inputs |= {"packages": {k: str(v) for k, v in packages.items()}, "ortstack": __version__}
    inputs |= {"local": [str(local), checked_local(dependency, local, env), _head(local, env)] if local else None}
    for path in sorted([tree / ORT_DEPS_CMAKE, *(tree / "cmake" / "patches" / "dawn").glob("*")]):
        inputs[path.relative_to(tree).as_posix()] = (
            hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""
        )
    key = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]
    return Assembly(
        ort_tree=tree,
        defines=dict(defines),
        platform=platform,
        dependency=dependency,
        mirror=mirror,
        local=local,
        destination=work_dir / "dawn" / key,
        packages=packages,
    )


def _head(checkout: Path, env: Mapping[str, str]) -> str:
    head = _run.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], env=env, capture=True, check=False, quiet=True)
    return head.stdout.strip() if head.returncode == 0 else ""


def fetch_for(
    *,
    builds: list[tuple[Path, dict[str, str]]],
    platform: str,
    mirror: Path,
    local: Path | None,
    cache: Cache,
    env: Mapping[str, str],
) -> str:
    """Fetch into the cache what the Dawn of each ``(ORT tree, cmake defines)`` build uses; a summary line."""
    plans: list[Plan] = []
    for tree, defines in builds:
        dependency = next((d for d in deps.read(tree) if d.name == "dawn"), None)
        if dependency is not None and uses_dawn(defines):
            checked_local(dependency, local, env)
            plans.append(plan(tree, defines, platform, source_of(dependency, mirror, local), revision_of(dependency)))
    if not plans:
        return "no variant builds Dawn"
    entries = [e for e in to_fetch(plans) if local is None or not _has_files(local / e.path)]
    fetched = fetch_all(cache, entries, env)
    names = ", ".join(sorted({t.path.removeprefix("third_party/") for p in plans for t in p.third_party}))
    return f"Dawn's third-party sources for {platform}: {names} ({fetched} fetched now)"
