"""Model level: TTFT and decode speed of a genai decoder, adapter on or off, graph capture on or off.

One request: a fresh generator, the adapter activated or not, a prompt of fixed random token ids
appended (the prefill), then greedy generation to exactly ``prompt + generate`` tokens, every new
token read back to the host. TTFT is the time from appending the prompt until the first new token
is on the host; decode speed is the remaining tokens over the time they took.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from wheel_bench import ep
from wheel_bench.genai_model import ADAPTER_FILE

if TYPE_CHECKING:
    from pathlib import Path

    from wheel_bench.ep import EpSetup

ADAPTER_NAME = "bench"


def _model(setup: EpSetup, model_dir: Path, *, capture: bool) -> Any:
    import onnxruntime_genai as og  # noqa: PLC0415 - only the model level needs genai

    config = og.Config(str(model_dir))
    config.clear_providers()
    if setup.kind != "cpu":
        if setup.kind == "plugin" and "genai" not in ep.registered:
            og.register_execution_provider_library(ep.WEBGPU, ep.plugin_library())
            ep.registered.add("genai")
        config.append_provider("webgpu")
        config.set_provider_option("webgpu", "enableGraphCapture", "1" if capture else "0")
    return og.Model(config)


def _request(og: Any, model: Any, adapters: Any, prompt: np.ndarray, generate: int, *, adapter: bool) -> dict[str, Any]:
    params = og.GeneratorParams(model)
    total = len(prompt) + generate
    params.set_search_options(max_length=total, min_length=total, do_sample=False)
    generator = og.Generator(model, params)
    if adapter:
        generator.set_active_adapter(adapters, ADAPTER_NAME)
    start = time.perf_counter()
    generator.append_tokens(prompt)
    tokens = [int(generator.get_next_tokens()[0])]
    first = time.perf_counter()
    while not generator.is_done():
        generator.generate_next_token()
        tokens.append(int(generator.get_next_tokens()[0]))
    end = time.perf_counter()
    decoded = len(tokens) - 1
    return {
        "ttft_ms": (first - start) * 1e3,
        "decode_tok_s": decoded / (end - first) if decoded else float("nan"),
        "tokens": len(tokens),
        # Greedy output identity: adapter on must differ from adapter off if the adapter applies.
        "output_sha256": hashlib.sha256(json.dumps(tokens).encode()).hexdigest()[:16],
    }


def _key(prompt_length: int, *, adapter: bool, capture: bool) -> str:
    return f"genai/P={prompt_length}/adapter={'on' if adapter else 'off'}/capture={'on' if capture else 'off'}"


def measure(
    setup: EpSetup,
    model_dir: Path,
    *,
    prompt_lengths: list[int],
    generate: int,
    capture_modes: list[bool],
    warmups: int,
    requests: int,
) -> list[dict[str, Any]]:
    """Every (capture, prompt length, adapter) case on one loaded model per capture mode."""
    import onnxruntime_genai as og  # noqa: PLC0415

    manifest = json.loads((model_dir / "manifest.json").read_text())
    vocab = int(manifest["shape"]["vocab"])
    results: list[dict[str, Any]] = []
    for capture in capture_modes:
        start = time.perf_counter()
        try:
            model = _model(setup, model_dir, capture=capture)
        except RuntimeError as exc:
            # Graph capture needs every node on the WebGPU EP; report the refusal as a result.
            results.append({"level": "genai", "key": f"genai/capture={'on' if capture else 'off'}", "error": str(exc)})
            continue
        adapters = og.Adapters(model)
        adapters.load(str(model_dir / ADAPTER_FILE), ADAPTER_NAME)
        load_ms = (time.perf_counter() - start) * 1e3
        for prompt_length in prompt_lengths:
            prompt = np.random.default_rng(prompt_length).integers(3, vocab, size=prompt_length, dtype=np.int32)
            for adapter in (False, True):
                first = _request(og, model, adapters, prompt, generate, adapter=adapter)
                for _ in range(warmups):
                    _request(og, model, adapters, prompt, generate, adapter=adapter)
                runs = [_request(og, model, adapters, prompt, generate, adapter=adapter) for _ in range(requests)]
                results.append(
                    {
                        "level": "genai",
                        "key": _key(prompt_length, adapter=adapter, capture=capture),
                        "prompt": prompt_length,
                        "generate": generate,
                        "adapter": adapter,
                        "capture": capture,
                        "model_load_ms": load_ms,
                        "first_request": first,
                        "ttft_ms": [r["ttft_ms"] for r in runs],
                        "decode_tok_s": [r["decode_tok_s"] for r in runs],
                        "tokens": [r["tokens"] for r in runs],
                        "output_sha256": sorted({r["output_sha256"] for r in runs}),
                    }
                )
        del adapters, model
    return results
