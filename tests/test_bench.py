"""``ortstack bench`` end to end on the CPU EP: real venvs, real worker processes, real outputs.

The wheel spec is the onnxruntime this interpreter already has (the ``test`` dependency group),
given twice (A and B), installed into venvs that see this interpreter's packages and reach no
index. Nothing here judges a timing: the test checks the shape of the outputs and that the rounds
interleave the wheels A B B A.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from clirun import one_error
from ortstack.suites import vulkan
from ortstack.suites.bench import OP_VARIANTS, interleaved_order
from wheel_bench import ops, report

if TYPE_CHECKING:
    from clirun import RunOrtstack

PYTHON_SRC = Path(__file__).parents[1] / "python"


def test_interleaved_order_reverses_the_second_round() -> None:
    assert interleaved_order(2) == [(0, 1), (1, 1), (1, 2), (0, 2)]
    assert interleaved_order(1) == [(0, 1), (0, 2)]


def test_the_orchestrator_offers_the_variants_the_worker_builds() -> None:
    assert OP_VARIANTS == ops.VARIANTS


@pytest.mark.parametrize(
    ("option", "value"),
    [("--capture", "maybe"), ("--capture", "on,on"), ("--adapter", "yes"), ("--variants", "base,lora_int4")],
)
def test_bench_refuses_unknown_modes_and_variants(run_ortstack: RunOrtstack, option: str, value: str) -> None:
    result = run_ortstack("bench", "--ep=cpu", f"{option}={value}")
    assert result.returncode == 2, result.stderr
    assert f"argument {option}" in result.stderr, result.stderr


def test_raw_int8_case_keeps_old_keys_and_disables_the_fusion() -> None:
    plain = ops.OpCase(variant="lora_int8", m=1, k=256, layers=4)
    assert plain.key == "lora_int8/M=1/K=256/L=4"
    assert plain.disabled_optimizers == []
    raw = ops.OpCase(variant="lora_int8_raw", m=1, k=256, layers=4, adapter=False, capture=True)
    assert raw.key == "lora_int8_raw/M=1/K=256/L=4/adapter=off/capture=on"
    assert raw.disabled_optimizers == ["MatMulNBitsQLoRAFusion"]
    # Both INT8 variants are one model; only the session differs.
    assert ops.build(raw)[0] == ops.build(ops.OpCase(variant="lora_int8", m=1, k=256, layers=4, adapter=False))[0]
    assert ops.build(raw)[0] != ops.build(plain)[0]


def _quick_cpu_bench(tmp_path: Path, base_env: dict[str, str], *args: str, wheels: int = 2) -> Path:
    """Run ``ortstack bench --quick --ep=cpu --levels=ops ARGS`` on this interpreter's onnxruntime; the output dir."""
    spec = f"onnxruntime=={version('onnxruntime')}"
    out = tmp_path / "out"
    no_index = tmp_path / "no-index"
    no_index.mkdir()
    argv = [
        sys.executable,
        "-m",
        "ortstack",
        "bench",
        "--quick",
        "--ep=cpu",
        "--levels=ops",
        *[f"--wheel={spec}"] * wheels,
        f"--out={out}",
        f"--cache-dir={tmp_path / 'cache'}",
        f"--find-links={no_index}",
        "--no-index",
        "--system-site-packages",
        *args,
    ]
    env = {**base_env, "PYTHONPATH": os.pathsep.join(filter(None, [str(PYTHON_SRC), base_env.get("PYTHONPATH")]))}
    # The timeout only guards against a hang; the bench itself is not timed.
    result = subprocess.run(argv, check=False, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stderr
    assert f"ok: bench written to {out}" in " ".join(result.stderr.split())
    return out


@pytest.mark.slow
def test_quick_cpu_bench_writes_json_markdown_png_in_ab_ba_order(tmp_path: Path, base_env: dict[str, str]) -> None:
    out = _quick_cpu_bench(tmp_path, base_env)
    document = json.loads((out / "bench.json").read_text())
    assert [w["id"] for w in document["wheels"]] == ["A", "B"]
    order = [(o["wheel"], o["round"]) for o in document["order"]]
    assert order == [("A", 1), ("B", 1), ("B", 2), ("A", 2)]
    starts = [o["started"] for o in document["order"]]
    assert starts == sorted(starts)
    assert [(r["wheel"], r["round"]) for r in document["runs"]] == order

    options = document["options"]
    expected_cases = {
        f"{v}/M={m}/K={options['k']}/L={n}"
        for v in options["variants"]
        for m in options["ms"]
        for n in {1, options["layers"]}
    }
    for run in document["runs"]:
        assert run["environment"]["ort_version"] == version("onnxruntime")
        assert run["environment"]["ep_kind"] == "cpu"
        assert {c["key"] for c in run["cases"]} == expected_cases
        for case in run["cases"]:
            assert len(case["samples_ms"]) == options["requests"]
            assert all(s > 0 for s in case["samples_ms"])
            assert case["output_finite"]

    summary = document["summary"]
    rows = [r for r in summary["rows"] if r["level"] == "ops"]
    assert {r["key"] for r in rows} == expected_cases
    for row in rows:
        assert set(row["wheels"]) == {"A", "B"}
        assert row["wheels"]["A"]["n"] == 2 * options["requests"]
        spread = row["wheels"]["A"]
        assert spread["min"] <= spread["median"] <= spread["max"]
        ratio = row["b_over_a"]
        assert ratio["ci_low"] <= ratio["ci_high"]
        assert ratio["verdict"] in {"no difference", "B better", "B worse"}
    assert {(r["wheel"], r["variant"]) for r in summary["ops"]} == {
        (w, v) for w in ("A", "B") for v in options["variants"]
    }

    markdown = (out / "bench.md").read_text()
    assert "| wheel | variant | M | adapter | capture | per layer µs | x base (95 %) |" in markdown
    assert "order of worker runs: A1 B1 B2 A2" in markdown
    assert "CPU-measured" not in markdown  # the CPU EP is not a software WebGPU adapter
    assert (out / "ops.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_webgpu_bench_without_a_driver_fails_before_any_venv_or_model(
    run_ortstack: RunOrtstack, tmp_path: Path
) -> None:
    """`nox -s bench` with no wheel and no GPU: the stock WebGPU wheels on a machine without lavapipe."""
    empty = tmp_path / "no-drivers"
    empty.mkdir()
    env = {name: str(empty) for name in ("XDG_DATA_DIRS", "XDG_CONFIG_DIRS", "XDG_DATA_HOME", "XDG_CONFIG_HOME")}
    env |= dict.fromkeys(vulkan.ICD_ENV, "")  # unset: the loader searches its folders
    cache = tmp_path / "cache"
    result = run_ortstack("bench", "--cache-dir", cache, "--work-dir", tmp_path / "work", env=env)
    line = one_error(result, 3)
    assert "the webgpu bench cannot run: no Vulkan driver is installed" in line
    assert "sudo bash ci/lavapipe.sh" in result.stderr
    assert "ortstack bench --ep cpu" in result.stderr
    assert not cache.exists(), "no venv and no model were made"


@pytest.mark.slow
def test_raw_vs_fused_adapter_and_capture_modes_on_the_cpu_ep(tmp_path: Path, base_env: dict[str, str]) -> None:
    """Same-wheel A/B of the raw INT8 pattern and the fused one: on the CPU EP nothing fuses, and capture
    (a WebGPU option) is reported as not measured, with why."""
    args = ("--variants=base,lora_int8,lora_int8_raw", "--adapter=on,off", "--capture=off,on", "--m=1,16")
    out = _quick_cpu_bench(tmp_path, base_env, *args, wheels=1)
    document = json.loads((out / "bench.json").read_text())
    options = document["options"]
    assert options["variants"] == ["base", "lora_int8", "lora_int8_raw"]
    assert options["adapter_modes"] == [True, False]
    assert options["capture_modes"] == [False, True]
    layers = {1, options["layers"]}
    expected = {
        f"{v}/M={m}/K={options['k']}/L={n}" + suffix + capture
        for m in (1, 16)
        for n in layers
        for capture in ("", "/capture=on")
        for v, suffix in [("base", ""), *((v, s) for v in ("lora_int8", "lora_int8_raw") for s in ("", "/adapter=off"))]
    }
    for run in document["runs"]:
        cases = {c["key"]: c for c in run["cases"]}
        assert set(cases) == expected
        for key, case in cases.items():
            if case["capture"]:
                assert case["error"] == "graph capture is a WebGPU provider option; the CPU EP has none", key
                continue
            if "error" in case:  # a wheel without empty-weight MatMulNBits refuses adapter off
                assert not case["adapter"], case
                assert case["error"].startswith("adapter off needs empty-weight MatMulNBits: "), case
                continue
            assert case["output_finite"], key
            if case["variant"] == "lora_int8":
                assert case["fused_nodes"] == 0, case
                assert case["fusion"].startswith("absent"), case
            elif case["variant"] == "lora_int8_raw":
                assert case["fused_nodes"] == 0, case
                assert case["fusion"] == f"disabled: 0/{case['layers']} fused with MatMulNBitsQLoRAFusion off"

    table = document["summary"]["ops"]
    assert not any(r["capture"] for r in table)  # nothing captured was measured
    for row in table:
        if row["variant"] == "base":
            assert row["x_base"] == pytest.approx(1.0)
            assert row["x_base_ci"] is None
        else:
            low, high = row["x_base_ci"]
            assert 0 < low <= high
            assert row["x_base"] > 0
    measured = {(r["variant"], r["m"], r["adapter"]) for r in table}
    assert {(v, m, True) for v in ("base", "lora_int8", "lora_int8_raw") for m in (1, 16)} <= measured

    markdown = (out / "bench.md").read_text()
    assert "| wheel | variant | M | adapter | capture | per layer µs | x base (95 %) |" in markdown
    assert "| absent: the optimized graph keeps the raw pattern (CPU EP) |" in markdown
    assert "## Not measured" in markdown
    assert "lora_int8_raw/M=16/K=256/L=4/adapter=off/capture=on: graph capture is a WebGPU provider option" in markdown


def test_each_wheels_rows_carry_what_its_own_run_found() -> None:
    # Wheel A lacks the fused operator, wheel B fused every layer: the table says so per wheel.
    absent = "absent: no MatMulNBitsQLoRA in this onnxruntime"

    def case(variant: str, layers: int, fusion: str | None) -> dict[str, object]:
        described: dict[str, object] = {"key": f"{variant}/M=1/K=64/L={layers}", "level": "ops", "variant": variant}
        described |= {"m": 1, "k": 64, "layers": layers, "adapter": True, "capture": False, "bytes_per_layer": 10}
        return described | {"samples_ms": [1.0 * layers, 1.1 * layers], "first_run_ms": 2.0, "fusion": fusion}

    def run(wheel: str, *, fused: bool) -> dict[str, object]:
        cases = [case("base", n, None) for n in (1, 4)]
        cases += [case("lora_int8", n, f"{n}/{n} fused" if fused else absent) for n in (1, 4)]
        return {"wheel": wheel, "round": 1, "cases": cases}

    document = {
        "wheels": [{"id": "A"}, {"id": "B"}],
        "host": {"gpus": []},
        "runs": [run("A", fused=False), run("B", fused=True)],
    }
    rows = [r for r in report.summarize(document)["ops"] if r["variant"] == "lora_int8"]
    assert {r["wheel"]: r["fusion"] for r in rows} == {"A": absent, "B": "4/4 fused"}
