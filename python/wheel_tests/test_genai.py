"""onnxruntime-genai end to end on a tiny random-init Llama (marker ``genai``, own environment).

fp32 CPU greedy decoding must equal torch's token for token; the int4 model on WebGPU must decode
the same greedy tokens as the int4 model on CPU.
"""

from __future__ import annotations

import numpy as np
import pytest

from wheel_tests import capabilities, eps, genai_model

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


def _genai_greedy(path: object, ids: list[int]) -> tuple[list[int], np.ndarray]:
    model = og.Model(og.Config(str(path)))
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(ids) + NEW_TOKENS, do_sample=False)
    generator = og.Generator(model, params)
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


def test_int4_webgpu_greedy_equals_int4_cpu(request: pytest.FixtureRequest) -> None:
    from wheel_tests.plugin import requested_eps  # noqa: PLC0415

    webgpu = [ep for ep in requested_eps(request.config) if ep != "cpu" and capabilities.ep_status(ep).runnable]
    if not webgpu:
        pytest.skip(
            "no WebGPU EP runs here: " + "; ".join(capabilities.ep_status(e).reason for e in ("webgpu", "plugin"))
        )
    if webgpu[0] == "plugin":
        import onnxruntime_ep_webgpu  # noqa: PLC0415

        og.register_execution_provider_library(eps.PROVIDER_NAME["plugin"], onnxruntime_ep_webgpu.get_library_path())
    ids = _prompt_ids()
    cpu_tokens, cpu_logits = _genai_greedy(genai_model.genai_model("int4", "cpu"), ids)
    gpu_tokens, gpu_logits = _genai_greedy(genai_model.genai_model("int4", "webgpu"), ids)
    assert gpu_tokens == cpu_tokens
    # fp16 on WebGPU against fp32 on CPU: measured 3% of max |logit| on lavapipe; the tokens above are
    # the real check, this bound catches a WebGPU model computing something else entirely.
    assert gpu_logits.shape == cpu_logits.shape
    assert np.abs(gpu_logits - cpu_logits).max() < 0.1 * np.abs(cpu_logits).max()
