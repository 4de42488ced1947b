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

Each case is also run with one layer, so a result carries both the per-layer time (t_L / L) and the
marginal cost of a layer ((t_L - t_1) / (L - 1)), which separates the fixed cost of a run.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from wheel_bench.genai_model import export_adapter

if TYPE_CHECKING:
    from wheel_bench.ep import EpSetup

VARIANTS = ("base", "lora_fp16", "lora_fp16_adapter", "lora_int8")
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

    @property
    def key(self) -> str:
        return f"{self.variant}/M={self.m}/K={self.k}/L={self.layers}"


def _quantized(rng: np.random.Generator, n: int, k: int, bits: int, prefix: str) -> list[onnx.TensorProto]:
    blocks = k // BLOCK
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
        elif case.variant == "lora_int8":
            inits += _quantized(rng, r, k, 8, f"a{i}") + _quantized(rng, n, r, 8, f"b{i}")
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
    elif case.variant == "lora_int8":
        total += (k * r + r * n) + 2 * ((k // BLOCK) * r + n) + 2 * m * r * 2 + 3 * 2 * m * n
    return total


def count_fused(setup: EpSetup, model: bytes) -> int:
    """How many MatMulNBitsQLoRA nodes the optimized graph holds."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "optimized.onnx"
        options = setup.session_options()
        options.optimized_model_filepath = str(path)
        import onnxruntime as ort  # noqa: PLC0415 - the worker's own runtime

        ort.InferenceSession(model, sess_options=options, providers=setup.providers())
        optimized = onnx.load(str(path), load_external_data=False)
    return sum(node.op_type == "MatMulNBitsQLoRA" for node in optimized.graph.node)


def measure(setup: EpSetup, case: OpCase, *, warmups: int, requests: int) -> dict[str, Any]:
    """Session creation, the first (cold) run, then ``requests`` timed runs after ``warmups``."""
    import onnxruntime as ort  # noqa: PLC0415 - the worker's own runtime

    model, adapter = build(case)
    start = time.perf_counter()
    session = setup.session(model)
    created = time.perf_counter() - start
    x = np.random.default_rng(1).standard_normal((case.m, case.k)).astype(np.float16)
    feeds = {"x": x}
    run_options = ort.RunOptions()
    if adapter:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "chain.onnx_adapter"
            export_adapter(path, adapter)
            lora = ort.LoraAdapter()
            lora.Load(str(path))
        run_options.add_active_adapter(lora)
    start = time.perf_counter()
    session.run(None, feeds, run_options)
    first = time.perf_counter() - start
    for _ in range(warmups):
        session.run(None, feeds, run_options)
    samples = []
    for _ in range(requests):
        start = time.perf_counter()
        (y,) = session.run(None, feeds, run_options)
        samples.append((time.perf_counter() - start) * 1e3)
    finite = bool(np.isfinite(y).all())
    result: dict[str, Any] = {
        "level": "ops",
        "key": case.key,
        "variant": case.variant,
        "m": case.m,
        "k": case.k,
        "layers": case.layers,
        "rank": case.rank,
        "session_create_ms": created * 1e3,
        "first_run_ms": first * 1e3,
        "samples_ms": samples,
        "output_finite": finite,
        "bytes_per_layer": bytes_moved(case),
    }
    if case.variant == "lora_int8" and setup.kind != "cpu":
        from wheel_bench.ep import has_schema  # noqa: PLC0415

        result["fused_nodes"] = count_fused(setup, model) if has_schema("MatMulNBitsQLoRA") else 0
    return result


def cases(*, ms: list[int], k: int, layers: int, variants: list[str]) -> list[OpCase]:
    chain_lengths = sorted({1, layers})
    return [OpCase(variant=v, m=m, k=k, layers=n) for m in ms for v in variants for n in chain_lengths]
