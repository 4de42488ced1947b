"""onnxruntime-genai is chosen from the onnxruntime under test, by real pip, from a real local index.

The package sources are a folder of small wheels (``--find-links DIR --no-index``) and the same
folder served as a PEP 503 index on 127.0.0.1: genai releases that, like the real ones, require
``numpy`` and ``onnxruntime>=X``, a stock onnxruntime that such a requirement would pull, and a
plugin EP wheel that brings its own core. pip reads no configuration of this machine.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import http.server
import json
import os
import re
import subprocess
import sys
import threading
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from packaging.version import Version

from ortstack.errors import SuiteError, UsageError
from ortstack.suites import bench, genai_choice, suites, venv
from wheel_bench import report

if TYPE_CHECKING:
    from collections.abc import Iterator

    from clirun import RunOrtstack

# (genai version, the onnxruntime its metadata requires), as the published releases pair them.
GENAI_RELEASES = (
    ("0.12.2", "1.24.1"),
    ("0.15.2", "1.28.0"),
    ("0.16.0", "1.30.0"),
    ("0.17.1", "1.30.0"),
    ("0.18.0", "1.31.0"),
)
LOCAL = "1.30.0+stack.0123abcd"


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def make_wheel(dest: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> Path:
    """A pure-Python wheel of ``name`` ``version`` whose metadata requires ``requires``."""
    module = name.replace("-", "_")
    info = f"{module}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    metadata += "".join(f"Requires-Dist: {r}\n" for r in requires)
    files = {
        f"{module}/__init__.py": f"__version__ = {version!r}\n".encode(),
        f"{info}/METADATA": metadata.encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    wheel = dest / f"{module}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for member, data in files.items():
            archive.writestr(member, data)
        records = [_record_line(member, data) for member, data in files.items()]
        archive.writestr(f"{info}/RECORD", "\n".join([*records, f"{info}/RECORD,,"]) + "\n")
    return wheel


@pytest.fixture(scope="module")
def house(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("house")
    for version, needs in GENAI_RELEASES:
        make_wheel(folder, "onnxruntime-genai", version, ("numpy>=1.21.6", f"onnxruntime>={needs}"))
    # What the suites' venvs add (SUITE_REQUIREMENTS), as empty stand-ins: only pip's choices are tested.
    for name, version in (("numpy", "2.1.0"), ("onnx", "1.18.0"), ("pytest", "8.3.0")):
        make_wheel(folder, name, version)
    make_wheel(folder, "onnxruntime", "1.31.1", ("numpy>=1.21.6",))
    make_wheel(folder, "onnxruntime-ep-webgpu", "0.4.0", ("onnxruntime>=1.24.4",))
    return folder


@pytest.fixture(scope="module")
def pip_env() -> dict[str, str]:
    """This process's environment, with pip reading no configuration file or variable of the machine."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_", "ORTSTACK_"))}
    return {**env, "PIP_CONFIG_FILE": os.devnull}


def offline(folder: Path) -> tuple[str, ...]:
    return ("--no-index", f"--find-links={folder}")


@pytest.mark.parametrize(
    ("onnxruntime", "expected"),
    [
        ("1.30.0", "0.17.1"),
        (LOCAL, "0.17.1"),
        ("1.31.1", "0.18.0"),
        ("1.31.0+stack.ab12", "0.18.0"),
        ("1.31.0.dev20261201", "0.17.1"),  # a development build comes before its release
        ("1.29.0+stack.ab12", "0.15.2"),
        ("1.27.0", "0.12.2"),
    ],
)
def test_the_newest_genai_whose_requirement_the_wheel_meets(
    house: Path, pip_env: dict[str, str], onnxruntime: str, expected: str
) -> None:
    choice = genai_choice.choose([Version(onnxruntime)], env=pip_env, pip_args=offline(house))
    assert choice.version == expected
    assert choice.requirement == f"onnxruntime-genai=={expected}"
    assert choice.dependencies == ("numpy>=1.21.6",)
    needs = dict(GENAI_RELEASES)[expected]
    assert choice.onnxruntime_requirement == f"onnxruntime>={needs}"
    assert choice.reason.startswith(f"onnxruntime-genai {expected}: the newest whose requirement onnxruntime>={needs}")
    assert f"onnxruntime {onnxruntime} meets" in choice.reason


def test_the_reason_names_the_newer_releases_passed_over(house: Path, pip_env: dict[str, str]) -> None:
    choice = genai_choice.choose([Version(LOCAL)], env=pip_env, pip_args=offline(house))
    assert choice.reason == (
        "onnxruntime-genai 0.17.1: the newest whose requirement onnxruntime>=1.30.0 "
        f"onnxruntime {LOCAL} meets (newer: 0.18.0 requires onnxruntime>=1.31.0)"
    )
    assert choice.record()["requirement"] == "onnxruntime-genai==0.17.1"


def test_an_ab_pair_gets_one_genai_that_both_meet(house: Path, pip_env: dict[str, str]) -> None:
    choice = genai_choice.choose([Version("1.31.1"), Version(LOCAL)], env=pip_env, pip_args=offline(house))
    assert choice.version == "0.17.1"
    assert f"onnxruntime 1.31.1 and {LOCAL} meets" in choice.reason


def test_when_none_fits_the_error_names_every_version_seen(house: Path, pip_env: dict[str, str]) -> None:
    with pytest.raises(SuiteError) as caught:
        genai_choice.choose([Version("1.23.0+stack.ab12")], env=pip_env, pip_args=offline(house))
    message = caught.value.message
    assert "fits onnxruntime 1.23.0+stack.ab12" in message
    for version, needs in GENAI_RELEASES:
        assert f"{version} requires onnxruntime>={needs}" in message
    assert caught.value.tip is not None
    assert "--genai-version" in caught.value.tip
    assert caught.value.exit_code == SuiteError.exit_code


def test_sources_without_genai_say_so(tmp_path: Path, pip_env: dict[str, str]) -> None:
    with pytest.raises(SuiteError, match="no onnxruntime-genai for this Python in --no-index --find-links="):
        genai_choice.choose([Version("1.30.0")], env=pip_env, pip_args=offline(tmp_path))


def test_a_version_the_user_names_wins_even_when_it_does_not_fit(house: Path, pip_env: dict[str, str]) -> None:
    choice = genai_choice.choose([Version(LOCAL)], env=pip_env, pip_args=offline(house), override="0.18.0")
    assert choice.version == "0.18.0"
    assert choice.reason.startswith("onnxruntime-genai 0.18.0: given by --genai-version")
    with pytest.raises(SuiteError, match=re.escape("cannot read the metadata of onnxruntime-genai 0.99.0")):
        genai_choice.choose([Version(LOCAL)], env=pip_env, pip_args=offline(house), override="0.99.0")


def test_the_onnxruntime_a_spec_installs(house: Path, tmp_path: Path, pip_env: dict[str, str]) -> None:
    core = tmp_path / f"onnxruntime_webgpu-{LOCAL}-cp312-cp312-linux_x86_64.whl"
    plugin = tmp_path / "onnxruntime_ep_webgpu-0.5.0+stack.ab12-py3-none-linux_x86_64.whl"

    def version_of(*parts: str | Path) -> Version:
        return genai_choice.onnxruntime_version([str(p) for p in parts], env=pip_env, pip_args=offline(house))

    assert str(version_of(core, plugin)) == LOCAL  # by the wheel's name
    assert str(version_of("onnxruntime==1.31.1", plugin)) == "1.31.1"  # a stock core under a plugin wheel
    # Left to pip: a plugin that brings its own core, a range.
    assert str(version_of("onnxruntime-ep-webgpu==0.4.0")) == "1.31.1"
    assert str(version_of("onnxruntime>=1.30")) == "1.31.1"
    with pytest.raises(SuiteError, match="installs no onnxruntime"):
        version_of("numpy")


@pytest.mark.slow
def test_the_genai_suites_venv_gets_genai_without_a_second_onnxruntime(
    house: Path, tmp_path: Path, pip_env: dict[str, str]
) -> None:
    """A built-in WebGPU core, as ``ortstack test`` would host the genai suite on one: genai's
    ``onnxruntime`` requirement names another distribution, so with its dependencies it would add one."""
    core = make_wheel(tmp_path, "onnxruntime-webgpu", LOCAL, ("numpy>=1.21.6",))
    pip_args = offline(house)
    genai_set = suites.WheelSet(label="genai on the core", requirements=(str(core),), eps=("cpu",), marker="genai")
    chosen = suites.choose_genai(genai_set, pip_env, pip_args=pip_args)
    assert chosen.genai is not None
    assert chosen.label == "genai on the core with onnxruntime-genai 0.17.1"
    made = suites.prepare_venv(chosen, tmp_path / "cache", pip_env, pip_args=pip_args)
    listing = subprocess.run(
        [made.python, "-m", "pip", "list", "--format=json"], env=pip_env, capture_output=True, text=True, check=True
    )
    installed = {p["name"]: p["version"] for p in json.loads(listing.stdout)}
    assert installed["onnxruntime-webgpu"] == LOCAL
    assert installed["onnxruntime-genai"] == "0.17.1"
    assert installed["numpy"] == "2.1.0"
    assert "onnxruntime" not in installed
    # onnxruntime-webgpu does not meet genai's requirement (another name): with its dependencies, the
    # same genai would bring the stock onnxruntime from these sources.
    report: list[str | os.PathLike[str]] = [
        made.python,
        "-m",
        "pip",
        "install",
        "--dry-run",
        "--quiet",
        "--report",
        "-",
        *pip_args,
    ]
    done = subprocess.run([*report, chosen.genai.requirement], env=pip_env, capture_output=True, text=True, check=True)
    assert [i["metadata"]["name"] for i in json.loads(done.stdout)["install"]] == ["onnxruntime"]


@pytest.mark.slow
def test_system_site_packages_serve_what_the_host_has_offline(tmp_path: Path, pip_env: dict[str, str]) -> None:
    """``--system-site-packages`` on a host without an index: a requirement this interpreter already meets
    (pytest here; torch and transformers on a GPU host) is used from it, not installed again. Without the
    option the same offline install fails."""
    core = make_wheel(tmp_path, "onnxruntime-webgpu", LOCAL)
    no_wheels = tmp_path / "no-wheels"
    no_wheels.mkdir()
    cache = tmp_path / "cache"
    with pytest.raises(SuiteError, match="failed"):
        venv.ensure(str(core), cache_dir=cache, env=pip_env, extras=("pytest>=7",), pip_args=offline(no_wheels))
    made = venv.ensure(
        str(core),
        cache_dir=cache,
        env=pip_env,
        extras=("pytest>=7",),
        pip_args=offline(no_wheels),
        system_site_packages=True,
    )
    show: list[str | os.PathLike[str]] = [
        made.python,
        "-c",
        "import onnxruntime_webgpu, pytest; print(onnxruntime_webgpu.__file__, pytest.__file__)",
    ]
    shown = subprocess.run(show, env=pip_env, capture_output=True, text=True, check=True)
    core_file, pytest_file = shown.stdout.split()
    assert Path(core_file).is_relative_to(made.root)
    assert not Path(pytest_file).is_relative_to(made.root)


class _IndexHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        """Quiet: pytest shows the test's own output only."""


@pytest.fixture
def index_url(house: Path, tmp_path: Path) -> Iterator[str]:
    """``house`` as a PEP 503 simple index, served on 127.0.0.1."""
    root = tmp_path / "index"
    projects: dict[str, list[Path]] = {}
    for wheel in house.glob("*.whl"):
        projects.setdefault(wheel.name.split("-")[0].replace("_", "-"), []).append(wheel)
    for project, wheels in projects.items():
        page = root / "simple" / project
        page.mkdir(parents=True)
        links = "".join(f'<a href="/files/{w.name}">{w.name}</a>\n' for w in wheels)
        (page / "index.html").write_text(f"<!DOCTYPE html><html><body>\n{links}</body></html>\n")
    (root / "files").mkdir()
    for wheel in house.glob("*.whl"):
        (root / "files" / wheel.name).write_bytes(wheel.read_bytes())
    handler = functools.partial(_IndexHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/simple/"
    server.shutdown()
    server.server_close()


def test_the_choice_reads_an_http_index(index_url: str, pip_env: dict[str, str]) -> None:
    choice = genai_choice.choose([Version(LOCAL)], env=pip_env, pip_args=(f"--index-url={index_url}",))
    assert choice.version == "0.17.1"
    assert choice.dependencies == ("numpy>=1.21.6",)


def test_a_plugin_wheel_on_the_stock_core_gets_the_genai_of_that_core(
    house: Path, tmp_path: Path, pip_env: dict[str, str]
) -> None:
    plugin = make_wheel(tmp_path, "onnxruntime-ep-webgpu", "0.5.0+stack.ab12", ("onnxruntime>=1.24.4",))
    genai_set = suites.with_genai(suites.plan([plugin], ["cpu", "plugin"]))[-1]
    assert genai_set.requirements == (suites.CPU_BASELINE, str(plugin))
    chosen = suites.choose_genai(genai_set, pip_env, pip_args=offline(house))
    assert chosen.genai is not None
    assert chosen.genai.version == "0.18.0"  # the stock core is 1.31.1
    assert "onnxruntime-genai" not in " ".join(chosen.extra_requirements)  # never pinned beside it


def test_the_bench_gives_both_wheels_the_genai_both_meet_and_reports_it(
    house: Path, tmp_path: Path, pip_env: dict[str, str]
) -> None:
    options = bench.BenchOptions(
        wheels=("onnxruntime-webgpu==1.27.0", "onnxruntime==1.31.1+onnxruntime-ep-webgpu==0.4.0"),
        out_dir=tmp_path / "out",
        cache_dir=tmp_path / "cache",
        pip_args=offline(house),
    )
    choice = bench.choose_genai(options, pip_env)
    assert choice.version == "0.12.2"
    assert "onnxruntime 1.27.0 and 1.31.1 meets" in choice.reason
    assert bench.choose_genai(bench.replace(options, genai_version="0.15.2"), pip_env).version == "0.15.2"
    document = {
        "wheels": [{"id": "A", "label": options.wheels[0]}, {"id": "B", "label": options.wheels[1]}],
        "runs": [],
        "order": [],
        "software_adapter": False,
        "host": {"platform": "test"},
        "options": {"warmups": 1, "requests": 1},
        "command": [],
        "genai": choice.record(),
    }
    document["summary"] = report.summarize(document)
    assert f"- {choice.reason}\n" in report.markdown(document)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["test", "--genai-version", "0.17.1"], "--genai-version names the onnxruntime-genai of the genai suite"),
        (["test", "--genai", "--genai-version", "latest"], "expected a version such as 0.17.1, got 'latest'"),
        (["bench", "--genai-version", "0.17"], None),
    ],
)
def test_the_genai_version_option(run_ortstack: RunOrtstack, args: list[str], expected: str | None) -> None:
    done = run_ortstack(*args, "--help" if expected is None else "--ep=cpu")
    if expected is None:
        assert done.returncode == 0, done.stderr
        assert "--genai-version VERSION" in done.stdout
        return
    assert done.returncode == UsageError.exit_code, done.stderr
    assert expected in " ".join(done.stderr.split())


@pytest.mark.slow
def test_a_package_on_the_callers_pythonpath_is_still_installed_into_the_venv(
    house: Path, tmp_path: Path, pip_env: dict[str, str]
) -> None:
    """pip counts a distribution on ``PYTHONPATH`` as installed; the suites run without the caller's
    ``PYTHONPATH``, so genai found there must still land in the venv (else the genai suite sees none)."""
    shadow = tmp_path / "shadow"
    genai = house / "onnxruntime_genai-0.17.1-py3-none-any.whl"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", shadow, genai],
        env=pip_env,
        check=True,
    )
    core = make_wheel(tmp_path, "onnxruntime-webgpu", LOCAL, ("numpy>=1.21.6",))
    made = venv.ensure(
        str(core),
        cache_dir=tmp_path / "cache",
        env={**pip_env, "PYTHONPATH": str(shadow)},
        extras_no_deps=("onnxruntime-genai==0.17.1",),
        pip_args=offline(house),
    )
    clean = {k: v for k, v in pip_env.items() if k != "PYTHONPATH"}
    shown = subprocess.run(
        [made.python, "-c", "import onnxruntime_genai; print(onnxruntime_genai.__file__)"],
        env=clean,
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(shown.stdout.strip()).is_relative_to(made.root)
