"""MatMulNBitsQLoRA fusion of the raw INT8-adapter pattern, where the wheel has the operator.

With the operator: the optimized graph holds it, fused equals unfused (the same wheel with
``disabled_optimizers=["MatMulNBitsQLoRAFusion"]``, and at basic optimization), and every
``session.webgpu.lora_fusion_mode`` agrees, for decode and prefill, 2-D X and batches, a base with
and without zero points, empty and partial adapters; ``auto`` picks its kernel from X's rows per
matrix, not from the batch. Without it: the optimized graph keeps the raw pattern, which still
computes the right numbers. Graph capture replays must follow an adapter switch (in a child process:
capture may crash a wheel).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from wheel_tests import capabilities, eps, lora, models, reference
from wheel_tests.capabilities import assert_refused
from wheel_tests.probes import NO_DEVICE_VALUES, run_probe

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path
    from typing import NoReturn

MODES = ("auto", "fuse_up", "fuse_down")
MODE_KEY = "session.webgpu.lora_fusion_mode"
FUSION = "MatMulNBitsQLoRAFusion"
BATCH = 3
ALL = ort.GraphOptimizationLevel.ORT_ENABLE_ALL


def _session(
    ep: eps.EpKind,
    model: bytes,
    *,
    level: ort.GraphOptimizationLevel,
    dump: Path | None = None,
    mode: str = "",
    disabled: tuple[str, ...] = (),
) -> ort.InferenceSession:
    options = eps.session_options(ep, {MODE_KEY: mode} if mode else None)
    options.graph_optimization_level = level
    if dump is not None:
        options.optimized_model_filepath = str(dump)
    return eps.make_session(model, ep, options=options, disabled_optimizers=disabled)


def _op_types(path: Path) -> list[str]:
    return [node.op_type for node in onnx.load(str(path)).graph.node]


def _defaults(ep: eps.EpKind) -> models.Defaults:
    return "empty" if capabilities.empty_weight_probe(ep).outcome == "ok" else "zeros"


# The common base (INT4 without zero points) in 2-D X and batches; a base with zero points, which the
# fused operator's kernels read through a path of their own, in 2-D X.
SHAPES = [
    pytest.param(None, 1, False, id="2d-decode"),
    pytest.param(None, 16, False, id="2d-prefill"),
    pytest.param(BATCH, 1, False, id=f"batch{BATCH}-decode"),
    pytest.param(BATCH, 16, False, id=f"batch{BATCH}-prefill"),
    pytest.param(None, 1, True, id="2d-decode-base-zp"),
    pytest.param(None, 16, True, id="2d-prefill-base-zp"),
]


@pytest.mark.parametrize(("batch", "m", "base_zero_points"), SHAPES)
@pytest.mark.parametrize("dtype", [pytest.param(np.float32, id="fp32"), pytest.param(np.float16, id="fp16")])
def test_qlora_fusion(
    ep: eps.EpKind,
    dtype: type[np.floating],
    m: int,
    *,
    batch: int | None,
    base_zero_points: bool,
    tmp_path: Path,
    absent: Callable[[str], NoReturn],
) -> None:
    spec = lora.spec(dtype, "int8", defaults=_defaults(ep), batched=batch is not None)
    base = lora.base_weight(dtype, zero_points=base_zero_points)
    model = models.qlora(spec, base)
    fusion_expected = (capabilities.has_qlora_schema() or capabilities.claimed("qlora")) and ep != "cpu"
    name = "fp16" if dtype == np.float16 else "fp32"
    refusal = capabilities.absent_because(capabilities.matmul_nbits_probe(ep, 8, name))
    if refusal is not None and not fusion_expected:
        assert_refused(lambda: _session(ep, model, level=ort.GraphOptimizationLevel.ORT_ENABLE_BASIC), refusal)
        absent(f"no INT8 QLoRA pattern to fuse: 8-bit MatMulNBits absent on {ep}: {refusal}")
    x = lora.activations(m, dtype, batch)
    weights = lora.adapter_weights(spec, seed=3)
    tensors = models.adapter_tensors(spec, weights)
    adapters: dict[str, ort.LoraAdapter | None] = {
        "off": None,
        "full": lora.write_adapter(tmp_path / "full.onnx_adapter", tensors),
    }
    # Partial adapters: only the down, or only the up projection replaced. The zero or empty default
    # of the other side keeps the update zero; the fused operator runs the base alone.
    for side in ("down", "up"):
        part = {k: v for k, v in tensors.items() if k.startswith(f"lora_{side}")}
        adapters[side] = lora.write_adapter(tmp_path / f"{side}.onnx_adapter", part)
    off = reference.qlora(x, base, None)
    expected = {"off": off, "full": reference.qlora(x, base, weights), "down": off, "up": off}

    dump = tmp_path / "optimized.onnx"
    fused = _session(ep, model, level=ALL, dump=dump)
    ops = _op_types(dump)
    not_fused = ""
    if not fusion_expected:
        assert capabilities.QLORA_OP not in ops, ops
        assert ops.count("MatMulNBits") == 3, ops
        reason = "the CPU EP runs the raw pattern" if ep == "cpu" else f"no {capabilities.QLORA_OP} in this wheel"
        not_fused = f"not fused ({reason}): optimized graph {ops}"
    else:
        assert capabilities.QLORA_OP in ops, ops
        assert "MatMulNBits" not in ops, ops

    # The unfused reference on the same wheel: every optimizer but the fusion.
    raw_dump = tmp_path / "raw.onnx"
    unfused = _session(ep, model, level=ALL, dump=raw_dump, disabled=(FUSION,))
    raw_ops = _op_types(raw_dump)
    assert capabilities.QLORA_OP not in raw_ops, raw_ops
    assert raw_ops.count("MatMulNBits") == 3, raw_ops
    basic = _session(ep, model, level=ort.GraphOptimizationLevel.ORT_ENABLE_BASIC)
    sessions = {"default": fused, "unfused": unfused, "basic": basic}
    if fusion_expected:
        sessions |= {mode: _session(ep, model, level=ALL, mode=mode) for mode in MODES}
    for state in ("off", "full", "off", "down", "full", "up"):
        outputs = {name: lora.run(s, x, adapters[state]) for name, s in sessions.items()}
        for name, y in outputs.items():
            reference.assert_close(y, expected[state], dtype=dtype)
            reference.assert_close(y, outputs["unfused"].astype(np.float64), dtype=dtype)
            assert y.shape == (*x.shape[:-1], lora.N), name
        if fusion_expected:
            # auto runs fuse_down for one row per matrix (decode, whatever the batch), else fuse_up:
            # the same dispatches, so the same bits.
            chosen = "fuse_down" if m == 1 else "fuse_up"
            np.testing.assert_array_equal(outputs["auto"], outputs[chosen], err_msg=f"auto vs {chosen} ({state})")
    if not_fused:  # the raw pattern's numbers were checked above; the fusion, this test's feature, is absent
        absent(not_fused)


@pytest.mark.parametrize("m", [1, 16], ids=["decode", "prefill"])
@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
def test_capture_replay_follows_adapter_switch(
    ep: eps.EpKind, dtype: str, m: int, absent: Callable[[str], NoReturn], not_checked: Callable[[str], NoReturn]
) -> None:
    """Buffers bound once, adapter inputs switched in place A, B, off, A: on WebGPU with graph capture on
    (every run after the first a replay), on the CPU EP uncaptured. Each run equals an uncaptured session.

    A wheel whose Python API cannot place OrtValues on the device has no way to feed a replay; that,
    is not checked; a capture refusal of a wheel without the fused operator is absent. Wrong numbers fail.
    """
    capture = ep != "cpu"
    result = run_probe(
        "qlora-capture", "--ep", ep, "--dtype", dtype, "--m", str(m), *(["--capture"] if capture else [])
    )
    assert result.outcome in {"ok", "error"}, result.describe()
    if result.outcome == "ok":
        return
    int8_absent = capabilities.absent_because(capabilities.matmul_nbits_probe(ep, 8, dtype))
    if int8_absent is not None:
        absent(f"no INT8 QLoRA pattern to capture: 8-bit MatMulNBits absent on {ep}: {int8_absent}")
    if result.detail.startswith(NO_DEVICE_VALUES):
        not_checked(f"capture replay: {result.detail}")
    assert not (capture and capabilities.claimed("qlora")), result.describe()
    assert ep != "cpu", result.describe()
    absent(f"graph capture refused: {result.detail}")
