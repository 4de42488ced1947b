"""A tiny random-init Llama and a locally trained BPE tokenizer, turned into onnxruntime-genai
models by genai's own model builder. Everything is made offline and cached on disk.

The cache lives in ``$WHEEL_TESTS_CACHE`` (``ortstack test`` points it into its cache directory).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SEED = 0
VOCAB = 384
CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "a small model runs on the cpu and on webgpu",
    "adapters change the output of a projection",
    "paged attention keeps keys and values in blocks",
] * 16


def cache_root() -> Path:
    default = Path.home() / ".cache" / "ortstack" / "wheel-tests"
    return Path(os.environ.get("WHEEL_TESTS_CACHE", default)) / "genai"


def hf_model() -> Path:
    """The Hugging Face directory of the tiny model (config, weights, tokenizer), made once."""
    out = cache_root() / "hf-tiny-llama"
    if (out / "ready").is_file():
        return out
    import torch  # noqa: PLC0415 - only the genai environment has these
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers  # noqa: PLC0415
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast  # noqa: PLC0415

    out.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<unk>", "<s>", "</s>"])
    tokenizer.train_from_iterator(CORPUS, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    fast.save_pretrained(out)
    torch.manual_seed(SEED)
    config = LlamaConfig(
        vocab_size=tokenizer.get_vocab_size(),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        bos_token_id=1,
        eos_token_id=2,
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(config)
    model.save_pretrained(out, safe_serialization=True)
    (out / "ready").write_text("ok\n")
    return out


def genai_model(precision: str, ep: str) -> Path:
    """``python -m onnxruntime_genai.models.builder`` output for ``precision`` on ``ep``, made once."""
    out = cache_root() / f"genai-{precision}-{ep}"
    if (out / "ready").is_file():
        return out
    source = hf_model()
    argv = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(source), "-o", str(out)]
    argv += ["-p", precision, "-e", ep, "-c", str(cache_root() / "builder-cache")]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=900)
    if done.returncode != 0:
        msg = f"genai model builder failed ({done.returncode}): {done.stderr.strip()[-2000:]}"
        raise RuntimeError(msg)
    (out / "ready").write_text("ok\n")
    return out
