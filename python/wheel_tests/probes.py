"""Probes that may crash the process, run in a child: ``python -m wheel_tests.probes NAME --ep EP``.

Stock wheels segfault on some inputs (zero-sized MatMulNBits weights), so anything that may take
the interpreter down runs here. The child prints one JSON line; the parent reads it, or the signal.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Literal, cast

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

Outcome = Literal["ok", "error", "crash", "mismatch"]
PROBE_TIMEOUT_S = 300


@dataclass(frozen=True, kw_only=True)
class ProbeResult:
    outcome: Outcome
    """ok: ran and matched; error: refused with an exception; crash: killed by a signal; mismatch: wrong numbers."""
    detail: str
    exit_crash: str | None = None
    """The signal that killed the child after it had answered (a runtime's teardown), if one did."""

    def describe(self) -> str:
        text = f"{self.outcome}: {self.detail}" if self.detail else self.outcome
        return f"{text}; then {self.exit_crash} at process exit" if self.exit_crash else text


def run_probe(name: str, *args: str) -> ProbeResult:
    """Run probe ``name`` in a child interpreter and classify how it ended."""
    argv = [sys.executable, "-m", "wheel_tests.probes", name, *args]
    return classify(subprocess.run(argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False))


def classify(done: subprocess.CompletedProcess[str]) -> ProbeResult:
    """How a probe child ended: its printed verdict, a crash, or an error."""
    lines = done.stdout.strip().splitlines()
    if done.returncode < 0:
        crash = signal.Signals(-done.returncode).name
        if not lines:
            return ProbeResult(outcome="crash", detail=crash)
        # The probe answered, then the process died while exiting (a runtime's teardown): keep the
        # answer, and say so, since that crash is a defect of its own.
        data = json.loads(lines[-1])
        return ProbeResult(outcome=data["outcome"], detail=data["detail"], exit_crash=crash)
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return ProbeResult(outcome="error", detail=f"probe exited {done.returncode}: {tail}")
    data = json.loads(lines[-1])
    return ProbeResult(outcome=data["outcome"], detail=data["detail"])


def first_line(exc: BaseException) -> str:
    """The root cause's first line: ORT's Python layer re-raises an EP failure as a CPU retry's error."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _device(ep: str, _: argparse.Namespace) -> tuple[Outcome, str]:
    """A tiny Add on the EP, CPU fallback off: does the EP have a working device?"""
    from onnx import TensorProto, helper  # noqa: PLC0415 - the child imports what its probe needs

    from wheel_tests import eps, models  # noqa: PLC0415

    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "x"], ["y"])],
        "device_probe",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
    )
    model = helper.make_model(graph, opset_imports=[models.OPSETS[0]], ir_version=models.IR_VERSION)
    session = eps.make_session(model.SerializeToString(), cast("eps.EpKind", ep))
    x = np.arange(4, dtype=np.float32)
    (y,) = session.run(None, {"x": x})
    if not np.array_equal(y, 2 * x):
        return "mismatch", f"{y} != {2 * x}"
    drivers = vulkan_drivers_loaded()
    if len(drivers) > 1:  # the loader maps every installed driver: which one served is not known
        return "ok", f"Vulkan drivers mapped: {', '.join(drivers)}"
    return "ok", f"Vulkan driver {drivers[0]}" if drivers else ""


# Vulkan drivers by the library the loader maps: Mesa's are libvulkan_<name>.so, NVIDIA's is its GLX
# library. A lane on a machine with a GPU and lavapipe says which of them answered.
_VULKAN_DRIVER_LIBRARIES = (re.compile(r"libvulkan_\w+\.so"), re.compile(r"libGLX_nvidia\.so"))


def vulkan_drivers_loaded() -> list[str]:
    """The Vulkan driver libraries this process has mapped (Linux only; elsewhere none are named)."""
    maps = Path("/proc/self/maps")
    if not sys.platform.startswith("linux") or not maps.is_file():
        return []
    names = {Path(line.split()[-1]).name for line in maps.read_text().splitlines() if "/" in line}
    return sorted(n for n in names if any(p.match(n) for p in _VULKAN_DRIVER_LIBRARIES))


def _empty_weight(ep: str, args: argparse.Namespace) -> tuple[Outcome, str]:
    """MatMulNBits with zero-sized packed B: the output must be zeros or the broadcast bias."""
    from wheel_tests import eps, models, reference  # noqa: PLC0415

    dtype = np.float16 if args.dtype == "fp16" else np.float32
    k = n = 64
    bias: reference.FloatArray | None = np.linspace(-1, 1, n).astype(dtype) if args.bias else None
    model = models.matmul_nbits_empty_b(k=k, n=n, bits=args.bits, dtype=dtype, bias=bias)
    session = eps.make_session(model, cast("eps.EpKind", ep))
    (y,) = session.run(None, {"A": np.ones((3, k), dtype)})
    expected = np.broadcast_to(bias if bias is not None else np.zeros(n, dtype), (3, n))
    if y.shape == expected.shape and np.array_equal(y, expected):
        return "ok", f"output {y.shape} equals {'the bias' if args.bias else 'zeros'}"
    return "mismatch", f"output shape {y.shape}, max |y - expected| {np.abs(y - expected).max(initial=0)}"


def _matmul_nbits(ep: str, args: argparse.Namespace) -> tuple[Outcome, str]:
    """A small MatMulNBits of ``--bits`` against the reference: does the EP have that kernel?"""
    from wheel_tests import eps, models, reference  # noqa: PLC0415

    dtype = np.float16 if args.dtype == "fp16" else np.float32
    rng = np.random.default_rng(args.bits)
    weight = reference.quantize(rng.standard_normal((64, 32)), bits=args.bits, zero_points=False, dtype=dtype)
    session = eps.make_session(models.matmul_nbits(weight, dtype=dtype), cast("eps.EpKind", ep))
    a: reference.FloatArray = rng.standard_normal((2, 64)).astype(dtype)
    (y,) = session.run(None, {"A": a})
    try:
        reference.assert_close(y, reference.matmul_nbits(a, weight), dtype=dtype)
    except AssertionError as exc:
        return "mismatch", str(exc)
    return "ok", f"{args.bits}-bit {args.dtype} output matches the reference"


def _paged_run(ep: str, *, qk_norm: bool) -> tuple[Outcome, str]:
    """PagedAttention (with or without per-head Q/K norm) against the reference: output and caches."""
    from wheel_tests import eps, paged  # noqa: PLC0415

    inputs = paged.inputs(new_tokens=(3, 2), past=(5, 17), qk_norm=qk_norm)
    session = eps.make_session(paged.model(qk_norm=qk_norm), cast("eps.EpKind", ep))
    outputs = [np.asarray(o) for o in session.run(None, paged.feeds(inputs))]
    try:
        paged.check(outputs, inputs)
    except AssertionError as exc:
        return "mismatch", str(exc)
    return "ok", "output and caches match the reference"


def _paged_attention(ep: str, _: argparse.Namespace) -> tuple[Outcome, str]:
    """Plain PagedAttention (no Q/K norm) against the reference: is the kernel registered on the EP?"""
    return _paged_run(ep, qk_norm=False)


def _qlora_empty_defaults(ep: str, args: argparse.Namespace) -> tuple[Outcome, str]:
    """The INT8-adapter QLoRA pattern with zero-sized defaults: base-only without an adapter,
    base + adapter with one, in the same session."""
    import tempfile  # noqa: PLC0415

    from wheel_tests import eps, lora, models, reference  # noqa: PLC0415

    dtype = np.float16 if args.dtype == "fp16" else np.float32
    spec = lora.spec(dtype, "int8", defaults="empty")
    base = lora.base_weight(dtype)
    session = eps.make_session(models.qlora(spec, base), cast("eps.EpKind", ep))
    x = lora.activations(args.m, dtype)
    try:
        reference.assert_close(lora.run(session, x, None), reference.qlora(x, base, None), dtype=dtype)
    except AssertionError as exc:
        return "mismatch", f"adapter off: {exc}"
    weights = lora.adapter_weights(spec, seed=1)
    with tempfile.TemporaryDirectory() as tmp:
        adapter = lora.write_adapter(Path(tmp) / "a.onnx_adapter", models.adapter_tensors(spec, weights))
        try:
            reference.assert_close(lora.run(session, x, adapter), reference.qlora(x, base, weights), dtype=dtype)
        except AssertionError as exc:
            return "mismatch", f"adapter on: {exc}"
    return "ok", "adapter off = base, adapter on = base + adapter"


NO_DEVICE_VALUES = "no device OrtValues"
"""How the capture probe starts its refusal when the wheel's Python API cannot bind device buffers."""
NO_REPLAY = "no replay"
"""How the capture probe starts its answer when graph capture was asked for but no run was a replay."""
REPLAY_LOG = "Replaying the captured"
"""What onnxruntime's session logs (severity INFO) when a run replays a captured graph instead of executing."""
GRAPH_ID_KEY = "gpu_graph_id"
"""The run option that names the captured graph a run records or replays (one per adapter state)."""
CAPTURE_STEPS = (("off", 0), ("off", 1), ("a", 1), ("a", 0), ("b", 0), ("off", 0), ("b", 1))
"""(adapter, activations) per run: off, then on, another adapter, off again and back on. The adapter
inputs are bound only while an adapter is on, so off reads the defaults (zero-sized, or zeros) and on
and off are two graphs (``gpu_graph_id``), each captured and then replayed (``replay_verdict``); each
replay must follow X or the adapter changed in place in the buffers it was captured with."""


@contextmanager
def _stderr_to(path: Path) -> Iterator[None]:
    """Send file descriptor 2 (where onnxruntime's default log sink writes) to ``path`` for a while."""
    sys.stderr.flush()
    saved = os.dup(2)
    with path.open("ab") as sink:
        os.dup2(sink.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def replayed(path: Path, run: Callable[[], object]) -> bool:
    """Run ``run`` with the log going to ``path``: whether the session said it replayed a captured graph."""
    before = path.read_text(errors="replace").count(REPLAY_LOG) if path.exists() else 0
    with _stderr_to(path):
        run()
    return path.read_text(errors="replace").count(REPLAY_LOG) > before


def _qlora_capture(ep: str, args: argparse.Namespace) -> tuple[Outcome, str]:
    """The INT8 QLoRA pattern through buffers bound once (``run_with_iobinding``), adapter inputs switched
    by ``update_inplace`` (``CAPTURE_STEPS``): with ``--capture`` (WebGPU ``enableGraphCapture``) each adapter
    state is a graph of its own (``gpu_graph_id``), which must be captured and replayed
    (``replay_verdict``), as the session's log says. Each run must equal an uncaptured session's output and the
    reference. ``--empty``: zero-sized adapter defaults, so off runs the base alone."""
    import tempfile  # noqa: PLC0415

    import onnxruntime as ort  # noqa: PLC0415

    from wheel_tests import eps, lora, models, reference  # noqa: PLC0415

    dtype = np.float16 if args.dtype == "fp16" else np.float32
    spec = lora.spec(dtype, "int8", defaults="empty" if args.empty else "zeros")
    base = lora.base_weight(dtype)
    model = models.qlora(spec, base)
    options = eps.session_options(cast("eps.EpKind", ep))
    options.enable_mem_pattern = False  # a replay reuses the buffers of its capture
    options.log_severity_level = 1  # INFO: the session says when it replays
    provider_options = {"enableGraphCapture": "1"} if args.capture else None
    session = eps.make_session(model, cast("eps.EpKind", ep), options=options, provider_options=provider_options)
    uncaptured = eps.make_session(model, cast("eps.EpKind", ep))
    xs = [lora.activations(args.m, dtype), lora.activations(args.m, dtype, seed=2)]
    weights = {"a": lora.adapter_weights(spec, seed=1), "b": lora.adapter_weights(spec, seed=2)}
    adapters = {name: models.adapter_tensors(spec, w) for name, w in weights.items()}
    device = "cpu" if ep == "cpu" else "webgpu"
    try:
        # Copies: a CPU OrtValue wraps its array, and update_inplace writes into it.
        values = {name: ort.OrtValue.ortvalue_from_numpy(np.array(v), device, 0) for name, v in adapters["a"].items()}
        x_value = ort.OrtValue.ortvalue_from_numpy(np.array(xs[0]), device, 0)
        x_value.update_inplace(xs[0])
        y = ort.OrtValue.ortvalue_from_shape_and_type((args.m, lora.N), dtype, device, 0)
    except Exception as exc:  # noqa: BLE001 - every refusal is a result to report
        return "error", f"{NO_DEVICE_VALUES} on {device}: {first_line(exc)}"
    bindings = {"off": session.io_binding(), "on": session.io_binding()}
    for binding in bindings.values():
        binding.bind_ortvalue_input("X", x_value)
        binding.bind_ortvalue_output("Y", y)
    for name, value in values.items():
        bindings["on"].bind_ortvalue_input(name, value)
    run_options = {state: ort.RunOptions() for state in bindings}
    for graph_id, state in enumerate(bindings, start=1):
        run_options[state].add_run_config_entry(GRAPH_ID_KEY, str(graph_id))
    replays: list[int] = []
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "session.log"
        for step, (name, x_index) in enumerate(CAPTURE_STEPS, start=1):
            state = "off" if name == "off" else "on"
            x_value.update_inplace(xs[x_index])
            for key, array in adapters.get(name, {}).items():
                # Older onnxruntime (1.23 and 1.25 here) copies update_inplace's buffer as if C-contiguous.
                values[key].update_inplace(np.ascontiguousarray(array))
            if replayed(log, partial(session.run_with_iobinding, bindings[state], run_options[state])):
                replays.append(step)
            got = np.asarray(bindings[state].copy_outputs_to_cpu()[0])
            x = xs[x_index]
            (want,) = uncaptured.run(None, {"X": x, **adapters.get(name, {})})
            try:
                reference.assert_close(got, np.asarray(want).astype(np.float64), dtype=dtype)
                reference.assert_close(got, reference.qlora(x, base, weights.get(name)), dtype=dtype)
            except AssertionError as exc:
                return "mismatch", f"run {step} (adapter {name}, X {x_index}): {exc}"
    runs = " -> ".join(f"{name}/X{x_index}" for name, x_index in CAPTURE_STEPS)
    return replay_verdict(replays, capture=args.capture, runs=runs)


def graph_runs() -> dict[str, list[int]]:
    """The runs of ``CAPTURE_STEPS`` (from 1) of each captured graph: adapter off, and on."""
    runs: dict[str, list[int]] = {"off": [], "on": []}
    for step, (name, _) in enumerate(CAPTURE_STEPS, start=1):
        runs["off" if name == "off" else "on"].append(step)
    return runs


def replay_verdict(replays: list[int], *, capture: bool, runs: str) -> tuple[Outcome, str]:
    """With capture, each graph's first run records it and its last one replays it, and once it replayed
    every later run of it does (an EP may run a graph uncaptured a few times first); without, none replays.
    A capture that never replayed is an answer of its own."""
    if not capture:
        if replays:
            return "mismatch", f"runs {replays} replayed a graph, with capture off ({runs})"
        return "ok", f"uncaptured: {runs} followed every switch"
    if not replays:
        return "error", f"{NO_REPLAY}: graph capture on, but the session replayed none of {runs}"
    for graph, steps in graph_runs().items():
        replayed_steps = [step for step in steps if step in replays]
        first = steps.index(replayed_steps[0]) if replayed_steps else len(steps)
        if first == 0 or first == len(steps) or replayed_steps != steps[first:]:
            return "mismatch", f"runs {replays} replayed; the {graph} graph's runs {steps} must end in replays"
    return "ok", f"captured, then replayed runs {replays}: {runs} followed every switch"


def _qk_norm(ep: str, _: argparse.Namespace) -> tuple[Outcome, str]:
    """PagedAttention with per-head Q/K RMSNorm weights against the reference (output and caches)."""
    return _paged_run(ep, qk_norm=True)


PROBES: dict[str, Callable[[str, argparse.Namespace], tuple[Outcome, str]]] = {
    "device": _device,
    "empty-weight": _empty_weight,
    "matmul-nbits": _matmul_nbits,
    "paged-attention": _paged_attention,
    "qlora-capture": _qlora_capture,
    "qlora-empty-defaults": _qlora_empty_defaults,
    "qk-norm": _qk_norm,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m wheel_tests.probes")
    parser.add_argument("probe", choices=sorted(PROBES))
    parser.add_argument("--ep", required=True)
    parser.add_argument("--dtype", choices=["fp32", "fp16"], default="fp32")
    parser.add_argument("--bits", type=int, choices=[4, 8], default=4)
    parser.add_argument("--bias", action="store_true")
    parser.add_argument("--m", type=int, default=1)
    parser.add_argument("--capture", action="store_true", help="WebGPU graph capture on")
    parser.add_argument("--empty", action="store_true", help="zero-sized adapter defaults")
    args = parser.parse_args(argv)
    try:
        outcome, detail = PROBES[args.probe](args.ep, args)
    except Exception as exc:  # noqa: BLE001 - every refusal is a result to report
        outcome, detail = "error", first_line(exc)
    print(json.dumps({"outcome": outcome, "detail": detail}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
