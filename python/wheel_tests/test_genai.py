"""onnxruntime-genai end to end on a tiny random-init Llama (marker ``genai``, own environment).

fp32 CPU greedy decoding must equal torch's token for token; the int4 model on WebGPU must decode
the same greedy tokens as the int4 model on CPU; a LoRA adapter off decodes the base tokens, on it
changes them identically on CPU and WebGPU; an adapter activated after graph capture changes the
logits as it does without capture (genai's capture identity), or the baseline is recorded.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import numpy as np
import pytest

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


def _genai_greedy(path: Path, ids: list[int], adapter: Path | None = None) -> tuple[list[int], np.ndarray]:
    model = og.Model(og.Config(str(path)))
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(ids) + NEW_TOKENS, do_sample=False)
    generator = og.Generator(model, params)
    if adapter is not None:
        adapters = og.Adapters(model)
        adapters.load(str(adapter), "adapter")
        generator.set_active_adapter(adapters, "adapter")
    generator.append_tokens(ids)
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


@pytest.mark.usefixtures("webgpu")
def test_adapter_off_equals_base_and_on_changes_cpu_and_webgpu_alike(tmp_path: Path) -> None:
    """LoRA as overridable graph inputs: off decodes exactly the base tokens; an adapter changes
    them, the same way on CPU and WebGPU."""
    ids = _prompt_ids()
    with_adapter = {}
    for ep in ("cpu", "webgpu"):
        base, _ = _genai_greedy(genai_model.genai_model("int4", ep), ids)
        adapted = genai_model.with_lora("int4", ep)
        off, _ = _genai_greedy(adapted, ids)
        assert off == base, ep
        adapter = genai_model.lora_adapter(adapted, tmp_path / f"{ep}.onnx_adapter", seed=1)
        with_adapter[ep], _ = _genai_greedy(adapted, ids, adapter)
        assert with_adapter[ep] != base, ep
    assert with_adapter["webgpu"] == with_adapter["cpu"]


def _logits_after_late_activation(capture: str, *, activate: bool) -> np.ndarray:
    """Decode 4 base tokens (captured when ``capture`` is "1"), then maybe activate the adapter,
    then one more step: that step's logits."""
    adapted = genai_model.with_lora("int4", "webgpu")
    adapter = genai_model.lora_adapter(adapted, adapted / "capture.onnx_adapter", seed=1)
    config = og.Config(str(adapted))
    webgpu_options = {"enableGraphCapture": capture, "validationMode": "basic"}
    config.overlay(
        json.dumps({"model": {"decoder": {"session_options": {"provider_options": [{"webgpu": webgpu_options}]}}}})
    )
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


@pytest.mark.usefixtures("webgpu")
def test_adapter_activated_after_graph_capture(
    absent: Callable[[str], NoReturn], record_feature: Callable[[capabilities.Feature], None]
) -> None:
    """Capture identity: activating an adapter after decode was captured must change the logits as
    it does without capture. A genai without the fix replays the base graph: absent."""
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
