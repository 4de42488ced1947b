"""Op level: a chain of L INT4 MatMulNBits projections, with and without a rank-r LoRA beside each.

Each layer maps [M, K] to [M, N] with K = N, so the chain needs no reshapes and its data stays on
the device between layers; one request is one ``session.run`` with the input uploaded and the output
read back. Variants per layer:

- ``base``: MatMulNBits, 4-bit, block 32, fp16, accuracy_level 4.
- ``lora_fp16``: base + MatMul(MatMul(X, A), B) with fp16 A [K, r] and B [r, N] (unfused LoRA).
- ``lora_fp16_adapter``: the same, with A and B as overridable graph inputs (zero defaults) whose
  values come from an ``.onnx_adapter`` activated per run (``RunOptions.add_active_adapter``), the
  way genai applies adapters.
- ``lora_int8``: base + MatMulNBits(MatMulNBits(X, A8), B8) with block-32 INT8 adapters: the raw
  pattern that a wheel with ``com.microsoft.MatMulNBitsQLoRA`` fuses at the default optimization
  level. Whether it fused is read back from the optimized graph and reported.
- ``lora_int8_raw``: the same model with the fusion disabled (``disabled_optimizers``): the raw
  pattern on the same wheel, the A side of a fused-vs-raw comparison.

The INT8 variants also run with the adapter off: zero-sized adapter weights, which the fused
operator runs as the base alone and which empty-weight MatMulNBits makes legal for the raw pattern
(a wheel without it refuses or crashes, so a child process asks first: ``python -m wheel_bench.ops``).
Any case may run with WebGPU graph capture on: the input is a device buffer updated in place and
the output a device buffer read back, bound once (``run_with_iobinding``), as replay requires.

Each case is also run with one layer, so a result carries both the per-layer time (t_L / L) and the
marginal cost of a layer ((t_L - t_1) / (L - 1)), which separates the fixed cost of a run.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from wheel_bench import gpu_time
from wheel_bench.genai_model import export_adapter

if TYPE_CHECKING:
    from collections.abc import Callable

    from wheel_bench.ep import EpSetup

VARIANTS = ("base", "lora_fp16", "lora_fp16_adapter", "lora_int8", "lora_int8_raw")
INT8_VARIANTS = ("lora_int8", "lora_int8_raw")
FUSION = "MatMulNBitsQLoRAFusion"
QLORA_OP = "MatMulNBitsQLoRA"
BLOCK = 32
# IR 10 / opset 21: the stock 1.27 WebGPU wheel rejects newer IR versions.
IR_VERSION = 10
OPSETS = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]


@dataclass(frozen=True, kw_only=True)
class OpCase:
    variant: str
    m: int
    k: int
    layers: int
    rank: int = 32
    adapter: bool = True
    """INT8 variants only: off means zero-sized adapter weights."""
    capture: bool = False
    """WebGPU graph capture (``enableGraphCapture``)."""

    @property
    def key(self) -> str:
        """``variant/M=/K=/L=``, then ``/adapter=off`` and ``/capture=on`` when not the default."""
        key = f"{self.variant}/M={self.m}/K={self.k}/L={self.layers}"
        return key + ("" if self.adapter else "/adapter=off") + ("/capture=on" if self.capture else "")

    @property
    def disabled_optimizers(self) -> list[str]:
        return [FUSION] if self.variant == "lora_int8_raw" else []


def _quantized(
    rng: np.random.Generator, n: int, k: int, bits: int, prefix: str, *, empty: bool = False
) -> list[onnx.TensorProto]:
    blocks = k // BLOCK
    if empty:  # zero-sized packed weights and scales: an all-zero weight
        packed_empty = np.zeros((0, blocks, BLOCK * bits // 8), np.uint8)
        scales_empty = np.zeros(0, np.float16)
        return [
            numpy_helper.from_array(packed_empty, f"{prefix}_q"),
            numpy_helper.from_array(scales_empty, f"{prefix}_s"),
        ]
    packed = rng.integers(0, 256, size=(n, blocks, BLOCK * bits // 8), dtype=np.uint8)
    # Scales keep activations near unit size through the chain (int4 values have std ~4.6, int8 ~74).
    spread = 4.6 if bits == 4 else 74.0
    scales = np.full(n * blocks, 1.0 / (spread * np.sqrt(k)), dtype=np.float16)
    return [numpy_helper.from_array(packed, f"{prefix}_q"), numpy_helper.from_array(scales, f"{prefix}_s")]


def _matmul_nbits(x: str, prefix: str, out: str, *, n: int, k: int, bits: int) -> onnx.NodeProto:
    return helper.make_node(
        "MatMulNBits",
        [x, f"{prefix}_q", f"{prefix}_s"],
        [out],
        domain="com.microsoft",
        K=k,
        N=n,
        bits=bits,
        block_size=BLOCK,
        accuracy_level=4,
        name=f"{prefix}_mmnb",
    )


def build(case: OpCase, seed: int = 0) -> tuple[bytes, dict[str, np.ndarray]]:
    """The ONNX model of ``case`` as bytes, and the adapter parameters it takes (if any)."""
    rng = np.random.default_rng(seed)
    k = n = case.k
    r = case.rank
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [case.m, k])]
    adapter: dict[str, np.ndarray] = {}
    x = "x"
    for i in range(case.layers):
        base_out = f"y{i}" if case.variant == "base" else f"base{i}"
        inits += _quantized(rng, n, k, 4, f"w{i}")
        nodes.append(_matmul_nbits(x, f"w{i}", base_out, n=n, k=k, bits=4))
        if case.variant in {"lora_fp16", "lora_fp16_adapter"}:
            a = (rng.standard_normal((k, r)) / np.sqrt(k)).astype(np.float16)
            b = (rng.standard_normal((r, n)) / np.sqrt(r) * 0.1).astype(np.float16)
            if case.variant == "lora_fp16_adapter":
                adapter |= {f"a{i}": a, f"b{i}": b}
                a, b = np.zeros_like(a), np.zeros_like(b)
                inputs += [
                    helper.make_tensor_value_info(f"a{i}", TensorProto.FLOAT16, [k, r]),
                    helper.make_tensor_value_info(f"b{i}", TensorProto.FLOAT16, [r, n]),
                ]
            inits += [numpy_helper.from_array(a, f"a{i}"), numpy_helper.from_array(b, f"b{i}")]
            nodes += [
                helper.make_node("MatMul", [x, f"a{i}"], [f"down{i}"], name=f"down{i}"),
                helper.make_node("MatMul", [f"down{i}", f"b{i}"], [f"up{i}"], name=f"up{i}"),
                helper.make_node("Add", [base_out, f"up{i}"], [f"y{i}"], name=f"add{i}"),
            ]
        elif case.variant in INT8_VARIANTS:
            off = not case.adapter
            inits += _quantized(rng, r, k, 8, f"a{i}", empty=off) + _quantized(rng, n, r, 8, f"b{i}", empty=off)
            nodes += [
                _matmul_nbits(x, f"a{i}", f"down{i}", n=r, k=k, bits=8),
                _matmul_nbits(f"down{i}", f"b{i}", f"up{i}", n=n, k=r, bits=8),
                helper.make_node("Add", [base_out, f"up{i}"], [f"y{i}"], name=f"add{i}"),
            ]
        elif case.variant != "base":
            msg = f"unknown variant {case.variant!r}"
            raise ValueError(msg)
        x = f"y{i}"
    graph = helper.make_graph(
        nodes,
        "chain",
        inputs,
        [helper.make_tensor_value_info(x, TensorProto.FLOAT16, [case.m, n])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=OPSETS, ir_version=IR_VERSION)
    return model.SerializeToString(), adapter


def bytes_moved(case: OpCase) -> int:
    """Bytes one layer must read and write at least: weights, scales, activations, adapter traffic."""
    k = n = case.k
    m, r = case.m, case.rank
    act = 2 * m * (k + n)
    total = k * n // 2 + (k // BLOCK) * n * 2 + act
    if case.variant in {"lora_fp16", "lora_fp16_adapter"}:
        total += 2 * (k * r + r * n) + 2 * m * r * 2 + 3 * 2 * m * n
    elif case.variant in INT8_VARIANTS and case.adapter:
        total += (k * r + r * n) + 2 * ((k // BLOCK) * r + n) + 2 * m * r * 2 + 3 * 2 * m * n
    return total


def count_fused(setup: EpSetup, model: bytes, *, disabled_optimizers: list[str]) -> int:
    """How many MatMulNBitsQLoRA nodes the optimized graph holds."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "optimized.onnx"
        options = setup.session_options()
        options.optimized_model_filepath = str(path)
        import onnxruntime as ort  # noqa: PLC0415 - the worker's own runtime

        ort.InferenceSession(
            model, sess_options=options, providers=setup.providers(), disabled_optimizers=disabled_optimizers
        )
        optimized = onnx.load(str(path), load_external_data=False)
    return sum(node.op_type == QLORA_OP for node in optimized.graph.node)


def fusion(setup: EpSetup, case: OpCase, model: bytes) -> tuple[int, str]:
    """Fused nodes in the optimized graph of an INT8 case, and what that means for the row."""
    from wheel_bench.ep import has_schema  # noqa: PLC0415

    if not has_schema(QLORA_OP):
        return 0, f"absent: no {QLORA_OP} in this onnxruntime"
    fused = count_fused(setup, model, disabled_optimizers=case.disabled_optimizers)
    if case.disabled_optimizers:
        return fused, f"disabled: {fused}/{case.layers} fused with {FUSION} off"
    if fused == 0:
        return 0, "absent: the optimized graph keeps the raw pattern" + (" (CPU EP)" if setup.kind == "cpu" else "")
    return fused, f"{fused}/{case.layers} fused"


def _runner(
    setup: EpSetup, case: OpCase, model: bytes, x: np.ndarray, run_options: Any, *, profile_prefix: str | None = None
) -> tuple[Any, Callable[[], np.ndarray]]:
    """The session of ``case`` and one request: upload ``x``, run, read the output back."""
    import onnxruntime as ort  # noqa: PLC0415 - the worker's own runtime

    session = setup.session(
        model, graph_capture=case.capture, disabled_optimizers=case.disabled_optimizers, profile_prefix=profile_prefix
    )
    if not case.capture:
        return session, lambda: np.asarray(session.run(None, {"x": x}, run_options)[0])
    # Replay re-issues the buffers recorded at capture: bind fixed device buffers, update them in place.
    x_value = ort.OrtValue.ortvalue_from_numpy(x, "webgpu", 0)
    y_value = ort.OrtValue.ortvalue_from_shape_and_type((case.m, case.k), np.float16, "webgpu", 0)
    binding = session.io_binding()
    binding.bind_ortvalue_input("x", x_value)
    binding.bind_ortvalue_output(session.get_outputs()[0].name, y_value)

    def request() -> np.ndarray:
        x_value.update_inplace(x)
        session.run_with_iobinding(binding, run_options)
        return np.asarray(binding.copy_outputs_to_cpu()[0])

    return session, request


def why_not_measured(setup: EpSetup, case: OpCase, empty_weights_refused: str | None) -> str | None:
    """What this wheel and EP cannot run of ``case``, known before a session is made."""
    if case.capture and setup.kind == "cpu":
        return "graph capture is a WebGPU provider option; the CPU EP has none"
    if not case.adapter and empty_weights_refused is not None:
        return f"adapter off needs empty-weight MatMulNBits: {empty_weights_refused}"
    return None


EMPTY_WEIGHTS_OK = "adapter off equals base"


def empty_weights_refusal(ep: str) -> str | None:
    """None when this wheel runs a chain with zero-sized INT8 adapters, else how it refused.

    Stock wheels reject such weights, several by crashing, so the try runs in a child process.
    """
    argv = [sys.executable, "-m", "wheel_bench.ops", ep]
    return refusal_of(subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False))


def refusal_of(done: subprocess.CompletedProcess[str]) -> str | None:
    """None when the empty-adapter child passed, else how it refused."""
    # A child that printed its verdict and then died while exiting (a runtime's teardown) answered.
    if done.returncode == 0 or done.stdout.strip().endswith(EMPTY_WEIGHTS_OK):
        return None
    if done.returncode < 0:
        return f"the probe died of signal {-done.returncode}"
    return (done.stderr.strip().splitlines() or [f"the probe exited {done.returncode}"])[-1]


def _describe(case: OpCase) -> dict[str, Any]:
    return {
        "level": "ops",
        "key": case.key,
        "variant": case.variant,
        "m": case.m,
        "k": case.k,
        "layers": case.layers,
        "rank": case.rank,
        "adapter": case.adapter,
        "capture": case.capture,
    }


def measure(
    setup: EpSetup, case: OpCase, *, warmups: int, requests: int, empty_weights_refused: str | None = None
) -> dict[str, Any]:
    """Session creation, the first (cold) run, then ``requests`` timed runs after ``warmups``.

    A case this wheel cannot run is returned with an ``error`` that says why, not measured.
    """
    reason = why_not_measured(setup, case, empty_weights_refused)
    if reason is not None:
        return {**_describe(case), "error": reason}
    try:
        return _measure(setup, case, warmups=warmups, requests=requests)
    except (RuntimeError, ValueError) as exc:  # onnxruntime's refusals (e.g. of capture on this wheel)
        if not case.capture:
            raise
        return {**_describe(case), "error": (str(exc).strip().splitlines() or [type(exc).__name__])[0]}


def _measure(setup: EpSetup, case: OpCase, *, warmups: int, requests: int) -> dict[str, Any]:
    import onnxruntime as ort  # noqa: PLC0415 - the worker's own runtime

    model, adapter = build(case)
    x = np.random.default_rng(1).standard_normal((case.m, case.k)).astype(np.float16)
    run_options = ort.RunOptions()
    if adapter:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "chain.onnx_adapter"
            export_adapter(path, adapter)
            lora = ort.LoraAdapter()
            lora.Load(str(path))
        run_options.add_active_adapter(lora)
    start = time.perf_counter()
    _, request = _runner(setup, case, model, x, run_options)
    created = time.perf_counter() - start
    start = time.perf_counter()
    request()
    first = time.perf_counter() - start
    for _ in range(warmups):
        request()
    samples = []
    host_cpu = []  # the calling thread's CPU time: what the host computes per run, apart from waiting
    for _ in range(requests):
        # The CPU clock is read outside the wall clock's span, so the wall time does not include its reads.
        start_cpu = time.thread_time()
        start = time.perf_counter()
        y = request()
        wall = time.perf_counter() - start
        host_cpu.append((time.thread_time() - start_cpu) * 1e3)
        samples.append(wall * 1e3)
    finite = bool(np.isfinite(y).all())
    result: dict[str, Any] = {
        **_describe(case),
        "session_create_ms": created * 1e3,
        "first_run_ms": first * 1e3,
        "samples_ms": samples,
        "host_cpu_ms": host_cpu,
        "output_finite": finite,
        "bytes_per_layer": bytes_moved(case),
    }
    if case.variant in INT8_VARIANTS:
        result["fused_nodes"], result["fusion"] = fusion(setup, case, model)
    result["gpu"] = _gpu_times(setup, case, model, x, run_options, warmups=warmups, requests=requests)
    return result


def _gpu_times(
    setup: EpSetup, case: OpCase, model: bytes, x: np.ndarray, run_options: Any, *, warmups: int, requests: int
) -> dict[str, Any]:
    """The case's dispatches timed on the GPU (``gpu_time``), or why not. With capture on these are the
    replays' dispatches: the capturing run encodes them untimed and replays them once, timed."""
    return gpu_time.measure(
        setup.kind,
        lambda prefix: _runner(setup, case, model, x, run_options, profile_prefix=prefix),
        warmups=warmups,
        requests=requests,
    )


def cases(
    *, ms: list[int], k: int, layers: int, variants: list[str], adapters: list[bool], captures: list[bool]
) -> list[OpCase]:
    """Every variant per M, capture mode and chain length; the INT8 variants per adapter mode too."""
    chain_lengths = sorted({1, layers})
    return [
        OpCase(variant=v, m=m, k=k, layers=n, adapter=adapter, capture=capture)
        for m in ms
        for capture in captures
        for v in variants
        for adapter in (adapters if v in INT8_VARIANTS else [True])
        for n in chain_lengths
    ]


def main(argv: list[str] | None = None) -> int:
    """The empty-adapter check ``empty_weights_refusal`` runs: one small adapter-off layer, output = base."""
    from wheel_bench import ep  # noqa: PLC0415

    setup = ep.setup((sys.argv[1:] if argv is None else argv)[0])
    case = OpCase(variant="lora_int8", m=2, k=64, layers=1, adapter=False)
    x = np.random.default_rng(1).standard_normal((case.m, case.k)).astype(np.float16)
    (y,) = setup.session(build(case)[0]).run(None, {"x": x})
    (base,) = setup.session(build(OpCase(variant="base", m=2, k=64, layers=1))[0]).run(None, {"x": x})
    if not np.array_equal(y, base):
        print(f"adapter off differs from base: max {np.abs(y - base).max()}", file=sys.stderr)
        return 1
    print(EMPTY_WEIGHTS_OK, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
