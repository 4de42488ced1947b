"""Build a random-init decoder for onnxruntime-genai offline, with rank-r LoRA as overridable inputs.

Steps, all local: train a small BPE tokenizer on generated text; make a random-init Llama of the
chosen width with transformers; convert it with genai's model builder (INT4, block 32, accuracy
level 4; for WebGPU in the capture-ready form); then put an unfused LoRA (MatMul, MatMul, Add)
beside every decoder projection, its A and B as graph inputs with small zero defaults (rank
``default_rank``), and write one ``.onnx_adapter`` with random rank-r weights for them. Adapter off
therefore runs the model as built plus zero rank-1 work (stock wheels reject rank-0 defaults on
WebGPU); adapter on feeds the adapter's weights.

Needs torch, transformers, tokenizers, onnx, onnx_ir, onnxruntime and onnxruntime-genai (the
builder ships with it). Run as ``python -m wheel_bench.genai_model --out DIR --ep webgpu ...``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ADAPTER_FILE = "adapter.onnx_adapter"
LORA_PREFIX = "lora."


@dataclass(frozen=True, kw_only=True)
class DecoderShape:
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int
    max_length: int
    rank: int = 32
    default_rank: int = 1


# About TinyLlama's width (a 1.1B decoder) with few layers, so it builds in a minute on a CPU.
REALISTIC = DecoderShape(hidden=2048, intermediate=5632, layers=4, heads=32, kv_heads=4, vocab=32000, max_length=2048)
TINY = DecoderShape(hidden=256, intermediate=512, layers=2, heads=4, kv_heads=2, vocab=2048, max_length=512)
SHAPES = {"realistic": REALISTIC, "tiny": TINY}


def _train_tokenizer(out: Path, vocab: int) -> None:
    import random  # noqa: PLC0415 - builder-only dependencies load here

    from tokenizers import Tokenizer, models, pre_tokenizers, trainers  # noqa: PLC0415
    from transformers import PreTrainedTokenizerFast  # noqa: PLC0415

    rng = random.Random(0)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(5000)]
    corpus = [" ".join(rng.choice(words) for _ in range(40)) for _ in range(4000)]
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=min(vocab, 8192), special_tokens=["<unk>", "<s>", "</s>"], show_progress=False
    )
    tokenizer.train_from_iterator(corpus, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
    )
    fast.save_pretrained(out)


def _random_llama(out: Path, shape: DecoderShape) -> None:
    import torch  # noqa: PLC0415
    from transformers import LlamaConfig, LlamaForCausalLM  # noqa: PLC0415

    torch.manual_seed(0)
    config = LlamaConfig(
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        vocab_size=shape.vocab,
        max_position_embeddings=shape.max_length,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config).to(torch.float16)
    model.save_pretrained(out)


def _builder(hf_dir: Path, out: Path, ep: str, cache: Path) -> None:
    argv = [
        sys.executable,
        "-m",
        "onnxruntime_genai.models.builder",
        "-i",
        str(hf_dir),
        "-o",
        str(out),
        "-p",
        "int4",
        "-e",
        ep,
        "-c",
        str(cache),
        "--extra_options",
        "block_size=32",
        "accuracy_level=4",
    ]
    if ep == "webgpu":
        # Keeps the attention-mask subgraph on the GPU, which graph capture needs.
        argv.append("enable_webgpu_graph=true")
    subprocess.run(argv, check=True)


def _projection_nodes(graph: Any) -> list[Any]:
    """The decoder's MatMulNBits projections (attention and MLP), not the LM head."""
    return [n for n in graph.node if n.op_type == "MatMulNBits" and "/layers." in n.name]


def add_lora_inputs(model_dir: Path, shape: DecoderShape, seed: int = 0) -> list[str]:
    """Rewrite ``model.onnx`` with LoRA beside each projection; write the adapter file. Returns the targets."""
    import numpy as np  # noqa: PLC0415
    import onnx  # noqa: PLC0415
    import onnxruntime as ort  # noqa: PLC0415
    from onnx import TensorProto, helper, numpy_helper  # noqa: PLC0415

    config = json.loads((model_dir / "genai_config.json").read_text())
    filename = config["model"]["decoder"]["filename"]
    model = onnx.load(str(model_dir / filename))
    graph = model.graph
    rng = np.random.default_rng(seed)
    dtype = next(i.type.tensor_type.elem_type for i in graph.input if i.name.startswith("past_key_values"))
    np_dtype = np.float16 if dtype == TensorProto.FLOAT16 else np.float32
    adapter: dict[str, Any] = {}
    lora_nodes: dict[str, list[Any]] = {}
    targets = []
    for index, node in enumerate(_projection_nodes(graph)):
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        k, n = int(attrs["K"]), int(attrs["N"])
        a_name, b_name = f"{LORA_PREFIX}{index}.A", f"{LORA_PREFIX}{index}.B"
        base_out = node.output[0]
        node.output[0] = f"{base_out}/lora_base"
        graph.input.extend(
            [
                helper.make_tensor_value_info(a_name, dtype, [k, "lora_rank"]),
                helper.make_tensor_value_info(b_name, dtype, ["lora_rank", n]),
            ]
        )
        zeros_a = np.zeros((k, shape.default_rank), dtype=np_dtype)
        zeros_b = np.zeros((shape.default_rank, n), dtype=np_dtype)
        graph.initializer.extend([numpy_helper.from_array(zeros_a, a_name), numpy_helper.from_array(zeros_b, b_name)])
        lora_nodes[node.name] = [
            helper.make_node(
                "MatMul", [node.input[0], a_name], [f"{base_out}/lora_down"], name=f"{node.name}/lora_down"
            ),
            helper.make_node(
                "MatMul", [f"{base_out}/lora_down", b_name], [f"{base_out}/lora_up"], name=f"{node.name}/lora_up"
            ),
            helper.make_node("Add", [node.output[0], f"{base_out}/lora_up"], [base_out], name=f"{node.name}/lora_add"),
        ]
        adapter[a_name] = (rng.standard_normal((k, shape.rank)) / np.sqrt(k)).astype(np_dtype)
        adapter[b_name] = (rng.standard_normal((shape.rank, n)) * 0.02).astype(np_dtype)
        targets.append(node.name)
    # Each LoRA sits right after its projection, which keeps the node list topologically sorted.
    ordered = []
    for node in graph.node:
        ordered.append(node)
        ordered.extend(lora_nodes.get(node.name, []))
    del graph.node[:]
    graph.node.extend(ordered)
    # onnx.save appends to an existing data file: drop the old one (its tensors are in memory now).
    (model_dir / f"{filename}.data").unlink()
    onnx.save(model, str(model_dir / filename), save_as_external_data=True, location=f"{filename}.data")
    out = ort.AdapterFormat()
    out.set_adapter_version(1)
    out.set_model_version(1)
    out.set_parameters({name: ort.OrtValue.ortvalue_from_numpy(value) for name, value in adapter.items()})
    out.export_adapter(str(model_dir / ADAPTER_FILE))
    return targets


def build(out: Path, shape: DecoderShape, ep: str) -> dict[str, Any]:
    """Build the model into ``out`` (a fresh directory); returns what ``manifest.json`` records."""
    out.mkdir(parents=True, exist_ok=False)
    hf_dir = out / "hf"
    _train_tokenizer(hf_dir, shape.vocab)
    _random_llama(hf_dir, shape)
    model_dir = out / "model"
    _builder(hf_dir, model_dir, ep, out / "builder-cache")
    targets = add_lora_inputs(model_dir, shape)
    manifest = {"shape": asdict(shape), "ep": ep, "lora_targets": targets, "adapter": ADAPTER_FILE}
    (model_dir / "manifest.json").write_text(json.dumps(manifest, indent=2))
    shutil.rmtree(hf_dir)
    shutil.rmtree(out / "builder-cache", ignore_errors=True)
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="fresh directory for the model")
    parser.add_argument("--ep", choices=["cpu", "webgpu"], default="webgpu")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="realistic")
    parser.add_argument("--layers", type=int, help="override the shape's layer count")
    args = parser.parse_args(argv)
    shape = SHAPES[args.shape]
    if args.layers is not None:
        shape = DecoderShape(**{**asdict(shape), "layers": args.layers})
    manifest = build(args.out, shape, args.ep)
    print(json.dumps(manifest, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
