"""Which onnxruntime-genai goes with the onnxruntime under test: chosen from the wheel, never pinned.

Each genai release requires an onnxruntime at least as new as the one it was built against (its
metadata says ``Requires-Dist: onnxruntime>=1.30.0`` for 0.17.x). The choice is the newest genai in
the run's package sources (the index, ``--find-links`` folders, ``--no-index``) whose requirement the
onnxruntime to be installed meets; a ``+stack.<hash>`` local label counts as its release, as PEP 440
has it. pip itself lists the versions and reads their metadata, so the choice sees what the install
will see, offline too.

genai's requirement names the ``onnxruntime`` distribution: installed with its dependencies, genai
would put the stock one beside ``onnxruntime-webgpu`` (another name, the same ``onnxruntime`` module)
or over a wheel under test. So genai goes in with ``--no-deps`` and its other requirements explicitly.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from ortstack import _run, log
from ortstack.errors import SuiteError

if TYPE_CHECKING:
    import os
    import subprocess
    from collections.abc import Mapping, Sequence

GENAI_DIST = "onnxruntime-genai"
ONNXRUNTIME_CORES = frozenset({"onnxruntime", "onnxruntime-gpu", "onnxruntime-webgpu"})
"""The distributions that provide the ``onnxruntime`` module genai runs on."""
OVERRIDE_OPTION = "--genai-version"


@dataclass(frozen=True, kw_only=True)
class GenaiChoice:
    version: str
    onnxruntime_requirement: str
    """genai's own requirement on onnxruntime, as its metadata states it ("" if it states none)."""
    dependencies: tuple[str, ...]
    """genai's other requirements: installed explicitly, since genai itself goes in without its dependencies."""
    reason: str
    """One line: why this version, for the log and the results."""

    @property
    def requirement(self) -> str:
        return f"{GENAI_DIST}=={self.version}"

    def record(self) -> dict[str, Any]:
        """What the results keep."""
        return {**asdict(self), "requirement": self.requirement}


def _pip(
    python: Path, args: Sequence[str], env: Mapping[str, str], pip_args: Sequence[str]
) -> subprocess.CompletedProcess[str]:
    argv: list[str | os.PathLike[str]] = [python, "-m", "pip", *args, "--disable-pip-version-check", *pip_args]
    return _run.run(argv, env=env, capture=True, check=False, quiet=True)


def _sources(pip_args: Sequence[str]) -> str:
    return " ".join(pip_args) if pip_args else "the configured package index"


def _pinned(requirement: Requirement) -> Version | None:
    """The one version ``name==V`` allows (``None`` for a range or a wildcard)."""
    specs = list(requirement.specifier)
    if len(specs) == 1 and specs[0].operator == "==" and "*" not in specs[0].version:
        return Version(specs[0].version)
    return None


def onnxruntime_version(
    parts: Sequence[str], *, env: Mapping[str, str], pip_args: Sequence[str] = (), python: Path | None = None
) -> Version:
    """The onnxruntime (whichever core distribution) that installing ``parts`` puts in a venv.

    ``parts`` are a wheel spec's (:func:`ortstack.suites.venv.parse_wheel_spec`): a core wheel or a
    pinned core says it by its name; anything else (a range, a plugin that brings its own core) is
    left to pip's resolver, asked without installing.
    """
    for part in parts:
        if part.endswith(".whl"):
            name, version, _, _ = parse_wheel_filename(Path(part).name)
            if name in ONNXRUNTIME_CORES:
                return version
            continue
        requirement = Requirement(part)
        pinned = _pinned(requirement)
        if canonicalize_name(requirement.name) in ONNXRUNTIME_CORES and pinned is not None:
            return pinned
    interpreter = python if python is not None else Path(sys.executable)
    report = ["install", "--dry-run", "--ignore-installed", "--quiet", "--report", "-", *parts]
    done = _pip(interpreter, report, env, pip_args)
    if done.returncode != 0:
        msg = f"pip cannot resolve {' + '.join(parts)} from {_sources(pip_args)} (exit {done.returncode})"
        raise SuiteError(msg, tip="check the wheel spec and the package sources", detail=done.stderr)
    for item in json.loads(done.stdout)["install"]:
        metadata = item["metadata"]
        if canonicalize_name(metadata["name"]) in ONNXRUNTIME_CORES:
            return Version(metadata["version"])
    msg = f"{' + '.join(parts)} installs no onnxruntime, and {GENAI_DIST} runs on one"
    raise SuiteError(msg, tip="add an onnxruntime core wheel to the spec")


def available_versions(
    *, env: Mapping[str, str], pip_args: Sequence[str] = (), python: Path | None = None
) -> list[Version]:
    """Every genai release the package sources offer for this interpreter, newest first."""
    interpreter = python if python is not None else Path(sys.executable)
    done = _pip(interpreter, ["index", "versions", GENAI_DIST], env, pip_args)
    found = re.search(r"^Available versions: (.+)$", done.stdout, re.MULTILINE)
    if done.returncode != 0 or found is None:
        msg = f"no {GENAI_DIST} for this Python in {_sources(pip_args)}"
        tip = f"add {GENAI_DIST} wheels to a --find-links DIR (`pip download --no-deps -d DIR {GENAI_DIST}==V`)"
        raise SuiteError(msg, tip=tip, detail=done.stderr)
    return sorted((Version(v) for v in found.group(1).split(", ")), reverse=True)


def _requirements(
    version: Version, *, env: Mapping[str, str], pip_args: Sequence[str], python: Path
) -> tuple[Requirement | None, tuple[str, ...]]:
    """genai ``version``'s onnxruntime requirement and its other requirements, from its metadata."""
    report = ["install", "--dry-run", "--ignore-installed", "--no-deps", "--quiet", "--report", "-"]
    done = _pip(python, [*report, f"{GENAI_DIST}=={version}"], env, pip_args)
    if done.returncode != 0:
        msg = f"pip cannot read the metadata of {GENAI_DIST} {version} from {_sources(pip_args)}"
        raise SuiteError(msg, tip="see the detail with --debug-traceback", detail=done.stderr)
    (item,) = json.loads(done.stdout)["install"]
    core: Requirement | None = None
    others: list[str] = []
    for text in item["metadata"].get("requires_dist", []):
        requirement = Requirement(text)
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue  # an extra's requirement, or another platform's
        if canonicalize_name(requirement.name) in ONNXRUNTIME_CORES:
            core = requirement
        else:
            others.append(text)
    return core, tuple(others)


def _fits(core: Requirement | None, versions: Sequence[Version]) -> bool:
    # Without an onnxruntime requirement a genai brings its own runtime: it would not test the wheel's.
    return core is not None and all(core.specifier.contains(v, prereleases=True) for v in versions)


def _describe(versions: Sequence[Version]) -> str:
    return "onnxruntime " + " and ".join(dict.fromkeys(str(v) for v in versions))


def choose(
    onnxruntime_versions: Sequence[Version],
    *,
    env: Mapping[str, str],
    pip_args: Sequence[str] = (),
    python: Path | None = None,
    override: str | None = None,
) -> GenaiChoice:
    """The newest genai whose onnxruntime requirement every one of ``onnxruntime_versions`` meets
    (one genai for all, so an A/B compares the runtimes), or ``override`` when the user names one."""
    interpreter = python if python is not None else Path(sys.executable)
    wheels = _describe(onnxruntime_versions)
    candidates = (
        [Version(override)]
        if override is not None
        else available_versions(env=env, pip_args=pip_args, python=interpreter)
    )
    seen: list[str] = []
    for candidate in candidates:
        core, others = _requirements(candidate, env=env, pip_args=pip_args, python=interpreter)
        fits = _fits(core, onnxruntime_versions)
        needs = str(core) if core is not None else "no onnxruntime requirement"
        if override is not None:
            reason = f"{GENAI_DIST} {candidate}: given by {OVERRIDE_OPTION} (it requires {needs}; {wheels})"
            if not fits:
                log.warn(f"{reason}: {wheels} does not meet that requirement")
        elif fits:
            reason = f"{GENAI_DIST} {candidate}: the newest whose requirement {needs} {wheels} meets"
            if seen:
                reason += f" (newer: {', '.join(seen)})"
        else:
            seen.append(f"{candidate} requires {needs}")
            continue
        log.info(reason)
        return GenaiChoice(
            version=str(candidate),
            onnxruntime_requirement=str(core) if core is not None else "",
            dependencies=others,
            reason=reason,
        )
    msg = f"no {GENAI_DIST} in {_sources(pip_args)} fits {wheels}: {'; '.join(seen)}"
    raise SuiteError(
        msg, tip=f"add a fitting {GENAI_DIST} wheel to a --find-links DIR, or name one with {OVERRIDE_OPTION}"
    )
