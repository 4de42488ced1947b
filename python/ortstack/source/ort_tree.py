"""What one variant asks of one pinned onnxruntime tree, decided from that tree's own cmake files.

A variant kind names the options it wants (``variants``); the tree says which of them it reads.
The rule is the same for every option: one the tree reads is passed; an ON option it does not read
is a feature the tree lacks, and the variant is refused before anything compiles; anything else it
does not read (an OFF switch, a value for a generator it does not have) is left out, because cmake
would ignore it without a word. Some options are named otherwise in some versions; ``EQUIVALENT`` lists the
names a tree may read instead.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ortstack.build import variants
from ortstack.errors import ConfigError
from ortstack.source import cmake_scan, deps

if TYPE_CHECKING:
    from pathlib import Path

    from ortstack.config import Variant

# Options named otherwise in some trees: (name, whether its value is the opposite). A tree gets
# every name of the group it reads.
EQUIVALENT: dict[str, tuple[tuple[str, bool], ...]] = {
    # Dawn as one shared library: onnxruntime_BUILD_DAWN_MONOLITHIC_LIBRARY in 1.21's
    # cmake/CMakeLists.txt, onnxruntime_BUILD_DAWN_SHARED_LIBRARY from 1.22 on.
    "onnxruntime_BUILD_DAWN_SHARED_LIBRARY": (("onnxruntime_BUILD_DAWN_MONOLITHIC_LIBRARY", False),),
    # The WebGPU plugin EP library: onnxruntime_BUILD_WEBGPU_EP_STATIC_LIB=OFF in 1.25's
    # cmake/onnxruntime_providers_webgpu.cmake (its default; ON links the EP into onnxruntime, which
    # is build.py's `--use_webgpu` default), onnxruntime_USE_EP_API_ADAPTERS=ON in later trees.
    "onnxruntime_USE_EP_API_ADAPTERS": (("onnxruntime_BUILD_WEBGPU_EP_STATIC_LIB", True),),
}
# onnxruntime 1.21 has no mirror option: it looks for each URL under <tree>/mirror/ (REPO_ROOT).
TREE_MIRROR_MARKER = "${REPO_ROOT}/mirror/"
TREE_MIRROR_DIR = "mirror"


@dataclass(frozen=True, kw_only=True)
class NeededDependency:
    """A deps.txt entry the variant's configure uses on this platform."""

    dependency: deps.Dependency
    content_name: str
    """The FetchContent name it is declared under (``FETCHCONTENT_SOURCE_DIR_<NAME>``)."""
    patches: tuple[str, ...]
    """onnxruntime's own patches for it (``cmake/patches/...``), applied by its PATCH_COMMAND."""
    decided: bool
    """False: only configure can tell (``if(NOT TARGET …)``); kept so nothing is missed."""
    where: str

    @property
    def name(self) -> str:
        return self.dependency.name


@dataclass(frozen=True, kw_only=True)
class TreePlan:
    defines: dict[str, str]
    """The variant's onnxruntime options as this tree reads them."""
    left_out: tuple[str, ...]
    """Options of the variant's kind this tree does not read, so not passed (``NAME=VALUE``)."""
    mirror_define: bool
    """The tree reads ``onnxruntime_CMAKE_DEPS_MIRROR_DIR``; else its mirror is ``<tree>/mirror``."""
    needed: tuple[NeededDependency, ...]
    dependencies: tuple[deps.Dependency, ...]
    """Every deps.txt entry of the tree (the Dawn revision is read from these)."""


def _fail(variant: Variant, message: str, tip: str | None = None) -> ConfigError:
    return ConfigError(f"variant {variant.name!r}: {message}", tip=tip)


def _is_option(name: str) -> bool:
    return name.startswith("onnxruntime_")


def _as_tree_reads(reading: cmake_scan.TreeCMake, name: str, value: str) -> dict[str, str]:
    """``name=value`` as this tree reads it: under each name of its group the tree reads."""
    group = ((name, False), *EQUIVALENT.get(name, ()))
    opposite = {"ON": "OFF", "OFF": "ON"}
    return {
        candidate: (opposite[value.upper()] if inverted and value.upper() in opposite else value)
        for candidate, inverted in group
        if reading.reads(candidate)
    }


def _options(reading: cmake_scan.TreeCMake, variant: Variant, platform: str) -> tuple[dict[str, str], list[str]]:
    wanted = variants.KINDS[variant.kind].cmake_defines(variant, platform)
    defines: dict[str, str] = {}
    left_out: list[str] = []
    for name, value in wanted.items():
        read = _as_tree_reads(reading, name, value) if _is_option(name) else {name: value}
        if read:
            defines.update(read)
        elif variants.is_on(value):
            names = [name, *(other for other, _ in EQUIVALENT.get(name, ()))]
            reads = f"never reads {name}" if len(names) == 1 else "reads neither " + " nor ".join(names)
            msg = f"this onnxruntime tree cannot build a {variant.kind} variant: its cmake {reads}"
            raise _fail(variant, msg, tip="pin an onnxruntime commit that has it, or drop this variant")
        else:
            left_out.append(f"{name}={value}")
    tree_options = sorted(w for w in reading.words if _is_option(w))
    for name, value in variant.cmake_defines.items():  # the user's own: a misspelling must not vanish
        if _is_option(name) and not reading.reads(name):
            close = difflib.get_close_matches(name, tree_options, n=1)
            tip = f"did you mean {close[0]!r}?" if close else "check the option's name in the tree's cmake/"
            raise _fail(variant, f"cmake_defines: {name} is not read by this onnxruntime tree's cmake", tip=tip)
        defines[name] = value
    return defines, left_out


def plan(tree: Path, variant: Variant, platform: str) -> TreePlan:
    """Check ``variant`` against ``tree`` and return what to pass its cmake; refuse what it cannot build."""
    variants.KINDS[variant.kind].check(variant)
    reading = cmake_scan.TreeCMake(tree)
    defines, left_out = _options(reading, variant, platform)
    configure = reading.read_configure(reading.facts(defines, platform))
    if configure.fatal_errors:
        tip = "change dawn or cmake_defines for this variant in stack.toml"
        raise _fail(variant, f"the pinned onnxruntime refuses these options: {configure.fatal_errors[0]}", tip=tip)
    mirror_define = reading.reads(deps.MIRROR_DEFINE)
    if not mirror_define and not reading.mentions(TREE_MIRROR_MARKER):
        msg = "this onnxruntime tree reads no deps mirror (neither onnxruntime_CMAKE_DEPS_MIRROR_DIR nor <tree>/mirror)"
        raise _fail(variant, msg, tip="give every dependency as a local source: [deps.NAME] source_dir in stack.toml")
    dependencies = tuple(deps.read(tree))
    by_name = {d.name: d for d in dependencies}
    needed = []
    for name, uses in cmake_scan.iter_needed(configure.uses):
        if name not in by_name:
            continue  # a DEP_URL_ that deps.txt does not define: cmake would see an empty URL too
        first = uses[0]
        needed.append(
            NeededDependency(
                dependency=by_name[name],
                content_name=first.content_name,
                patches=tuple(dict.fromkeys(p for use in uses for p in use.patches)),
                decided=any(use.condition is True for use in uses),
                where=first.where,
            )
        )
    return TreePlan(
        defines=defines,
        left_out=tuple(left_out),
        mirror_define=mirror_define,
        needed=tuple(needed),
        dependencies=dependencies,
    )


def fetchcontent_source_define(content_name: str) -> str:
    """The variable that makes FetchContent take a local source dir instead of downloading."""
    return f"FETCHCONTENT_SOURCE_DIR_{re.sub(r'[^A-Za-z0-9_]', '_', content_name).upper()}"
