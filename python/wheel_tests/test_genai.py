"""onnxruntime-genai end to end on a tiny random-init Llama (marker ``genai``, own environment).

fp32 CPU greedy decoding must equal torch's token for token; the int4 model on WebGPU must decode
the same greedy tokens as the int4 model on CPU. The LoRA model carries the raw INT8 pattern beside
every projection with zero-sized defaults (``wheel_bench.genai_model``): adapter off decodes the base
tokens, an adapter changes them identically on CPU and WebGPU; an adapter activated after graph
capture changes the logits as it does without capture (genai's capture identity), or the baseline
is recorded. Where the wheel has ``MatMulNBitsQLoRA``: the fused graph holds one fused node per
projection and the raw graph (the fusion disabled through genai's session options) none, both
decode the same greedy tokens with logits within a stated RMSE, and an adapter activated after the
fused decode was captured is used on replay (onnxruntime-genai#2740 fails here, by name).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from wheel_bench import genai_run
from wheel_bench.genai_model import read_targets
from wheel_tests import capabilities, eps, genai_model

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path
    from typing import NoReturn

pytestmark = pytest.mark.genai
og = pytest.importorskip(
    "onnxruntime_genai", reason="the genai suite runs in its own environment (ortstack test --genai)"
)
torch = pytest.importorskip("torch", reason="the genai suite runs in its own environment (ortstack test --genai)")
transformers = pytest.importorskip("transformers", reason="the genai suite runs in its own environment")

PROMPT = "the quick brown fox"
NEW_TOKENS = 12


def _prompt_ids() -> list[int]:
    tokenizer = transformers.AutoTokenizer.from_pretrained(genai_model.hf_model())
    return list(tokenizer(PROMPT)["input_ids"])


def _greedy_generator(config: Any, ids: list[int], adapter: Path | None) -> Any:
    """A greedy generator for ``NEW_TOKENS`` after ``ids``, the adapter at ``adapter`` active, the prompt appended."""
    model = og.Model(config)
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(ids) + NEW_TOKENS, do_sample=False)
    generator = og.Generator(model, params)
    if adapter is not None:
        adapters = og.Adapters(model)
        adapters.load(str(adapter), "adapter")
        generator.set_active_adapter(adapters, "adapter")
    generator.append_tokens(ids)
    return generator


def _genai_greedy(path: Path, ids: list[int], adapter: Path | None = None) -> tuple[list[int], np.ndarray]:
    generator = _greedy_generator(og.Config(str(path)), ids, adapter)
    first_logits = np.array(generator.get_output("logits"), dtype=np.float64)
    while not generator.is_done():
        generator.generate_next_token()
    return [int(t) for t in generator.get_sequence(0)], first_logits


def test_fp32_cpu_greedy_equals_torch() -> None:
    ids = _prompt_ids()
    model = transformers.AutoModelForCausalLM.from_pretrained(genai_model.hf_model())
    with torch.no_grad():
        expected = model.generate(torch.tensor([ids]), max_new_tokens=NEW_TOKENS, do_sample=False)[0].tolist()
    tokens, _ = _genai_greedy(genai_model.genai_model("fp32", "cpu"), ids)
    assert len(tokens) == len(ids) + NEW_TOKENS
    assert tokens == expected


def test_genai_hands_unknown_session_options_to_onnxruntime_as_config_entries() -> None:
    """The raw graph rests on it (``optimization.disable_specified_optimizers``): an entry onnxruntime
    refuses on the CPU EP shows that genai passed it on, not dropped it."""
    config = og.Config(str(genai_model.genai_model("int4", "cpu")))
    config.overlay(json.dumps({"model": {"decoder": {"session_options": {eps.FALLBACK_SWITCH: "1"}}}}))
    with pytest.raises(RuntimeError, match="fallback to CPU EP has been explicitly disabled"):
        og.Model(config)


@pytest.fixture(scope="module")
def webgpu(request: pytest.FixtureRequest) -> str:
    """A WebGPU EP genai can use here (the plugin is registered with genai), or a skip with the reason."""
    from wheel_tests.plugin import requested_eps  # noqa: PLC0415

    usable = [ep for ep in requested_eps(request.config) if ep != "cpu" and capabilities.ep_status(ep).runnable]
    if not usable:
        reasons = "; ".join(f"{e}: {capabilities.ep_status(e).reason}" for e in ("webgpu", "plugin"))
        pytest.skip(f"no WebGPU EP runs here ({reasons})")
    if usable[0] == "plugin":
        import onnxruntime_ep_webgpu  # noqa: PLC0415

        og.register_execution_provider_library(eps.PROVIDER_NAME["plugin"], onnxruntime_ep_webgpu.get_library_path())
    return usable[0]


@pytest.mark.usefixtures("webgpu")
def test_int4_webgpu_greedy_equals_int4_cpu() -> None:
    ids = _prompt_ids()
    cpu_tokens, cpu_logits = _genai_greedy(genai_model.genai_model("int4", "cpu"), ids)
    gpu_tokens, gpu_logits = _genai_greedy(genai_model.genai_model("int4", "webgpu"), ids)
    assert gpu_tokens == cpu_tokens
    # fp16 on WebGPU against fp32 on CPU: measured 3% of max |logit| on lavapipe; the tokens above are
    # the real check, this bound catches a WebGPU model computing something else entirely.
    assert gpu_logits.shape == cpu_logits.shape
    assert np.abs(gpu_logits - cpu_logits).max() < 0.1 * np.abs(cpu_logits).max()


def _empty_adapters_refused(ep: eps.EpKind, dtype: str) -> str | None:
    """Why this wheel cannot run the LoRA model's zero-sized INT8 defaults on ``ep`` (adapter off), or None."""
    probe = capabilities.empty_weight_probe(ep, dtype, bits=8)
    return None if probe.outcome == "ok" else probe.describe()


def test_adapter_off_equals_base_and_on_changes_cpu_and_webgpu_alike(
    webgpu: eps.EpKind, tmp_path: Path, absent: Callable[[str], NoReturn]
) -> None:
    """LoRA as overridable graph inputs: an adapter changes the tokens the same way on CPU and WebGPU;
    off (zero-sized defaults) decodes exactly the base tokens."""
    ids = _prompt_ids()
    with_adapter: dict[str, list[int]] = {}
    refusals: dict[str, str | None] = {}
    lanes: tuple[tuple[str, eps.EpKind, str], ...] = (("cpu", "cpu", "fp32"), ("webgpu", webgpu, "fp16"))
    for ep, kind, dtype in lanes:
        base, _ = _genai_greedy(genai_model.genai_model("int4", ep), ids)
        adapted = genai_model.with_lora("int4", ep)
        adapter = genai_model.lora_adapter(adapted, tmp_path / f"{ep}.onnx_adapter", seed=1)
        with_adapter[ep], _ = _genai_greedy(adapted, ids, adapter)
        assert with_adapter[ep] != base, ep
        refusals[ep] = _empty_adapters_refused(kind, dtype)
        if refusals[ep] is None:
            off, _ = _genai_greedy(adapted, ids)
            assert off == base, ep
    assert with_adapter["webgpu"] == with_adapter["cpu"]
    refused = {ep: why for ep, why in refusals.items() if why is not None}
    if refused:
        absent(f"adapter off needs empty-weight MatMulNBits: {refused}")


def _logits_after_late_activation(capture: str, *, activate: bool, graph: str = "fused") -> np.ndarray:
    """Decode 4 base tokens (captured when ``capture`` is "1"), then maybe activate the adapter,
    then one more step: that step's logits. ``graph`` raw disables the fusion."""
    adapted = genai_model.with_lora("int4", "webgpu")
    adapter = genai_model.lora_adapter(adapted, adapted / "capture.onnx_adapter", seed=1)
    config = og.Config(str(adapted))
    webgpu_options = {"enableGraphCapture": capture, "validationMode": "basic"}
    session_options = {**genai_run.session_entries(graph), "provider_options": [{"webgpu": webgpu_options}]}
    config.overlay(json.dumps({"model": {"decoder": {"session_options": session_options}}}))
    model = og.Model(config)
    adapters = og.Adapters(model)
    adapters.load(str(adapter), "adapter")
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=32, do_sample=False)
    generator = og.Generator(model, params)
    generator.append_tokens(_prompt_ids())
    for _ in range(4):
        generator.generate_next_token()
    if activate:
        generator.set_active_adapter(adapters, "adapter")
    generator.generate_next_token()
    return np.array(generator.get_output("logits"), dtype=np.float64)


def test_adapter_activated_after_graph_capture(
    webgpu: eps.EpKind, absent: Callable[[str], NoReturn], record_feature: Callable[[capabilities.Feature], None]
) -> None:
    """Capture identity: activating an adapter after decode was captured must change the logits as
    it does without capture. A genai without the fix replays the base graph: absent."""
    refused = _empty_adapters_refused(webgpu, "fp16")
    if refused is not None:
        absent(f"decoding with the adapter off needs empty-weight MatMulNBits: {refused}")
    uncaptured = _logits_after_late_activation("0", activate=True)
    base = _logits_after_late_activation("1", activate=False)
    captured = _logits_after_late_activation("1", activate=True)
    tolerance = 1e-2 * max(np.abs(uncaptured).max(), 1.0)
    assert np.abs(uncaptured - base).max() > 10 * tolerance, "the adapter does not change these logits"
    row = f"genai capture identity (onnxruntime-genai {og.__version__})"
    difference = np.abs(captured - uncaptured).max()
    if difference <= tolerance:
        evidence = f"adapter activated after capture: max |captured - uncaptured| {difference:.2g}"
        record_feature(capabilities.Feature(name=row, state="present", evidence=evidence))
        return
    assert np.abs(captured - base).max() <= tolerance, "captured decode is neither base nor adapted"
    record_feature(capabilities.Feature(name=row, state="absent", evidence="captured decode replays the base graph"))
    absent(f"capture identity absent in onnxruntime-genai {og.__version__}: captured decode ignores the adapter")


@pytest.fixture
def qlora_webgpu(webgpu: eps.EpKind, tmp_path: Path, absent: Callable[[str], NoReturn]) -> eps.EpKind:
    """A WebGPU EP that fuses the LoRA model and runs its zero-sized adapter defaults, or absent: the
    schema alone is not enough, the EP needs the kernel (onnxruntime registers the fusion only then).
    A build that claims the operator fails instead."""
    claimed = capabilities.claimed("qlora")
    if not (capabilities.has_qlora_schema() or claimed):
        absent(f"no {capabilities.QLORA_OP} in {capabilities.wheel_set()}: nothing to fuse")
    adapted = genai_model.with_lora("int4", "webgpu")
    fused = _fused_nodes(webgpu, adapted, "fused", tmp_path)
    refused = _empty_adapters_refused(webgpu, "fp16")
    missing = []
    if fused == 0:
        missing.append(f"{webgpu} fuses none of the {len(read_targets(adapted))} projections")
    if refused is not None:
        missing.append(f"{webgpu} refuses empty adapter defaults: {refused}")
    if missing:
        assert not claimed, f"the build claims {capabilities.QLORA_OP}, but " + "; ".join(missing)
        absent(f"{capabilities.QLORA_OP} in {capabilities.wheel_set()}, but " + "; ".join(missing))
    return webgpu


def _fused_nodes(ep: eps.EpKind, model_dir: Path, graph: str, tmp_path: Path) -> int:
    """MatMulNBitsQLoRA nodes in the graph onnxruntime optimizes from ``model_dir``'s decoder for ``graph``,
    with the session config entries genai is given for it. A genai decoder keeps some nodes on the CPU,
    as genai's own session does: this session allows that (the fusion applies to WebGPU nodes only)."""
    dump = tmp_path / f"{graph}.onnx"
    options = eps.session_options("cpu", genai_run.session_entries(graph))  # without the fallback switch
    options.optimized_model_filepath = str(dump)
    options.add_session_config_entry("session.optimized_model_external_initializers_file_name", f"{graph}.data")
    decoder = str(model_dir / "model.onnx")
    if ep == "plugin":
        options.add_provider_for_devices(list(eps.plugin_devices()[:1]), {})
        session = ort.InferenceSession(decoder, options)
    else:
        session = ort.InferenceSession(decoder, options, providers=[eps.PROVIDER_NAME[ep], "CPUExecutionProvider"])
    assert session.get_providers()[0] == eps.PROVIDER_NAME[ep], session.get_providers()
    return sum(n.op_type == capabilities.QLORA_OP for n in onnx.load(str(dump), load_external_data=False).graph.node)


def _decode(model_dir: Path, ids: list[int], graph: str, adapter: Path | None) -> tuple[list[int], np.ndarray]:
    """Greedy tokens of ``graph`` (adapter off when None) and the last position's logits of every step."""
    config = og.Config(str(model_dir))
    entries = genai_run.session_entries(graph)
    if entries:
        config.overlay(json.dumps({"model": {"decoder": {"session_options": entries}}}))
    generator = _greedy_generator(config, ids, adapter)
    steps = []
    while True:
        logits = np.array(generator.get_output("logits"), dtype=np.float64)
        steps.append(logits.reshape(-1, logits.shape[-1])[-1])
        if generator.is_done():
            break
        generator.generate_next_token()
    return [int(t) for t in generator.get_sequence(0)], np.stack(steps)


def _rmse(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.sqrt(np.mean((a - b) ** 2)))


FUSED_RMSE = 1e-2
"""Fused vs raw logits: RMSE at most 1 % of the raw logits' RMS. Both run the same INT4 base kernels;
they differ in how the rank-32 intermediate is rounded (fp16 in the raw graph, f32 in the fused
kernel) and summed, which moves fp16 logits by far less; an adapter dropped or applied twice moves
them by the adapter's whole effect, which the test first shows to be over ten times the bound."""


def test_fused_graph_equals_raw_graph(qlora_webgpu: eps.EpKind, tmp_path: Path) -> None:
    adapted = genai_model.with_lora("int4", "webgpu")
    targets = len(read_targets(adapted))
    assert _fused_nodes(qlora_webgpu, adapted, "fused", tmp_path) == targets
    assert _fused_nodes(qlora_webgpu, adapted, "raw", tmp_path) == 0
    ids = _prompt_ids()
    base, _ = _genai_greedy(genai_model.genai_model("int4", "webgpu"), ids)
    adapter = genai_model.lora_adapter(adapted, tmp_path / "a.onnx_adapter", seed=1)
    raw_off: np.ndarray | None = None
    for name, path in (("off", None), ("A", adapter)):
        raw_tokens, raw = _decode(adapted, ids, "raw", path)
        fused_tokens, fused = _decode(adapted, ids, "fused", path)
        bound = FUSED_RMSE * float(np.sqrt(np.mean(raw**2)))
        if raw_off is None:
            assert raw_tokens == base, "adapter off must decode the base model's tokens"
            raw_off = raw
        else:
            # The prompt's logits, the same input in both: the adapter must move them far past the bound.
            moved = _rmse(raw[:1], raw_off[:1])
            assert moved > 10 * bound, f"adapter A moves the prompt's logits by RMSE {moved:.3g}, bound {bound:.3g}"
        assert fused_tokens == raw_tokens, f"adapter {name}: fused decoded {fused_tokens}, raw {raw_tokens}"
        rmse = _rmse(fused, raw)
        assert rmse <= bound, f"adapter {name}: fused vs raw logits RMSE {rmse:.3g} > bound {bound:.3g}"


def test_adapter_activated_after_fused_decode_was_captured_is_used_on_replay(qlora_webgpu: eps.EpKind) -> None:
    """onnxruntime-genai#2740: a decode captured before the adapter was activated must not be replayed
    after it; the fused graph is where the seed met it. A genai with the bug fails here, by name."""
    uncaptured = _logits_after_late_activation("0", activate=True)
    base = _logits_after_late_activation("1", activate=False)
    captured = _logits_after_late_activation("1", activate=True)
    tolerance = 1e-2 * max(np.abs(uncaptured).max(), 1.0)
    assert np.abs(uncaptured - base).max() > 10 * tolerance, "the adapter does not change these logits"
    difference = np.abs(captured - uncaptured).max()
    replays_base = np.abs(captured - base).max() <= tolerance
    assert difference <= tolerance, (
        f"onnxruntime-genai {og.__version__} on {qlora_webgpu}: adapter A activated after the fused decode was "
        f"captured {'is ignored on replay (the base graph replays)' if replays_base else 'gives other logits'}: "
        f"max |captured - uncaptured| {difference:.3g} > {tolerance:.3g} -- onnxruntime-genai#2740 "
        "(capture identity must include the active adapter)"
    )
