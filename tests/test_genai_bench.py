"""The genai level of ``ortstack bench``: fused vs raw graph on one wheel, its options, plan and report.

What runs here without a GPU or onnxruntime-genai: the options as the command line gives them, the
plan a worker gets, the order a round loads its models in, and the report's arithmetic on a
document of known samples.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from bench_options import bench_options
from clirun import one_error
from ortstack.errors import UsageError
from ortstack.suites import bench
from wheel_bench import genai_model, genai_run, report

if TYPE_CHECKING:
    from pathlib import Path

    from clirun import RunOrtstack


def test_the_orchestrator_offers_what_the_genai_worker_runs() -> None:
    assert bench.GENAI_GRAPHS == genai_run.GRAPHS
    assert bench.GENAI_ADAPTERS == genai_run.ADAPTERS
    assert set(bench.MODEL_SHAPES) == set(genai_model.SHAPES)
    h200 = genai_model.SHAPES["h200"]
    # Llama-shaped for the GPU: wide, deep, GQA, a real vocabulary, room for 1,024 + 128 tokens.
    assert h200.hidden >= 2048
    assert h200.layers >= 16
    assert h200.heads > h200.kv_heads
    assert h200.heads % h200.kv_heads == 0
    assert h200.vocab >= 32000
    assert h200.max_length >= 1024 + 128
    assert h200.hidden % genai_model.BLOCK == h200.intermediate % genai_model.BLOCK == 0


def test_genai_options_default_to_the_seeds_protocol_and_the_quick_bench_stays_small(tmp_path: Path) -> None:
    full = bench_options(tmp_path)
    assert full.genai_graphs == ("fused", "raw")
    assert full.genai_adapters == ("off", "a", "b")
    assert full.prompt_lengths == (128, 1024)
    assert full.generate == 128
    assert full.capture_modes == (False, True)
    assert (full.warmups, full.requests) == (3, 5)  # ten timed requests over two rounds
    quick = bench_options(tmp_path, "--quick")
    assert quick.model_shape == "tiny"
    assert quick.genai_adapters == ("off", "a")
    assert quick.prompt_lengths == (16,)
    assert quick.generate == 8


def test_genai_options_pick_shape_graphs_adapters_and_prompts(tmp_path: Path) -> None:
    options = bench_options(
        tmp_path,
        "--quick",
        "--model-shape=h200",
        "--genai-graphs=raw",
        "--genai-adapters=off,b",
        "--prompts=128,1024",
        "--generate=128",
        "--capture=on",
    )
    assert options.model_shape == "h200"
    assert options.genai_graphs == ("raw",)
    assert options.genai_adapters == ("off", "b")
    assert options.prompt_lengths == (128, 1024)
    assert options.capture_modes == (True,)
    plan = bench._plan(options, "A", 2, tmp_path / "model")
    assert plan["genai"] == {
        "model_dir": str(tmp_path / "model"),
        "prompt_lengths": [128, 1024],
        "generate": 128,
        "capture_modes": [True],
        "graphs": ["raw"],
        "adapters": ["off", "b"],
        "profile_dir": None,
    }
    assert plan["round"] == 2
    profiled = bench_options(tmp_path, "--quick", "--genai-profile")
    kept = bench._plan(profiled, "A", 1, tmp_path / "model")["genai"]["profile_dir"]
    assert kept == str(profiled.out_dir / "profiles" / "A")


@pytest.mark.parametrize("levels_capture", [("--levels=genai", "--capture=on"), ("--levels=ops", "--capture=off")])
def test_a_genai_profile_without_an_uncaptured_genai_request_is_refused_before_anything_is_made(
    run_ortstack: RunOrtstack, tmp_path: Path, levels_capture: tuple[str, str]
) -> None:
    cache = tmp_path / "cache"
    result = run_ortstack("bench", "--ep=cpu", *levels_capture, "--genai-profile", "--cache-dir", cache)
    assert "--genai-profile profiles a genai request without graph capture" in one_error(result, 2)
    assert not cache.exists()


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--genai-graphs", "fused,unfused"),
        ("--genai-graphs", "raw,raw"),
        ("--genai-adapters", "on"),
        ("--genai-adapters", "a,c"),
        ("--model-shape", "huge"),
    ],
)
def test_bench_refuses_unknown_genai_graphs_adapters_and_shapes(
    run_ortstack: RunOrtstack, option: str, value: str
) -> None:
    result = run_ortstack("bench", "--ep=cpu", f"{option}={value}")
    assert result.returncode == 2, result.stderr
    assert f"argument {option}" in result.stderr, result.stderr


def test_a_round_loads_one_model_per_adapter_state_under_capture_and_round_two_reverses() -> None:
    first = genai_run.loads(["fused", "raw"], [False, True], ["off", "a", "b"], round_=1)
    assert [(x.graph, x.capture, x.adapters) for x in first] == [
        ("fused", False, ("off", "a", "b")),
        ("raw", False, ("off", "a", "b")),
        ("fused", True, ("off",)),
        ("fused", True, ("a",)),
        ("fused", True, ("b",)),
        ("raw", True, ("off",)),
        ("raw", True, ("a",)),
        ("raw", True, ("b",)),
    ]
    second = genai_run.loads(["fused", "raw"], [False, True], ["off", "a", "b"], round_=2)
    assert [(x.graph, x.capture, x.adapters) for x in second] == [
        (x.graph, x.capture, x.adapters[::-1]) for x in reversed(first)
    ]
    assert genai_run.key("raw", 1024, adapter="b", capture=True) == "genai/graph=raw/P=1024/adapter=b/capture=on"


CHECKS = {
    "fused": {"fused_nodes": 4, "int8_nodes": 0, "targets": 4, "ok": True, "note": "fused: 4/4"},
    "raw": {
        "fused_nodes": 0,
        "int8_nodes": 8,
        "targets": 4,
        "ok": True,
        "note": "raw: 0/4 fused with MatMulNBitsQLoRAFusion disabled, 8 INT8 MatMulNBits",
    },
}


def _genai_case(graph: str, adapter: str, ttft: list[float], decode: list[float], tokens: str) -> dict[str, Any]:
    case: dict[str, Any] = {
        "level": "genai",
        "key": genai_run.key(graph, 128, adapter=adapter, capture=True),
        "graph": graph,
    }
    case |= {"prompt": 128, "generate": 128, "adapter": adapter, "capture": True, "graph_check": CHECKS[graph]}
    case |= {"capture_isolation": genai_run.CAPTURE_ISOLATION, "first_request": {"ttft_ms": 900.0}}
    return case | {"ttft_ms": ttft, "decode_tok_s": decode, "output_sha256": [tokens]}


def test_fused_over_raw_ratios_intervals_and_token_identity(tmp_path: Path) -> None:
    spread = [0.0, 0.1, -0.1, 0.2, -0.2]
    rounds = []
    for round_ in (1, 2):
        cases = [
            _genai_case("fused", "a", [60 + d for d in spread], [175 + d for d in spread], "t-a"),
            _genai_case("raw", "a", [100 + d for d in spread], [100 + d for d in spread], "t-a"),
            _genai_case("fused", "b", [50 + d for d in spread], [100.1 + d for d in spread], "t-b-fused"),
            _genai_case("raw", "b", [50 + d for d in spread], [100 + d for d in spread], "t-b"),
        ]
        error = "adapter off needs empty-weight MatMulNBits: the probe died of signal 11"
        for graph in ("fused", "raw"):
            off = _genai_case(graph, "off", [], [], "")
            cases.append(
                {k: v for k, v in off.items() if k not in {"ttft_ms", "decode_tok_s", "output_sha256"}}
                | {"error": error}
            )
        if round_ == 1:  # as genai_run writes it, on the fused cases of round 1
            agreement = genai_run.logits_agreement(np.array([1.0, 3.0, -2.0, 2.0]), np.array([1.0, 2.0, -2.0, 2.0]))
            cases[0]["logits_vs_raw"] = agreement | {"prompt": 128}
        rounds.append({"wheel": "A", "round": round_, "cases": cases})
    document: dict[str, Any] = {
        "wheels": [{"id": "A", "label": "ours"}],
        "host": {"platform": "linux", "gpus": ["NVIDIA H200"]},
        "runs": rounds,
    }
    rows = {(r["adapter"]): r for r in report.summarize(document)["fused_vs_raw"]}
    a, b, off = rows["a"], rows["b"], rows["off"]
    assert a["ttft_ms"]["ratio"] == pytest.approx(0.6)
    assert a["ttft_ms"]["fused"] == pytest.approx(statistics.median([60 + d for d in spread * 2]))
    assert a["decode_tok_s"]["ratio"] == pytest.approx(1.75)
    low, high = a["decode_tok_s"]["ci"]
    assert low <= 1.75 <= high
    assert high < 1.8
    assert a["decode_tok_s"]["resampled"] == "requests"  # two rounds: too few to draw from
    assert a["ttft_ms"]["verdict"] == "fused better"
    assert a["decode_tok_s"]["verdict"] == "fused better"
    assert a["same_tokens"] is True
    # Inside each other's spread: no difference, whatever the ratio says.
    assert b["ttft_ms"]["verdict"] == b["decode_tok_s"]["verdict"] == "no difference"
    assert b["same_tokens"] is False
    assert off["not_measured"].startswith("adapter off needs empty-weight MatMulNBits")
    assert off["fused_check"] == CHECKS["fused"]

    document |= {"software_adapter": False, "order": [], "options": {"warmups": 3, "requests": 5}, "command": []}
    for run in document["runs"]:
        run["environment"] = {"ort_version": "1.32.0", "ep": "webgpu", "ep_kind": "builtin", "has_qlora_schema": True}
    document["summary"] = report.summarize(document)
    markdown = report.markdown(document)
    assert "## Fused / raw graph on the same wheel" in markdown
    assert (
        "| A | 128 | a | on | 0.600 (0.598-0.602) | fused better | 1.750 (1.747-1.753) | fused better | yes | "
        "P = 128: RMSE 0.5 (27.74% of raw RMS), max 1, same argmax | "
        "fused: 4/4 | raw: 0/4 fused with MatMulNBitsQLoRAFusion disabled, 8 INT8 MatMulNBits |"
    ) in markdown
    assert "| A | 128 | b | on | 1.000 (0.996-1.004) | no difference |" in markdown
    assert "| no | - | fused: 4/4 |" in markdown  # adapter b: no logits recorded
    assert "| A | 128 | off | on | adapter off needs empty-weight MatMulNBits" in markdown
    assert "| fused | b | on | 128 | 128 | A | 50.0 (49.8-50.2) | 100.1 (99.9-100.3) |" in markdown
    assert "differs from adapter off" not in markdown  # adapter off was not measured: nothing to compare
    assert "tokens differ from raw" in markdown
    rows_order = [line.split(" | ")[:2] for line in markdown.splitlines() if line.startswith(("| fused |", "| raw |"))]
    assert rows_order == [["| fused", "a"], ["| fused", "b"], ["| raw", "a"], ["| raw", "b"]]
    assert f"Graph capture: {genai_run.CAPTURE_ISOLATION}." in markdown
    report.write(document, tmp_path)
    assert (tmp_path / "genai.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_fused_over_raw_draws_rounds_from_four_rounds_on() -> None:
    """Decode 1.75x faster fused in three rounds and 1.2x in the fourth: the interval says so."""
    spread = [0.0, 0.1, -0.1, 0.2, -0.2]
    runs = []
    for round_, fused_tok_s in ((1, 175), (2, 175), (3, 175), (4, 120)):
        cases = [
            _genai_case("fused", "a", [60 + d for d in spread], [fused_tok_s + d for d in spread], "t-a"),
            _genai_case("raw", "a", [100 + d for d in spread], [100 + d for d in spread], "t-a"),
        ]
        runs.append({"wheel": "A", "round": round_, "cases": cases})
    document: dict[str, Any] = {"wheels": [{"id": "A", "label": "ours"}], "host": {"platform": "linux"}, "runs": runs}
    (row,) = report.summarize(document)["fused_vs_raw"]
    decode = row["decode_tok_s"]
    assert decode["resampled"] == "rounds and requests"
    assert decode["ratio"] == pytest.approx(1.75, abs=0.002)
    low, high = decode["ci"]
    assert low < 1.5  # a bootstrap of the pooled requests stays above 1.74
    assert high > 1.7
    assert row["ttft_ms"]["ci"] == pytest.approx([0.6, 0.6], abs=0.003)  # alike in every round: narrow


def _one_run_document(cases: list[dict[str, Any]], *, label: str, environment: dict[str, Any]) -> dict[str, Any]:
    """A results document of one wheel and one round holding ``cases``, summarized."""
    document: dict[str, Any] = {
        "wheels": [{"id": "A", "label": label}],
        "host": {"platform": "linux"},
        "runs": [{"wheel": "A", "round": 1, "cases": cases, "environment": environment}],
    }
    document |= {"software_adapter": False, "order": [], "options": {"warmups": 1, "requests": 2}, "command": []}
    document["summary"] = report.summarize(document)
    return document


def test_a_profiled_request_reports_gpu_time_beside_wall_time() -> None:
    busy = _genai_case("fused", "a", [60.0, 61.0], [175.0, 176.0], "t") | {"capture": False}
    busy["gpu_profile"] = {
        "adapter": "a",
        "wall_ms": 800.0,
        "ttft_ms": 60.0,
        "gpu_ms": 200.0,
        "dispatches": 4000,
        "busiest_programs_ms": {"MatMulNBitsQLoRA&QLoRAGemv": 90.0, "GroupQueryAttention&FlashAttention": 40.5},
        "runs": 129,
        "in_run_ms": 700.0,
        "recorded_runs": 2,
        "recorded_in_run_ms": 40.0,
        "before_executor_ms": 6.0,
        "executing_ms": 30.0,
        "after_executor_ms": 4.0,
        "node_host_ms": {"WebGpu": 25.0, "CPU": 1.5},
        "longest_node": {
            "median_ms": 16.5,
            "min_ms": 15.75,
            "max_ms": 21.25,
            "node": "QuickGelu /layers.0/mlp/act",
            "runs_with_that_node": 2,
        },
    }
    before_longest_node = _genai_case("raw", "off", [60.0, 61.0], [175.0, 176.0], "t") | {"capture": False}
    before_longest_node["gpu_profile"] = {k: v for k, v in busy["gpu_profile"].items() if k != "longest_node"}
    before_longest_node["gpu_profile"]["adapter"] = "off"
    before_host_phases = _genai_case("fused", "b", [60.0, 61.0], [175.0, 176.0], "t") | {"capture": False}
    before_host_phases["gpu_profile"] = {k: v for k, v in busy["gpu_profile"].items() if k != "recorded_runs"}
    before_host_phases["gpu_profile"]["adapter"] = "b"
    refused = _genai_case("raw", "a", [100.0, 101.0], [100.0, 99.0], "t") | {"capture": False}
    refused["gpu_profile"] = {"adapter": "a", "error": "the profile has no GPU dispatch events"}
    environment = {"ort_version": "1.30.0", "ep": "webgpu", "ep_kind": "builtin", "has_qlora_schema": True}
    document = _one_run_document(
        [busy, before_longest_node, before_host_phases, refused], label="ours", environment=environment
    )
    markdown = report.markdown(document)
    assert "### Where a request's time goes" in markdown
    assert (
        "| A | fused | 128 | 128 | a | 800.0 | 200.0 (25%) | 4000 | 129: 700.0 | 2: 40.0 | 6.0 | 30.0 | 4.0 | "
        "WebGpu 25.0, CPU 1.5 | 16.50 (15.75-21.25): `QuickGelu /layers.0/mlp/act` in 2 of 2 runs | "
        "`MatMulNBitsQLoRA&QLoRAGemv` 90.0, `GroupQueryAttention&FlashAttention` 40.5 |"
    ) in markdown
    before = "| A | raw | 128 | 128 | off | 800.0 | 200.0 (25%) | 4000 | 129: 700.0 | 2: 40.0 | 6.0 | 30.0 | 4.0 | "
    assert before in markdown
    assert "WebGpu 25.0, CPU 1.5 | - | `MatMul" in markdown
    not_recorded = (
        "| A | fused | 128 | 128 | b | 800.0 | 200.0 (25%) | 4000 | not recorded | - | - | - | - | - | - | `MatMul"
    )
    assert not_recorded in markdown
    refused_line = (
        "| A | raw | 128 | 128 | a | - | the profile has no GPU dispatch events | - | - | - | - | - | - | - | - | - |"
    )
    assert refused_line in markdown


def _profile_events(request_runs: list[list[list[tuple[str, str, float]]]]) -> list[dict[str, Any]]:
    """onnxruntime profile events of requests made of decoder runs, each run a list of (node, provider, µs)
    nodes, laid out as onnxruntime writes them: per run its nodes, the executor's event and ``model_run``, which
    starts 5 µs before the executor and ends 15 µs after it. A run without nodes has neither node nor executor
    events (a profiler that stopped recording)."""
    events: list[dict[str, Any]] = []
    ts = 0.0
    for runs in request_runs:
        for nodes in runs:
            start = ts
            for name, provider, dur in nodes:
                args = {"op_name": name, "provider": provider}
                events.append({"cat": "Node", "name": f"{name}_kernel_time", "ts": ts, "dur": dur, "args": args})
                events.append({"cat": "Node", "name": f"{name}_fence_after", "ts": ts + dur, "dur": 0, "args": args})
                ts += dur + 10.0
            if nodes:
                executing = ts - start
                events.append({"cat": "Session", "name": "SequentialExecutor::Execute", "ts": start, "dur": executing})
            else:
                ts += 50.0  # a run as long as one with nodes, none recorded
            events.append({"cat": "Session", "name": "model_run", "ts": start - 5.0, "dur": ts - start + 20.0})
            ts += 1000.0  # genai's own time between runs
    return events


def test_host_phases_reads_the_last_requests_runs_and_the_nodes_of_the_runs_that_recorded_them() -> None:
    run = [("MatMul", "WebGpuExecutionProvider", 30.0), ("Shape", "CPUExecutionProvider", 4.0)]
    first = [[("MatMul", "WebGpuExecutionProvider", 900.0)], run, run, run]  # the first request compiles
    events = _profile_events([first, [run, run, [], []]])
    phases = genai_run.host_phases(events)
    assert phases["runs"] == 4
    assert phases["in_run_ms"] == pytest.approx((2 * (30 + 10 + 4 + 10 + 20) + 2 * (50 + 20)) / 1e3)
    assert phases["recorded_runs"] == 2
    assert phases["recorded_in_run_ms"] == pytest.approx(2 * (30 + 10 + 4 + 10 + 20) / 1e3)
    assert phases["executing_ms"] == pytest.approx(2 * (30 + 10 + 4 + 10) / 1e3)
    assert phases["before_executor_ms"] == pytest.approx(2 * 5 / 1e3)
    assert phases["after_executor_ms"] == pytest.approx(2 * 15 / 1e3)
    assert phases["node_host_ms"] == pytest.approx({"WebGpu": 0.060, "CPU": 0.008})
    assert phases["longest_node"] == {
        "median_ms": pytest.approx(0.030),
        "min_ms": pytest.approx(0.030),
        "max_ms": pytest.approx(0.030),
        "node": "MatMul MatMul",
        "runs_with_that_node": 2,
    }
    uneven = _profile_events([first, [run, run, run]])
    assert genai_run.host_phases(uneven) == {"host_error": "7 decoder runs do not split into two equal requests"}


def test_the_models_own_webgpu_options_are_kept(tmp_path: Path) -> None:
    """genai's builder turns WebGPU validation off in the model's config; clearing providers drops that."""
    options = {"log_id": "onnxruntime-genai", "provider_options": [{"webgpu": {"validationMode": "disabled"}}]}
    config = {"model": {"decoder": {"session_options": options, "filename": "model.onnx"}}}
    (tmp_path / "genai_config.json").write_text(json.dumps(config), encoding="utf-8")
    assert genai_run.webgpu_options(tmp_path) == {"validationMode": "disabled"}
    del config["model"]["decoder"]["session_options"]
    (tmp_path / "genai_config.json").write_text(json.dumps(config), encoding="utf-8")
    assert genai_run.webgpu_options(tmp_path) == {}


def test_results_written_before_two_adapters_still_report() -> None:
    """Older genai cases: no graph, adapter as a flag."""
    old = {"level": "genai", "key": "genai/P=16/adapter=on/capture=off", "prompt": 16, "generate": 8}
    old |= {"adapter": True, "capture": False, "first_request": {"ttft_ms": 5.0}, "output_sha256": ["x"]}
    old |= {"ttft_ms": [1.0, 1.1], "decode_tok_s": [10.0, 11.0]}
    off = old | {"key": "genai/P=16/adapter=off/capture=off", "adapter": False, "output_sha256": ["y"]}
    environment = {"ort_version": "1.27.0", "ep": "cpu", "ep_kind": "cpu", "has_qlora_schema": False}
    document = _one_run_document([old, off], label="stock", environment=environment)
    assert document["summary"]["fused_vs_raw"] == []
    markdown = report.markdown(document)
    assert "| - | on | off | 16 | 8 | A | 1.1 (1.0-1.1) | 10.5 (10.0-11.0) | differs from adapter off |" in markdown


def test_no_verdict_where_the_fused_graph_fused_nothing() -> None:
    """A wheel without the fused operator runs the raw pattern in both graphs: figures, but no verdict."""
    not_fused = {**CHECKS["fused"], "fused_nodes": 0, "int8_nodes": 8, "ok": False}
    not_fused["note"] = "fused: 0/4 (absent: this wheel keeps the raw pattern)"
    fast = _genai_case("fused", "a", [50.0, 50.1, 49.9], [300.0, 301.0, 299.0], "t") | {"graph_check": not_fused}
    slow = _genai_case("raw", "a", [100.0, 100.1, 99.9], [100.0, 101.0, 99.0], "t")
    document: dict[str, Any] = {
        "wheels": [{"id": "A", "label": "stock"}],
        "host": {"platform": "linux"},
        "runs": [{"wheel": "A", "round": 1, "cases": [fast, slow]}],
    }
    refused = {"level": "genai", "capture": True, "graph_check": not_fused, "error": "capture refused"}
    for graph in ("fused", "raw"):
        document["runs"][0]["cases"].append(refused | {"key": f"genai/graph={graph}/capture=on", "graph": graph})
    (row,) = report.summarize(document)["fused_vs_raw"]
    assert row["ttft_ms"]["ratio"] == pytest.approx(0.5)
    assert row["ttft_ms"]["verdict"] == row["decode_tok_s"]["verdict"] == report.NOT_AS_NAMED


def test_a_builder_python_without_the_builders_modules_is_refused_before_anything_is_made(tmp_path: Path) -> None:
    """A real interpreter without torch, transformers or onnxruntime-genai: the bench names each one it lacks."""
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    python = bare / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    options = bench.replace(bench_options(tmp_path, "--levels=genai", "--ep=cpu"), builder_python=python)
    with pytest.raises(UsageError) as refused:
        bench.check_before_installing(options, dict(os.environ))
    for module in bench.BUILDER_MODULES:
        assert module in refused.value.message
    assert not (tmp_path / "cache" / "venvs").exists()

    options = bench.replace(options, builder_python=tmp_path / "no-such-python")
    with pytest.raises(UsageError, match="cannot run"):
        bench.check_before_installing(options, dict(os.environ))


def test_logits_agreement_says_how_far_fused_is_from_raw_and_whether_greedy_picks_the_same() -> None:
    raw = np.array([0.0, 2.0, 1.9, -4.0])
    same = genai_run.logits_agreement(raw + 0.01, raw)
    assert same["rmse"] == pytest.approx(0.01)
    assert same["relative"] == pytest.approx(0.01 / np.sqrt(np.mean(raw**2)))
    assert same["same_argmax"] is True
    flipped = genai_run.logits_agreement(raw + np.array([0.0, 0.0, 0.2, 0.0]), raw)
    assert flipped["max_abs"] == pytest.approx(0.2)
    assert flipped["same_argmax"] is False
