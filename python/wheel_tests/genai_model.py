"""A tiny random-init Llama and a locally trained BPE tokenizer, turned into onnxruntime-genai
models by genai's own model builder. Everything is made offline and cached on disk.

The cache lives in ``$WHEEL_TESTS_CACHE`` (``ortstack test`` points it into its cache directory).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from wheel_tests import lora

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


LORA_RANK = 32
LORA_TARGET = "/attn/o_proj/"


def with_lora(precision: str, ep: str) -> Path:
    """The builder's model plus a rank-32 LoRA branch on every o_proj: ``x @ A @ B`` added to its
    output, A and B graph inputs whose rank-1 zero defaults make the branch a no-op until an
    adapter overrides them (the builder itself can only bake LoRA weights in)."""
    out = cache_root() / f"genai-{precision}-{ep}-lora"
    if (out / "ready").is_file():
        return out
    source = genai_model(precision, ep)
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(source, out, ignore=shutil.ignore_patterns("ready", "model.onnx"))
    model = onnx.load(str(source / "model.onnx"), load_external_data=False)
    graph = model.graph
    elem = next(o.type.tensor_type.elem_type for o in graph.output if o.name == "logits")
    dtype = helper.tensor_dtype_to_np_dtype(elem)
    hidden = next(int(a.i) for n in graph.node for a in n.attribute if a.name == "K" and LORA_TARGET in n.name)
    targets = [n for n in graph.node if n.op_type in {"MatMul", "MatMulNBits"} and LORA_TARGET in n.name]
    for index, node in enumerate(targets):
        prefix = f"lora.{index}"
        base_out = node.output[0]
        node.output[0] = f"{base_out}/base"
        graph.node.extend(
            [
                helper.make_node("MatMul", [node.input[0], f"{prefix}.A"], [f"{prefix}/t"], name=f"{prefix}/down"),
                helper.make_node("MatMul", [f"{prefix}/t", f"{prefix}.B"], [f"{prefix}/out"], name=f"{prefix}/up"),
                helper.make_node("Add", [f"{base_out}/base", f"{prefix}/out"], [base_out], name=f"{prefix}/add"),
            ]
        )
        for name, shape in ((f"{prefix}.A", [hidden, 1]), (f"{prefix}.B", [1, hidden])):
            graph.initializer.append(numpy_helper.from_array(np.zeros(shape, dtype), name))
            dims: list[str | int | None] = [hidden, "rank"] if name.endswith("A") else ["rank", hidden]
            graph.input.append(helper.make_tensor_value_info(name, elem, dims))
    # The new nodes consume outputs of earlier ones: restore a topological order.
    produced = {i.name for i in graph.input} | {i.name for i in graph.initializer} | {""}
    ordered, pending = [], list(graph.node)
    while pending:
        ready = [n for n in pending if all(i in produced for i in n.input)]
        if not ready:
            msg = "LoRA insertion left the graph cyclic"
            raise RuntimeError(msg)
        for n in ready:
            ordered.append(n)
            produced.update(n.output)
            pending.remove(n)
    del graph.node[:]
    graph.node.extend(ordered)
    onnx.save(model, str(out / "model.onnx"))
    (out / "ready").write_text(f"{len(targets)} adapted projections, hidden {hidden}\n")
    return out


def lora_adapter(path: Path, *, layers: int, hidden: int, dtype: type[np.floating], seed: int) -> Path:
    """An ``.onnx_adapter`` for :func:`with_lora` with weights big enough to change greedy tokens."""
    rng = np.random.default_rng(seed)
    tensors = {}
    for index in range(layers):
        tensors[f"lora.{index}.A"] = (rng.standard_normal((hidden, LORA_RANK)) / np.sqrt(hidden)).astype(dtype)
        tensors[f"lora.{index}.B"] = (rng.standard_normal((LORA_RANK, hidden)) * 0.2).astype(dtype)
    lora.export_adapter(path, tensors)
    return path
