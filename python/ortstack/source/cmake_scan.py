"""Reading the pinned tree's own cmake files: which options it reads, which deps.txt entries its
configure uses, and which of onnxruntime's dependency patches it applies.

onnxruntime's option names and dependency handling change between versions, and cmake ignores an
option it does not read without a word, so ortstack decides from the tree rather than from a table.
The reading is static: commands are walked from ``cmake/CMakeLists.txt`` through ``include()``, and
each ``if()`` condition is evaluated in three-valued logic against what is known before configure
(the variant's defines, the option defaults, the host platform). What cannot be known then
(``TARGET``, ``EXISTS``, values set by configure) is *unknown*, and an unknown condition keeps the
dependency: this errs towards mirroring one dependency too many, never one too few.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from ortstack.source import cmake_eval

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping
    from pathlib import Path

Truth = bool | None  # None: not known before configure

_FALSE_CONSTANTS = {"", "0", "OFF", "NO", "FALSE", "N", "IGNORE", "NOTFOUND"}
_TRUE_CONSTANTS = {"1", "ON", "YES", "TRUE", "Y"}
_UNARY_TESTS = {"EXISTS", "COMMAND", "POLICY", "TARGET", "TEST", "IS_DIRECTORY", "IS_SYMLINK", "IS_ABSOLUTE"}
_BINARY_TESTS = {
    "STREQUAL", "STRLESS", "STRGREATER", "EQUAL", "LESS", "GREATER", "LESS_EQUAL", "GREATER_EQUAL",
    "MATCHES", "VERSION_LESS", "VERSION_GREATER", "VERSION_EQUAL", "VERSION_LESS_EQUAL",
    "VERSION_GREATER_EQUAL", "IN_LIST", "IS_NEWER_THAN", "STRLESS_EQUAL", "STRGREATER_EQUAL", "PATH_EQUAL",
}  # fmt: skip
_DEP_REFERENCE = re.compile(r"\bDEP_(?:URL|SHA1)_([A-Za-z0-9_+-]+)")
_PATCH_FILE = re.compile(r"patches/[\w.+-]+/[\w.+-]+\.patch")
_VARIABLE = re.compile(r"\$\{(\w+)\}")


@dataclass(frozen=True)
class Command:
    name: str
    """Lower-case command name, e.g. ``if`` or ``onnxruntime_fetchcontent_declare``."""
    args: tuple[str, ...]
    """Arguments as written (quotes removed), variables not expanded."""
    file: str
    line: int


def parse_commands(text: str, file: str) -> list[Command]:
    """The commands of a cmake file (``cmake_eval.parse``), with the file each came from."""
    return [
        Command(name=c.name, args=tuple(a.text for a in c.args), file=file, line=c.line)
        for c in cmake_eval.parse(text, file)
    ]


# --------------------------------------------------------------------------------------------------
# Three-valued evaluation of if() conditions.


def _not(value: Truth) -> Truth:
    return None if value is None else not value


def _and(values: list[Truth]) -> Truth:
    if any(v is False for v in values):
        return False
    return True if all(v is True for v in values) else None


def _or(values: list[Truth]) -> Truth:
    if any(v is True for v in values):
        return True
    return False if all(v is False for v in values) else None


@dataclass(frozen=True)
class Facts:
    """What is known before configure: variable values (``ON``/``OFF``/strings)."""

    values: Mapping[str, str]

    def expand(self, word: str) -> str | None:
        """``word`` with ``${VAR}`` replaced; None when a variable in it is not known."""
        unknown = False

        def replace(match: re.Match[str]) -> str:
            nonlocal unknown
            value = self.values.get(match.group(1))
            if value is None:
                unknown = True
                return ""
            return value

        expanded = _VARIABLE.sub(replace, word)
        return None if unknown else expanded

    def truth_of(self, word: str) -> Truth:
        """if(<word>): a constant, or a variable's value; a name not known here is None."""
        expanded = self.expand(word)
        if expanded is None:
            return None
        constant = _constant_truth(expanded)
        if constant is not None:
            return constant
        if expanded in self.values:
            return _constant_truth(self.values[expanded]) is not False
        return None

    def operand(self, word: str, *, left: bool) -> str | None:
        """A comparison operand: a variable's value, or the literal; an unknown name on the left is None."""
        if "${" in word:
            return self.expand(word)
        if word in self.values:
            return self.values[word]
        return None if left and re.fullmatch(r"[A-Za-z_]\w*", word) else word

    def compare(self, left: str, operator: str, right: str) -> Truth:
        lhs, rhs = self.operand(left, left=True), self.operand(right, left=False)
        if lhs is None or rhs is None:
            return None
        if operator == "STREQUAL":
            return lhs == rhs
        if operator == "MATCHES":
            try:
                return re.search(rhs, lhs) is not None
            except re.error:
                return None
        return None  # numeric, version and list tests: not needed to decide dependencies


def _constant_truth(word: str) -> Truth:
    upper = word.upper()
    if upper in _TRUE_CONSTANTS or re.fullmatch(r"-?[1-9]\d*(\.\d+)?", word):
        return True
    if upper in _FALSE_CONSTANTS or upper.endswith("-NOTFOUND"):
        return False
    return None


@dataclass
class _Condition:
    """A recursive-descent reading of if() arguments: OR of ANDs of NOTs of tests."""

    words: list[str]
    facts: Facts
    position: int = 0

    def peek(self) -> str:
        return self.words[self.position].upper() if self.position < len(self.words) else ""

    def take(self) -> str:
        self.position += 1
        return self.words[self.position - 1] if self.position <= len(self.words) else ""

    def any_of(self) -> Truth:
        values = [self.all_of()]
        while self.peek() == "OR":
            self.take()
            values.append(self.all_of())
        return _or(values)

    def all_of(self) -> Truth:
        values = [self.negation()]
        while self.peek() == "AND":
            self.take()
            values.append(self.negation())
        return _and(values)

    def negation(self) -> Truth:
        if self.peek() == "NOT":
            self.take()
            return _not(self.negation())
        return self.test()

    def test(self) -> Truth:
        word = self.take()
        if word == "(":
            value = self.any_of()
            self.take()  # the closing parenthesis
            return value
        if word.upper() == "DEFINED":
            return True if self.take() in self.facts.values else None
        if word.upper() in _UNARY_TESTS:
            self.take()
            return None
        if self.peek() in _BINARY_TESTS:
            operator = self.take().upper()
            return self.facts.compare(word, operator, self.take())
        return self.facts.truth_of(word) if word else None


def evaluate(args: tuple[str, ...], facts: Facts) -> Truth:
    """The truth of an ``if()`` argument list, or None when configure would decide it."""
    # Parentheses arrive glued to words ("(A" / "B)"); split them off.
    words = [part for arg in args for part in re.split(r"(\(|\))", arg) if part]
    return _Condition(words=words, facts=facts).any_of()


# --------------------------------------------------------------------------------------------------
# Walking the tree's cmake from CMakeLists.txt.


@dataclass(frozen=True, kw_only=True)
class DepUse:
    """One place the configure would use a deps.txt entry."""

    dep: str
    """The deps.txt name (``DEP_URL_<name>``)."""
    content_name: str
    """The FetchContent name it is declared under (for ``FETCHCONTENT_SOURCE_DIR_<NAME>``)."""
    condition: Truth
    patches: tuple[str, ...]
    """onnxruntime's own patches for it, relative to ``cmake/`` (applied by its PATCH_COMMAND)."""
    where: str


@dataclass
class _Walk:
    facts: Facts
    uses: list[DepUse] = field(default_factory=list)
    patch_variables: dict[str, list[tuple[Truth, tuple[str, ...]]]] = field(default_factory=dict)
    fatal_errors: list[str] = field(default_factory=list)
    seen_files: set[str] = field(default_factory=set)


@dataclass(frozen=True, kw_only=True)
class ConfigureReading:
    """What walking the tree's cmake found for one set of facts."""

    uses: tuple[DepUse, ...]
    fatal_errors: tuple[str, ...]
    """``file:line: message`` of each FATAL_ERROR the configure would certainly reach."""


@dataclass
class _Branches:
    """The if()/elseif()/else() branches around the current command; function and macro bodies are
    skipped (they run only when called)."""

    outer: Truth
    facts: Facts
    stack: list[tuple[Truth, Truth]] = field(default_factory=list)
    """(this branch holds, an earlier branch of the same if() held) per open if()."""
    in_body: int = 0

    def active(self) -> Truth:
        return _and([self.outer, *[holds for holds, _ in self.stack]])

    def follow(self, command: Command) -> bool:
        """Track ``command`` if it opens, turns or closes a block; False for any other command."""
        name = command.name
        if name in {"function", "macro", "endfunction", "endmacro"}:
            self.in_body = max(0, self.in_body + (1 if name in {"function", "macro"} else -1))
        elif self.in_body:
            pass
        elif name == "if":
            holds = evaluate(command.args, self.facts)
            self.stack.append((holds, holds))
        elif name in {"elseif", "else"} and self.stack:
            _, earlier = self.stack.pop()
            holds = _not(earlier) if name == "else" else _and([_not(earlier), evaluate(command.args, self.facts)])
            self.stack.append((holds, _or([earlier, holds])))
        elif name == "endif" and self.stack:
            self.stack.pop()
        else:
            return False
        return True


@dataclass(frozen=True)
class TreeCMake:
    """The cmake files of one onnxruntime tree, read once."""

    tree: Path

    @cached_property
    def files(self) -> dict[str, str]:
        cmake = self.tree / "cmake"
        paths = [cmake / "CMakeLists.txt", *sorted(cmake.rglob("*.cmake"))]
        return {
            p.relative_to(cmake).as_posix(): p.read_text(encoding="utf-8", errors="replace")
            for p in paths
            if p.is_file()
        }

    @cached_property
    def words(self) -> set[str]:
        """Every identifier in the tree's cmake files."""
        return {word for text in self.files.values() for word in re.findall(r"\b[A-Za-z_]\w*\b", text)}

    def reads(self, name: str) -> bool:
        """Whether any of the tree's cmake files names ``name`` (an option it does not name is ignored)."""
        return name in self.words

    def mentions(self, text: str) -> bool:
        return any(text in content for content in self.files.values())

    def facts(self, defines: Mapping[str, str], platform: str) -> Facts:
        """The platform, the defines, then CMakeLists.txt's option defaults for what they leave unset.

        ``cmake_dependent_option(NAME doc DEFAULT "DEPENDS" FORCE)`` is DEFAULT when every condition
        in DEPENDS holds and FORCE when one fails (then even a define cannot change it).
        """
        values = {**platform_facts(platform), **defines}
        for command in parse_commands(self.files.get("CMakeLists.txt", ""), "CMakeLists.txt"):
            if command.name == "option" and command.args:
                default = command.args[2] if len(command.args) > 2 else "OFF"  # noqa: PLR2004 - name, doc, value
                values.setdefault(command.args[0], default)
            elif command.name == "cmake_dependent_option" and len(command.args) >= 5:  # noqa: PLR2004
                name, _, default, depends, forced = command.args[:5]
                holds = _and([evaluate(tuple(part.split()), Facts(values)) for part in depends.split(";")])
                if holds is False:
                    values[name] = forced
                elif holds is True:
                    values.setdefault(name, default)
        return Facts(values)

    def read_configure(self, facts: Facts) -> ConfigureReading:
        """Every place the configure would use a deps.txt entry (with its condition), and the
        FATAL_ERRORs it would certainly reach."""
        walk = _Walk(facts=facts)
        self._walk("CMakeLists.txt", walk, outer=True)
        return ConfigureReading(uses=tuple(walk.uses), fatal_errors=tuple(walk.fatal_errors))

    def _resolve_include(self, argument: str, facts: Facts) -> str | None:
        expanded = facts.expand(argument) or argument
        name = re.sub(r"^\$\{[^}]*\}/", "", expanded).removeprefix("cmake/")
        for candidate in (name, f"{name}.cmake", f"external/{name}", f"external/{name}.cmake"):
            if candidate in self.files:
                return candidate
        return None

    def _walk(self, file: str, walk: _Walk, *, outer: Truth) -> None:
        if file in walk.seen_files:
            return
        walk.seen_files.add(file)
        branches = _Branches(outer=outer, facts=walk.facts)
        for command in parse_commands(self.files[file], file):
            if not branches.follow(command) and branches.active() is not False:
                self._visit(command, walk, branches.active())

    def _visit(self, command: Command, walk: _Walk, condition: Truth) -> None:
        joined = " ".join(command.args)
        if command.name == "message" and command.args[:1] == ("FATAL_ERROR",):
            if condition is True:
                walk.fatal_errors.append(f"cmake/{command.file}:{command.line}: {' '.join(command.args[1:])}")
        elif command.name == "include" and command.args:
            target = self._resolve_include(command.args[0], walk.facts)
            if target:
                self._walk(target, walk, outer=condition)
        elif command.name in {"set", "list"} and _PATCH_FILE.search(joined):
            variable = command.args[1] if command.name == "list" and len(command.args) > 1 else command.args[0]
            walk.patch_variables.setdefault(variable, []).append((condition, tuple(_PATCH_FILE.findall(joined))))
        elif command.name not in {"set", "message", "list", "string"}:
            _record_uses(command, joined, walk, condition)


def _record_uses(command: Command, joined: str, walk: _Walk, condition: Truth) -> None:
    """A command that names ``DEP_URL_<dep>``: the configure uses that dependency here."""
    deps = sorted({match.group(1) for match in _DEP_REFERENCE.finditer(joined)})
    if not deps:
        return
    patches = list(_PATCH_FILE.findall(joined))
    for variable in _VARIABLE.findall(joined):
        patches += [p for held, found in walk.patch_variables.get(variable, []) if held is not False for p in found]
    for dep in deps:
        walk.uses.append(
            DepUse(
                dep=dep,
                content_name=command.args[0] if command.args else "",
                condition=condition,
                patches=tuple(dict.fromkeys(patches)),
                where=f"cmake/{command.file}:{command.line}",
            )
        )


def platform_facts(platform: str) -> dict[str, str]:
    """What cmake knows about the host before configure, as onnxruntime's conditions use it."""
    if platform == "windows":
        return {
            "WIN32": "ON", "MSVC": "ON", "UNIX": "OFF", "APPLE": "OFF", "ANDROID": "OFF", "IOS": "OFF",
            "LINUX": "OFF", "CMAKE_SYSTEM_NAME": "Windows", "CMAKE_HOST_SYSTEM_NAME": "Windows",
            "CMAKE_CXX_COMPILER_ID": "MSVC", "CMAKE_C_COMPILER_ID": "MSVC", "CMAKE_SYSTEM_PROCESSOR": "AMD64",
            "onnxruntime_target_platform": "x64", "CMAKE_CROSSCOMPILING": "OFF", "WINDOWS_STORE": "OFF",
            "CMAKE_HOST_WIN32": "ON", "CMAKE_HOST_APPLE": "OFF", "CMAKE_HOST_UNIX": "OFF", "CMAKE_SIZEOF_VOID_P": "8",
        }  # fmt: skip
    return {
        "WIN32": "OFF", "MSVC": "OFF", "UNIX": "ON", "APPLE": "OFF", "ANDROID": "OFF", "IOS": "OFF",
        "LINUX": "ON", "CMAKE_SYSTEM_NAME": "Linux", "CMAKE_HOST_SYSTEM_NAME": "Linux",
        "CMAKE_CXX_COMPILER_ID": "GNU", "CMAKE_C_COMPILER_ID": "GNU", "CMAKE_SYSTEM_PROCESSOR": "x86_64",
        "onnxruntime_target_platform": "x86_64", "CMAKE_CROSSCOMPILING": "OFF", "WINDOWS_STORE": "OFF",
        "CMAKE_SIZEOF_VOID_P": "8", "CMAKE_HOST_WIN32": "OFF", "CMAKE_HOST_APPLE": "OFF", "CMAKE_HOST_UNIX": "ON",
    }  # fmt: skip


def iter_needed(uses: tuple[DepUse, ...]) -> Iterator[tuple[str, list[DepUse]]]:
    """deps.txt names whose use is not ruled out, each with the uses that keep it."""
    by_dep: dict[str, list[DepUse]] = {}
    for use in uses:
        if use.condition is not False:
            by_dep.setdefault(use.dep, []).append(use)
    yield from sorted(by_dep.items())
