"""The tools a compile needs, found before anything starts: cmake, ninja, a C/C++ compiler, a cache.

Also how many jobs to run: cores, capped by memory, because one onnxruntime compile job can take
about 2 GB and a machine that swaps is slower than one that runs fewer jobs.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.version import Version

from ortstack import _run
from ortstack.errors import BuildError, ConfigError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ortstack.config import BuildOptions

# Compilers tried in order when CC/CXX are not set.
C_COMPILERS = ("cc", "gcc", "clang", "cl")
CXX_COMPILERS = ("c++", "g++", "clang++", "cl")
# sccache reads these for a shared backend; the environment wins over stack.toml.
SCCACHE_REDIS_VARS = ("SCCACHE_REDIS_ENDPOINT", "SCCACHE_REDIS")
SCCACHE_BUCKET_VARS = ("SCCACHE_BUCKET", "SCCACHE_GCS_BUCKET")


@dataclass(frozen=True, kw_only=True)
class Toolchain:
    cmake: str
    ninja: str
    c_compiler: str
    cxx_compiler: str
    compiler_version: str
    """First line of ``<c++> --version``: part of the build fingerprint and the build info."""
    cmake_version: str
    cache: str = ""
    """``ccache``, ``sccache`` or empty."""
    cache_program: str = ""
    cache_env: dict[str, str] = field(default_factory=dict)
    """Environment the cache needs (the sccache backend)."""

    def launcher_defines(self) -> dict[str, str]:
        if not self.cache_program:
            return {}
        return {"CMAKE_C_COMPILER_LAUNCHER": self.cache_program, "CMAKE_CXX_COMPILER_LAUNCHER": self.cache_program}


def _first_line(argv: list[str], env: Mapping[str, str]) -> str:
    try:
        result = _run.run(argv, env=env, capture=True, quiet=True, check=False, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    text = (result.stdout or result.stderr or "").strip()
    return text.splitlines()[0] if text else ""


def _find_compiler(env: Mapping[str, str], variable: str, candidates: tuple[str, ...]) -> str | None:
    if env.get(variable):
        return _run.which(env[variable].split()[0], env)
    for name in candidates:
        found = _run.which(name, env)
        if found:
            return found
    return None


def _sccache_env(options: BuildOptions, env: Mapping[str, str]) -> dict[str, str]:
    if any(env.get(name) for name in (*SCCACHE_REDIS_VARS, *SCCACHE_BUCKET_VARS)):
        return {}  # the environment already chose a backend
    if options.sccache_redis:
        return {"SCCACHE_REDIS_ENDPOINT": options.sccache_redis}
    bucket = options.sccache_bucket
    if bucket.startswith("s3://"):
        return {"SCCACHE_BUCKET": bucket.removeprefix("s3://")}
    if bucket.startswith("gs://"):
        return {"SCCACHE_GCS_BUCKET": bucket.removeprefix("gs://"), "SCCACHE_GCS_RW_MODE": "READ_WRITE"}
    if bucket:
        msg = f"[build] sccache_bucket = {bucket!r} must start with s3:// or gs://"
        raise ConfigError(msg, tip="write s3://NAME or gs://NAME")
    return {}


def _pick_cache(options: BuildOptions, env: Mapping[str, str]) -> tuple[str, str]:
    wanted = options.compiler_cache
    if wanted == "none":
        return "", ""
    order = ("sccache", "ccache") if wanted == "auto" else (wanted,)
    for name in order:
        found = _run.which(name, env)
        if found:
            return name, found
    if wanted != "auto":
        msg = f"[build] compiler_cache = {wanted!r}, but {wanted} is not on PATH"
        raise BuildError(msg, tip=f"install {wanted} or set compiler_cache = 'auto'")
    return "", ""


def detect(options: BuildOptions, env: Mapping[str, str], *, python_binding: bool) -> Toolchain:
    """Find every tool or fail naming all that are missing, before anything is configured.

    ``python_binding``: the variant compiles onnxruntime's Python binding, which needs numpy too.
    """
    found = {
        "cmake": _run.which("cmake", env),
        "ninja": _run.which("ninja", env),
        "a C compiler (CC)": _find_compiler(env, "CC", C_COMPILERS),
        "a C++ compiler (CXX)": _find_compiler(env, "CXX", CXX_COMPILERS),
    }
    missing = [name for name, path in found.items() if path is None]
    if missing:
        msg = f"cannot build: {', '.join(missing)} not found on PATH"
        raise BuildError(msg, tip="install them (e.g. `pip install cmake ninja` and a compiler), then run again")
    check_wheel_tools(env, python_binding=python_binding)
    cmake, ninja, cc, cxx = (str(path) for path in found.values())
    cache, cache_program = _pick_cache(options, env)
    return Toolchain(
        cmake=cmake,
        ninja=ninja,
        c_compiler=cc,
        cxx_compiler=cxx,
        compiler_version=_first_line([cxx, "--version"], env),
        cmake_version=_first_line([cmake, "--version"], env),
        cache=cache,
        cache_program=cache_program,
        cache_env=_sccache_env(options, env) if cache == "sccache" else {},
    )


def cmake_major(toolchain: Toolchain) -> int:
    have = re.search(r"(\d+)\.\d+", toolchain.cmake_version)
    return int(have.group(1)) if have else 0


# cmake 4 refuses `cmake_minimum_required(VERSION < 3.5)`, which some of onnxruntime's pinned
# dependencies still say (dlpack, for one); this variable lets cmake treat them as 3.5 instead.
POLICY_MINIMUM = "3.5"


def policy_defines(toolchain: Toolchain) -> dict[str, str]:
    """What a cmake of today needs so every pinned dependency configures (cmake 4: the policy floor)."""
    return {"CMAKE_POLICY_VERSION_MINIMUM": POLICY_MINIMUM} if cmake_major(toolchain) >= 4 else {}  # noqa: PLR2004


# A toolchain that links the C++ runtime statically (-static-libstdc++, or a GCC built without a shared
# libstdc++) puts a copy of it into every shared library. A library that exports all it holds, as
# Dawn's libwebgpu_dawn does, then exports that copy's STB_GNU_UNIQUE symbols (locale ids, guard
# variables); the dynamic linker binds those process-wide, and the next module built against the
# system's libstdc++ crashes (`import ml_dtypes` after onnxruntime). Hidden, each copy stays private;
# where the runtime is linked dynamically no such archive is linked and the flag changes nothing.
HIDE_STATIC_CXX_RUNTIME = "-Wl,--exclude-libs,libstdc++.a:libsupc++.a"


def linker_defines(platform: str) -> dict[str, str]:
    """Linker flags every onnxruntime build gets on ``platform`` (GNU ld, gold and lld on Linux)."""
    # The _INIT value: cmake puts $LDFLAGS in front of it, so a user's own linker flags stay.
    return {"CMAKE_SHARED_LINKER_FLAGS_INIT": HIDE_STATIC_CXX_RUNTIME} if platform == "linux" else {}


# What turns the configured tree into a wheel, run by this interpreter (module) or found on PATH.
# `pip install ./python` gives ortstack without them; `nox -s build` installs them (the "build" group).
WHEEL_MODULES = {"build": "build", "scikit_build_core": "scikit-build-core"}
LINUX_WHEEL_MODULES = {"auditwheel": "auditwheel"}
# onnxruntime's Python binding compiles against numpy's C headers, which cmake asks this interpreter
# for (Python_EXECUTABLE): without numpy its configure stops late, at the binding's target.
BINDING_MODULES = {"numpy": "numpy"}
PATCHELF_MINIMUM = Version("0.14.5")  # what auditwheel repair refuses to run below
WHEEL_TOOLS_TIP = (
    "pip install scikit-build-core build auditwheel patchelf numpy (or run the build through `nox -s build`)"
)


def _has_module(name: str) -> bool:
    # A folder named like the module (./build is ortstack's work dir) is a namespace package, not the tool.
    spec = importlib.util.find_spec(name)
    return spec is not None and spec.origin not in (None, "namespace")


def check_wheel_tools(env: Mapping[str, str], *, python_binding: bool) -> None:
    """The Python build tools, numpy for a Python binding and, on Linux, auditwheel and patchelf: all
    named at once if missing."""
    modules = {
        **WHEEL_MODULES,
        **(BINDING_MODULES if python_binding else {}),
        **(LINUX_WHEEL_MODULES if sys.platform.startswith("linux") else {}),
    }
    missing = [package for module, package in modules.items() if not _has_module(module)]
    if sys.platform.startswith("linux"):
        patchelf = _run.which("patchelf", env)
        have = re.search(r"(\d+\.\d+(?:\.\d+)?)", _first_line([patchelf, "--version"], env) if patchelf else "")
        if have is None or Version(have.group(1)) < PATCHELF_MINIMUM:
            found = f", {patchelf} is {have.group(1)}" if patchelf and have else ""
            missing.append(f"patchelf >= {PATCHELF_MINIMUM} (on PATH, for auditwheel{found})")
    if missing:
        msg = f"cannot build wheels: {', '.join(missing)} missing (Python tools looked for in {sys.executable})"
        raise BuildError(msg, tip=WHEEL_TOOLS_TIP)


def check_cmake_version(toolchain: Toolchain, cmake_lists: Path) -> None:
    """Refuse a cmake older than the ``cmake_minimum_required`` of the tree about to be configured."""
    found = re.search(r"cmake_minimum_required\s*\(\s*VERSION\s+([0-9.]+)", cmake_lists.read_text(encoding="utf-8"))
    have = re.search(r"(\d+\.\d+(?:\.\d+)?)", toolchain.cmake_version)
    if found and have and Version(have.group(1)) < Version(found.group(1)):
        msg = f"{cmake_lists} needs cmake >= {found.group(1)}, but {toolchain.cmake} is {have.group(1)}"
        raise BuildError(msg, tip=f"pip install 'cmake>={found.group(1)}' (or put a newer cmake first on PATH)")


# onnxruntime generates its WGSL kernels with npm when onnxruntime_WGSL_TEMPLATE is set
# (cmake/onnxruntime_providers_webgpu.cmake at microsoft/onnxruntime@001d12d2623fd411ce0f83d05abb5e82304a3389).
WGSL_TEMPLATES = Path("onnxruntime/core/providers/webgpu/wgsl_templates")


def check_wgsl_generator(tree: Path, env: Mapping[str, str]) -> None:
    """A tree that generates WGSL with npm needs node and npm, found before configuring."""
    if not (tree / WGSL_TEMPLATES / "package.json").is_file():
        return
    missing = [tool for tool in ("node", "npm") if _run.which(tool, env) is None]
    if missing:
        tools = " and ".join(missing)
        msg = f"cannot build: {tools} not found, and {WGSL_TEMPLATES} generates the WGSL kernels with npm"
        raise BuildError(msg, tip="install Node.js (with npm); offline, also provide its node_modules folder")


def start_cache_server(toolchain: Toolchain, env: Mapping[str, str], log_file: Path) -> None:
    """sccache: start its server now, with the backend in ``env``, rather than from the first compile.

    A server started by a compile would inherit that build's output pipe and the backend settings of
    whichever build came first. One already running keeps its settings (stop it to change backend).
    The logged run returns when the client exits, though the server keeps the pipe open.
    """
    if toolchain.cache == "sccache":
        _run.run([toolchain.cache_program, "--start-server"], env=env, check=False, quiet=True, log_file=log_file)


def total_memory_bytes() -> int | None:
    """Physical memory; ``None`` where the platform does not say (then only cores count)."""
    sysconf = getattr(os, "sysconf", None)  # POSIX only; Windows has no sysconf
    if sysconf is None:
        return None
    try:
        return int(sysconf("SC_PAGE_SIZE")) * int(sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError):
        return None


def parallel_jobs(options: BuildOptions, requested: int | None = None) -> int:
    """Jobs to run: the request (CLI, then stack.toml) or the cores; never more than cores or memory allow."""
    cores = os.cpu_count() or 1
    jobs = min(requested or options.jobs or cores, cores)
    memory = total_memory_bytes()
    if memory is not None:
        jobs = min(jobs, max(1, memory // (options.memory_per_job_mb * 1024 * 1024)))
    return max(1, jobs)


def sccache_stats(toolchain: Toolchain, env: Mapping[str, str]) -> dict[str, int]:
    """Compile requests, hits, misses and errors from the running sccache server; with a scheduler, also
    the compiles run (``compilations``), those its build servers ran and those that fell back to here."""
    argv = [toolchain.cache_program, "--show-stats", "--stats-format=json"]
    stats = json.loads(_run.run(argv, env=env, capture=True, quiet=True).stdout)["stats"]

    def total(key: str) -> int:
        return sum(int(v) for v in stats.get(key, {}).get("counts", {}).values())

    return {
        "requests": int(stats.get("compile_requests", 0)),
        "hits": total("cache_hits"),
        "misses": total("cache_misses"),
        "errors": total("cache_errors"),
        "compilations": int(stats.get("compilations", 0)),
        "distributed": sum(int(v) for v in (stats.get("dist_compiles") or {}).values()),
        "fell_back": int(stats.get("dist_errors", 0)),
    }
