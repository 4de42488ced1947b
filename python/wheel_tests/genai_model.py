"""A tiny random-init Llama and a locally trained BPE tokenizer, turned into onnxruntime-genai
models by genai's own model builder, with the steps of ``wheel_bench.genai_model``. Everything is
made offline and cached on disk.

The cache lives in ``$WHEEL_TESTS_CACHE`` (``ortstack test`` points it into its cache directory).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from importlib.metadata import version
from pathlib import Path

from wheel_bench import genai_model as steps

VOCAB = 384
CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "a small model runs on the cpu and on webgpu",
    "adapters change the output of a projection",
    "paged attention keeps keys and values in blocks",
] * 16


def cache_root() -> Path:
    """Keyed by the code that makes the models, so a change to it never reuses an older build."""
    default = Path.home() / ".cache" / "ortstack" / "wheel-tests"
    recipe = hashlib.sha256(Path(__file__).read_bytes() + Path(steps.__file__).read_bytes()).hexdigest()[:12]
    return Path(os.environ.get("WHEEL_TESTS_CACHE", default)) / f"genai-{recipe}"


def hf_model() -> Path:
    """The Hugging Face directory of the tiny fp32 model (config, weights, tokenizer), made once."""
    out = cache_root() / "hf-tiny-llama"
    if (out / "ready").is_file():
        return out
    out.mkdir(parents=True, exist_ok=True)
    vocab = steps.train_tokenizer(out, CORPUS, VOCAB)
    shape = steps.DecoderShape(hidden=64, intermediate=128, layers=2, heads=4, kv_heads=2, vocab=vocab, max_length=128)
    steps.random_llama(out, shape, "float32")
    (out / "ready").write_text("ok\n")
    return out


def _builder() -> str:
    """The installed genai, whose builder made a model: the genai suite's genai follows the wheel under test."""
    return f"onnxruntime-genai-{version('onnxruntime-genai')}"


def genai_model(precision: str, ep: str) -> Path:
    """``python -m onnxruntime_genai.models.builder`` output for ``precision`` on ``ep``, made once per genai."""
    out = cache_root() / _builder() / f"genai-{precision}-{ep}"
    if (out / "ready").is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    steps.run_builder(hf_model(), out, precision=precision, ep=ep, cache=cache_root() / "builder-cache")
    (out / "ready").write_text("ok\n")
    return out


def with_lora(precision: str, ep: str) -> Path:
    """The builder's model plus the raw INT8 LoRA pattern beside every attention and MLP projection
    (``wheel_bench.genai_model.add_lora_inputs``): zero-sized defaults make it the base model until an
    adapter overrides them; a wheel with ``MatMulNBitsQLoRA`` fuses it on WebGPU."""
    out = cache_root() / _builder() / f"genai-{precision}-{ep}-lora"
    if (out / "ready").is_file():
        return out
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(genai_model(precision, ep), out, ignore=shutil.ignore_patterns("ready"))
    targets = steps.add_lora_inputs(out, target="/layers.")
    (out / "ready").write_text(f"{len(targets)} adapted projections\n")
    return out


def lora_adapter(model_dir: Path, path: Path, *, seed: int) -> Path:
    """A rank-32 INT8 ``.onnx_adapter`` for :func:`with_lora`'s ``model_dir``, with weights big enough
    to change greedy tokens; other seeds give other adapters."""
    return steps.write_adapter(path, steps.read_targets(model_dir), up_scale=0.2, seed=seed)
