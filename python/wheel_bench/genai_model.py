"""Build a random-init decoder for onnxruntime-genai offline, with rank-r LoRA as overridable inputs.

Steps, all local: train a small BPE tokenizer on generated text; make a random-init Llama of the
chosen width with transformers; convert it with genai's model builder (INT4, block 32, accuracy
level 4; for WebGPU in the capture-ready form); then put an unfused LoRA (MatMul, MatMul, Add)
beside every decoder projection, its A and B as graph inputs with small zero defaults (rank
``default_rank``), and write one ``.onnx_adapter`` with random rank-r weights for them. Adapter off
therefore runs the model as built plus zero rank-1 work (stock wheels reject rank-0 defaults on
WebGPU); adapter on feeds the adapter's weights.

The steps are public: ``wheel_tests.genai_model`` makes its tiny fp32 test model with them.

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
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

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


def export_adapter(path: Path, tensors: Mapping[str, Any]) -> None:
    """Write ``tensors`` (name to numpy array) as an ``.onnx_adapter`` file with AdapterFormat."""
    import onnxruntime as ort  # noqa: PLC0415

    writer = ort.AdapterFormat()
    writer.set_adapter_version(1)
    writer.set_model_version(1)
    writer.set_parameters({name: ort.OrtValue.ortvalue_from_numpy(value) for name, value in tensors.items()})
    writer.export_adapter(str(path))


def train_tokenizer(out: Path, corpus: Iterable[str], vocab: int) -> int:
    """Train a byte-level BPE tokenizer on ``corpus`` and save it into ``out``; returns its vocabulary size."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers  # noqa: PLC0415
    from transformers import PreTrainedTokenizerFast  # noqa: PLC0415

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False)
    tokenizer.train_from_iterator(corpus, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    fast.save_pretrained(out)
    return int(tokenizer.get_vocab_size())


def _random_corpus() -> list[str]:
    """Sentences of random letter-words, so the tokenizer learns many merges."""
    import random  # noqa: PLC0415

    rng = random.Random(0)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(5000)]
    return [" ".join(rng.choice(words) for _ in range(40)) for _ in range(4000)]


def random_llama(out: Path, shape: DecoderShape, dtype: str) -> None:
    """Save a random-init (seed 0) Llama of ``shape`` in torch dtype ``dtype`` ("float16", "float32") into ``out``."""
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
    model = LlamaForCausalLM(config).to(getattr(torch, dtype))
    model.save_pretrained(out)


def run_builder(
    hf_dir: Path, out: Path, *, precision: str, ep: str, cache: Path, extra_options: Sequence[str] = ()
) -> None:
    """``python -m onnxruntime_genai.models.builder`` from ``hf_dir`` into ``out``; raises with its stderr."""
    argv = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(hf_dir), "-o", str(out)]
    argv += ["-p", precision, "-e", ep, "-c", str(cache)]
    if extra_options:
        argv += ["--extra_options", *extra_options]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=1800)
    if done.returncode != 0:
        msg = f"genai model builder failed ({done.returncode}): {done.stderr.strip()[-2000:]}"
        raise RuntimeError(msg)


@dataclass(frozen=True, kw_only=True)
class LoraTarget:
    """A projection given a LoRA branch: its node name, its ``K`` x ``N`` weight and the branch's dtype."""

    projection: str
    k: int
    n: int
    dtype: str


def add_lora_inputs(model_dir: Path, *, target: str, default_rank: int) -> list[LoraTarget]:
    """Rewrite the decoder in ``model_dir`` in place with an unfused LoRA (MatMul, MatMul, Add) beside
    every MatMulNBits whose name contains ``target``: ``lora.<i>.A`` and ``lora.<i>.B`` become graph
    inputs with zero defaults of rank ``default_rank``. Returns the adapted projections in index order."""
    import numpy as np  # noqa: PLC0415
    import onnx  # noqa: PLC0415
    from onnx import helper, numpy_helper  # noqa: PLC0415

    config = json.loads((model_dir / "genai_config.json").read_text())
    filename = config["model"]["decoder"]["filename"]
    model = onnx.load(str(model_dir / filename))
    graph = model.graph
    elem = next(i.type.tensor_type.elem_type for i in graph.input if i.name.startswith("past_key_values"))
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(elem))
    lora_nodes: dict[str, list[Any]] = {}
    targets = []
    projections = [n for n in graph.node if n.op_type == "MatMulNBits" and target in n.name]
    for index, node in enumerate(projections):
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        k, n = int(attrs["K"]), int(attrs["N"])
        a_name, b_name = f"{LORA_PREFIX}{index}.A", f"{LORA_PREFIX}{index}.B"
        base_out = node.output[0]
        node.output[0] = f"{base_out}/lora_base"
        graph.input.extend(
            [
                helper.make_tensor_value_info(a_name, elem, [k, "lora_rank"]),
                helper.make_tensor_value_info(b_name, elem, ["lora_rank", n]),
            ]
        )
        zeros_a = np.zeros((k, default_rank), dtype=dtype)
        zeros_b = np.zeros((default_rank, n), dtype=dtype)
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
        targets.append(LoraTarget(projection=node.name, k=k, n=n, dtype=dtype.name))
    # Each LoRA sits right after its projection, which keeps the node list topologically sorted.
    ordered = []
    for node in graph.node:
        ordered.append(node)
        ordered.extend(lora_nodes.get(node.name, []))
    del graph.node[:]
    graph.node.extend(ordered)
    # onnx.save appends to an existing data file: drop the old one (its tensors are in memory now).
    (model_dir / f"{filename}.data").unlink(missing_ok=True)
    onnx.save(model, str(model_dir / filename), save_as_external_data=True, location=f"{filename}.data")
    return targets


def write_adapter(
    path: Path, shapes: Sequence[tuple[int, int]], *, dtype: str, rank: int, up_scale: float, seed: int
) -> None:
    """An ``.onnx_adapter`` with random rank-``rank`` weights for LoRA ``i`` of ``K`` x ``N`` ``shapes[i]``:
    A is ``N(0, 1/K)``, B is ``N(0, up_scale^2)``, so ``up_scale`` sets how far the adapter moves the output."""
    import numpy as np  # noqa: PLC0415

    rng = np.random.default_rng(seed)
    tensors = {}
    for index, (k, n) in enumerate(shapes):
        tensors[f"{LORA_PREFIX}{index}.A"] = (rng.standard_normal((k, rank)) / np.sqrt(k)).astype(dtype)
        tensors[f"{LORA_PREFIX}{index}.B"] = (rng.standard_normal((rank, n)) * up_scale).astype(dtype)
    export_adapter(path, tensors)


def build(out: Path, shape: DecoderShape, ep: str) -> dict[str, Any]:
    """Build the model into ``out`` (a fresh directory); returns what ``manifest.json`` records."""
    out.mkdir(parents=True, exist_ok=False)
    hf_dir = out / "hf"
    train_tokenizer(hf_dir, _random_corpus(), min(shape.vocab, 8192))
    random_llama(hf_dir, shape, "float16")
    model_dir = out / "model"
    # INT4, block 32, accuracy level 4; on WebGPU the attention-mask subgraph stays on the GPU, which
    # graph capture needs.
    options = ["block_size=32", "accuracy_level=4", *(["enable_webgpu_graph=true"] if ep == "webgpu" else [])]
    run_builder(hf_dir, model_dir, precision="int4", ep=ep, cache=out / "builder-cache", extra_options=options)
    # Every decoder projection (attention and MLP), not the LM head.
    targets = add_lora_inputs(model_dir, target="/layers.", default_rank=shape.default_rank)
    shapes = [(t.k, t.n) for t in targets]
    write_adapter(model_dir / ADAPTER_FILE, shapes, dtype=targets[0].dtype, rank=shape.rank, up_scale=0.02, seed=0)
    lora_targets = [t.projection for t in targets]
    manifest = {"shape": asdict(shape), "ep": ep, "lora_targets": lora_targets, "adapter": ADAPTER_FILE}
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
