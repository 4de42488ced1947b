"""The genai bench model's LoRA: the raw INT8 pattern the fusion matches, zero-sized defaults, two adapters.

The decoder here is a small stand-in for the model builder's output (its node names, its
``genai_config.json``, a ``past_key_values`` input giving the float type, INT4 block-32 projections
and an LM head), rewritten by ``wheel_bench.genai_model.add_lora_inputs`` and run by this
interpreter's onnxruntime on the CPU EP against a float64 reference.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from wheel_bench import genai_model, genai_run
from wheel_bench.ep import setup
from wheel_tests import reference

if TYPE_CHECKING:
    from pathlib import Path

HIDDEN, INTERMEDIATE, VOCAB = 64, 96, 128
PROJECTIONS = [
    ("/model/layers.0/attn/q_proj/MatMul_Q4", "hidden", "q", HIDDEN, HIDDEN),
    ("/model/layers.0/mlp/up_proj/MatMul_Q4", "residual", "up", HIDDEN, INTERMEDIATE),
    ("/model/layers.0/mlp/down_proj/MatMul_Q4", "up", "down", INTERMEDIATE, HIDDEN),
    ("/lm_head/MatMul_Q4", "down", "logits", HIDDEN, VOCAB),
]
"""(name, input, output, K, N) of each INT4 projection, in order; ``residual = q + hidden``."""


def _weights() -> dict[str, reference.QuantizedWeight]:
    rng = np.random.default_rng(7)
    return {
        name: reference.quantize(rng.standard_normal((k, n)) / np.sqrt(k), bits=4, zero_points=False, dtype=np.float32)
        for name, _, _, k, n in PROJECTIONS
    }


def _decoder(model_dir: Path) -> Path:
    """A decoder the way the builder lays it out, written into ``model_dir``."""
    model_dir.mkdir()
    nodes, inits = [], []
    for name, x, out, k, n in PROJECTIONS:
        w = _weights()[name]
        inits += [numpy_helper.from_array(w.packed, f"{name}.B"), numpy_helper.from_array(w.scales, f"{name}.scales")]
        inputs = [x, f"{name}.B", f"{name}.scales"]
        node = helper.make_node("MatMulNBits", inputs, [out], name=name, domain="com.microsoft")
        node.attribute.extend(
            helper.make_attribute(key, value)
            for key, value in {"K": k, "N": n, "bits": 4, "block_size": 32, "accuracy_level": 4}.items()
        )
        nodes.append(node)
        if out == "q":
            nodes.append(helper.make_node("Add", ["q", "hidden"], ["residual"], name="/model/layers.0/residual"))
    nodes.append(helper.make_node("Identity", ["past_key_values.0.key"], ["present.0.key"], name="present"))
    past = helper.make_tensor_value_info("past_key_values.0.key", TensorProto.FLOAT, [1, 2, "past", 32])
    graph = helper.make_graph(
        nodes,
        "decoder",
        [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, [1, "seq", HIDDEN]), past],
        [
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, "seq", VOCAB]),
            helper.make_tensor_value_info("present.0.key", TensorProto.FLOAT, [1, 2, "past", 32]),
        ],
        initializer=inits,
    )
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=10)
    onnx.save(model, str(model_dir / "model.onnx"), save_as_external_data=True, location="model.onnx.data")
    (model_dir / "genai_config.json").write_text(json.dumps({"model": {"decoder": {"filename": "model.onnx"}}}))
    return model_dir / "model.onnx"


@pytest.fixture(scope="module")
def decoders(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The base decoder, and the same decoder rewritten with the LoRA pattern."""
    root = tmp_path_factory.mktemp("genai-lora")
    base = _decoder(root / "base")
    adapted = _decoder(root / "adapted")
    genai_model.add_lora_inputs(adapted.parent, target="/layers.")
    return base, adapted


def _attrs(node: onnx.NodeProto) -> dict[str, object]:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def test_every_decoder_projection_gets_the_raw_int8_pattern_and_the_lm_head_none(
    decoders: tuple[Path, Path],
) -> None:
    _, adapted = decoders
    model = onnx.load(str(adapted))
    onnx.checker.check_model(model, full_check=True)
    graph = model.graph
    producers = {out: node for node in graph.node for out in node.output}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    targets = genai_model.read_targets(adapted.parent)
    assert [(t.projection, t.index, t.k, t.n, t.dtype) for t in targets] == [
        (name, i, k, n, "float32") for i, (name, _, _, k, n) in enumerate(PROJECTIONS[:3])
    ]
    initializers = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    inputs = {i.name: i for i in graph.input}
    for target, (name, x, out, k, n) in zip(targets, PROJECTIONS, strict=False):
        add = producers[out]  # the projection's old output now comes from the Add
        assert add.op_type == "Add"
        base, up = (producers[i] for i in add.input)
        assert base.name == name
        assert [c.name for c in consumers[base.output[0]]] == [add.name]  # private to the Add, as the fusion needs
        down = producers[up.input[0]]
        assert down.input[0] == base.input[0] == x
        assert [c.name for c in consumers[down.output[0]]] == [up.name]
        for node, kn in ((down, (k, 32)), (up, (32, n))):
            assert node.op_type == "MatMulNBits"
            assert node.domain == "com.microsoft"
            assert len(node.input) == 3  # implicit zero point, no bias
            attrs = _attrs(node)
            assert (attrs["K"], attrs["N"], attrs["bits"], attrs["block_size"]) == (*kn, 8, 32)
        names = target.names()
        assert list(down.input[1:]) == [names["down_b"], names["down_scales"]]
        assert list(up.input[1:]) == [names["up_b"], names["up_scales"]]
        # Overridable graph inputs whose defaults are zero-sized: adapter off is the base alone.
        assert initializers[names["down_b"]].shape == (0, k // 32, 32)
        assert initializers[names["up_b"]].shape == (0, 1, 32)
        assert initializers[names["down_scales"]].shape == initializers[names["up_scales"]].shape == (0,)
        for input_name in names.values():
            dims = inputs[input_name].type.tensor_type.shape.dim
            assert not dims[0].HasField("dim_value"), input_name  # the adapter's full size fits too
    lm_head = producers["logits"]
    assert lm_head.name == "/lm_head/MatMul_Q4"
    assert [n.name for n in graph.node].count("/lm_head/MatMul_Q4/lora_down") == 0
    assert genai_model.base_projections(adapted.parent, targets) == {
        "count": 3,
        "bits": [4],
        "block_size": [32],
        "accuracy_level": [4],
        "as_asked": True,
        "note": "INT4, block 32, accuracy level 4",
    }


def _run(model: Path, hidden: np.ndarray, adapter: Path | None = None) -> np.ndarray:
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    run_options = ort.RunOptions()
    if adapter is not None:
        lora = ort.LoraAdapter()
        lora.Load(str(adapter))
        run_options.add_active_adapter(lora)
    past = np.zeros((1, 2, 0, 32), np.float32)
    logits = session.run(["logits"], {"hidden": hidden, "past_key_values.0.key": past}, run_options)[0]
    return np.asarray(logits)


def _reference(
    hidden: np.ndarray, tensors: dict[str, np.ndarray] | None, targets: list[genai_model.LoraTarget]
) -> np.ndarray:
    """The decoder in float64, each adapted projection plus (x @ down) @ up with the adapter dequantized."""
    weights = _weights()
    values = {"hidden": hidden[0].astype(np.float64)}
    for index, (name, x, out, _, _) in enumerate(PROJECTIONS):
        y = reference.matmul_nbits(values[x], weights[name])
        if tensors is not None and index < len(targets):
            target = targets[index]
            names = target.names()
            down = reference.QuantizedWeight(
                k=target.k,
                n=32,
                bits=8,
                block=32,
                packed=tensors[names["down_b"]],
                scales=tensors[names["down_scales"]],
                zero_points=None,
            )
            up = reference.QuantizedWeight(
                k=32,
                n=target.n,
                bits=8,
                block=32,
                packed=tensors[names["up_b"]],
                scales=tensors[names["up_scales"]],
                zero_points=None,
            )
            y = y + (values[x] @ reference.dequantize(down)) @ reference.dequantize(up)
        values[out] = y
        if out == "q":
            values["residual"] = y + values["hidden"]
    logits: np.ndarray = values["logits"][None]
    return logits


def test_adapter_off_is_the_base_model_and_two_adapters_move_it_differently(
    decoders: tuple[Path, Path], tmp_path: Path
) -> None:
    base, adapted = decoders
    hidden = np.random.default_rng(3).standard_normal((1, 5, HIDDEN)).astype(np.float32)
    base_logits = _run(base, hidden)
    try:
        off = _run(adapted, hidden)
    except (RuntimeError, ort.capi.onnxruntime_pybind11_state.Fail) as exc:
        pytest.fail(f"this onnxruntime refuses zero-sized MatMulNBits weights: {exc}")
    assert np.array_equal(off, base_logits), "adapter off must be the base model, bit for bit"

    targets = genai_model.read_targets(adapted.parent)
    tensors = {
        name: genai_model.adapter_tensors(targets, up_scale=0.1, seed=seed) for name, seed in (("a", 1), ("b", 2))
    }
    assert set(tensors["a"]) == set(tensors["b"])
    assert any(not np.array_equal(tensors["a"][k], tensors["b"][k]) for k in tensors["a"])
    paths = {
        name: genai_model.write_adapter(tmp_path / f"{name}.onnx_adapter", targets, up_scale=0.1, seed=seed)
        for name, seed in (("a", 1), ("b", 2))
    }
    # The files hold exactly those tensors.
    for name, path in paths.items():
        stored = ort.AdapterFormat.read_adapter(str(path)).get_parameters()
        assert set(stored) == set(tensors[name])
        for key, value in stored.items():
            assert np.array_equal(value.numpy(), tensors[name][key]), key

    # accuracy_level 4 quantizes activations to INT8 on the CPU EP: about 1 % of the largest logit.
    def tolerance(expected: np.ndarray) -> float:
        return float(2e-2 * np.abs(expected).max())

    outputs = {}
    for name, path in paths.items():
        outputs[name] = _run(adapted, hidden, path)
        expected = _reference(hidden, tensors[name], targets)
        error = np.abs(outputs[name] - expected).max()
        assert error <= tolerance(expected), f"adapter {name}: max error {error:.3g} > {tolerance(expected):.3g}"
        moved = np.abs(outputs[name] - base_logits).max()
        assert moved > 10 * tolerance(base_logits), f"adapter {name} moves the logits by only {moved:.3g}"
    assert np.abs(outputs["a"] - outputs["b"]).max() > 10 * tolerance(base_logits)
    assert np.abs(_reference(hidden, None, targets) - base_logits).max() <= tolerance(base_logits)


def test_graph_check_counts_what_the_optimized_graph_holds(decoders: tuple[Path, Path]) -> None:
    """On the CPU EP nothing fuses: raw is what it says, fused is reported absent."""
    _, adapted = decoders
    (adapted.parent / "manifest.json").write_text(json.dumps({"lora_targets": ["x"] * 3}))
    cpu = setup("cpu")
    raw = genai_run.graph_check(cpu, adapted.parent, "raw", 3)
    assert raw == {
        "fused_nodes": 0,
        "int8_nodes": 6,
        "targets": 3,
        "ok": True,
        "note": "raw: 0/3 fused with MatMulNBitsQLoRAFusion disabled, 6 INT8 MatMulNBits",
    }
    fused = genai_run.graph_check(cpu, adapted.parent, "fused", 3)
    assert fused["ok"] is False
    assert fused["note"] == "fused: 0/3 (absent: the CPU EP keeps the raw pattern)"
    assert genai_run.session_entries("raw") == {"optimization.disable_specified_optimizers": "MatMulNBitsQLoRAFusion"}
    assert genai_run.session_entries("fused") == {}
    with pytest.raises(ValueError, match="unknown graph"):
        genai_run.session_entries("unfused")
