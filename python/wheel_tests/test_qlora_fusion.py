"""MatMulNBitsQLoRA fusion of the raw INT8-adapter pattern, where the wheel has the operator.

With the operator: the optimized graph holds it, fused equals unfused, and every
``session.webgpu.lora_fusion_mode`` agrees, for decode and prefill, empty and partial adapters.
Without it: the optimized graph keeps the raw pattern, which still computes the right numbers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from wheel_tests import capabilities, eps, lora, models, reference
from wheel_tests.capabilities import assert_refused

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

MODES = ("auto", "fuse_up", "fuse_down")
MODE_KEY = "session.webgpu.lora_fusion_mode"


def _session(
    ep: eps.EpKind, model: bytes, *, level: ort.GraphOptimizationLevel, dump: Path | None = None, mode: str = ""
) -> ort.InferenceSession:
    options = eps.session_options(ep, {MODE_KEY: mode} if mode else None)
    options.graph_optimization_level = level
    if dump is not None:
        options.optimized_model_filepath = str(dump)
    return eps.make_session(model, ep, options=options)


def _op_types(path: Path) -> list[str]:
    return [node.op_type for node in onnx.load(str(path)).graph.node]


def _defaults(ep: eps.EpKind) -> models.Defaults:
    return "empty" if capabilities.empty_weight_probe(ep).outcome == "ok" else "zeros"


@pytest.mark.parametrize("m", [1, 16], ids=["decode", "prefill"])
@pytest.mark.parametrize("dtype", [pytest.param(np.float32, id="fp32"), pytest.param(np.float16, id="fp16")])
def test_qlora_fusion(
    ep: eps.EpKind, dtype: type[np.floating], m: int, tmp_path: Path, record_baseline: Callable[[str], None]
) -> None:
    spec = lora.spec(dtype, "int8", defaults=_defaults(ep))
    base = lora.base_weight(dtype)
    model = models.qlora(spec, base)
    fusion_expected = (capabilities.has_qlora_schema() or capabilities.claimed("qlora")) and ep != "cpu"
    name = "fp16" if dtype == np.float16 else "fp32"
    absent = capabilities.absent_because(capabilities.matmul_nbits_probe(ep, 8, name))
    if absent is not None and not fusion_expected:
        assert_refused(lambda: _session(ep, model, level=ort.GraphOptimizationLevel.ORT_ENABLE_BASIC), absent)
        record_baseline(f"no INT8 QLoRA pattern to fuse: 8-bit MatMulNBits absent on {ep}: {absent}")
        return
    x = lora.activations(m, dtype)
    weights = lora.adapter_weights(spec, seed=3)
    tensors = models.adapter_tensors(spec, weights)
    full = lora.write_adapter(tmp_path / "full.onnx_adapter", tensors)
    # Partial: only the down projection is replaced; the zero/empty up default keeps it a no-op.
    partial_tensors = {k: v for k, v in tensors.items() if k.startswith("lora_down")}
    partial = (
        lora.write_adapter(tmp_path / "partial.onnx_adapter", partial_tensors) if spec.defaults == "zeros" else None
    )
    expected = {"off": reference.qlora(x, base, None), "full": reference.qlora(x, base, weights)}

    dump = tmp_path / "optimized.onnx"
    fused = _session(ep, model, level=ort.GraphOptimizationLevel.ORT_ENABLE_ALL, dump=dump)
    ops = _op_types(dump)
    if not fusion_expected:
        assert capabilities.QLORA_OP not in ops, ops
        assert ops.count("MatMulNBits") == 3, ops
        reason = "the CPU EP runs the raw pattern" if ep == "cpu" else f"no {capabilities.QLORA_OP} in this wheel"
        record_baseline(f"not fused ({reason}): optimized graph {ops}")
    else:
        assert capabilities.QLORA_OP in ops, ops
        assert "MatMulNBits" not in ops, ops

    unfused = _session(ep, model, level=ort.GraphOptimizationLevel.ORT_ENABLE_BASIC)
    sessions = {"default": fused, "unfused": unfused}
    if fusion_expected:
        sessions |= {
            mode: _session(ep, model, level=ort.GraphOptimizationLevel.ORT_ENABLE_ALL, mode=mode) for mode in MODES
        }
    adapters: dict[str, ort.LoraAdapter | None] = {"off": None, "full": full}
    if partial is not None:
        adapters["partial"] = partial
        expected["partial"] = expected["off"]
    for state in ("off", "full", "off", *(["partial"] if partial is not None else [])):
        outputs = {name: lora.run(s, x, adapters[state]) for name, s in sessions.items()}
        for name, y in outputs.items():
            reference.assert_close(y, expected[state], dtype=dtype)
            reference.assert_close(y, outputs["unfused"].astype(np.float64), dtype=dtype)
            assert y.shape == (m, lora.N), name
