"""``ortstack test`` on an ortstack-built wheel of an older onnxruntime, from a local wheelhouse.

The wheel under test is the stock onnxruntime 1.21.0 (a real old ORT: 4-bit-only MatMulNBits on its
CPU EP, no PagedAttention) repacked the way ortstack names and marks its wheels: a ``+stack.<hash>``
local version and a build-info file that claims the WebGPU Q/K norm. The suites' venv is made with
``--find-links DIR --no-index``, from a wheelhouse downloaded once, so no package index is used.
What 1.21 lacks must be recorded as absent with the reason, and the run must pass.
"""

from __future__ import annotations

import base64
import hashlib
import re
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest

from clirun import one_error
from ortstack.build.buildinfo import BUILD_INFO_NAME, BuildInfo
from ortstack.errors import ConfigError
from ortstack.suites import venv

if TYPE_CHECKING:
    import os
    from pathlib import Path

OLD_ORT = "onnxruntime==1.21.0"
LOCAL_VERSION = "1.21.0+stack.0123abcd"


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """onnxruntime 1.21.0 and what the suites need, downloaded once (the only index access here)."""
    house = tmp_path_factory.mktemp("wheelhouse")
    argv: list[str | os.PathLike[str]] = [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:"]
    argv += ["--dest", house, OLD_ORT]
    subprocess.run([*argv, "numpy>=1.26", "onnx>=1.17", "pytest>=8"], check=True, timeout=600)
    return house


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def repack_as_ortstack_build(stock: Path, dest: Path, *, features: list[str]) -> Path:
    """``stock`` renamed to a ``+stack`` local version, with an ortstack build-info file inside."""
    old_info, new_info = "onnxruntime-1.21.0.dist-info", f"onnxruntime-{LOCAL_VERSION}.dist-info"
    info = BuildInfo(
        ort_version="1.21.0",
        ort_commit="0" * 40,
        tree_commit="1" * 40,
        dawn_revision="",
        patches=(),
        variant="cpu-test",
        kind="core",
        wheel_name="onnxruntime",
        version=LOCAL_VERSION,
        cmake_options={},
        compiler="",
        platform="linux",
        date="2026-12-01T00:00:00Z",
        extra={"features": features},
    )
    wheel = dest / stock.name.replace("-1.21.0-", f"-{LOCAL_VERSION}-")
    records = []
    with zipfile.ZipFile(stock) as source, zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as target:
        members = [(m.filename, source.read(m)) for m in source.infolist() if not m.filename.endswith("/RECORD")]
        members.append((f"onnxruntime/{BUILD_INFO_NAME}", info.to_json().encode()))
        for name, data in members:
            renamed = name.replace(old_info, new_info)
            version_line = f"\nVersion: {LOCAL_VERSION}\n".encode()
            content = data.replace(b"\nVersion: 1.21.0\n", version_line) if renamed.endswith("/METADATA") else data
            target.writestr(renamed, content)
            records.append(_record_line(renamed, content))
        target.writestr(f"{new_info}/RECORD", "\n".join([*records, f"{new_info}/RECORD,,"]) + "\n")
    return wheel


def test_a_wheel_path_with_a_local_version_is_one_part(tmp_path: Path) -> None:
    core = tmp_path / f"onnxruntime-{LOCAL_VERSION}-cp312-cp312-linux_x86_64.whl"
    plugin = tmp_path / "onnxruntime_ep_webgpu-0.5.0+stack.ab12-py3-none-linux_x86_64.whl"
    for path in (core, plugin):
        zipfile.ZipFile(path, "w").close()
    assert venv.parse_wheel_spec(str(core)) == (str(core),)
    assert venv.parse_wheel_spec(f"{core}+{plugin}") == (str(core), str(plugin))
    assert venv.parse_wheel_spec(f"{core}+numpy==2.0") == (str(core), "numpy==2.0")
    # A plugin wheel on the stock core, as `ortstack test` joins them: the wheel's path starts a new part.
    assert venv.parse_wheel_spec(f"onnxruntime==1.31.1+{plugin}") == ("onnxruntime==1.31.1", str(plugin))
    assert (
        venv.spec_label(f"{core}+{plugin}") == f"onnxruntime=={LOCAL_VERSION} + onnxruntime-ep-webgpu==0.5.0+stack.ab12"
    )


@pytest.mark.parametrize("core", ["onnxruntime-webgpu==1.27.0", "onnxruntime-gpu==1.31.1", "WHEEL"])
def test_a_plugin_beside_another_onnxruntime_distribution_is_refused(tmp_path: Path, core: str) -> None:
    """pip would install the onnxruntime the plugin requires over that distribution's package folder."""
    if core == "WHEEL":
        core = str(tmp_path / f"onnxruntime_webgpu-{LOCAL_VERSION}-cp312-cp312-linux_x86_64.whl")
        zipfile.ZipFile(core, "w").close()
    with pytest.raises(ConfigError, match="puts onnxruntime-ep-webgpu beside onnxruntime-") as refused:
        venv.parse_wheel_spec(f"{core}+onnxruntime-ep-webgpu==0.4.0")
    assert "pair the plugin with onnxruntime" in (refused.value.tip or "")
    assert venv.parse_wheel_spec("onnxruntime==1.31.1+onnxruntime-ep-webgpu==0.4.0+onnxruntime-genai==0.17.1")


@dataclass(frozen=True)
class OldOrtRun:
    """The repacked wheel and one cache for the module's runs: the suites' venv is made once and reused."""

    wheelhouse: Path
    wheel: Path
    cache: Path
    env: dict[str, str]

    def test(self, *args: str) -> subprocess.CompletedProcess[str]:
        argv: list[str | os.PathLike[str]] = [sys.executable, "-m", "ortstack", "test", "--wheel", self.wheel]
        argv += ["--ep", "cpu", "--find-links", self.wheelhouse, "--no-index", "--cache-dir", self.cache, *args]
        cwd = self.cache.parent
        return subprocess.run(argv, cwd=cwd, env=self.env, capture_output=True, text=True, check=False, timeout=1200)


@pytest.fixture(scope="module")
def old_ort(wheelhouse: Path, tmp_path_factory: pytest.TempPathFactory, cli_env: dict[str, str]) -> OldOrtRun:
    (stock,) = wheelhouse.glob("onnxruntime-1.21.0-*.whl")
    root = tmp_path_factory.mktemp("old-ort")
    wheel = repack_as_ortstack_build(stock, root, features=["qk_norm"])
    # PIP_FIND_LINKS of the machine would add another folder: the wheelhouse must suffice alone.
    env = {k: v for k, v in cli_env.items() if not k.startswith(("PIP_", "UV_"))}
    return OldOrtRun(wheelhouse=wheelhouse, wheel=wheel, cache=root / "cache", env=env)


@pytest.mark.slow
def test_an_old_ort_build_passes_offline_with_what_it_lacks_recorded_as_absent(old_ort: OldOrtRun) -> None:
    done = old_ort.test()
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-6000:]
    assert f"onnxruntime {LOCAL_VERSION}" in out  # the repacked wheel is the one under test
    absent = {
        "8-bit MatMulNBits": r"test_matmul_nbits\[cpu-fp32-8-.*no 8-bit fp32 MatMulNBits on cpu: .*Only 4b",
        "PagedAttention": r"test_paged_attention\[cpu-decode\]: no cpu PagedAttention kernel: .*not a registered",
        "Q/K norm claimed for WebGPU": r"test_qk_norm\[cpu-decode\]: schema has no q_norm_weight",
        "QLoRA INT8 pattern": r"test_adapters_on_off_switching\[cpu-int8-fp16-prefill\]: the INT8 QLoRA pattern "
        r"needs 8-bit MatMulNBits, absent on cpu",
        "QLoRA fusion": r"test_qlora_fusion\[cpu-fp32-2d-decode\]: no INT8 QLoRA pattern to fuse",
    }
    for what, pattern in absent.items():
        assert re.search(pattern, out), f"{what} is not recorded as absent:\n{out[-6000:]}"
    assert re.search(r"MatMulNBits 8-bit \(cpu\)\s+absent", out), out[-6000:]
    assert re.search(r"test_paged_qk_norm\.py:\d+: absent: Q/K norm on cpu: ", out), out[-6000:]
    assert re.search(r"^cpu\s+\d+ passed, 0 failed, \d+ absent, 0 not checked$", out, re.MULTILINE), out[-6000:]
    lane = r"onnxruntime-1\.21\.0\+stack\.0123abcd\S*\s*│ cpu\s*│ run\s*│ "
    assert re.search(lane + r"\d+ passed, 0 failed, \d+ absent, 0 not checked\s*│ device answered", out), out[-3000:]
    assert "ok: wheel suites passed: 1 wheel sets, every lane asked for ran" in out


@pytest.mark.slow
def test_a_suite_that_ran_and_failed_is_exit_code_7(old_ort: OldOrtRun) -> None:
    """7 is for suites that ran: here pytest ran and selected nothing (pytest exit 5), which passes nothing."""
    line = one_error(old_ort.test("--", "-k", "no_such_test"), 7)
    assert f"wheel suites failed for onnxruntime-{LOCAL_VERSION}" in line
    assert "failed (pytest exit 5)" in line
