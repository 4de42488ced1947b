"""The raw QLoRA pattern (INT4 base + rank-32 adapter + Add) with adapters switched per run."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pytest

from wheel_tests import capabilities, eps, lora, models, reference
from wheel_tests.capabilities import assert_refused
from wheel_tests.probes import first_line, run_probe

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path
    from typing import NoReturn

# Pairwise over adapter form/layout, dtype and M (decode, prefill): each pair of levels appears.
CASES = [
    pytest.param("float", "original", np.float32, 1, id="float-original-fp32-decode"),
    pytest.param("float", "original", np.float16, 16, id="float-original-fp16-prefill"),
    pytest.param("float", "transposed", np.float32, 16, id="float-transposed-fp32-prefill"),
    pytest.param("float", "transposed", np.float16, 1, id="float-transposed-fp16-decode"),
    pytest.param("int8", "original", np.float32, 1, id="int8-fp32-decode"),
    pytest.param("int8", "original", np.float16, 16, id="int8-fp16-prefill"),
    pytest.param("int8", "transposed", np.float16, 1, id="int8-transposed-fp16-decode"),
    pytest.param("int8", "transposed", np.float32, 16, id="int8-transposed-fp32-prefill"),
]
DTYPES = [pytest.param(np.float32, id="fp32"), pytest.param(np.float16, id="fp16")]


def _name(dtype: type[np.floating]) -> str:
    return "fp16" if dtype == np.float16 else "fp32"


@pytest.mark.parametrize(("form", "layout", "dtype", "m"), CASES)
def test_adapters_on_off_switching(
    ep: eps.EpKind,
    *,
    dtype: type[np.floating],
    form: models.AdapterForm,
    layout: models.Layout,
    m: int,
    tmp_path: Path,
    absent: Callable[[str], NoReturn],
) -> None:
    spec = lora.spec(dtype, form, layout=layout)
    base = lora.base_weight(dtype)
    model = models.qlora(spec, base)
    refusal = (
        capabilities.absent_because(capabilities.matmul_nbits_probe(ep, 8, _name(dtype))) if form == "int8" else None
    )
    if refusal is not None:
        assert_refused(lambda: eps.make_session(model, ep), refusal)
        absent(f"the INT8 QLoRA pattern needs 8-bit MatMulNBits, absent on {ep}: {refusal}")
    has_operator = capabilities.has_qlora_schema() or capabilities.claimed("qlora")
    if form == "int8" and layout == "transposed" and ep != "cpu" and not has_operator:
        # Unfused, the block-major adapters need a uint8 Transpose, which a WebGPU EP may lack; a wheel
        # with the fused operator must run them (its fusion absorbs the Transposes).
        try:
            session = eps.make_session(model, ep)
        except eps.SilentFallbackError:
            raise
        except Exception as exc:  # noqa: BLE001 - onnxruntime refuses with several exception types
            absent(f"block-major INT8 adapters unfused on {ep}: {first_line(exc)}")
    else:
        session = eps.make_session(model, ep)
    x = lora.activations(m, dtype)
    weights = {name: lora.adapter_weights(spec, seed) for name, seed in (("a", 1), ("b", 2))}
    adapters = {
        name: lora.write_adapter(tmp_path / f"{name}.onnx_adapter", models.adapter_tensors(spec, w))
        for name, w in weights.items()
    }
    expected = {name: reference.qlora(x, base, w) for name, w in weights.items()}
    expected["off"] = reference.qlora(x, base, None)
    # The adapters must move the output, or "on" and "off" would not be told apart.
    for name in ("a", "b"):
        with pytest.raises(AssertionError):
            reference.assert_close(expected[name], expected["off"], dtype=dtype)
    for name in ("off", "a", "off", "b", "a", "off"):
        y = lora.run(session, x, adapters.get(name))
        reference.assert_close(y, expected[name], dtype=dtype, what=f"adapter {name}")


@pytest.mark.parametrize("m", [1, 16], ids=["decode", "prefill"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_empty_adapter_defaults(
    ep: eps.EpKind, dtype: type[np.floating], m: int, absent: Callable[[str], NoReturn]
) -> None:
    """INT8 adapters with zero-sized packed defaults: base-only when off, base + adapter when on.

    A wheel without empty-weight MatMulNBits must refuse the model (an error or a crash, in a child
    process); wrong numbers are a failure either way.
    """
    args = ["--ep", ep, "--dtype", "fp16" if dtype == np.float16 else "fp32", "--m", str(m)]
    result = run_probe("qlora-empty-defaults", *args)
    supported = capabilities.empty_weight_probe(ep).outcome == "ok"
    if supported:
        assert result.outcome == "ok", result.describe()
    else:
        assert result.outcome in {"error", "crash"}, result.describe()
        absent(f"empty adapter defaults refused: {result.describe()}")


def _overwriting_matmul_nbits(a: reference.FloatArray, w: reference.QuantizedWeight, lanes: int) -> np.ndarray:
    """A kernel that splits K blocks over ``lanes`` and writes each block's sum with ``=`` in place of ``+=``:
    only the last block of each lane is left."""
    kept = range(max(w.blocks - lanes, 0), w.blocks)
    rows = np.concatenate([np.arange(kb * w.block, (kb + 1) * w.block) for kb in kept])
    result: np.ndarray = a.astype(np.float64)[:, rows] @ reference.dequantize(w)[rows]
    return result


@pytest.mark.parametrize("dtype", DTYPES)
def test_overwritten_accumulation_shows_at_k_2048(dtype: type[np.floating]) -> None:
    """Why K = 2048: with 32 lanes per output (the fused down projection's split), K = 1024 gives each lane one
    block, so an accumulator overwritten instead of added to computes the right numbers; at K = 2048 it is
    caught."""
    rng = np.random.default_rng(5)
    for k, caught in ((1024, False), (lora.K, True)):
        w = reference.quantize(rng.standard_normal((k, lora.N)), bits=4, zero_points=False, dtype=dtype)
        a: reference.FloatArray = rng.standard_normal((4, k)).astype(dtype)
        wrong = _overwriting_matmul_nbits(a, w, lanes=32)
        if caught:
            with pytest.raises(AssertionError, match="max abs error"):
                reference.assert_close(wrong, reference.matmul_nbits(a, w), dtype=dtype)
        else:
            reference.assert_close(wrong, reference.matmul_nbits(a, w), dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_block_major_reference(dtype: type[np.floating]) -> None:
    """The block-major (offline-transposed) storage stands for the same weight as MatMulNBits order, read
    block by block in its own order; the model's Transposes (perm [1, 0, 2] and [1, 0]) give MatMulNBits'
    tensors back; and rank-32 up weights (one block per output) are the same bytes in both layouts."""
    spec = lora.spec(dtype, "int8", layout="transposed")
    weights = lora.adapter_weights(spec, seed=1)
    stored = models.adapter_tensors(spec, weights)
    for side, w in (("down", weights.down), ("up", weights.up)):
        assert isinstance(w, reference.QuantizedWeight)
        block_major = reference.BlockMajor(
            packed=np.asarray(stored[f"lora_{side}.B"], np.uint8),
            scales=np.asarray(stored[f"lora_{side}.scales"], dtype),
        )
        assert block_major.packed.shape == (w.blocks, w.n, 32)
        np.testing.assert_array_equal(reference.dequantize_block_major(block_major, bits=8), reference.dequantize(w))
        np.testing.assert_array_equal(block_major.packed.transpose(1, 0, 2), w.packed)
        np.testing.assert_array_equal(block_major.scales.T.reshape(-1), w.scales)
    up = weights.up
    assert isinstance(up, reference.QuantizedWeight)
    assert up.blocks == 1
    assert stored["lora_up.B"].tobytes() == up.packed.tobytes()
    assert stored["lora_up.scales"].tobytes() == up.scales.tobytes()
    # Not vacuous: down has several blocks per rank, so its two layouts are different bytes.
    down = weights.down
    assert isinstance(down, reference.QuantizedWeight)
    assert stored["lora_down.B"].tobytes() != down.packed.tobytes()
