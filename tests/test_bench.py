"""``ortstack bench`` end to end on the CPU EP: real venvs, real worker processes, real outputs.

The wheel spec is the onnxruntime this interpreter already has (the ``test`` dependency group),
given twice (A and B), installed into venvs that see this interpreter's packages and reach no
index. Nothing here judges a timing: the test checks the shape of the outputs and that the rounds
interleave the wheels A B B A.
"""

from __future__ import annotations

import ctypes
import json
import os
import statistics
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any

import onnx
import pytest

from bench_options import bench_options
from clirun import one_error
from ortstack.suites import bench, vulkan
from ortstack.suites.bench import DEFAULT_LEVELS, LEVELS, OP_VARIANTS, PAGED_VARIANTS, interleaved_order
from wheel_bench import ep, ops, paged, report, stats

if TYPE_CHECKING:
    from clirun import RunOrtstack

PYTHON_SRC = Path(__file__).parents[1] / "python"


def test_interleaved_order_reverses_every_other_round() -> None:
    assert interleaved_order(2) == [(0, 1), (1, 1), (1, 2), (0, 2)]
    assert interleaved_order(1) == [(0, 1), (0, 2)]
    assert interleaved_order(2, 4) == [(0, 1), (1, 1), (1, 2), (0, 2), (0, 3), (1, 3), (1, 4), (0, 4)]
    assert interleaved_order(1, 4) == [(0, 1), (0, 2), (0, 3), (0, 4)]


def test_more_rounds_run_each_wheel_first_as_often_as_last_and_pool_every_request(
    tmp_path: Path, base_env: dict[str, str]
) -> None:
    out = _quick_cpu_bench(tmp_path, base_env, "--variants=base", "--m=1", "--rounds=4")
    document = json.loads((out / "bench.json").read_text())
    order = [(o["wheel"], o["round"]) for o in document["order"]]
    assert order == [("A", 1), ("B", 1), ("B", 2), ("A", 2), ("A", 3), ("B", 3), ("B", 4), ("A", 4)]
    requests = document["options"]["requests"]
    rows = [r for r in document["summary"]["rows"] if r["level"] == "ops"]
    assert rows
    assert all(r["wheels"][w]["n"] == 4 * requests for r in rows for w in ("A", "B"))
    assert all(r["b_over_a"]["resampled"] == "rounds and requests" for r in rows)
    assert all(len(r["b_over_a_by_round"]) == 4 for r in rows)
    markdown = (out / "bench.md").read_text()
    assert "order of worker runs: A1 B1 B2 A2 A3 B3 B4 A4" in markdown
    assert "The intervals draw whole rounds" in markdown


@pytest.mark.parametrize("rounds", ["0", "3"])
def test_rounds_that_cannot_alternate_the_order_are_refused_before_anything_is_made(
    run_ortstack: RunOrtstack, tmp_path: Path, rounds: str
) -> None:
    cache = tmp_path / "cache"
    result = run_ortstack("bench", "--ep=cpu", f"--rounds={rounds}", "--cache-dir", cache)
    assert f"--rounds {rounds}: the rounds reverse the order in pairs" in one_error(result, 2)
    assert not cache.exists()


def test_each_capture_mode_gets_worker_plans_of_its_own_and_paged_runs_once(tmp_path: Path) -> None:
    both = bench_options(tmp_path, "--levels=ops,paged,genai", "--capture=off,on")
    assert bench.worker_captures(both) == [(False,), (True,)]
    plans = [bench._plan(both, "A", 1, tmp_path / "model", captures) for captures in bench.worker_captures(both)]
    assert [p["ops"]["captures"] for p in plans] == [[False], [True]]
    assert [p["genai"]["capture_modes"] for p in plans] == [[False], [True]]
    assert ["paged" in p for p in plans] == [True, False]  # it does not capture: once per round
    on_first = bench_options(tmp_path, "--levels=ops,paged", "--capture=on,off")
    assert ["paged" in bench._plan(on_first, "A", 1, None, c) for c in bench.worker_captures(on_first)] == [True, False]
    paged_only = bench_options(tmp_path, "--levels=paged", "--capture=off,on")
    assert bench.worker_captures(paged_only) == [(False, True)]  # nothing captures: one worker
    assert bench.worker_captures(bench_options(tmp_path, "--levels=ops", "--capture=on")) == [(True,)]


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
            # The calling thread's CPU time of a run: some, and not more than the run's wall time. Compared by
            # the median: one run's thread CPU time was seen 54 µs over its 245 µs wall time on a VM, where the
            # thread clock is read from the sched_clock of whichever CPU the thread is on.
            assert len(case["host_cpu_ms"]) == options["requests"]
            assert all(c > 0 for c in case["host_cpu_ms"])
            assert statistics.median(case["host_cpu_ms"]) <= statistics.median(case["samples_ms"]) + 0.05
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
    assert all(0 < r["host_cpu_us"] <= r["per_layer_us"] + 50 for r in summary["ops"])

    markdown = (out / "bench.md").read_text()
    assert "| wheel | variant | M | adapter | capture | per layer µs | x base (95 %) | host CPU µs |" in markdown
    assert "order of worker runs: A1 B1 B2 A2" in markdown
    assert all(r["b_over_a"]["resampled"] == "requests" for r in rows)  # two rounds: requests only
    assert all(len(r["b_over_a_by_round"]) == 2 for r in rows)
    assert "| verdict | B/A by round |" in markdown
    assert "The intervals draw whole rounds" not in markdown
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
    # Each capture mode in a worker process of its own: no uncaptured case runs after a captured one.
    workers = [(o["wheel"], o["round"], o["captures"]) for o in document["order"]]
    assert workers == [("A", 1, [False]), ("A", 1, [True]), ("A", 2, [False]), ("A", 2, [True])]
    assert [run["captures"] for run in document["runs"]] == [w[2] for w in workers]
    layers = {1, options["layers"]}
    expected = {
        capture: {
            f"{v}/M={m}/K={options['k']}/L={n}" + suffix + ("/capture=on" if capture else "")
            for m in (1, 16)
            for n in layers
            for v, suffix in [
                ("base", ""),
                *((v, s) for v in ("lora_int8", "lora_int8_raw") for s in ("", "/adapter=off")),
            ]
        }
        for capture in (False, True)
    }
    for run in document["runs"]:
        cases = {c["key"]: c for c in run["cases"]}
        assert set(cases) == expected[run["captures"][0]]
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
    assert (
        "order of worker runs: A1 (capture off) A1 (capture on) A2 (capture off) A2 (capture on), "
        "each capture mode in a process of its own;" in " ".join(markdown.split())
    )
    assert markdown.count("- A ran onnxruntime") == 1


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


def test_the_orchestrator_offers_the_paged_variants_and_levels_the_worker_builds() -> None:
    assert PAGED_VARIANTS == paged.VARIANTS
    assert "paged" in LEVELS
    assert "paged" not in DEFAULT_LEVELS


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--levels", "ops,paging"),
        ("--paged-variants", "norm,fused"),
        ("--paged-heads", "32/7"),
        ("--paged-heads", "8"),
    ],
)
def test_bench_refuses_unknown_levels_paged_variants_and_heads(
    run_ortstack: RunOrtstack, option: str, value: str
) -> None:
    result = run_ortstack("bench", "--ep=cpu", f"{option}={value}")
    assert result.returncode == 2, result.stderr
    assert f"argument {option}" in result.stderr, result.stderr


def _paged_case(variant: str, *, layers: int = 3, phase: str = "decode") -> paged.PagedCase:
    new, past = (1, 40) if phase == "decode" else (16, 0)
    return paged.PagedCase(
        variant=variant, phase=phase, new_tokens=new, past=past, layers=layers, num_heads=4, kv_heads=2, head_size=32
    )


def test_paged_chain_feeds_each_nodes_output_to_the_next_query_with_caches_of_its_own() -> None:
    case = _paged_case("norm", layers=3)
    model = onnx.load_from_string(paged.build(case))
    onnx.checker.check_model(model)  # build checks it too; this is the model as a consumer loads it
    nodes = list(model.graph.node)
    assert [n.op_type for n in nodes] == ["PagedAttention"] * 3
    assert [n.input[0] for n in nodes] == ["query", "attention0", "attention1"]
    assert [n.output[0] for n in nodes] == ["attention0", "attention1", "output"]
    assert [tuple(n.input[3:5]) for n in nodes] == [(f"key_cache{i}", f"value_cache{i}") for i in range(3)]
    assert [tuple(n.output[1:]) for n in nodes] == [(f"key_cache_out{i}", f"value_cache_out{i}") for i in range(3)]
    assert {n.input[1] for n in nodes} == {"key"}  # new K/V tokens from graph inputs
    initializers = {t.name for t in model.graph.initializer}
    for i, node in enumerate(nodes):
        assert list(node.input[10:]) == ["", "", f"q_norm_weight{i}", f"k_norm_weight{i}"]
        assert {f"q_norm_weight{i}", f"k_norm_weight{i}"} <= initializers
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        assert attrs["num_heads"] == 4
        assert attrs["kv_num_heads"] == 2
        assert attrs["do_rotary"] == 1
        assert attrs["qk_norm_epsilon"] == pytest.approx(paged.EPSILON)
    cache = next(i for i in model.graph.input if i.name == "key_cache0")
    dims = [d.dim_value for d in cache.type.tensor_type.shape.dim]
    assert dims == [2, paged.BLOCK_SIZE, 2, 32]  # 41 tokens in blocks of 32
    assert model.graph.output[0].name == "output"


def test_paged_norm_off_has_no_norm_inputs_and_both_norm_variants_are_one_model() -> None:
    off = onnx.load_from_string(paged.build(_paged_case("norm_off")))
    assert all(len(n.input) == 10 for n in off.graph.node)
    assert not off.graph.initializer
    assert all("qk_norm_epsilon" not in {a.name for a in n.attribute} for n in off.graph.node)
    assert paged.build(_paged_case("norm")) == paged.build(_paged_case("norm_unfused"))
    assert _paged_case("norm_unfused").unfused
    assert not _paged_case("norm").unfused


def test_paged_cases_are_both_phases_each_variant_with_one_and_l_nodes() -> None:
    chain = paged.cases(
        context=4096, prefill=1024, layers=16, variants=list(paged.VARIANTS), num_heads=32, kv_heads=8, head_size=128
    )
    assert len(chain) == len({c.key for c in chain}) == 2 * 3 * 2
    decode = [c for c in chain if c.phase == "decode"]
    prefill = [c for c in chain if c.phase == "prefill"]
    assert {(c.new_tokens, c.past) for c in decode} == {(1, 4096)}
    assert {(c.new_tokens, c.past) for c in prefill} == {(1024, 0)}
    assert {c.layers for c in chain} == {1, 16}
    assert decode[0].key == "paged/decode/norm_off/H=32/8x128/past=4096/new=1/L=1"
    assert decode[0].blocks == 129  # 4,097 tokens in blocks of 32


def _c_getenv(name: str) -> bytes | None:
    """What the C library's getenv (the kernel's read of the switch) sees in this process."""
    getenv = ctypes.CDLL(None).getenv
    getenv.restype = ctypes.c_char_p
    value: bytes | None = getenv(name.encode())
    return value


def test_the_unfused_switch_is_set_only_while_sessions_are_made(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(paged.UNFUSED_SWITCH, "0")
    with paged.unfused_switch(on=True):
        assert os.environ[paged.UNFUSED_SWITCH] == "1"
        assert _c_getenv(paged.UNFUSED_SWITCH) == b"1"  # a kernel constructed now reads it
    assert os.environ[paged.UNFUSED_SWITCH] == "0"
    with paged.unfused_switch(on=False):
        assert paged.UNFUSED_SWITCH not in os.environ
        assert _c_getenv(paged.UNFUSED_SWITCH) is None
    assert _c_getenv(paged.UNFUSED_SWITCH) == b"0"


STOCK_REFUSAL = (
    "Error in execution: Non-zero status code returned while running PagedAttention node. Name:'attn0' "
    "Status Message: PagedAttention (WebGPU): q_norm_weight/k_norm_weight inputs are not supported yet."
)


def test_a_refused_norm_is_absent_unless_the_build_claims_it() -> None:
    norm = _paged_case("norm")
    absent = paged.refusal(norm, RuntimeError(STOCK_REFUSAL), claims_qk_norm=False)
    assert isinstance(absent, paged.Absent)
    assert str(absent) == "PagedAttention (WebGPU): q_norm_weight/k_norm_weight inputs are not supported yet."
    # A build whose patches add Q/K norm has failed when it refuses it; another error is a failure too.
    assert paged.refusal(norm, RuntimeError(STOCK_REFUSAL), claims_qk_norm=True) is None
    assert paged.refusal(norm, RuntimeError("Status Message: device lost"), claims_qk_norm=False) is None
    no_kernel = RuntimeError("NOT_IMPLEMENTED : Could not find an implementation for PagedAttention(1) node")
    assert isinstance(paged.refusal(_paged_case("norm_off"), no_kernel, claims_qk_norm=True), paged.Absent)


def test_paired_bootstrap_keeps_drift_that_moved_both_columns_out_of_the_interval() -> None:
    drifting = [float(i) for i in range(1, 21)]
    shifted = [x + 0.5 for x in drifting]

    def difference(columns: list[list[float]]) -> float:
        return statistics.median(columns[1]) - statistics.median(columns[0])

    assert stats.bootstrap_interval(difference, [drifting, shifted]) == (0.5, 0.5)
    low, high = stats.bootstrap_interval(difference, [drifting, shifted[:-1]])  # unpaired: drift is spread
    assert low < 0.5 < high
    assert high - low > 1
    assert stats.marginal([5.0, 5.0, 6.0], [2.0, 1.0, 2.0], 4) == 1.0


def test_drawing_rounds_widens_the_interval_by_what_moved_between_rounds() -> None:
    """B 2 % slower than A in three rounds and 10 % in the fourth: a bootstrap of pooled requests reads
    the three alike rounds as precision; drawing rounds lets the fourth reach the interval."""
    a_rounds = [[100.0 + i * 0.1 for i in range(10)] for _ in range(4)]
    b_rounds = [[x * 1.02 for x in a_rounds[0]]] * 3 + [[x * 1.10 for x in a_rounds[0]]]
    a, b = [x for r in a_rounds for x in r], [x for r in b_rounds for x in r]
    pooled = stats.compare(a, b, higher_is_better=False)
    drawn = stats.compare(a, b, higher_is_better=False, rounds=(a_rounds, b_rounds))
    assert (pooled.resampled, drawn.resampled) == ("requests", "rounds and requests")
    assert drawn.ratio == pooled.ratio
    assert pooled.ci_high < 1.03
    assert drawn.ci_high > 1.05
    assert pooled.verdict == drawn.verdict == "B worse"
    two_rounds = stats.compare(a, b, higher_is_better=False, rounds=(a_rounds[:2], b_rounds[:2]))
    assert two_rounds.resampled == "requests"  # two rounds are too few to draw from


def _round(median: float, requests: int = 20, spread: float = 0.02) -> list[float]:
    """A round's requests, spread evenly over ``median`` ± ``spread`` (an interquartile range of about
    ``spread``)."""
    return [median * (1 - spread + 2 * spread * i / (requests - 1)) for i in range(requests)]


def test_rounds_in_two_process_states_are_told_from_rounds_that_agree() -> None:
    """Round medians of 1.1 or 1.5 ms (each worker in one of two states, as at M = 1 on the H200) with
    requests within 2 %: process level. The same spread within the rounds, or too few rounds: not."""
    two_states = stats.RoundSpread.of([_round(m) for m in (1.1, 1.5, 1.5, 1.1, 1.5, 1.1)])
    assert two_states.process_level
    assert two_states.between == pytest.approx(0.4 / 1.3)
    assert two_states.within == pytest.approx(0.02, rel=0.15)
    agreeing = stats.RoundSpread.of([_round(m) for m in (1.30, 1.31, 1.29, 1.30, 1.32, 1.28)])
    assert not agreeing.process_level
    noisy_requests = stats.RoundSpread.of([[m * f for f in (0.6, 0.8, 1.0, 1.2, 1.4)] for m in (1.1, 1.5, 1.5, 1.1)])
    assert noisy_requests.between > stats.PROCESS_STATE_SPREAD
    assert not noisy_requests.process_level
    assert not stats.RoundSpread.of([_round(m) for m in (1.1, 1.5, 1.5)]).process_level


def _ops_case(key: str, samples: list[float]) -> dict[str, Any]:
    return {
        "level": "ops",
        "key": key,
        "variant": "base",
        "m": 1,
        "k": 64,
        "layers": 16,
        "adapter": True,
        "capture": False,
        "bytes_per_layer": 1000,
        "samples_ms": samples,
        "first_run_ms": 9.0,
    }


def _ab_summary(medians: dict[str, dict[str, list[float]]], **requests: Any) -> dict[str, Any]:
    """The summary of an A/B whose cases (key -> wheel -> round medians) ran in as many rounds as given,
    each round's requests made by ``_round(median, **requests)``."""
    rounds = len(next(iter(medians.values()))["A"])
    runs = [
        {
            "wheel": w,
            "round": r + 1,
            "cases": [_ops_case(key, _round(by_wheel[w][r], **requests)) for key, by_wheel in medians.items()],
        }
        for r in range(rounds)
        for w in "AB"
    ]
    return report.summarize({"host": {}, "wheels": [{"id": "A"}, {"id": "B"}], "runs": runs})


def test_the_ab_report_lists_the_round_medians_of_a_case_whose_rounds_are_process_states() -> None:
    """Four rounds each: one case whose rounds sit at 1.1 or 1.5 ms, one whose rounds agree."""
    summary = _ab_summary(
        {"states": {"A": [1.1, 1.5, 1.5, 1.1], "B": [1.5, 1.1, 1.1, 1.5]}, "steady": {"A": [5.0] * 4, "B": [5.1] * 4}}
    )
    rows = {r["key"]: r for r in summary["rows"]}
    assert rows["states"]["round_spread"]["A"]["process_level"]
    assert not rows["steady"]["round_spread"]["B"]["process_level"]
    lines = report._process_level_lines([r for r in summary["rows"] if "b_over_a" in r])
    assert "| states | ms | A | 1.10 1.50 1.50 1.10 | 31% | 2% |" in lines
    assert not any(line.startswith("| steady |") for line in lines)


def test_two_rounds_whose_own_ratios_leave_the_interval_are_marked() -> None:
    """Two rounds draw requests only: many requests spread ±20 %, B equal to A in one round and 10 %
    slower in the other, pool into an interval near 1.05 that neither round's ratio lies in; a case whose
    rounds agree is not marked; four rounds draw rounds, and their interval is not marked either."""
    many = {"requests": 200, "spread": 0.2}
    moved, agreed = {"A": [1.0, 1.0], "B": [1.0, 1.1]}, {"A": [1.0, 1.0], "B": [1.1, 1.1]}
    rows = {r["key"]: r for r in _ab_summary({"moved": moved, "agreed": agreed}, **many)["rows"]}
    assert rows["moved"]["b_over_a_by_round"] == pytest.approx([1.0, 1.1])
    assert 1.01 < rows["moved"]["b_over_a"]["ci_low"] <= rows["moved"]["b_over_a"]["ci_high"] < 1.09
    assert report._rounds_disagree(rows["moved"])
    assert not report._rounds_disagree(rows["agreed"])
    four = _ab_summary({"moved": {"A": [1.0] * 4, "B": [1.0, 1.1, 1.0, 1.1]}}, **many)
    assert four["rows"][0]["b_over_a"]["resampled"] == "rounds and requests"
    assert not report._rounds_disagree(four["rows"][0])


def test_gpu_times_below_the_profilers_resolution_are_shown_not_compared() -> None:
    """A kernel of under a microsecond reads 0 µs: its GPU row keeps its figures and takes no ratio;
    the wall-time row of the same case is compared as ever."""
    runs = []
    for r in range(4):
        for w in "AB":
            case = _ops_case("tiny", _round(0.1))
            case["gpu"] = {
                "run_us": [0.0, 0.0, 1.0] if w == "A" else [1.0, 1.0, 2.0],
                "by_program": {},
                "dispatches": 1,
            }
            runs.append({"wheel": w, "round": r + 1, "cases": [case]})
    summary = report.summarize({"host": {}, "wheels": [{"id": "A"}, {"id": "B"}], "runs": runs})
    rows = {r["metric"]: r for r in summary["rows"]}
    assert "below the timer's resolution" in rows["gpu_us"]["not_compared"]
    assert "b_over_a" not in rows["gpu_us"]
    assert rows["gpu_us"]["wheels"]["B"]["median"] == 1.0
    assert rows["ms"]["b_over_a"]["ratio"] == pytest.approx(1.0)


def _paged_result(variant: str, layers: int, samples: list[float], phase: str = "decode") -> dict[str, object]:
    case = _paged_case(variant, layers=layers, phase=phase)
    described = {
        "level": "paged",
        "key": case.key,
        "variant": variant,
        "phase": phase,
        "layers": layers,
        "new_tokens": case.new_tokens,
        "past": case.past,
        "num_heads": 4,
        "kv_heads": 2,
        "head_size": 32,
    }
    return described | {"samples_ms": samples, "first_run_ms": 9.0, "cache_in_place": True, "output_finite": True}


def test_paged_report_gives_marginal_costs_their_ratios_and_absent_variants(tmp_path: Path) -> None:
    drift = [0.0, 0.3, 0.1, 0.5, 0.2, 0.4]  # moves every case of a request together, as interleaving does

    def timed(fixed: float, per_node: float, layers: int) -> list[float]:
        return [fixed + per_node * layers + d for d in drift]

    decode = [
        _paged_result(variant, n, timed(1.0, per_node, n))
        for variant, per_node in (("norm_off", 0.2), ("norm", 0.21), ("norm_unfused", 0.3))
        for n in (1, 4)
    ]
    prefill = [_paged_result("norm_off", n, timed(2.0, 1.0, n), phase="prefill") for n in (1, 4)]
    prefill[1]["cache_in_place"] = False  # the first run found node 0's cache unchanged
    refusal = "absent: PagedAttention (WebGPU): q_norm_weight/k_norm_weight inputs are not supported yet."
    prefill += [{**_paged_result("norm", n, [], phase="prefill"), "error": refusal} for n in (1, 4)]
    document: dict[str, Any] = {
        "wheels": [{"id": "A", "label": "stock"}],
        "host": {"platform": "linux", "gpus": []},
        "runs": [{"wheel": "A", "round": 1, "cases": decode + prefill}],
    }
    rows = {(r["phase"], r["variant"]): r for r in report.summarize(document)["paged"]}
    off, norm, unfused = rows[("decode", "norm_off")], rows[("decode", "norm")], rows[("decode", "norm_unfused")]
    assert off["marginal_us"] == pytest.approx(200.0)
    assert norm["marginal_us"] == pytest.approx(210.0)
    assert unfused["marginal_us"] == pytest.approx(300.0)
    assert off["per_node_us"] == pytest.approx((1.0 + 0.8 + 0.25) / 4 * 1e3)  # chain / L keeps the fixed cost
    assert off["marginal_ci_us"] == pytest.approx([200.0, 200.0])  # the paired drift cancels
    assert "x_norm_off" not in off
    assert norm["x_norm_off"] == pytest.approx(1.05)
    assert norm["norm_budget"] == "within 10 %"
    assert unfused["x_norm_off"] == pytest.approx(1.5)
    assert unfused["norm_budget"] == "over 10 %"
    assert unfused["x_norm"] == pytest.approx(300 / 210)
    assert "x_norm" not in norm
    assert rows[("prefill", "norm_off")]["marginal_us"] == pytest.approx(1000.0)
    assert rows[("prefill", "norm")]["not_measured"] == refusal
    assert "marginal_us" not in rows[("prefill", "norm")]

    document |= {"software_adapter": False, "order": [], "options": {"warmups": 1, "requests": 6}, "command": []}
    document["runs"][0]["environment"] = {
        "ort_version": "1.31.1",
        "ep": "webgpu",
        "ep_kind": "plugin",
        "has_qlora_schema": False,
        "claims_qk_norm": False,
    }
    document["summary"] = report.summarize(document)
    markdown = report.markdown(document)
    assert "## PagedAttention: cost of the Q/K norm per node" in markdown
    assert "| A | decode | 4/2x32 | 40 | 1 | norm | 4 | 2.090 | 522.5 | 210.0 (210.0-210.0) |" in markdown
    assert "1.050 (1.050-1.050) | within 10 % |" in markdown
    assert f"| A | prefill | 4/2x32 | 0 | 16 | norm | 4 | {refusal} |" in markdown
    assert "Q/K norm claimed by its build: no" in markdown
    assert (
        "| A | prefill | 4/2x32 | 0 | 16 | norm_off | 4 | 6.250 | 1,562.5 | 1,000.0 (1,000.0-1,000.0) (caches not"
        in markdown
    )
    assert markdown.count("caches not appended in place") == 1
    without_plots = tmp_path / "without-plots"
    assert set(report.write(document, without_plots, with_plots=False)) == {"json", "markdown"}
    assert sorted(p.name for p in without_plots.iterdir()) == ["bench.json", "bench.md"]
    paths = report.write(document, tmp_path)
    assert (tmp_path / "paged.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert tmp_path / "paged.png" in paths.values()


def test_paged_budget_is_decided_only_by_a_whole_interval() -> None:
    assert report._budget([1.02, 1.09]) == "within 10 %"
    assert report._budget([1.11, 1.4]) == "over 10 %"
    assert report._budget([1.05, 1.2]) == "undecided"


@pytest.mark.slow
def test_quick_cpu_bench_reports_paged_attention_absent_where_the_ep_has_none(
    tmp_path: Path, base_env: dict[str, str]
) -> None:
    """The CPU EP has no PagedAttention kernel: every variant is absent with the wheel's words, never measured."""
    out = _quick_cpu_bench(tmp_path, base_env, "--levels=paged", wheels=1)
    document = json.loads((out / "bench.json").read_text())
    for run in document["runs"]:
        assert run["environment"]["claims_qk_norm"] is False
        assert len(run["cases"]) == 2 * 3 * 2
        for case in run["cases"]:
            assert case["level"] == "paged"
            assert case["error"].startswith("absent: "), case
            assert "Could not find an implementation for PagedAttention" in case["error"], case
            assert "samples_ms" not in case
    rows = document["summary"]["paged"]
    assert len(rows) == 2 * 3
    assert all(r["not_measured"].startswith("absent: ") and "marginal_us" not in r for r in rows)
    markdown = (out / "bench.md").read_text()
    assert "## PagedAttention: cost of the Q/K norm per node" in markdown
    assert "within 10 %" not in markdown


@pytest.mark.parametrize(
    ("option", "problem"),
    [
        ("--paged-layers=1", "a marginal cost needs L >= 2"),
        ("--paged-head-size=63", "rotary needs an even, positive head size"),
        ("--paged-prefill=0", "--paged-prefill >= 1"),
    ],
)
def test_paged_sizes_it_cannot_build_are_refused_before_any_venv(
    run_ortstack: RunOrtstack, tmp_path: Path, option: str, problem: str
) -> None:
    cache = tmp_path / "cache"
    result = run_ortstack("bench", "--ep=cpu", "--levels=paged", option, "--cache-dir", cache)
    line = one_error(result, 2)
    assert "the paged level cannot run: " in line
    assert problem in line
    assert not cache.exists()


class _Recorder:
    """A case that notes when it ran: the order of requests is what is checked, not their time."""

    def __init__(self, name: str, log: list[str]) -> None:
        self.name, self.log = name, log

    def request(self) -> float:
        self.log.append(self.name)
        return 0.001


def test_paged_cases_interleave_request_by_request_in_a_rotated_order() -> None:
    log: list[str] = []
    runners = {name: _Recorder(name, log) for name in ("a", "b", "c")}
    samples = paged.interleave(runners, warmups=1, requests=4)
    warmup = ["a", "b", "c"]
    timed = ["a", "b", "c", "b", "c", "a", "c", "a", "b", "a", "b", "c"]
    assert log == [*warmup, *timed]
    assert samples == {name: [1.0] * 4 for name in runners}


def test_graph_capture_reaches_the_built_in_ep_through_its_config_entry() -> None:
    """onnxruntime 1.30.0's binding builds the built-in WebGPU EP from config entries only; a provider
    option alone asked for capture and got none (the suites' replay check found it)."""
    from wheel_bench import ep  # noqa: PLC0415 - imports onnxruntime

    key = "ep.webgpuexecutionprovider.enableGraphCapture"
    setup = ep.EpSetup(ep="webgpu", kind="builtin")
    with pytest.raises(RuntimeError, match="does not have configuration"):
        setup.session_options(graph_capture=False).get_session_config_entry(key)
    assert setup.session_options(graph_capture=True).get_session_config_entry(key) == "1"
    assert setup.providers(graph_capture=True) == [(ep.WEBGPU, {"enableGraphCapture": "1"})]


def test_webgpu_options_reach_the_plan_the_sessions_and_the_report(tmp_path: Path) -> None:
    options = bench_options(
        tmp_path, "--webgpu-option", "storageBufferCacheMode=simple", "--webgpu-option", "validationMode=disabled"
    )
    plan = bench._plan(options, "A", 1, None)
    assert plan["webgpu_options"] == {"storageBufferCacheMode": "simple", "validationMode": "disabled"}
    # The built-in EP reads them as session config entries (onnxruntime 1.30 drops its provider options).
    setup = ep.EpSetup(ep="webgpu", kind="builtin", options=plan["webgpu_options"])
    session_options = setup.session_options(graph_capture=True)
    prefix = "ep.webgpuexecutionprovider."
    assert session_options.get_session_config_entry(prefix + "storageBufferCacheMode") == "simple"
    assert session_options.get_session_config_entry(prefix + "validationMode") == "disabled"
    assert session_options.get_session_config_entry(prefix + "enableGraphCapture") == "1"
    assert setup.providers(graph_capture=False) == [
        (ep.WEBGPU, {"storageBufferCacheMode": "simple", "validationMode": "disabled"})
    ]
    document = {"runs": [], "options": {"webgpu_options": list(options.webgpu_options)}}
    assert report._software_lines(document) == [
        "- WebGPU EP options given to every session: `storageBufferCacheMode=simple`, `validationMode=disabled`"
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--ep=cpu", "--webgpu-option=validationMode=disabled"], "--webgpu-option is for the WebGPU EP"),
        (["--ep=webgpu", "--webgpu-option=enableGraphCapture=1"], "each case sets graph capture itself"),
    ],
)
def test_webgpu_options_the_bench_cannot_honour_are_refused_before_anything_is_made(
    run_ortstack: RunOrtstack, tmp_path: Path, args: list[str], message: str
) -> None:
    cache = tmp_path / "cache"
    result = run_ortstack("bench", *args, "--cache-dir", cache)
    assert message in one_error(result, 2)
    assert not cache.exists()


def test_a_webgpu_option_without_a_value_is_a_usage_error(run_ortstack: RunOrtstack) -> None:
    result = run_ortstack("bench", "--ep=webgpu", "--webgpu-option=validationMode")
    assert result.returncode == 2, result.stderr
    assert "expected NAME=VALUE, got 'validationMode'" in result.stderr


RECORDED = (
    PYTHON_SRC / "wheel_bench/results/h200-main-89b01b40/webgpu-955e0a87b4/rounds-1.27/rounds12-m1024-ours-vs-1.27"
)


def test_report_from_summarizes_a_recorded_bench_again_and_keeps_its_runs(
    tmp_path: Path, run_ortstack: RunOrtstack
) -> None:
    """A recorded H200 bench (twelve rounds, the EP's GPU time per run) with its summary dropped:
    ``--report-from`` summarizes its runs again, GPU time A/B rows among them."""
    recorded = json.loads((RECORDED / "bench.json").read_text(encoding="utf-8"))
    del recorded["summary"]
    out = tmp_path / "bench"
    out.mkdir()
    (out / "bench.json").write_text(json.dumps(recorded), encoding="utf-8")

    result = run_ortstack("bench", "--report-from", out)
    assert result.returncode == 0, result.stderr

    rewritten = json.loads((out / "bench.json").read_text(encoding="utf-8"))
    assert rewritten["runs"] == recorded["runs"]
    key = "base/M=1024/K=4096/L=16"
    row = next(r for r in rewritten["summary"]["rows"] if r["key"] == key and r["metric"] == "gpu_us")

    def gpu_runs(wheel: str) -> list[float]:
        runs = [r for r in recorded["runs"] if r["wheel"] == wheel]
        return [us for run in runs for case in run["cases"] if case["key"] == key for us in case["gpu"]["run_us"]]

    assert row["wheels"]["A"]["n"] == len(gpu_runs("A")) == 12 * 20
    expected = statistics.median(gpu_runs("B")) / statistics.median(gpu_runs("A"))
    assert row["b_over_a"]["ratio"] == pytest.approx(expected)
    assert row["b_over_a"]["resampled"] == "rounds and requests"
    assert len(row["b_over_a_by_round"]) == 12
    markdown = (out / "bench.md").read_text(encoding="utf-8")
    assert f"| {key} | gpu_us | " in markdown
    assert "gpu_us: the case's dispatches per run" in markdown


def test_report_from_refuses_what_is_not_a_bench_and_changes_nothing(tmp_path: Path, run_ortstack: RunOrtstack) -> None:
    assert "no such file" in one_error(run_ortstack("bench", "--report-from", tmp_path / "nowhere"), 2)
    odd_dir = tmp_path / "bench"
    (odd_dir / "bench.json").mkdir(parents=True)  # a folder where the file should be
    assert "cannot be read" in one_error(run_ortstack("bench", "--report-from", odd_dir), 2)
    other = tmp_path / "other.json"
    other.write_text('{"schema": 2, "runs": []}', encoding="utf-8")
    assert "not a bench result" in one_error(run_ortstack("bench", "--report-from", other), 2)
    assert other.read_text(encoding="utf-8") == '{"schema": 2, "runs": []}'
    torn = tmp_path / "torn.json"
    torn.write_text('{"schema": 1, "wheels": [', encoding="utf-8")
    assert "not a bench result" in one_error(run_ortstack("bench", "--report-from", torn), 2)
    assert not (tmp_path / "bench.md").exists()
    assert "takes no --wheel" in one_error(run_ortstack("bench", "--report-from", other, "--wheel", "a.whl"), 2)
    odd = tmp_path / "odd.json"
    odd.write_text('{"schema": 1, "wheels": [{"id": "A"}], "runs": [{"wheel": "A"}]}', encoding="utf-8")
    assert "cannot read (KeyError" in one_error(run_ortstack("bench", "--report-from", odd), 2)
    assert odd.read_text(encoding="utf-8") == '{"schema": 1, "wheels": [{"id": "A"}], "runs": [{"wheel": "A"}]}'
    assert not (tmp_path / "bench.md").exists()
