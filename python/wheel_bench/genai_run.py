"""Model level: TTFT and decode speed of a genai decoder, fused vs raw LoRA graph on one wheel.

One request: a fresh generator, adapter A or B activated or none (off), a prompt of fixed random
token ids appended (the prefill), then greedy generation to exactly ``prompt + generate`` tokens,
every new token read back to the host. TTFT is the time from appending the prompt until the first
new token is on the host; decode speed is the remaining tokens over the time they took.

Graphs: ``fused`` is the model as the wheel optimizes it (``MatMulNBitsQLoRAFusion`` fuses the raw
INT8 LoRA pattern where the wheel has it); ``raw`` is the same model with that fusion disabled through
genai's session options (``optimization.disable_specified_optimizers``, a session config entry).
genai cannot save its optimized graph, so a probe session of this onnxruntime on the same decoder, EP
and config entry counts the fused nodes of each graph (``graph_check``).

Graph capture with adapters: onnxruntime-genai#2740 (a decode captured with one adapter state is
replayed after another is activated) is worked around in the open: with capture on, every adapter
state gets a model (session) of its own, so no captured graph is ever shared between adapter states;
each case records that in ``capture_isolation``.

Where the time goes (``profile``): in round 1, without capture, one more model per graph with onnxruntime's
profiler on runs the longest prompt twice with the first adapter measured; the second request's dispatches,
timed on the GPU by the WebGPU EP (``gpu_time``), are set beside its wall time. A GPU busy for a small part
of the wall time means the host (dispatch, upload, readback) sets the pace.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import statistics
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from wheel_bench import ep, gpu_time, ops
from wheel_bench.genai_model import ADAPTER_FILES

if TYPE_CHECKING:
    from wheel_bench.ep import EpSetup

GRAPHS = ("fused", "raw")
ADAPTERS = ("off", "a", "b")
"""Adapter off (zero-sized defaults: the base alone), or one of the two adapters a build writes."""
FUSION = "MatMulNBitsQLoRAFusion"
QLORA_OP = "MatMulNBitsQLoRA"
DISABLE_OPTIMIZERS = "optimization.disable_specified_optimizers"
CAPTURE_ISOLATION = "one model (session) per adapter state, as onnxruntime-genai#2740 needs"


def session_entries(graph: str) -> dict[str, str]:
    """The session config entries that make ``graph`` (genai passes unknown session options on as these)."""
    if graph not in GRAPHS:
        msg = f"unknown graph {graph!r}: use {' or '.join(GRAPHS)}"
        raise ValueError(msg)
    return {DISABLE_OPTIMIZERS: FUSION} if graph == "raw" else {}


def _model(setup: EpSetup, model_dir: Path, *, graph: str, capture: bool, profile_prefix: str | None = None) -> Any:
    """``profile_prefix``: onnxruntime's profiler on in the decoder's session, its file named from it."""
    import onnxruntime_genai as og  # noqa: PLC0415 - only the model level needs genai

    config = og.Config(str(model_dir))
    options: dict[str, Any] = dict(session_entries(graph))
    if profile_prefix is not None:
        options["enable_profiling"] = profile_prefix
    if options:
        config.overlay(json.dumps({"model": {"decoder": {"session_options": options}}}))
    config.clear_providers()
    if setup.kind != "cpu":
        if setup.kind == "plugin" and "genai" not in ep.registered:
            og.register_execution_provider_library(ep.WEBGPU, ep.plugin_library())
            ep.registered.add("genai")
        config.append_provider("webgpu")
        # As the model was built (its builder turns validation off for speed), then the bench's own options,
        # capture as the case asks.
        given = {**webgpu_options(model_dir), **setup.options, "enableGraphCapture": "1" if capture else "0"}
        for name, value in given.items():
            config.set_provider_option("webgpu", name, value)
    return og.Model(config)


def webgpu_options(model_dir: Path) -> dict[str, str]:
    """The WebGPU provider options the model's ``genai_config.json`` names (``clear_providers`` drops them)."""
    config = json.loads((model_dir / "genai_config.json").read_text(encoding="utf-8"))
    providers = config["model"]["decoder"].get("session_options", {}).get("provider_options", [])
    return {name: str(value) for entry in providers for name, value in entry.get("webgpu", {}).items()}


def graph_check(setup: EpSetup, model_dir: Path, graph: str, targets: int) -> dict[str, Any]:
    """Fused and raw-pattern nodes in the graph this onnxruntime optimizes for ``graph``, and whether
    that is the graph the name promises: ``fused`` with every target fused, ``raw`` with none."""
    import onnx  # noqa: PLC0415

    config = json.loads((model_dir / "genai_config.json").read_text())
    decoder = model_dir / config["model"]["decoder"]["filename"]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "optimized.onnx"
        options = setup.session_options()
        # genai's own session lets shape nodes run on the CPU; the fusion applies to WebGPU nodes only.
        options.add_session_config_entry("session.disable_cpu_ep_fallback", "0")
        options.optimized_model_filepath = str(path)
        # A whole decoder passes protobuf's 2 GiB: its weights go to a file beside it.
        options.add_session_config_entry("session.optimized_model_external_initializers_file_name", "weights.data")
        options.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "1024")
        for key, value in session_entries(graph).items():
            options.add_session_config_entry(key, value)
        import onnxruntime as ort  # noqa: PLC0415 - the worker's own runtime

        session = ort.InferenceSession(str(decoder), sess_options=options, providers=setup.providers())
        del session
        nodes = onnx.load(str(path), load_external_data=False).graph.node
    fused = sum(n.op_type == QLORA_OP for n in nodes)
    int8 = sum(n.op_type == "MatMulNBits" and any(a.name == "bits" and a.i == 8 for a in n.attribute) for n in nodes)
    check: dict[str, Any] = {"fused_nodes": fused, "int8_nodes": int8, "targets": targets}
    if graph == "raw":
        check["ok"] = fused == 0 and int8 == 2 * targets
        check["note"] = f"raw: {fused}/{targets} fused with {FUSION} disabled, {int8} INT8 MatMulNBits"
    else:
        check["ok"] = fused == targets and int8 == 0
        check["note"] = f"fused: {fused}/{targets}" + (
            "" if fused else f" (absent: {'the CPU EP' if setup.kind == 'cpu' else 'this wheel'} keeps the raw pattern)"
        )
    return check


def _request(og: Any, model: Any, adapters: Any, prompt: np.ndarray, generate: int, *, adapter: str) -> dict[str, Any]:
    params = og.GeneratorParams(model)
    total = len(prompt) + generate
    params.set_search_options(max_length=total, min_length=total, do_sample=False)
    generator = og.Generator(model, params)
    if adapter != "off":
        generator.set_active_adapter(adapters, adapter)
    start = time.perf_counter()
    generator.append_tokens(prompt)
    tokens = [int(generator.get_next_tokens()[0])]
    first = time.perf_counter()
    while not generator.is_done():
        generator.generate_next_token()
        tokens.append(int(generator.get_next_tokens()[0]))
    end = time.perf_counter()
    decoded = len(tokens) - 1
    return {
        "ttft_ms": (first - start) * 1e3,
        "decode_tok_s": decoded / (end - first) if decoded else float("nan"),
        "tokens": len(tokens),
        # Greedy output identity: adapters must differ from off, and fused must match raw.
        "output_sha256": hashlib.sha256(json.dumps(tokens).encode()).hexdigest()[:16],
    }


TOP_PROGRAMS = 8
"""Programs listed by GPU time in a profiled request."""


def profiled_request(
    setup: EpSetup, model_dir: Path, *, graph: str, prompt: np.ndarray, generate: int, adapter: str, keep: Path
) -> dict[str, Any]:
    """Two requests on a model of their own with the profiler on; the second one's GPU time (its dispatches
    summed), dispatch count, busiest programs and wall time; or ``{"error": why}``. The profile is kept,
    gzip-compressed, as ``keep`` (a trace viewer opens it as it is)."""
    import onnxruntime_genai as og  # noqa: PLC0415

    with tempfile.TemporaryDirectory() as tmp:
        prefix = Path(tmp) / "genai"
        model = _model(setup, model_dir, graph=graph, capture=False, profile_prefix=str(prefix))
        lora = _adapters(og, model, model_dir, [adapter])
        runs = [_request(og, model, lora, prompt, generate, adapter=adapter) for _ in range(2)]
        # The decoder's session writes its profile when it ends.
        del lora, model
        profiles = sorted(Path(tmp).glob("genai*.json"))
        if not profiles:
            return {"error": "onnxruntime wrote no profile for the decoder's session"}
        keep.parent.mkdir(parents=True, exist_ok=True)
        keep.write_bytes(gzip.compress(profiles[-1].read_bytes()))
        events = json.loads(profiles[-1].read_text(encoding="utf-8"))
        try:
            times = gpu_time.per_run(gpu_time.kernel_events(events), 2, skip=1)
        except gpu_time.NoKernelTimes as exc:
            return {"error": str(exc)}
    wall = runs[-1]
    decoded = wall["tokens"] - 1
    wall_ms = wall["ttft_ms"] + (decoded / wall["decode_tok_s"] * 1e3 if decoded else 0.0)
    busiest = sorted(times.by_program.items(), key=lambda item: -item[1])[:TOP_PROGRAMS]
    return {
        "adapter": adapter,
        "profile_file": keep.name,
        "wall_ms": wall_ms,
        "ttft_ms": wall["ttft_ms"],
        "gpu_ms": times.run_us[0] / 1e3,
        "dispatches": times.dispatches,
        "busiest_programs_ms": {program: us / 1e3 for program, us in busiest},
        **host_phases(events),
    }


def host_phases(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Where the host spends the last of two requests, from onnxruntime's session events: the decoder's runs
    (``model_run``); wall time outside them is genai's own. Each run that has executor and node events splits
    into the time before the executor (feeds copied in, adapter parameters among them, and the EPs' run
    start), the executor's (kernels enqueued) and the time after it (fetches copied out, the EPs' run end),
    with the nodes' own host time by EP (a CPU EP share is a fallback), and each run's longest node: a node
    that holds the host for milliseconds where its kind takes microseconds is a wait (a submission blocked, a
    map) in the middle of the run. Runs without those events (a profiler that stopped recording) are counted
    apart rather than guessed."""
    runs = sorted((e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"), key=_ts)
    if len(runs) < 2 or len(runs) % 2:
        return {"host_error": f"{len(runs)} decoder runs do not split into two equal requests"}
    last_runs = runs[len(runs) // 2 :]
    kernel_times = [e for e in events if e.get("cat") == "Node" and str(e.get("name", "")).endswith("_kernel_time")]
    executor_runs = [e for e in events if str(e.get("name", "")).endswith("Executor::Execute")]
    recorded: list[dict[str, Any]] = []
    before = executing = after = 0.0
    nodes: dict[str, float] = {}
    longest: list[dict[str, Any]] = []
    for run in last_runs:
        start, end = _ts(run), _ts(run) + float(run["dur"])
        kernels = [e for e in kernel_times if start <= _ts(e) <= end]
        executors = [e for e in executor_runs if start <= _ts(e) <= end]
        if not kernels or not executors:
            continue
        recorded.append(run)
        first, last = min(executors, key=_ts), max(executors, key=lambda e: _ts(e) + float(e["dur"]))
        before += _ts(first) - start
        after += end - (_ts(last) + float(last["dur"]))
        executing += sum(float(e["dur"]) for e in executors)
        longest.append(max(kernels, key=lambda e: float(e["dur"])))
        for event in kernels:
            provider = str(event.get("args", {}).get("provider", "?")).removesuffix("ExecutionProvider")
            nodes[provider] = nodes.get(provider, 0.0) + float(event["dur"]) / 1e3
    return {
        "runs": len(last_runs),
        "in_run_ms": sum(float(e["dur"]) for e in last_runs) / 1e3,
        "recorded_runs": len(recorded),
        "recorded_in_run_ms": sum(float(e["dur"]) for e in recorded) / 1e3,
        "before_executor_ms": before / 1e3,
        "executing_ms": executing / 1e3,
        "after_executor_ms": after / 1e3,
        "node_host_ms": nodes,
        "longest_node": _longest_node(longest),
    }


def _longest_node(per_run: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The median, min and max of the runs' longest node times (ms), and the node that is longest most often."""
    if not per_run:
        return None
    names = Counter(
        f"{e.get('args', {}).get('op_name', '?')} {str(e['name']).removesuffix('_kernel_time')}" for e in per_run
    )
    times = [float(e["dur"]) / 1e3 for e in per_run]
    [(node, runs)] = names.most_common(1)
    return {
        "median_ms": statistics.median(times),
        "min_ms": min(times),
        "max_ms": max(times),
        "node": node,
        "runs_with_that_node": runs,
    }


def _ts(event: dict[str, Any]) -> float:
    return float(event.get("ts", 0.0))


def key(graph: str, prompt_length: int, *, adapter: str, capture: bool) -> str:
    return f"genai/graph={graph}/P={prompt_length}/adapter={adapter}/capture={'on' if capture else 'off'}"


@dataclass(frozen=True, kw_only=True)
class Load:
    """One loaded model and the adapter states it serves, in request order."""

    graph: str
    capture: bool
    adapters: tuple[str, ...]


def loads(graphs: list[str], capture_modes: list[bool], adapters: list[str], *, round_: int) -> list[Load]:
    """The models a round loads, in order: per graph and capture mode one model for every adapter state
    without capture, one per state with it (#2740). Round 2 runs everything in the reverse order."""
    out = [
        Load(graph=graph, capture=capture, adapters=(adapter,) if capture else tuple(adapters))
        for capture in capture_modes
        for graph in graphs
        for adapter in (adapters if capture else adapters[:1])
    ]
    if round_ % 2 == 0:
        out = [Load(graph=x.graph, capture=x.capture, adapters=x.adapters[::-1]) for x in reversed(out)]
    return out


def measure(
    setup: EpSetup,
    model_dir: Path,
    *,
    prompt_lengths: list[int],
    generate: int,
    capture_modes: list[bool],
    graphs: list[str],
    adapters: list[str],
    warmups: int,
    requests: int,
    round_: int = 1,
    profile_dir: Path | None = None,
) -> list[dict[str, Any]]:
    """Every (graph, capture, prompt length, adapter) case; each graph checked once per run. With
    ``profile_dir``, in round 1 the longest prompt's first adapter case without capture gets ``gpu_profile``
    (``profiled_request``), its onnxruntime profile kept in that folder."""
    import onnxruntime_genai as og  # noqa: PLC0415

    manifest = json.loads((model_dir / "manifest.json").read_text())
    vocab = int(manifest["shape"]["vocab"])
    targets = len(manifest["lora_targets"])
    checks = {graph: graph_check(setup, model_dir, graph, targets) for graph in graphs}
    empty_refused = ops.empty_weights_refusal(setup.ep) if "off" in adapters else None
    prompts = {p: np.random.default_rng(p).integers(3, vocab, size=p, dtype=np.int32) for p in prompt_lengths}
    # Round 1: the shortest prompt's last logits per graph and adapter, to set fused beside raw.
    prompt_logits: dict[tuple[str, str], np.ndarray] = {}
    results: list[dict[str, Any]] = []
    for load in loads(graphs, capture_modes, adapters, round_=round_):
        described = {"level": "genai", "graph": load.graph, "capture": load.capture, "graph_check": checks[load.graph]}
        if load.capture:
            described["capture_isolation"] = CAPTURE_ISOLATION
        measured = [a for a in load.adapters if not (a == "off" and empty_refused is not None)]
        results += [
            {**described, "key": key(load.graph, p, adapter="off", capture=load.capture), "prompt": p, "adapter": "off"}
            | {"generate": generate, "error": f"adapter off needs empty-weight MatMulNBits: {empty_refused}"}
            for p in prompt_lengths
            if "off" in load.adapters and empty_refused is not None
        ]
        if not measured:
            continue
        start = time.perf_counter()
        try:
            model = _model(setup, model_dir, graph=load.graph, capture=load.capture)
        except RuntimeError as exc:
            # Graph capture needs every node on the WebGPU EP; report the refusal as a result.
            case_key = f"genai/graph={load.graph}/capture={'on' if load.capture else 'off'}"
            results.append({**described, "key": case_key, "error": str(exc)})
            continue
        lora = _adapters(og, model, model_dir, measured)
        described["model_load_ms"] = (time.perf_counter() - start) * 1e3
        for prompt_length in prompt_lengths if round_ % 2 else prompt_lengths[::-1]:
            for adapter in measured:
                runs = _requests(
                    og,
                    model,
                    lora,
                    prompts[prompt_length],
                    generate=generate,
                    adapter=adapter,
                    warmups=warmups,
                    requests=requests,
                )
                results.append(
                    {
                        **described,
                        "key": key(load.graph, prompt_length, adapter=adapter, capture=load.capture),
                        "prompt": prompt_length,
                        "generate": generate,
                        "adapter": adapter,
                        **runs,
                    }
                )
        # After the requests, so that round 1's first request still meets cold shaders.
        if round_ == 1 and not load.capture:
            prompt_logits |= {
                (load.graph, a): _prompt_logits(og, model, lora, prompts[min(prompt_lengths)], adapter=a)
                for a in measured
            }
        del lora, model
        # Capture off: a replay has no node events to split the host time by.
        if profile_dir is not None and round_ == 1 and not load.capture:
            _add_gpu_profile(
                setup, model_dir, load, results, prompts=prompts, generate=generate, adapters=measured, keep=profile_dir
            )
    _add_logits_agreement(results, prompt_logits, prompt=min(prompt_lengths))
    return results


def _add_logits_agreement(
    results: list[dict[str, Any]], prompt_logits: dict[tuple[str, str], np.ndarray], *, prompt: int
) -> None:
    """``logits_vs_raw`` on every fused case of an adapter state whose prompt logits both graphs gave."""
    for (graph, adapter), fused in prompt_logits.items():
        raw = prompt_logits.get(("raw", adapter))
        if graph != "fused" or raw is None:
            continue
        agreement = logits_agreement(fused, raw) | {"prompt": prompt}
        for case in results:
            if case.get("graph") == "fused" and case.get("adapter") == adapter and "error" not in case:
                case["logits_vs_raw"] = agreement


def _adapters(og: Any, model: Any, model_dir: Path, names: list[str]) -> Any:
    """genai's adapter container of ``model`` with each named adapter of the model dir loaded (off: none)."""
    lora = og.Adapters(model)
    for name in names:
        if name != "off":
            lora.load(str(model_dir / ADAPTER_FILES[name]), name)
    return lora


def _prompt_logits(og: Any, model: Any, adapters: Any, prompt: np.ndarray, *, adapter: str) -> np.ndarray:
    """The logits of the prompt's last position after the prefill."""
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(prompt) + 1, do_sample=False)
    generator = og.Generator(model, params)
    if adapter != "off":
        generator.set_active_adapter(adapters, adapter)
    generator.append_tokens(prompt)
    logits = np.asarray(generator.get_output("logits"), dtype=np.float64)
    return logits.reshape(-1, logits.shape[-1])[-1]


def logits_agreement(fused: np.ndarray, raw: np.ndarray) -> dict[str, Any]:
    """How far the fused graph's logits are from the raw graph's (the seed reports the RMSE): RMSE, relative
    to the raw logits' RMS, the largest difference, and whether the greedy token is the same."""
    rmse = float(np.sqrt(np.mean((fused - raw) ** 2)))
    raw_rms = float(np.sqrt(np.mean(raw**2)))
    return {
        "rmse": rmse,
        "relative": rmse / raw_rms if raw_rms else float("nan"),
        "max_abs": float(np.abs(fused - raw).max()),
        "same_argmax": int(np.argmax(fused)) == int(np.argmax(raw)),
    }


def _requests(
    og: Any,
    model: Any,
    lora: Any,
    prompt: np.ndarray,
    *,
    generate: int,
    adapter: str,
    warmups: int,
    requests: int,
) -> dict[str, Any]:
    """A case's first request (cold), its warmups, then its measured requests, summed up."""
    first = _request(og, model, lora, prompt, generate, adapter=adapter)
    for _ in range(warmups):
        _request(og, model, lora, prompt, generate, adapter=adapter)
    runs = [_request(og, model, lora, prompt, generate, adapter=adapter) for _ in range(requests)]
    return {
        "first_request": first,
        "ttft_ms": [r["ttft_ms"] for r in runs],
        "decode_tok_s": [r["decode_tok_s"] for r in runs],
        "tokens": [r["tokens"] for r in runs],
        "output_sha256": sorted({r["output_sha256"] for r in runs}),
    }


def _add_gpu_profile(
    setup: EpSetup,
    model_dir: Path,
    load: Load,
    results: list[dict[str, Any]],
    *,
    prompts: dict[int, np.ndarray],
    generate: int,
    adapters: list[str],
    keep: Path,
) -> None:
    """``gpu_profile`` for the case of ``load``'s longest prompt and first adapter (not off where it has
    another), its profile kept in the folder ``keep``."""
    longest = max(prompts)
    adapter = next((a for a in adapters if a != "off"), adapters[0])
    profiled = profiled_request(
        setup,
        model_dir,
        graph=load.graph,
        prompt=prompts[longest],
        generate=generate,
        adapter=adapter,
        keep=keep / f"genai-{load.graph}-P{longest}-{adapter}.json.gz",
    )
    case_key = key(load.graph, longest, adapter=adapter, capture=False)
    next(r for r in results if r["key"] == case_key)["gpu_profile"] = profiled
