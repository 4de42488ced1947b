"""Fresh virtual environments for the wheel suites: one per wheel spec, cached by what went in.

A *wheel spec* names what to install as one string: a local ``.whl`` path, a requirement string
(``onnxruntime-webgpu==1.27.0``), or several joined with ``+``
(``onnxruntime==1.31.1+onnxruntime-ep-webgpu==0.4.0``). A ``+`` that starts a PEP 440 local
version stays part of its requirement (``onnxruntime==1.27.0+stack.ab12``) or wheel file name
(``dist/onnxruntime_webgpu-1.21.0+stack.ab12-cp312-cp312-linux_x86_64.whl``, as every wheel ortstack
builds is named): a new part begins only where the text before ``+`` is complete (a ``.whl`` path
or a requirement) and the text after it is a path, a ``.whl`` or a requirement with a specifier.

The cache key covers the interpreter, the parts (a local wheel by its sha256 and its tags) and the
extras, so a rebuilt or renamed wheel gets a new venv and an unchanged one is reused. A wheel built
for another platform is refused before any venv is looked up, as pip would refuse it. A venv counts as ready only once
everything installed: a marker file is written last, and a half-made venv is rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import TYPE_CHECKING

from filelock import FileLock
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from ortstack import _run, log, wheelfile
from ortstack.errors import ConfigError, SuiteError
from ortstack.suites.genai_choice import GENAI_DIST

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

_READY_MARKER = "ortstack-venv.json"

PLUGIN_DIST = "onnxruntime-ep-webgpu"
PLUGIN_CORE_DIST = "onnxruntime"
"""The distribution a plugin EP wheel requires: the only core it is installed beside."""


@dataclass(frozen=True, kw_only=True)
class Venv:
    root: Path
    """The venv directory."""
    python: Path
    """Its interpreter."""
    parts: tuple[str, ...]
    """What was installed for the spec (paths made absolute), extras excluded."""


def _starts_new_part(text: str) -> bool:
    if text.endswith(".whl") or "/" in text or "\\" in text:
        return True
    try:
        return bool(Requirement(text).specifier)
    except InvalidRequirement:
        return False


def _inside_wheel_name(before: str, rest: str) -> bool:
    """Whether the ``+`` between ``before`` and ``rest`` is the local-version ``+`` of one wheel file name."""
    if before.endswith(".whl") or ".whl" not in rest:
        return False
    tail = rest[: rest.index(".whl") + len(".whl")]
    if "/" in tail or "\\" in tail:  # a path begins after the ``+``: a new part (a plugin wheel after a core)
        return False
    candidate = f"{before}+{tail}"
    try:
        parse_wheel_filename(PurePath(candidate).name)
    except InvalidWheelFilename:
        return False
    return True


def parse_wheel_spec(spec: str) -> tuple[str, ...]:
    """Split a wheel spec into pip arguments; local wheel paths become absolute."""
    parts: list[str] = []
    pieces = spec.split("+")
    for index, piece in enumerate(pieces):
        joins = _inside_wheel_name(parts[-1], "+".join(pieces[index:])) if parts else False
        if parts and (joins or not (parts[-1].endswith(".whl") or _starts_new_part(piece))):
            parts[-1] = f"{parts[-1]}+{piece}"
        else:
            parts.append(piece)
    resolved: list[str] = []
    names: list[str] = []
    for part in (p.strip() for p in parts):
        if part and not part.endswith(".whl") and Path(part).expanduser().exists():
            wheelfile.check(Path(part))  # a file or folder given as a wheel: says why it is none
        if not part:
            msg = f"wheel spec {spec!r} has an empty part"
            raise ConfigError(msg, tip="join requirements with a single '+'")
        if part.endswith(".whl"):
            wheel = wheelfile.check(Path(part))
            wheelfile.check_fits_machine(wheel)
            resolved.append(str(wheel.path))
            names.append(wheel.name)
            continue
        try:
            names.append(canonicalize_name(Requirement(part).name))
        except InvalidRequirement as exc:
            msg = f"wheel spec part {part!r} is neither a .whl path nor a requirement: {exc}"
            raise ConfigError(
                msg,
                tip="write e.g. onnxruntime==1.31.1+onnxruntime-ep-webgpu==0.4.0 or a path to a .whl",
            ) from None
        resolved.append(part)
    _check_plugin_core(names, spec)
    return tuple(resolved)


def _check_plugin_core(names: Sequence[str], spec: str) -> None:
    """A plugin EP wheel requires onnxruntime: beside another distribution of the onnxruntime package
    (onnxruntime-webgpu, onnxruntime-gpu) pip installs the stock onnxruntime over that one's files, and
    its own WebGPU EP, if it has one, would be a second WebGPU runtime in the process."""
    if PLUGIN_DIST not in names:
        return
    others = [n for n in names if n.startswith("onnxruntime") and n not in {PLUGIN_DIST, PLUGIN_CORE_DIST, GENAI_DIST}]
    if others:
        msg = f"wheel spec {spec!r} puts {PLUGIN_DIST} beside {', '.join(others)}: pip would install "
        msg += f"{PLUGIN_CORE_DIST}, which the plugin requires, over its onnxruntime package"
        tip = f"pair the plugin with {PLUGIN_CORE_DIST} (the stock one, or a core variant's wheel)"
        raise ConfigError(msg, tip=tip)


def spec_label(spec: str) -> str:
    """A short human name for a spec: wheel file names without the tags, requirements as written."""
    return " + ".join(wheelfile.check(Path(p)).label if p.endswith(".whl") else p for p in parse_wheel_spec(spec))


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def cache_key(parts: Sequence[str], extras: Sequence[str], python: Path, *, variant: str = "") -> str:
    identity = {
        "python": str(python.resolve()),
        # A wheel by its bytes and by the tags its name gives: what pip decides to install it by.
        "parts": [[_file_digest(Path(p)), *wheelfile.check(Path(p)).tags] if p.endswith(".whl") else p for p in parts],
        "extras": sorted(extras),
        "variant": variant,
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]


def venv_python(root: Path) -> Path:
    if os.name == "nt":
        return root / "Scripts" / "python.exe"
    return root / "bin" / "python"


def _uv(env: Mapping[str, str], *, system_site_packages: bool) -> str | None:
    # uv does not see packages that a .pth file adds, so inheriting venvs use pip.
    return None if system_site_packages else _run.which("uv", env)


def _create(root: Path, python: Path, env: Mapping[str, str], *, system_site_packages: bool) -> None:
    uv = _uv(env, system_site_packages=system_site_packages)
    system = ["--system-site-packages"] if system_site_packages else []
    if uv is not None:
        _run.run([uv, "venv", "--quiet", *system, "--python", python, root], env=env)
    else:
        _run.run([python, "-m", "venv", *system, root], env=env)


def _inherit_parent_venv(root: Path, python: Path, env: Mapping[str, str]) -> None:
    """``--system-site-packages`` sees the base interpreter only; when ``python`` is itself a venv's,
    a ``.pth`` file adds that venv's site-packages too (after the new venv's own)."""
    show_site = "import site, sys; print(sys.prefix != sys.base_prefix); print(*site.getsitepackages(), sep='\\n')"
    lines = _run.run([python, "-c", show_site], env=env, capture=True, quiet=True).stdout.splitlines()
    if lines[0] != "True":
        return
    show_purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    purelib = _run.run([venv_python(root), "-c", show_purelib], env=env, capture=True, quiet=True).stdout.strip()
    (Path(purelib) / "ortstack-parent-site.pth").write_text("\n".join(lines[1:]) + "\n")


def _install(root: Path, args: Sequence[str], env: Mapping[str, str], pip_args: Sequence[str], uv: str | None) -> None:
    if uv is not None:
        _run.run([uv, "pip", "install", "--quiet", "--python", venv_python(root), *pip_args, *args], env=env)
    else:
        argv: list[str | os.PathLike[str]] = [
            venv_python(root),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            *pip_args,
            *args,
        ]
        _run.run(argv, env=env)


def ensure(
    spec: str,
    *,
    cache_dir: Path,
    env: Mapping[str, str],
    extras: Sequence[str] = (),
    extras_no_deps: Sequence[str] = (),
    pip_args: Sequence[str] = (),
    python: Path | None = None,
    system_site_packages: bool = False,
) -> Venv:
    """Return a ready venv holding ``spec`` plus ``extras`` (requirements), creating it if needed.

    ``extras_no_deps`` are installed afterwards without their dependencies (onnxruntime-genai, which
    would otherwise replace the wheel's own onnxruntime). ``system_site_packages`` lets the venv see
    the interpreter's packages (offline machines that already have numpy). ``pip_args`` pass through
    to the installer (``--no-index``, ``--find-links DIR``) and are not part of the cache key.
    Raises :class:`SuiteError` when the installation fails.
    """
    interpreter = python if python is not None else Path(sys.executable)
    # pip counts what the caller's PYTHONPATH holds as installed and would then install nothing of
    # it, though the suites run without that path: the venv must hold what it is asked for.
    env = {k: v for k, v in env.items() if k not in {"PYTHONPATH", "PYTHONHOME"}}
    parts = parse_wheel_spec(spec)
    variant = json.dumps([sorted(extras_no_deps), system_site_packages])
    key = cache_key(parts, extras, interpreter, variant=variant)
    root = cache_dir / "venvs" / key
    root.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(root.parent / f"{key}.lock"):
        marker = root / _READY_MARKER
        if marker.is_file():
            log.info(f"reusing venv {root} for {spec_label(spec)}")
            return Venv(root=root, python=venv_python(root), parts=parts)
        if root.exists():
            shutil.rmtree(root)
        with log.step(f"venv for {spec_label(spec)}"):
            try:
                _create(root, interpreter, env, system_site_packages=system_site_packages)
                if system_site_packages:
                    _inherit_parent_venv(root, interpreter, env)
                uv = _uv(env, system_site_packages=system_site_packages)
                _install(root, [*parts, *extras], env, pip_args, uv)
                if extras_no_deps:
                    _install(root, extras_no_deps, env, [*pip_args, "--no-deps"], uv)
            except subprocess.CalledProcessError as exc:
                msg = f"installing {spec_label(spec)} into a fresh venv failed (exit {exc.returncode})"
                raise SuiteError(
                    msg,
                    tip="check the spec and that the wheel fits this Python; the pip output is above",
                ) from None
            marker.write_text(json.dumps({"spec": spec, "parts": parts, "extras": list(extras)}, indent=2))
    return Venv(root=root, python=venv_python(root), parts=parts)
