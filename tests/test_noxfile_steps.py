"""What the nox sessions run, read from the noxfile's own functions (the sessions call them)."""

from __future__ import annotations

import importlib.util
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from types import ModuleType

ROOT = Path(__file__).parents[1]


@cache  # nox registers each session once per process
def _noxfile() -> ModuleType:
    spec = importlib.util.spec_from_file_location("noxfile_under_test", ROOT / "noxfile.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_build_plan_fetches_no_dependencies() -> None:
    """`nox -s build -- --plan` runs offline once the source is there: no `fetch --deps` before it."""
    noxfile = _noxfile()
    assert noxfile.build_commands(["--plan", "--source-dir", "ort"]) == [
        ["ortstack", "fetch", "--source-dir", "ort"],
        ["ortstack", "patch", "--source-dir", "ort"],
        ["ortstack", "build", "--plan"],
    ]
    assert noxfile.build_commands(["--variant", "webgpu"])[0] == ["ortstack", "fetch", "--deps"]


def test_bench_without_arguments_is_the_quick_one_and_says_how_to_run_the_full_one() -> None:
    noxfile = _noxfile()
    assert noxfile.bench_args([]) == ["--quick"]
    assert noxfile.bench_args(["--ep", "cpu"]) == ["--ep", "cpu"]
    assert "nox -s bench -- --wheel A --wheel B --ep webgpu" in noxfile.QUICK_BENCH_NOTE
