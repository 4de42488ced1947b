"""Exit codes: one documented table, every error class in it, and the CLI tests reaching each code.

The third test reads the test sources: every ``one_error(result, CODE)`` call is a CLI run that
asserted ``CODE`` together with its one error line, so a code that no such call names is a code
the CLI was never seen to return.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from pathlib import Path

import ortstack
from faultkit import EXIT_CODE_OF_SIGNAL, FAULTS
from ortstack import errors
from ortstack.errors import EXIT_CODES, OrtstackError

TESTS = Path(__file__).parent
PACKAGE = Path(ortstack.__file__).parent


def error_classes() -> set[type[OrtstackError]]:
    """Every ``OrtstackError`` subclass defined anywhere in the package."""
    for module in pkgutil.walk_packages(ortstack.__path__, "ortstack."):
        if module.name != "ortstack.__main__":
            importlib.import_module(module.name)
    found: set[type[OrtstackError]] = set()
    pending = [OrtstackError]
    while pending:
        for subclass in pending.pop().__subclasses__():
            found.add(subclass)
            pending.append(subclass)
    return found


def test_every_error_class_has_a_documented_exit_code() -> None:
    classes = error_classes()
    assert len(classes) >= 8
    for cls in classes:
        assert cls.exit_code in EXIT_CODES, f"{cls.__name__}.exit_code {cls.exit_code} is not in EXIT_CODES"
        assert cls.exit_code != 0, cls
        # 2 is argparse's usage error (tests/test_cli.py): only usage errors of our own share it.
        assert cls.exit_code != errors.UsageError.exit_code or issubclass(cls, errors.UsageError), cls


def test_the_table_in_errors_docstring_is_exit_codes() -> None:
    assert errors.__doc__ is not None
    rows = re.findall(r"^(\d+)\s+\S", errors.__doc__, flags=re.MULTILINE)
    assert [int(code) for code in rows] == list(EXIT_CODES)


def asserted_codes() -> set[int]:
    """Exit codes named as the second argument of ``one_error(...)`` anywhere in the tests."""
    known = {**vars(errors), "EXIT_CODE_OF_SIGNAL": EXIT_CODE_OF_SIGNAL}
    codes: set[int] = set()
    for path in TESTS.glob("test_*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and getattr(node.func, "id", "") == "one_error" and len(node.args) > 1):
                continue
            for part in ast.walk(node.args[1]):
                if isinstance(part, ast.Constant) and isinstance(part.value, int):
                    codes.add(part.value)
                elif isinstance(part, ast.Name) and isinstance(known.get(part.id), int):
                    codes.add(known[part.id])
                elif isinstance(part, ast.Name) and isinstance(known.get(part.id), dict):
                    codes.update(known[part.id].values())
    return codes


def raised_classes() -> set[type[OrtstackError]]:
    """Error classes the package raises somewhere (a class only defined is not yet a code the CLI returns)."""
    sources = "\n".join(p.read_text(encoding="utf-8") for p in PACKAGE.rglob("*.py") if p.name != "errors.py")
    return {cls for cls in error_classes() if re.search(rf"\b{cls.__name__}\(", sources)}


def test_the_cli_is_seen_returning_every_code_it_can_return() -> None:
    wanted = {cls.exit_code for cls in raised_classes()} | set(EXIT_CODE_OF_SIGNAL.values())
    missing = wanted - asserted_codes()
    assert not missing, f"no test runs the CLI into exit code(s) {sorted(missing)} and checks its error line"


def test_every_catalogued_fault_has_exactly_one_test() -> None:
    """``faultkit.FAULTS`` is the count stated for the suite: each entry marks one test (or one parameter)."""
    used: list[str] = []
    for path in TESTS.glob("test_faults_*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "fault" and node.args:
                argument = node.args[0]
                assert isinstance(argument, ast.Constant), ast.unparse(node)
                used.append(str(argument.value))
    assert sorted(used) == sorted(FAULTS)
