"""GPU time from the WebGPU EP's profile: events cut into runs, the compiling runs dropped, reported.

The events have the shape onnxruntime's WebGPU EP writes (``WebGpuContext::CollectProfilingData``):
one per dispatch, ``node&op_type&program``, ``dur`` in µs, ``args.cache_key``; the session's own
events (no cache key) are not dispatches.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper

from wheel_bench import gpu_time, report

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path


def _dispatch(node: str, program: str, dur: int) -> dict[str, Any]:
    return {"cat": "Api", "name": f"{node}&MatMulNBits&{program}", "dur": dur, "args": {"cache_key": program}}


def _profile(tmp_path: Path, runs: list[list[int]]) -> Path:
    """A profile of runs of a two-layer chain: each run's durations for (quantize, matmul) x 2 layers."""
    events: list[dict[str, Any]] = [{"cat": "Session", "name": "model_loading_array", "dur": 900, "args": {}}]
    for run in runs:
        events.append({"cat": "Session", "name": "model_run", "dur": 5000, "args": {}})
        for layer in range(2):
            events.append(_dispatch(f"w{layer}", "DP4AMatMulQuantize", run[2 * layer]))
            events.append(_dispatch(f"w{layer}", "DP4AMatMulNBits", run[2 * layer + 1]))
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(events), encoding="utf-8")
    return path


def test_runs_are_cut_by_count_and_the_compiling_runs_dropped(tmp_path: Path) -> None:
    profile = _profile(tmp_path, [[800_000, 900_000, 5, 60], [2, 40, 2, 40], [3, 50, 1, 30], [2, 60, 2, 50]])
    times = gpu_time.per_run(gpu_time.kernel_events(profile), 4, skip=1)
    assert times.dispatches == 4
    assert times.run_us == [84.0, 84.0, 114.0]
    assert times.by_program == {"MatMulNBits&DP4AMatMulNBits": 80.0, "MatMulNBits&DP4AMatMulQuantize": 4.0}


def test_a_profile_without_dispatches_or_with_uneven_runs_says_why(tmp_path: Path) -> None:
    with pytest.raises(gpu_time.NoKernelTimes, match="no GPU dispatch events"):
        gpu_time.per_run(gpu_time.kernel_events(_profile(tmp_path, [])), 3, skip=1)
    events = gpu_time.kernel_events(_profile(tmp_path, [[1, 2, 3, 4], [1, 2, 3, 4]]))
    with pytest.raises(gpu_time.NoKernelTimes, match="8 dispatch events do not split into 3 equal runs"):
        gpu_time.per_run(events, 3, skip=1)


def _case(
    variant: str, layers: int, runs: list[float] | None, *, error: str | None = None, capture: bool = False
) -> dict[str, Any]:
    gpu: dict[str, Any] = {"error": error} if error else {"run_us": runs, "by_program": {"k": 40.0}, "dispatches": 2}
    return {
        "level": "ops",
        "variant": variant,
        "m": 1,
        "k": 64,
        "layers": layers,
        "adapter": True,
        "capture": capture,
        "bytes_per_layer": 1000,
        "samples_ms": [1.0, 1.1, 1.2],
        "first_run_ms": 9.0,
        "gpu": gpu,
    }


def test_the_op_table_gives_gpu_time_per_layer_and_its_ratio_to_base() -> None:
    cases = {
        "base/L=2": _case("base", 2, [100.0, 102.0, 98.0]),
        "base/L=1": _case("base", 1, [50.0, 51.0, 49.0]),
        "lora_int8/L=2": _case("lora_int8", 2, [150.0, 153.0, 147.0]),
        "lora_int8/L=1": _case("lora_int8", 1, None, error="the profile has no GPU dispatch events"),
    }
    document = {
        "host": {},
        "wheels": [{"id": "A"}],
        "runs": [{"wheel": "A", "round": 1, "cases": [{"key": k, **c} for k, c in cases.items()]}],
    }
    summary = report.summarize(document)
    rows = {r["variant"]: r for r in summary["ops"]}
    assert rows["base"]["gpu_us"] == pytest.approx(50.0)
    assert rows["lora_int8"]["gpu_us"] == pytest.approx(75.0)
    assert rows["lora_int8"]["gpu_x_base"] == pytest.approx(1.5)
    low, high = rows["lora_int8"]["gpu_x_base_ci"]
    assert low <= 1.5 <= high
    assert rows["lora_int8"]["gpu_kernels_us"] == {"k": 20.0}
    assert "gpu_error" not in rows["lora_int8"]
    lines = report._kernel_lines(summary["ops"])
    assert "| A | lora_int8 | 1 | on | off | `k` | 20.0 |" in lines
    assert "No GPU time" not in "\n".join(lines)


def test_captured_replays_are_timed_against_the_base_of_their_own_capture_mode() -> None:
    cases = {
        "base/L=2": _case("base", 2, [100.0, 102.0, 98.0]),
        "base/L=2/capture=on": _case("base", 2, [60.0, 61.0, 59.0], capture=True),
        "lora_int8/L=2/capture=on": _case("lora_int8", 2, [240.0, 244.0, 236.0], capture=True),
    }
    document = {
        "host": {},
        "wheels": [{"id": "A"}],
        "runs": [{"wheel": "A", "round": 1, "cases": [{"key": k, **c} for k, c in cases.items()]}],
    }
    summary = report.summarize(document)
    rows = {(r["variant"], r["capture"]): r for r in summary["ops"]}
    assert rows["lora_int8", True]["gpu_x_base"] == pytest.approx(4.0)
    lines = report._kernel_lines(summary["ops"])
    assert "| A | base | 1 | on | off | `k` | 20.0 |" in lines
    assert "| A | base | 1 | on | on | `k` | 20.0 |" in lines


def _paged(variant: str, layers: int, runs: list[float]) -> dict[str, Any]:
    return {
        "level": "paged",
        "phase": "decode",
        "variant": variant,
        "layers": layers,
        "new_tokens": 1,
        "past": 64,
        "num_heads": 4,
        "kv_heads": 2,
        "head_size": 16,
        "samples_ms": [1.0 + 0.1 * layers, 1.1 + 0.1 * layers, 1.2 + 0.1 * layers],
        "first_run_ms": 9.0,
        "cache_in_place": True,
        "gpu": {"run_us": runs, "by_program": {"PagedAttention&Norm": 8.0}, "dispatches": 3},
    }


def test_the_paged_table_gives_the_norms_gpu_time_against_norm_off() -> None:
    cases = {
        "off/L=4": _paged("norm_off", 4, [400.0, 404.0, 396.0]),
        "off/L=1": _paged("norm_off", 1, [100.0, 101.0, 99.0]),
        "norm/L=4": _paged("norm", 4, [420.0, 424.0, 416.0]),
        "norm/L=1": _paged("norm", 1, [105.0, 106.0, 104.0]),
    }
    document = {
        "host": {},
        "wheels": [{"id": "A"}],
        "runs": [{"wheel": "A", "round": 1, "cases": [{"key": k, **c} for k, c in cases.items()]}],
    }
    rows = {r["variant"]: r for r in report.summarize(document)["paged"]}
    assert rows["norm_off"]["gpu_us"] == pytest.approx(100.0)
    assert rows["norm"]["gpu_us"] == pytest.approx(105.0)
    assert rows["norm"]["gpu_x_base"] == pytest.approx(1.05)
    assert "gpu_x_base" not in rows["norm_off"]
    lines = report._kernel_lines(list(rows.values()), columns=("phase", "variant"))
    assert "| A | decode | norm | `PagedAttention&Norm` | 2.0 |" in lines


def _relu_model() -> bytes:
    x, y = (helper.make_tensor_value_info(name, TensorProto.FLOAT, [4]) for name in ("x", "y"))
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    return bytes(model.SerializeToString())


@pytest.mark.parametrize(("ep_kind", "cause"), [("builtin", "timestamp-query"), ("plugin", "does not implement")])
def test_a_real_profile_without_dispatches_names_the_cause_of_its_ep(ep_kind: str, cause: str) -> None:
    """A real onnxruntime profile with no dispatch in it (as a plugin EP's is): the reason given
    depends on the kind of WebGPU EP that ran it."""
    model = _relu_model()

    def open_session(prefix: str) -> tuple[Any, Callable[[], object]]:
        options = onnxruntime.SessionOptions()
        options.enable_profiling = True
        options.profile_file_prefix = prefix
        session = onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        return session, lambda: session.run(None, {"x": np.ones(4, dtype=np.float32)})

    error = gpu_time.measure(ep_kind, open_session, warmups=1, requests=2)["error"]
    assert error.startswith("the profile has no GPU dispatch events (")
    assert cause in error
