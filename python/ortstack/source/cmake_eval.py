"""A small evaluator of the CMake that decides what Dawn's configure reads, without running cmake.

Which third-party folders a Dawn build uses is decided by ``if()`` blocks in Dawn's own CMake over
options that onnxruntime's cmake forces. cmake itself cannot answer that without the folders
present, a compiler, and the target platform, so this walks the same files the way cmake would:
``set``/``option``/``list(APPEND)``, cache versus normal variables, ``if``/``elseif``/``else``,
``function``/``macro``, ``return()``, and records every other command with its arguments expanded.
Commands it does not model (``project``, ``target_*``, ``add_library`` …) are only recorded.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ortstack.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Callable

_TRUE = {"1", "ON", "YES", "TRUE", "Y"}
_FALSE = {"0", "OFF", "NO", "FALSE", "N", "IGNORE", "NOTFOUND", ""}
_UNARY = {"TARGET", "DEFINED", "EXISTS", "COMMAND", "POLICY", "IS_DIRECTORY"}
_BINARY = {"STREQUAL", "MATCHES", "EQUAL", "LESS", "GREATER", "IN_LIST", "VERSION_LESS", "VERSION_GREATER"}
_BLOCKS = {"function": "endfunction", "macro": "endmacro", "foreach": "endforeach", "while": "endwhile"}
_VARIABLE = re.compile(r"\$\{([A-Za-z0-9_./+-]+)\}")


@dataclass(frozen=True, kw_only=True)
class Argument:
    text: str
    quoted: bool


@dataclass(frozen=True, kw_only=True)
class Command:
    name: str
    """Lower case, as cmake compares command names."""
    args: tuple[Argument, ...]
    line: int


def parse(text: str, origin: str) -> list[Command]:
    """The commands of a CMake file, in order: comments dropped, ``(``/``)`` inside arguments kept as
    arguments of their own, quoted and bracket arguments marked ``quoted``.

    Read leniently, as the files of a pinned tree are: words not followed by ``(`` are skipped.
    """
    commands: list[Command] = []
    position, length = 0, len(text)
    while position < length:
        char = text[position]
        if char == "#":
            position = _comment_end(text, position)
        elif char.isalpha() or char == "_":
            match = _NAME.match(text, position)
            assert match is not None  # the branch tested the first character
            opening = _OPENING.match(text, match.end())
            if opening is None:
                position = match.end()
                continue
            args, position = _arguments(text, opening.end(), origin)
            line = text.count("\n", 0, match.start()) + 1
            commands.append(Command(name=match.group(0).lower(), args=tuple(args), line=line))
        else:
            position += 1
    return commands


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_OPENING = re.compile(r"[ \t]*\(")
_BRACKET = re.compile(r"\[(=*)\[(.*?)\]\1\]", re.DOTALL)


def _comment_end(text: str, position: int) -> int:
    """Where a comment starting at ``text[position]`` (``#`` or ``#[[ … ]]``) ends."""
    bracket = _BRACKET.match(text, position + 1)
    if bracket:
        return bracket.end()
    end = text.find("\n", position)
    return len(text) if end < 0 else end


def _quoted_end(text: str, position: int) -> int:
    """Index of the quote that closes the string opened at ``text[position]``."""
    end = position + 1
    while end < len(text) and text[end] != '"':
        end += 2 if text[end] == "\\" else 1
    return end


def _word_end(text: str, position: int) -> int:
    """Where an unquoted argument ends; it may hold escapes and quoted parts (cmake's ``a"b c"d``)."""
    while position < len(text) and text[position] not in " \t\r\n()#":
        if text[position] == "\\":  # an escape: \" or \( belongs to the word
            position += 2
        elif text[position] == '"':
            position = _quoted_end(text, position) + 1
        else:
            position += 1
    return position


def _arguments(text: str, position: int, origin: str) -> tuple[list[Argument], int]:
    """Arguments of a command whose ``(`` ends before ``position``, and the index after its ``)``."""
    args: list[Argument] = []
    depth, length = 1, len(text)
    while position < length:
        char = text[position]
        if char in " \t\r\n":
            position += 1
        elif char == "#":
            position = _comment_end(text, position)
        elif char == "[" and (bracket := _BRACKET.match(text, position)):
            args.append(Argument(text=bracket.group(2).removeprefix("\n"), quoted=True))
            position = bracket.end()
        elif char == '"':
            end = _quoted_end(text, position)
            args.append(Argument(text=text[position + 1 : end].replace('\\"', '"'), quoted=True))
            position = end + 1
        elif char in "()":
            depth += 1 if char == "(" else -1
            if depth == 0:
                return args, position + 1
            args.append(Argument(text=char, quoted=False))
            position += 1
        else:
            end = _word_end(text, position)
            args.append(Argument(text=text[position:end], quoted=False))
            position = end
    line = text.count("\n", 0, position) + 1
    msg = f"{origin}:{line}: unbalanced parentheses"
    raise ConfigError(msg, tip="the pinned file could not be read as CMake")


class Stop(Exception):  # noqa: N818 - a signal, not an error
    """Raised by a watcher to end the evaluation at a command."""


@dataclass(kw_only=True)
class Evaluation:
    """What one walk saw: variables as the last command left them, and every command that ran."""

    variables: dict[str, str] = field(default_factory=dict)
    cache: dict[str, str] = field(default_factory=dict)
    targets: set[str] = field(default_factory=set)
    ran: list[tuple[str, list[str]]] = field(default_factory=list)
    """``(command, expanded arguments)`` of every command that ran, in order."""
    mentioned: set[str] = field(default_factory=set)
    """Names of every command in the files read, run or not."""
    functions: dict[str, tuple[list[str], list[Command]]] = field(default_factory=dict)
    watcher: Callable[[str, list[str]], None] | None = None
    follow: Callable[[str], tuple[str, str] | None] | None = None
    """``add_subdirectory`` argument -> (origin, text) of that folder's CMakeLists.txt, or None to skip it."""

    def lookup(self, name: str) -> str | None:
        return self.variables.get(name, self.cache.get(name))

    def expand(self, text: str) -> str:
        for _ in range(8):  # nested ${${X}} at most this deep
            expanded = _VARIABLE.sub(lambda m: self.lookup(m.group(1)) or "", text)
            if expanded == text:
                return expanded
            text = expanded
        return text

    def values(self, args: tuple[Argument, ...]) -> list[str]:
        """Arguments as cmake hands them to a command: unquoted ones split on ``;`` after expansion."""
        out: list[str] = []
        for arg in args:
            value = self.expand(arg.text)
            if arg.quoted:
                out.append(value)
            elif value:
                out.extend(value.split(";"))
        return out

    def run(self, commands: list[Command], origin: str) -> None:
        self.mentioned.update(command.name for command in commands)
        try:
            self._block(commands, origin)
        except _Return:
            return

    def _block(self, commands: list[Command], origin: str) -> None:
        index = 0
        while index < len(commands):
            command = commands[index]
            if command.name == "if":
                index = self._if(commands, index, origin)
                continue
            if command.name in _BLOCKS:
                end = _matching(commands, index, command.name, _BLOCKS[command.name], origin)
                if command.name in {"function", "macro"}:
                    names = self.values(command.args)
                    self.functions[names[0].lower()] = (names[1:], commands[index + 1 : end])
                index = end + 1
                continue
            self._command(command, origin)
            index += 1

    def _if(self, commands: list[Command], start: int, origin: str) -> int:
        branches: list[tuple[Command, int]] = [(commands[start], start)]
        depth, index = 0, start + 1
        while index < len(commands):
            name = commands[index].name
            if name == "if":
                depth += 1
            elif name == "endif" and depth == 0:
                break
            elif name == "endif":
                depth -= 1
            elif name in {"elseif", "else"} and depth == 0:
                branches.append((commands[index], index))
            index += 1
        else:
            msg = f"{origin}:{commands[start].line}: if() without endif()"
            raise ConfigError(msg, tip="the pinned file could not be read as CMake")
        bounds = [position for _, position in branches] + [index]
        for number, (head, position) in enumerate(branches):
            if head.name == "else" or self.condition(head.args):
                self._block(commands[position + 1 : bounds[number + 1]], origin)
                break
        return index + 1

    def _command(self, command: Command, origin: str) -> None:
        name = command.name
        values = self.values(command.args)
        relative_folder = name == "add_subdirectory" or (name == "include" and "/" in values[0] if values else False)
        if relative_folder and values and not _absolute(values[0]):
            values[0] = f"{self.lookup('CMAKE_CURRENT_SOURCE_DIR')}/{values[0]}"  # relative to the current folder
        self.ran.append((name, values))
        if self.watcher is not None:
            self.watcher(name, values)
        if name == "return":
            raise _Return
        if name in self.functions:
            self._call(name, values, origin)
        elif name in _MODELLED and values:
            getattr(self, _MODELLED[name])(values)

    def _option(self, values: list[str]) -> None:
        if values[0] not in self.cache and values[0] not in self.variables:
            self.cache[values[0]] = values[2] if len(values) > 2 else "OFF"  # noqa: PLR2004 - name, doc, default

    def _set_if_not_defined(self, values: list[str]) -> None:
        # Dawn's macro (src/cmake/DawnSetIfNotDefined.cmake): name, value, doc.
        if self.lookup(values[0]) is None and len(values) > 1:
            self.cache[values[0]] = values[1]

    def _list(self, values: list[str]) -> None:
        if values[0] == "APPEND" and len(values) > 1:
            current = self.lookup(values[1])
            self.variables[values[1]] = ";".join(([current] if current else []) + values[2:])

    def _unset(self, values: list[str]) -> None:
        self.variables.pop(values[0], None)

    def _target(self, values: list[str]) -> None:
        self.targets.add(values[0])

    def _set(self, values: list[str]) -> None:
        name, rest = values[0], values[1:]
        if "CACHE" in rest:
            where = rest.index("CACHE")
            if "FORCE" in rest[where:] or name not in self.cache:
                self.cache[name] = ";".join(rest[:where])
            return
        if rest and rest[-1] == "PARENT_SCOPE":
            rest = rest[:-1]
        if rest:
            self.variables[name] = ";".join(rest)
        else:
            self.variables.pop(name, None)

    def _subdirectory(self, values: list[str]) -> None:
        folder = values[0]
        found = self.follow(folder) if self.follow is not None else None
        if found is None:
            return
        origin, text = found
        saved = dict(self.variables)  # a directory is a scope: its normal variables do not leak out
        self.variables["CMAKE_CURRENT_SOURCE_DIR"] = folder
        self.run(parse(text, origin), origin)
        self.variables = saved

    def _call(self, name: str, values: list[str], origin: str) -> None:
        params, body = self.functions[name]
        saved = dict(self.variables)
        self.variables.update(zip(params, values, strict=False))
        self.variables["ARGN"] = ";".join(values[len(params) :])
        with contextlib.suppress(_Return):
            self._block(body, origin)
        self.variables = saved

    def run_uncalled_functions(self, origin: str) -> None:
        """Run once, without arguments, each function no evaluated file calls or names: Dawn's own
        sources (not evaluated here) call those, such as the code generator's ``DawnGenerator``."""
        for name in sorted(set(self.functions) - self.mentioned):
            self._call(name, [], origin)

    # ----------------------------------------------------------------------------------------------
    # if() conditions: NOT, AND, OR, parentheses, unary and binary tests, as cmake ranks them.

    def condition(self, args: tuple[Argument, ...]) -> bool:
        tokens = [Argument(text=self.expand(a.text), quoted=a.quoted) for a in args]
        result, rest = self._or(tokens)
        return result if not rest else False

    def _or(self, tokens: list[Argument]) -> tuple[bool, list[Argument]]:
        left, tokens = self._and(tokens)
        while tokens and _is(tokens[0], "OR"):
            right, tokens = self._and(tokens[1:])
            left = left or right
        return left, tokens

    def _and(self, tokens: list[Argument]) -> tuple[bool, list[Argument]]:
        left, tokens = self._not(tokens)
        while tokens and _is(tokens[0], "AND"):
            right, tokens = self._not(tokens[1:])
            left = left and right
        return left, tokens

    def _not(self, tokens: list[Argument]) -> tuple[bool, list[Argument]]:
        if tokens and _is(tokens[0], "NOT"):
            value, rest = self._not(tokens[1:])
            return not value, rest
        return self._comparison(tokens)

    def _comparison(self, tokens: list[Argument]) -> tuple[bool, list[Argument]]:
        if not tokens:
            return False, []
        first = tokens[0]
        if _is(first, "("):
            value, rest = self._or(tokens[1:])
            return value, rest[1:] if rest and _is(rest[0], ")") else rest
        if not first.quoted and first.text in _UNARY and len(tokens) > 1:
            return self._unary(first.text, tokens[1].text), tokens[2:]
        if len(tokens) > 2 and not tokens[1].quoted and tokens[1].text in _BINARY:  # noqa: PLR2004
            return self._binary(tokens[1].text, first, tokens[2]), tokens[3:]
        return self._truthy(first), tokens[1:]

    def _unary(self, operator: str, operand: str) -> bool:
        if operator == "TARGET":
            return operand in self.targets
        if operator == "DEFINED":
            return self.lookup(operand) is not None
        if operator == "COMMAND":
            return operand.lower() in self.functions
        return False  # EXISTS, IS_DIRECTORY: nothing of the evaluated tree is on disk; POLICY: not modelled

    def _operand(self, arg: Argument) -> str:
        value = None if arg.quoted else self.lookup(arg.text)
        return arg.text if value is None else value

    def _binary(self, operator: str, left: Argument, right: Argument) -> bool:
        a, b = self._operand(left), self._operand(right)
        if operator == "STREQUAL":
            return a == b
        if operator == "MATCHES":
            return re.search(b, a) is not None
        if operator == "IN_LIST":
            return a in (self.lookup(right.text) or "").split(";")
        numbers = re.findall(r"\d+", a), re.findall(r"\d+", b)
        left_key, right_key = [int(n) for n in numbers[0]], [int(n) for n in numbers[1]]
        if operator == "EQUAL":
            return left_key == right_key
        if operator in {"LESS", "VERSION_LESS"}:
            return left_key < right_key
        return left_key > right_key

    def _truthy(self, arg: Argument) -> bool:
        upper = arg.text.upper()
        if upper in _TRUE or re.fullmatch(r"[1-9]\d*(\.\d+)?", arg.text):
            return True
        if upper in _FALSE or upper.endswith("-NOTFOUND") or arg.quoted:
            return False
        value = self.lookup(arg.text)
        return value is not None and not _false(value)


_MODELLED = {
    "set": "_set",
    "unset": "_unset",
    "option": "_option",
    "set_if_not_defined": "_set_if_not_defined",
    "list": "_list",
    "add_library": "_target",
    "add_executable": "_target",
    "add_subdirectory": "_subdirectory",
}
"""Commands whose effect on variables, targets or folders the evaluation follows (method names)."""


class _Return(Exception):  # noqa: N818 - control flow
    pass


def _absolute(path: str) -> bool:
    return path.startswith(("/", "@")) or re.match(r"[A-Za-z]:[/\\]", path) is not None


def _false(value: str) -> bool:
    upper = value.upper()
    return upper in _FALSE or upper.endswith("-NOTFOUND")


def _is(arg: Argument, word: str) -> bool:
    return not arg.quoted and arg.text == word


def _matching(commands: list[Command], start: int, opening: str, closing: str, origin: str) -> int:
    depth = 0
    for index in range(start + 1, len(commands)):
        if commands[index].name == opening:
            depth += 1
        elif commands[index].name == closing:
            if depth == 0:
                return index
            depth -= 1
    msg = f"{origin}:{commands[start].line}: {opening}() without {closing}()"
    raise ConfigError(msg, tip="the pinned file could not be read as CMake")
