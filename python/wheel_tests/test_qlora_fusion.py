"""MatMulNBitsQLoRA fusion of the raw INT8-adapter pattern, where the wheel has the operator.

With the operator: the optimized graph holds it and nothing of the raw pattern, fused equals unfused
(the same wheel with ``disabled_optimizers=["MatMulNBitsQLoRAFusion"]``, and at basic optimization),
and every ``session.webgpu.lora_fusion_mode`` agrees, for decode, prefill and M = 1024, 2-D X and
batches, a base with and without zero points and bias, adapters in MatMulNBits order and stored
block-major behind Transposes (opset 13 and 23/24: the fused node absorbs them and reads the stored
layout), empty and partial adapters; ``auto`` picks its kernel from X's rows per matrix, not from the
batch. K = 2048 and N = 300 (``lora``): several K blocks per lane and partial output tiles. fp16 decode
gives the unfused graph's bits, as the seed's fused kernels do. Without
the operator: the optimized graph keeps the raw pattern, which still computes the right numbers.
Graph capture replays must follow adapter switches (in a child process: capture may crash a wheel).
A run uses what its adapter holds now, though a session may keep its parameters on the device.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from wheel_bench.genai_model import export_adapter
from wheel_tests import capabilities, eps, lora, models, probes, reference
from wheel_tests.capabilities import assert_refused
from wheel_tests.probes import NO_DEVICE_VALUES, first_line, run_probe

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path
    from typing import NoReturn

    from _pytest.mark import ParameterSet

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


def _nodes(path: Path) -> list[onnx.NodeProto]:
    return list(onnx.load(str(path)).graph.node)


def _defaults(ep: eps.EpKind) -> models.Defaults:
    return "empty" if capabilities.empty_weight_probe(ep).outcome == "ok" else "zeros"


@dataclass(frozen=True, kw_only=True)
class Case:
    """One projection: X's rows, the base's extras, how the adapter is stored and the opset."""

    m: int
    batch: int | None = None
    base_zero_points: bool = False
    base_bias: bool = False
    layout: models.Layout = "original"
    opset: int = models.ONNX_OPSET
    n: int = lora.N
    accuracy_level: int = 0


def _case(dtype: type[np.floating], case: Case, name: str) -> ParameterSet:
    return pytest.param(dtype, case, id=f"{'fp16' if dtype == np.float16 else 'fp32'}-{name}")


# The common base (INT4 without zero points) in 2-D X and batches and a base with zero points (a path
# of its own in the fused kernels), for both dtypes; then, pairwise over dtype and decode/prefill: a
# base with a bias (with and without zero points: neither runs the single-dispatch decode kernel), the
# INT8 adapters stored block-major behind Transposes (Transpose-13, the pre-23 form, and Transpose-23/24,
# whose newer since-versions a fusion must also absorb), and M = 1024 (a few: slow on lavapipe).
CASES = (
    [
        _case(dtype, case, name)
        for dtype in (np.float32, np.float16)
        for case, name in (
            (Case(m=1), "2d-decode"),
            (Case(m=16), "2d-prefill"),
            (Case(m=1, batch=BATCH), f"batch{BATCH}-decode"),
            (Case(m=16, batch=BATCH), f"batch{BATCH}-prefill"),
            (Case(m=1, base_zero_points=True), "2d-decode-base-zp"),
            (Case(m=16, base_zero_points=True), "2d-prefill-base-zp"),
        )
    ]
    + [
        _case(np.float32, Case(m=1, base_bias=True), "2d-decode-base-bias"),
        _case(np.float16, Case(m=16, base_bias=True), "2d-prefill-base-bias"),
        _case(np.float16, Case(m=1, base_bias=True, base_zero_points=True), "2d-decode-base-bias-zp"),
        _case(np.float32, Case(m=16, base_bias=True, base_zero_points=True), "2d-prefill-base-bias-zp"),
        _case(np.float32, Case(m=1, layout="transposed", opset=13), "transposed-opset13-decode"),
        _case(np.float16, Case(m=16, layout="transposed", opset=13), "transposed-opset13-prefill"),
        _case(np.float16, Case(m=1, layout="transposed", opset=23), "transposed-opset23-decode"),
        _case(
            np.float32,
            Case(m=16, batch=BATCH, layout="transposed", opset=24),
            f"batch{BATCH}-transposed-opset24-prefill",
        ),
        _case(np.float16, Case(m=1024), "2d-m1024"),
        _case(np.float32, Case(m=1024, base_bias=True, layout="transposed"), "2d-m1024-base-bias-transposed"),
    ]
    + [
        # Accuracy level 4 with N a multiple of 16: the base runs onnxruntime's DP4A kernels, and from 4 rows on
        # its tiled kernel, which adds the fused up projection in its output stage. M and N leave partial tiles.
        _case(np.float16, Case(m=70, n=lora.N_TILED, accuracy_level=4), "2d-m70-dp4a-tiled"),
        _case(
            np.float32,
            Case(m=1024, n=lora.N_TILED, accuracy_level=4, base_bias=True, base_zero_points=True),
            "2d-m1024-dp4a-tiled-base-bias-zp",
        ),
        _case(np.float16, Case(m=16, batch=BATCH, n=lora.N_TILED, accuracy_level=4), f"batch{BATCH}-dp4a-tiled"),
        _case(np.float32, Case(m=1, n=lora.N_TILED, accuracy_level=4), "2d-decode-dp4a-n336"),
    ]
)


def _attribute(node: onnx.NodeProto, name: str) -> int | None:
    return next((int(onnx.helper.get_attribute_value(a)) for a in node.attribute if a.name == name), None)


def _assert_fused(nodes: list[onnx.NodeProto], case: Case, *, layout_attribute: bool) -> None:
    """The optimized graph holds one fused projection and nothing of the raw pattern, reading the stored
    adapter inputs by name (still overridable), the base's bias and zero points, and (where the schema has
    ``lora_down_layout``) the layout the down adapter is stored in."""
    ops = [node.op_type for node in nodes]
    fused = [node for node in nodes if node.op_type == capabilities.QLORA_OP]
    assert len(fused) == 1, ops
    for raw in ("MatMulNBits", "Transpose", "Add"):
        assert raw not in ops, ops
    (node,) = fused
    inputs = list(node.input)
    for name in ("lora_down.B", "lora_down.scales", "lora_up.B", "lora_up.scales"):
        assert name in inputs, (name, inputs)
    if case.base_bias:
        assert "base.bias" in inputs, inputs
    if case.base_zero_points:
        assert "base.zero_points" in inputs, inputs
    if layout_attribute:
        # Down has K / 32 blocks per rank, so its two layouts are different bytes; up (rank 32, one
        # block per output) is the same bytes either way.
        assert _attribute(node, "lora_down_layout") == (1 if case.layout == "transposed" else 0), node


def _missing_pattern(ep: eps.EpKind, dtype: type[np.floating], model: bytes, case: Case) -> str | None:
    """Why a wheel without the operator cannot even run the raw pattern (after asserting it refuses), or None."""
    name = "fp16" if dtype == np.float16 else "fp32"
    refusal = capabilities.absent_because(capabilities.matmul_nbits_probe(ep, 8, name))
    if refusal is not None:
        assert_refused(lambda: _session(ep, model, level=ort.GraphOptimizationLevel.ORT_ENABLE_BASIC), refusal)
        return f"no INT8 QLoRA pattern to fuse: 8-bit MatMulNBits absent on {ep}: {refusal}"
    if case.opset != models.ONNX_OPSET or (case.layout == "transposed" and ep != "cpu"):
        # It may predate the opset (or its EP the Transpose version), or its EP may have no uint8
        # Transpose for the block-major adapters: then there is neither a pattern to run nor a fusion
        # to check. A wheel with the operator must run it (its fusion absorbs the Transposes).
        try:
            _session(ep, model, level=ort.GraphOptimizationLevel.ORT_ENABLE_BASIC)
        except Exception as exc:  # noqa: BLE001 - onnxruntime refuses with several exception types
            return f"opset {case.opset} pattern refused on {ep}: {first_line(exc)}"
    return None


def _adapters(
    spec: models.QloraSpec, weights: reference.LoraWeights, tmp_path: Path
) -> dict[str, ort.LoraAdapter | None]:
    """off, the full adapter, and partial ones: only the down, or only the up projection replaced. The
    zero or empty default of the other side keeps the update zero; the fused operator runs the base alone."""
    tensors = models.adapter_tensors(spec, weights)
    adapters: dict[str, ort.LoraAdapter | None] = {
        "off": None,
        "full": lora.write_adapter(tmp_path / "full.onnx_adapter", tensors),
    }
    for side in ("down", "up"):
        part = {k: v for k, v in tensors.items() if k.startswith(f"lora_{side}")}
        adapters[side] = lora.write_adapter(tmp_path / f"{side}.onnx_adapter", part)
    return adapters


@pytest.mark.parametrize(("dtype", "case"), CASES)
def test_qlora_fusion(
    ep: eps.EpKind,
    dtype: type[np.floating],
    case: Case,
    *,
    tmp_path: Path,
    absent: Callable[[str], NoReturn],
) -> None:
    spec = lora.spec(
        dtype,
        "int8",
        n=case.n,
        defaults=_defaults(ep),
        batched=case.batch is not None,
        layout=case.layout,
        opset=case.opset,
        accuracy_level=case.accuracy_level,
    )
    base = lora.base_weight(dtype, zero_points=case.base_zero_points, n=case.n)
    bias = lora.base_bias(dtype, case.n) if case.base_bias else None
    model = models.qlora(spec, base, bias=bias)
    fusion_expected = (capabilities.has_qlora_schema() or capabilities.claimed("qlora")) and ep != "cpu"
    if not fusion_expected:
        missing = _missing_pattern(ep, dtype, model, case)
        if missing is not None:
            absent(missing)
    x = lora.activations(case.m, dtype, case.batch)
    weights = lora.adapter_weights(spec, seed=3)
    adapters = _adapters(spec, weights, tmp_path)
    off = reference.qlora(x, base, None, bias=bias)
    expected = {"off": off, "full": reference.qlora(x, base, weights, bias=bias), "down": off, "up": off}

    dump = tmp_path / "optimized.onnx"
    fused = _session(ep, model, level=ALL, dump=dump)
    nodes = _nodes(dump)
    ops = [node.op_type for node in nodes]
    not_fused = ""
    if not fusion_expected:
        assert capabilities.QLORA_OP not in ops, ops
        assert ops.count("MatMulNBits") == 3, ops
        reason = "the CPU EP runs the raw pattern" if ep == "cpu" else f"no {capabilities.QLORA_OP} in this wheel"
        not_fused = f"not fused ({reason}): optimized graph {ops}"
    else:
        layout_attribute = "lora_down_layout" in capabilities.schema_attributes(capabilities.QLORA_OP)
        _assert_fused(nodes, case, layout_attribute=layout_attribute)

    # The unfused reference on the same wheel: every optimizer but the fusion. Unfused, block-major INT8
    # adapters need a uint8 Transpose, which the WebGPU EPs lack: that reference runs on the CPU EP.
    raw_ep: eps.EpKind = "cpu" if case.layout == "transposed" else ep
    raw_dump = tmp_path / "raw.onnx"
    unfused = _session(raw_ep, model, level=ALL, dump=raw_dump, disabled=(FUSION,))
    raw_ops = [node.op_type for node in _nodes(raw_dump)]
    assert capabilities.QLORA_OP not in raw_ops, raw_ops
    assert raw_ops.count("MatMulNBits") == 3, raw_ops
    basic = _session(raw_ep, model, level=ort.GraphOptimizationLevel.ORT_ENABLE_BASIC)
    sessions = {"default": fused, "unfused": unfused, "basic": basic}
    if fusion_expected:
        sessions |= {mode: _session(ep, model, level=ALL, mode=mode) for mode in MODES}
    for state in ("off", "full", "off", "down", "full", "up"):
        outputs = {name: lora.run(s, x, adapters[state]) for name, s in sessions.items()}
        for name, y in outputs.items():
            what = f"{name} session, adapter {state}"
            reference.assert_close(y, expected[state], dtype=dtype, quantized_x=case.accuracy_level == 4, what=what)
            reference.assert_close(
                y, outputs["unfused"].astype(np.float64), dtype=dtype, what=f"{what}, against unfused"
            )
            assert y.shape == (*x.shape[:-1], case.n), name
        if fusion_expected:
            # auto runs fuse_down for one row per matrix (decode, whatever the batch), else fuse_up:
            # the same dispatches, so the same bits.
            chosen = "fuse_down" if case.m == 1 else "fuse_up"
            np.testing.assert_array_equal(outputs["auto"], outputs[chosen], err_msg=f"auto vs {chosen} ({state})")
    if not_fused:  # the raw pattern's numbers were checked above; the fusion, this test's feature, is absent
        absent(not_fused)


@pytest.mark.parametrize("batch", [None, BATCH], ids=["2d", f"batch{BATCH}"])
@pytest.mark.parametrize("base_zero_points", [False, True], ids=["base", "base-zp"])
def test_fused_decode_equals_the_unfused_graph_bitwise(
    ep: eps.EpKind,
    batch: int | None,
    *,
    base_zero_points: bool,
    tmp_path: Path,
    absent: Callable[[str], NoReturn],
) -> None:
    """fp16 decode as the seed builds it: the base kernel's dispatch also computes T with MatMulNBits' own 8-bit
    arithmetic, and T . up is summed and added as the unfused graph's MatMulNBits and Add do, so the fused
    projection gives the unfused graph's bits (the seed checks full models against the unfused FP16 graph)."""
    if ep == "cpu" or not (capabilities.has_qlora_schema() or capabilities.claimed("qlora")):
        absent(f"no {capabilities.QLORA_OP} on this EP: nothing fused to compare")
    spec = lora.spec(np.float16, "int8", defaults=_defaults(ep), batched=batch is not None)
    base = lora.base_weight(np.float16, zero_points=base_zero_points)
    model = models.qlora(spec, base)
    x = lora.activations(1, np.float16, batch)
    adapter = lora.write_adapter(
        tmp_path / "full.onnx_adapter", models.adapter_tensors(spec, lora.adapter_weights(spec, seed=3))
    )
    fused = lora.run(_session(ep, model, level=ALL), x, adapter)
    unfused = lora.run(_session(ep, model, level=ALL, disabled=(FUSION,)), x, adapter)
    assert np.abs(fused.astype(np.float64)).max() > 0  # a real update, not two zero outputs
    np.testing.assert_array_equal(fused, unfused, err_msg="fused decode against the unfused graph")


@pytest.mark.parametrize("m", [1, 16], ids=["decode", "prefill"])
def test_run_uses_the_adapter_as_loaded_now(
    ep: eps.EpKind, m: int, *, tmp_path: Path, absent: Callable[[str], NoReturn]
) -> None:
    """A session may keep an active adapter's parameters on its device across runs; each run must still
    use what its adapters hold now. Adapter A twice (the second run from any kept copy), the same adapter
    object loaded again with B's parameters, then released and a new adapter loaded with A (it may take the
    released one's addresses), then none: each run equals the reference of its parameters. A wheel without
    the LoRA API or the pattern's 8-bit MatMulNBits has nothing to run: absent."""
    if not capabilities.has_lora_api():
        absent("no LoRA adapter API (AdapterFormat, LoraAdapter, RunOptions.add_active_adapter)")
    dtype = np.float16
    spec = lora.spec(dtype, "int8", defaults=_defaults(ep))
    base = lora.base_weight(dtype)
    model = models.qlora(spec, base)
    missing = _missing_pattern(ep, dtype, model, Case(m=m))
    if missing is not None:
        absent(missing)
    session = _session(ep, model, level=ALL)
    x = lora.activations(m, dtype)
    weights = {"A": lora.adapter_weights(spec, seed=3), "B": lora.adapter_weights(spec, seed=4)}
    files: dict[str, Path] = {}
    for name, w in weights.items():
        files[name] = tmp_path / f"{name}.onnx_adapter"
        export_adapter(files[name], models.adapter_tensors(spec, w))

    def check(adapter: ort.LoraAdapter | None, name: str | None, what: str) -> None:
        expected = reference.qlora(x, base, weights[name] if name else None)
        reference.assert_close(lora.run(session, x, adapter), expected, dtype=dtype, what=what)

    adapter = ort.LoraAdapter()
    adapter.Load(str(files["A"]))
    check(adapter, "A", "adapter A")
    check(adapter, "A", "adapter A, second run")
    adapter.Load(str(files["B"]))
    check(adapter, "B", "the same adapter object loaded again with B")
    del adapter
    replacement = ort.LoraAdapter()
    replacement.Load(str(files["A"]))
    check(replacement, "A", "a new adapter with A after the first was released")
    check(None, None, "no adapter")


# Pairwise over dtype, decode/prefill and the adapter defaults: zero-sized (off runs the base alone, so
# off and on are different dispatches) or full-size zeros.
CAPTURE_CASES = [
    pytest.param("fp32", 1, "empty", id="fp32-decode-empty"),
    pytest.param("fp16", 16, "empty", id="fp16-prefill-empty"),
    pytest.param("fp32", 16, "zeros", id="fp32-prefill-zeros"),
    pytest.param("fp16", 1, "zeros", id="fp16-decode-zeros"),
]


@pytest.mark.parametrize(("dtype", "m", "defaults"), CAPTURE_CASES)
def test_capture_replay_follows_adapter_switch(
    ep: eps.EpKind,
    dtype: str,
    m: int,
    *,
    defaults: models.Defaults,
    absent: Callable[[str], NoReturn],
    not_checked: Callable[[str], NoReturn],
) -> None:
    """Buffers bound once; adapter off, on (A), another adapter (B), off, on again, X and the adapter inputs
    changed in place (``probes.CAPTURE_STEPS``): on WebGPU with graph capture on, off and on are two
    captured graphs (``gpu_graph_id``), each recorded by its first run and replayed by its last (and by
    every run after its first replay), as the session's log says; on the CPU EP uncaptured, and no run a
    replay. Each run equals an uncaptured session and the reference.

    A wheel whose Python API cannot place OrtValues on the device has no way to feed a replay: not checked.
    Empty defaults on a wheel without empty-weight MatMulNBits, and a capture refused or never replayed on a
    wheel without the fused operator, are absent. Wrong numbers, or a replay where none was due, fail.
    """
    capture = ep != "cpu"
    args = ["--ep", ep, "--dtype", dtype, "--m", str(m)]
    args += [*(["--capture"] if capture else []), *(["--empty"] if defaults == "empty" else [])]
    result = run_probe("qlora-capture", *args)
    if result.outcome == "ok":
        return
    if defaults == "empty" and capabilities.empty_weight_probe(ep).outcome != "ok":
        assert result.outcome in {"error", "crash"}, result.describe()
        absent(f"empty adapter defaults refused: {result.describe()}")
    assert result.outcome == "error", result.describe()
    int8_absent = capabilities.absent_because(capabilities.matmul_nbits_probe(ep, 8, dtype))
    if int8_absent is not None:
        absent(f"no INT8 QLoRA pattern to capture: 8-bit MatMulNBits absent on {ep}: {int8_absent}")
    if result.detail.startswith(NO_DEVICE_VALUES):
        not_checked(f"capture replay: {result.detail}")
    has_operator = capabilities.claimed("qlora") or capabilities.has_qlora_schema()
    assert not (capture and has_operator), result.describe()
    assert ep != "cpu", result.describe()
    absent(f"graph capture refused or never replayed: {result.detail}")


def test_replay_verdict_needs_the_replays() -> None:
    """The capture probe's verdict: with capture, each graph (adapter off, on) is recorded by its first run
    and replayed by its last, and replays once it has; without, nothing replays. A capture that never
    replayed, or one graph that did not, or a replay out of turn, is not a pass."""
    assert probes.graph_runs() == {"off": [1, 2, 6], "on": [3, 4, 5, 7]}
    for replays in ([2, 4, 5, 6, 7], [6, 5, 7]):  # every run after the first; after a warm-up run
        assert probes.replay_verdict(sorted(replays), capture=True, runs="r")[0] == "ok", replays
    assert probes.replay_verdict([], capture=False, runs="r")[0] == "ok"
    outcome, detail = probes.replay_verdict([], capture=True, runs="r")
    assert (outcome, detail.startswith(probes.NO_REPLAY)) == ("error", True)
    for replays in ([2, 4, 5, 6], [2, 6], [4, 5, 7], [2, 4, 5, 7], [1, 2, 4, 5, 6, 7], [2, 3, 4, 5, 6, 7]):
        assert probes.replay_verdict(replays, capture=True, runs="r")[0] == "mismatch", replays
    assert probes.replay_verdict([2], capture=False, runs="r")[0] == "mismatch"


def test_replay_log_is_read_from_file_descriptor_2(tmp_path: Path) -> None:
    """onnxruntime's log sink writes to file descriptor 2, not to Python's sys.stderr: a line written there
    during the run is seen, and only the runs that wrote one count."""
    log = tmp_path / "session.log"
    assert probes.replayed(log, partial(os.write, 2, f"I: {probes.REPLAY_LOG} WebGpu graph\n".encode()))
    assert not probes.replayed(log, partial(os.write, 2, b"I: an ordinary run\n"))


@pytest.mark.parametrize("m", [1, 16], ids=["decode", "prefill"])
def test_capture_steps_each_change_the_output(m: int) -> None:
    """Every run of the capture probe changes X or the adapter so that the reference moves beyond the fp16
    tolerance: a replay that left the previous run's output, or read a stale buffer, cannot pass."""
    dtype = np.float16
    spec = lora.spec(dtype, "int8")
    base = lora.base_weight(dtype)
    xs = [lora.activations(m, dtype), lora.activations(m, dtype, seed=2)]
    weights = {"a": lora.adapter_weights(spec, seed=1), "b": lora.adapter_weights(spec, seed=2)}
    outputs = [reference.qlora(xs[x], base, weights.get(name)) for name, x in probes.CAPTURE_STEPS]
    for step, (previous, current) in enumerate(itertools.pairwise(outputs), start=2):
        try:
            reference.assert_close(current, previous, dtype=dtype)
        except AssertionError:
            continue
        pytest.fail(f"run {step} {probes.CAPTURE_STEPS[step - 1]} expects the output of run {step - 1}")


def _fused_node(*, bias: bool, down_layout: int) -> onnx.NodeProto:
    """A MatMulNBitsQLoRA node as the fusion writes it (the schema's input order)."""
    inputs = ["X", "base.B", "base.scales", "", "", "base.bias" if bias else ""]
    inputs += ["lora_down.B", "lora_down.scales", "lora_up.B", "lora_up.scales"]
    return onnx.helper.make_node(
        capabilities.QLORA_OP, inputs, ["Y"], domain="com.microsoft", rank=32, lora_down_layout=down_layout
    )


def test_fused_graph_check_catches_what_it_claims() -> None:
    """The fused-graph assertions, which need a wheel with the operator, hold for the graph the fusion should
    write and fail for a left-over Transpose, a wrong layout, a lost bias or a second projection."""
    transposed = Case(m=1, base_bias=True, layout="transposed", opset=23)
    good = [_fused_node(bias=True, down_layout=1)]
    _assert_fused(good, transposed, layout_attribute=True)
    _assert_fused([_fused_node(bias=False, down_layout=0)], Case(m=1), layout_attribute=True)
    transpose = onnx.helper.make_node("Transpose", ["lora_down.B"], ["t"], perm=[1, 0, 2])
    wrong: list[list[onnx.NodeProto]] = [
        [transpose, *good],
        [_fused_node(bias=True, down_layout=0)],
        [_fused_node(bias=False, down_layout=1)],
        [*good, _fused_node(bias=True, down_layout=1)],
    ]
    for nodes in wrong:
        with pytest.raises(AssertionError):
            _assert_fused(nodes, transposed, layout_attribute=True)


def test_transposed_rows_use_each_transpose_version() -> None:
    """The block-major rows' models carry Transpose-13 and the newer Transpose-23 and -24 (each opset a
    since-version of its own), so a fusion that matches only older versions cannot pass them."""
    cases = [param.values[1] for param in CASES]
    opsets = {case.opset for case in cases if isinstance(case, Case) and case.layout == "transposed"}
    assert {13, 23, 24} <= opsets
    for opset in opsets:
        spec = lora.spec(np.float32, "int8", layout="transposed", opset=opset)
        model = onnx.load_from_string(models.qlora(spec, lora.base_weight(np.float32)))
        versions = {o.domain: o.version for o in model.opset_import}
        transposes = [node for node in model.graph.node if node.op_type == "Transpose"]
        assert len(transposes) == 4
        assert onnx.defs.get_schema("Transpose", versions[""]).since_version == opset
