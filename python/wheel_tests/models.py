"""ONNX model builders (``onnx.helper``), IR version 10 so every wheel down to 1.27 loads them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy.typing as npt

    from wheel_tests.reference import FloatArray, LoraWeights, QuantizedWeight

IR_VERSION = 10
ONNX_OPSET = 21
OPSETS = (helper.make_opsetid("", ONNX_OPSET), helper.make_opsetid("com.microsoft", 1))
ELEM_TYPE: dict[type[np.floating], int] = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16}

AdapterForm = Literal["float", "int8"]
"""``float``: down/up as MatMul in the activation type. ``int8``: block-32 INT8 MatMulNBits."""
Layout = Literal["original", "transposed"]
"""``transposed``: adapters stored offline-transposed, with a Transpose in front of each weight input.

Float adapters: (r, K) and (N, r), perm [1, 0] in front of each MatMul. INT8 adapters: block-major
(``reference.BlockMajor``), perm [1, 0, 2] in front of B and [1, 0] in front of the 2-D scales."""
Defaults = Literal["zeros", "empty"]
"""Adapter defaults: zeros (rank 1 for float adapters, full size for INT8) or zero-sized (needs empty weights)."""


def _model(
    nodes: Sequence[onnx.NodeProto],
    inputs: Sequence[onnx.ValueInfoProto],
    outputs: Sequence[onnx.ValueInfoProto],
    initializers: Sequence[onnx.TensorProto] = (),
    *,
    opset: int = ONNX_OPSET,
) -> bytes:
    graph = helper.make_graph(list(nodes), "wheel_tests", list(inputs), list(outputs), list(initializers))
    opsets = [helper.make_opsetid("", opset), OPSETS[1]]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=IR_VERSION)
    onnx.checker.check_model(model)
    return bytes(model.SerializeToString())


def _tensor(name: str, array: npt.NDArray[np.generic]) -> onnx.TensorProto:
    return numpy_helper.from_array(np.ascontiguousarray(array), name)


def _nbits_node(
    name: str, a: str, w: QuantizedWeight, out: str, *, bias: str = "", zero_points: str = "", accuracy_level: int = 0
) -> onnx.NodeProto:
    inputs = [a, f"{name}.B", f"{name}.scales", zero_points, "", bias]
    while inputs and not inputs[-1]:
        inputs.pop()
    node = helper.make_node(
        "MatMulNBits",
        inputs,
        [out],
        name=name,
        domain="com.microsoft",
        K=w.k,
        N=w.n,
        bits=w.bits,
        block_size=w.block,
    )
    if accuracy_level:
        node.attribute.append(helper.make_attribute("accuracy_level", accuracy_level))
    return node


def _nbits_initializers(name: str, w: QuantizedWeight) -> list[onnx.TensorProto]:
    tensors = [_tensor(f"{name}.B", w.packed), _tensor(f"{name}.scales", w.scales)]
    if w.zero_points is not None:
        tensors.append(_tensor(f"{name}.zero_points", w.zero_points))
    return tensors


def matmul_nbits(w: QuantizedWeight, *, dtype: type[np.floating], bias: FloatArray | None = None) -> bytes:
    """Y = A @ dequant(B) (+ bias), A of shape (M, K) with M dynamic."""
    initializers = _nbits_initializers("proj", w)
    if bias is not None:
        initializers.append(_tensor("proj.bias", bias.astype(dtype)))
    node = _nbits_node(
        "proj",
        "A",
        w,
        "Y",
        bias="proj.bias" if bias is not None else "",
        zero_points="proj.zero_points" if w.zero_points is not None else "",
    )
    elem = ELEM_TYPE[dtype]
    return _model(
        [node],
        [helper.make_tensor_value_info("A", elem, ["M", w.k])],
        [helper.make_tensor_value_info("Y", elem, ["M", w.n])],
        initializers,
    )


def matmul_nbits_empty_b(*, k: int, n: int, bits: int, dtype: type[np.floating], bias: FloatArray | None) -> bytes:
    """MatMulNBits whose packed B is zero-sized on the N axis: logically an all-zero weight."""
    blob = 32 * bits // 8
    initializers = [
        _tensor("proj.B", np.zeros((0, k // 32, blob), np.uint8)),
        _tensor("proj.scales", np.ones(n * k // 32, dtype)),
    ]
    if bias is not None:
        initializers.append(_tensor("proj.bias", bias.astype(dtype)))
    node = helper.make_node(
        "MatMulNBits",
        ["A", "proj.B", "proj.scales", "", "", "proj.bias"] if bias is not None else ["A", "proj.B", "proj.scales"],
        ["Y"],
        name="proj",
        domain="com.microsoft",
        K=k,
        N=n,
        bits=bits,
        block_size=32,
    )
    elem = ELEM_TYPE[dtype]
    return _model(
        [node],
        [helper.make_tensor_value_info("A", elem, ["M", k])],
        [helper.make_tensor_value_info("Y", elem, ["M", n])],
        initializers,
    )


@dataclass(frozen=True, kw_only=True)
class QloraSpec:
    k: int
    n: int
    rank: int
    dtype: type[np.floating]
    form: AdapterForm
    layout: Layout = "original"
    defaults: Defaults = "zeros"
    batched: bool = False
    """X of shape (batch, M, K) instead of (M, K)."""
    opset: int = ONNX_OPSET
    """The default-domain opset: which Transpose version a transposed layout uses (13, 21, 23, 24)."""
    accuracy_level: int = 0
    """The base projection's: 4 lets onnxruntime quantize X to INT8 for a DP4A base kernel, as built models do."""


def adapter_tensors(spec: QloraSpec, adapter: LoraWeights) -> dict[str, npt.NDArray[np.generic]]:
    """The graph inputs an adapter overrides, by name, in the model's storage layout."""
    if spec.form == "int8":
        from wheel_tests.reference import QuantizedWeight, block_major  # noqa: PLC0415 - runtime use of a type import

        assert isinstance(adapter.down, QuantizedWeight)
        assert isinstance(adapter.up, QuantizedWeight)
        if spec.layout == "transposed":
            stored_down, stored_up = block_major(adapter.down), block_major(adapter.up)
            return {
                "lora_down.B": stored_down.packed,
                "lora_down.scales": stored_down.scales,
                "lora_up.B": stored_up.packed,
                "lora_up.scales": stored_up.scales,
            }
        return {
            "lora_down.B": adapter.down.packed,
            "lora_down.scales": adapter.down.scales,
            "lora_up.B": adapter.up.packed,
            "lora_up.scales": adapter.up.scales,
        }
    down, up = np.asarray(adapter.down, spec.dtype), np.asarray(adapter.up, spec.dtype)
    if spec.layout == "transposed":
        return {"lora_down.weight": np.ascontiguousarray(down.T), "lora_up.weight": np.ascontiguousarray(up.T)}
    return {"lora_down.weight": down, "lora_up.weight": up}


def default_adapter(spec: QloraSpec) -> dict[str, npt.NDArray[np.generic]]:
    """Adapter defaults that contribute nothing: zeros, or zero-sized packed weights."""
    rank = 0 if spec.defaults == "empty" else spec.rank
    if spec.form == "int8":
        # N and K are attributes of MatMulNBits, so a non-empty default is full-size: packed 128
        # (the implicit zero point) with zero scales is exactly zero. Empty: the N axis is zero-sized.
        down_n, up_n = rank, spec.n if rank else 0
        down_blocks, up_blocks = spec.k // 32, spec.rank // 32
        if spec.layout == "transposed":
            return {
                "lora_down.B": np.full((down_blocks, down_n, 32), 128, np.uint8),
                "lora_down.scales": np.zeros((down_blocks, down_n), spec.dtype),
                "lora_up.B": np.full((up_blocks, up_n, 32), 128, np.uint8),
                "lora_up.scales": np.zeros((up_blocks, up_n), spec.dtype),
            }
        return {
            "lora_down.B": np.full((down_n, down_blocks, 32), 128, np.uint8),
            "lora_down.scales": np.zeros(down_n * down_blocks, spec.dtype),
            "lora_up.B": np.full((up_n, up_blocks, 32), 128, np.uint8),
            "lora_up.scales": np.zeros(up_n * up_blocks, spec.dtype),
        }
    rank = min(rank, 1)  # a float default needs no more than rank 1 to be a zero update
    down = np.zeros((spec.k, rank), spec.dtype)
    up = np.zeros((rank, spec.n), spec.dtype)
    if spec.layout == "transposed":
        return {"lora_down.weight": down.T.copy(), "lora_up.weight": up.T.copy()}
    return {"lora_down.weight": down, "lora_up.weight": up}


def _transposed_inputs(names: Sequence[str], perms: Sequence[list[int]]) -> tuple[list[onnx.NodeProto], list[str]]:
    """A private Transpose in front of each stored tensor: the nodes, and the names the consumers read."""
    nodes = [
        helper.make_node("Transpose", [name], [f"{name}.t"], name=f"{name}_transpose", perm=perm)
        for name, perm in zip(names, perms, strict=True)
    ]
    return nodes, [f"{name}.t" for name in names]


def qlora(spec: QloraSpec, base: QuantizedWeight, *, bias: FloatArray | None = None) -> bytes:
    """The raw pattern the patched ORT fuses: Y = MatMulNBits_int4(X) (+ bias) + up(down(X)).

    Adapter weights are graph inputs with initializer defaults, so a LoraAdapter (or a feed)
    overrides them by name; the defaults make the adapter a no-op.
    """
    elem = ELEM_TYPE[spec.dtype]
    zero_points = "base.zero_points" if base.zero_points is not None else ""
    nodes = [
        _nbits_node(
            "base",
            "X",
            base,
            "base_out",
            zero_points=zero_points,
            bias="base.bias" if bias is not None else "",
            accuracy_level=spec.accuracy_level,
        )
    ]
    initializers = _nbits_initializers("base", base)
    if bias is not None:
        initializers.append(_tensor("base.bias", bias.astype(spec.dtype)))
    defaults = default_adapter(spec)
    transposed = spec.layout == "transposed"
    if spec.form == "int8":
        # MatMulNBits requires N and K as attributes: the INT8 form is rank-32 by construction.
        stored = ["lora_down.B", "lora_down.scales", "lora_up.B", "lora_up.scales"]
        read = stored
        if transposed:
            transposes, read = _transposed_inputs(stored, [[1, 0, 2], [1, 0], [1, 0, 2], [1, 0]])
            nodes += transposes
        nodes += [
            helper.make_node(
                "MatMulNBits",
                ["X", read[0], read[1]],
                ["lora_t"],
                name="lora_down",
                domain="com.microsoft",
                K=spec.k,
                N=spec.rank,
                bits=8,
                block_size=32,
            ),
            helper.make_node(
                "MatMulNBits",
                ["lora_t", read[2], read[3]],
                ["lora_out"],
                name="lora_up",
                domain="com.microsoft",
                K=spec.rank,
                N=spec.n,
                bits=8,
                block_size=32,
            ),
        ]
        shapes: dict[str, list[str | int | None]] = (
            {
                "lora_down.B": [spec.k // 32, None, 32],
                "lora_down.scales": [spec.k // 32, None],
                "lora_up.B": [spec.rank // 32, None, 32],
                "lora_up.scales": [spec.rank // 32, None],
            }
            if transposed
            else {
                "lora_down.B": [None, spec.k // 32, 32],
                "lora_down.scales": [None],
                "lora_up.B": [None, spec.rank // 32, 32],
                "lora_up.scales": [None],
            }
        )
        types: dict[str, int] = {"lora_down.B": TensorProto.UINT8, "lora_up.B": TensorProto.UINT8}
    else:
        down, up = "lora_down.weight", "lora_up.weight"
        if transposed:
            transposes, (down, up) = _transposed_inputs([down, up], [[1, 0], [1, 0]])
            nodes += transposes
            shapes = {"lora_down.weight": ["rank", spec.k], "lora_up.weight": [spec.n, "rank"]}
        else:
            shapes = {"lora_down.weight": [spec.k, "rank"], "lora_up.weight": ["rank", spec.n]}
        nodes += [
            helper.make_node("MatMul", ["X", down], ["lora_t"], name="lora_down"),
            helper.make_node("MatMul", ["lora_t", up], ["lora_out"], name="lora_up"),
        ]
        types = {}
    nodes.append(helper.make_node("Add", ["base_out", "lora_out"], ["Y"], name="lora_add"))
    initializers += [_tensor(name, value) for name, value in defaults.items()]
    rows: list[str] = ["batch", "M"] if spec.batched else ["M"]
    inputs = [helper.make_tensor_value_info("X", elem, [*rows, spec.k])]
    inputs += [helper.make_tensor_value_info(name, types.get(name, elem), shape) for name, shape in shapes.items()]
    outputs = [helper.make_tensor_value_info("Y", elem, [*rows, spec.n])]
    return _model(nodes, inputs, outputs, initializers, opset=spec.opset)


@dataclass(frozen=True, kw_only=True)
class PagedSpec:
    num_heads: int
    kv_heads: int
    head_size: int
    blocks: int
    block_size: int
    dtype: type[np.floating] = np.float16
    qk_norm: bool = False
    epsilon: float = 1e-6
    rotary: bool = True
    interleaved: bool = False
    packed_qkv: bool = False
    """Q, K and V in one ``query`` input of (tokens, (num_heads + 2 * kv_heads) * head_size)."""
    local_window: int = -1
    causal: bool | None = None
    """The ``is_causal`` attribute; None leaves it out (schemas before it causal only)."""


NORM_WEIGHT_SLOT = 12
"""PagedAttention's input index of ``q_norm_weight`` (``k_norm_weight`` follows)."""


def paged_attention_node(
    spec: PagedSpec, inputs: Sequence[str], outputs: Sequence[str], *, name: str
) -> onnx.NodeProto:
    """A PagedAttention node with the attributes ``spec`` implies, wired to the given input and output names."""
    attrs: dict[str, float | int] = {
        "num_heads": spec.num_heads,
        "kv_num_heads": spec.kv_heads,
        "do_rotary": int(spec.rotary),
    }
    if spec.rotary:
        attrs["rotary_interleaved"] = int(spec.interleaved)
    if spec.qk_norm:
        attrs["qk_norm_epsilon"] = spec.epsilon
    if spec.local_window != -1:
        attrs["local_window_size"] = spec.local_window
    if spec.causal is not None:
        attrs["is_causal"] = int(spec.causal)
    node = helper.make_node("PagedAttention", list(inputs), list(outputs), name=name, domain="com.microsoft")
    node.attribute.extend(helper.make_attribute(key, value) for key, value in attrs.items())
    return node


def paged_attention(spec: PagedSpec) -> bytes:
    """PagedAttention, separate or packed Q/K/V, optional RoPE and per-head Q/K RMSNorm weights as inputs."""
    elem = ELEM_TYPE[spec.dtype]
    d = spec.head_size
    cache_shape = [spec.blocks, spec.block_size, spec.kv_heads, d]
    if spec.packed_qkv:
        names = ["query", "", ""]
        inputs = [helper.make_tensor_value_info("query", elem, ["T", (spec.num_heads + 2 * spec.kv_heads) * d])]
    else:
        names = ["query", "key", "value"]
        inputs = [
            helper.make_tensor_value_info("query", elem, ["T", spec.num_heads * d]),
            helper.make_tensor_value_info("key", elem, ["T", spec.kv_heads * d]),
            helper.make_tensor_value_info("value", elem, ["T", spec.kv_heads * d]),
        ]
    names += ["key_cache", "value_cache", "cumulative_sequence_length", "past_seqlens", "block_table"]
    inputs += [
        helper.make_tensor_value_info("key_cache", elem, cache_shape),
        helper.make_tensor_value_info("value_cache", elem, cache_shape),
        helper.make_tensor_value_info("cumulative_sequence_length", TensorProto.INT32, ["B1"]),
        helper.make_tensor_value_info("past_seqlens", TensorProto.INT32, ["B"]),
        helper.make_tensor_value_info("block_table", TensorProto.INT32, ["B", "MB"]),
    ]
    if spec.rotary:
        names += ["cos_cache", "sin_cache"]
        inputs += [
            helper.make_tensor_value_info("cos_cache", elem, ["P", d // 2]),
            helper.make_tensor_value_info("sin_cache", elem, ["P", d // 2]),
        ]
    if spec.qk_norm:
        names += [""] * (NORM_WEIGHT_SLOT - len(names))  # cos/sin caches when absent, slot_mapping, head_sink
        names += ["q_norm_weight", "k_norm_weight"]
        inputs += [
            helper.make_tensor_value_info("q_norm_weight", elem, [d]),
            helper.make_tensor_value_info("k_norm_weight", elem, [d]),
        ]
    node = paged_attention_node(spec, names, ["output", "key_cache_out", "value_cache_out"], name="attention")
    outputs = [
        helper.make_tensor_value_info("output", elem, ["T", spec.num_heads * d]),
        helper.make_tensor_value_info("key_cache_out", elem, cache_shape),
        helper.make_tensor_value_info("value_cache_out", elem, cache_shape),
    ]
    return _model([node], inputs, outputs)


@dataclass(frozen=True, kw_only=True)
class GqaSpec:
    num_heads: int
    kv_heads: int
    head_size: int
    epsilon: float = 1e-6
    with_past: bool = True


def group_query_attention(spec: GqaSpec) -> bytes:
    """fp16 GroupQueryAttention with RoPE and per-head Q/K RMSNorm (inputs 14/15), BSNH, one sequence."""
    elem = TensorProto.FLOAT16
    d = spec.head_size
    past = ["past_key", "past_value"] if spec.with_past else ["", ""]
    names = ["query", "key", "value", *past, "seqlens_k", "total_sequence_length", "cos_cache", "sin_cache"]
    names += ["", "", "", "", "", "q_norm_weight", "k_norm_weight"]  # position_ids .. v_scale unused
    inputs = [
        helper.make_tensor_value_info("query", elem, ["B", "S", spec.num_heads * d]),
        helper.make_tensor_value_info("key", elem, ["B", "S", spec.kv_heads * d]),
        helper.make_tensor_value_info("value", elem, ["B", "S", spec.kv_heads * d]),
    ]
    if spec.with_past:
        inputs += [
            helper.make_tensor_value_info("past_key", elem, ["B", spec.kv_heads, "P", d]),
            helper.make_tensor_value_info("past_value", elem, ["B", spec.kv_heads, "P", d]),
        ]
    inputs += [
        helper.make_tensor_value_info("seqlens_k", TensorProto.INT32, ["B"]),
        helper.make_tensor_value_info("total_sequence_length", TensorProto.INT32, []),
        helper.make_tensor_value_info("cos_cache", elem, ["M", d // 2]),
        helper.make_tensor_value_info("sin_cache", elem, ["M", d // 2]),
        helper.make_tensor_value_info("q_norm_weight", elem, [d]),
        helper.make_tensor_value_info("k_norm_weight", elem, [d]),
    ]
    node = helper.make_node(
        "GroupQueryAttention",
        names,
        ["output", "present_key", "present_value"],
        name="gqa",
        domain="com.microsoft",
        num_heads=spec.num_heads,
        kv_num_heads=spec.kv_heads,
        do_rotary=1,
        qk_norm_epsilon=spec.epsilon,
    )
    outputs = [
        helper.make_tensor_value_info("output", elem, ["B", "S", spec.num_heads * d]),
        helper.make_tensor_value_info("present_key", elem, ["B", spec.kv_heads, "T", d]),
        helper.make_tensor_value_info("present_value", elem, ["B", spec.kv_heads, "T", d]),
    ]
    return _model([node], inputs, outputs)
