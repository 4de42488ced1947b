"""Build a random-init decoder for onnxruntime-genai offline, with rank-32 INT8 LoRA as overridable inputs.

Steps, all local: train a small BPE tokenizer on generated text; make a random-init Llama of the
chosen shape with transformers; convert it with genai's model builder (INT4, block 32, accuracy
level 4; for WebGPU in the capture-ready form); then put the raw INT8 LoRA pattern beside every
attention and MLP projection: ``Add(base(X), up(down(X)))``, down and up block-32 INT8 MatMulNBits of
rank 32, the pattern ``com.microsoft.MatMulNBitsQLoRA``'s fusion matches. Their packed weights and
scales are graph inputs with zero-sized defaults, so adapter off runs the base alone (a wheel needs
empty-weight MatMulNBits for that); two ``.onnx_adapter`` files (A and B) hold different random
weights for them. The base projections the builder made are checked and recorded in the manifest.

The steps are public: ``wheel_tests.genai_model`` makes its tiny test models with them.

Needs torch, transformers, tokenizers, onnx, onnx_ir, onnxruntime and onnxruntime-genai (the
builder ships with it). Run as ``python -m wheel_bench.genai_model --out DIR --ep webgpu --shape h200``.
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

ADAPTER_FILES = {"a": "adapter-a.onnx_adapter", "b": "adapter-b.onnx_adapter"}
"""The two adapters a build writes, by the name the bench activates them with."""
LORA_PREFIX = "lora."
LORA_TARGETS_FILE = "lora_targets.json"
RANK = 32
ADAPTER_BITS = 8
BLOCK = 32


@dataclass(frozen=True, kw_only=True)
class DecoderShape:
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int
    max_length: int


# About TinyLlama's width (a 1.1B decoder) with few layers, so it builds in a minute on a CPU.
REALISTIC = DecoderShape(hidden=2048, intermediate=5632, layers=4, heads=32, kv_heads=4, vocab=32000, max_length=2048)
TINY = DecoderShape(hidden=256, intermediate=512, layers=2, heads=4, kv_heads=2, vocab=2048, max_length=512)
# Llama 3.2 1B's shape (GQA 32/8, 128k vocabulary, untied head): a whole model for the GPU that a
# 16-core host still builds in minutes; room for a 1,024-token prompt and 128 generated tokens.
H200 = DecoderShape(hidden=2048, intermediate=8192, layers=16, heads=32, kv_heads=8, vocab=128256, max_length=2048)
SHAPES = {"realistic": REALISTIC, "tiny": TINY, "h200": H200}


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
    """A projection given a LoRA branch: its node name, index, ``K`` x ``N`` and the model's float dtype."""

    projection: str
    index: int
    k: int
    n: int
    dtype: str

    def names(self) -> dict[str, str]:
        """The branch's four overridable inputs: packed B and scales of the down and up projections."""
        prefix = f"{LORA_PREFIX}{self.index}"
        return {
            "down_b": f"{prefix}.down.B",
            "down_scales": f"{prefix}.down.scales",
            "up_b": f"{prefix}.up.B",
            "up_scales": f"{prefix}.up.scales",
        }


def _attributes(node: Any) -> dict[str, Any]:
    from onnx import helper  # noqa: PLC0415

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _matmul_nbits(x: str, b: str, scales: str, out: str, *, k: int, n: int, name: str) -> Any:
    """An INT8 block-32 MatMulNBits with implicit zero point and no bias: what the fusion takes as an adapter."""
    from onnx import helper  # noqa: PLC0415

    return helper.make_node(
        "MatMulNBits",
        [x, b, scales],
        [out],
        domain="com.microsoft",
        name=name,
        K=k,
        N=n,
        bits=ADAPTER_BITS,
        block_size=BLOCK,
        accuracy_level=4,
    )


def add_lora_inputs(model_dir: Path, *, target: str) -> list[LoraTarget]:
    """Rewrite the decoder in ``model_dir`` in place with the raw INT8 LoRA pattern beside every
    MatMulNBits whose name contains ``target``: ``Add(base(X), up(down(X)))`` where down is an INT8
    block-32 MatMulNBits [K -> 32] and up one [32 -> N], exactly what ``MatMulNBitsQLoRAFusion`` matches.
    Their packed B and scales become graph inputs (``LoraTarget.names``) with zero-sized defaults:
    adapter off runs the base alone (empty-weight MatMulNBits gives zeros), an adapter overrides them.
    Writes the targets to ``LORA_TARGETS_FILE`` and returns them in index order."""
    import numpy as np  # noqa: PLC0415
    import onnx  # noqa: PLC0415
    from onnx import TensorProto, helper, numpy_helper  # noqa: PLC0415

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
        attrs = _attributes(node)
        lora = LoraTarget(projection=node.name, index=index, k=int(attrs["K"]), n=int(attrs["N"]), dtype=dtype.name)
        names = lora.names()
        blocks = lora.k // BLOCK
        # Dimensions left unnamed: the defaults are zero-sized, an adapter's tensors are full-size.
        graph.input.extend(
            [
                helper.make_tensor_value_info(names["down_b"], TensorProto.UINT8, [None, blocks, BLOCK]),
                helper.make_tensor_value_info(names["down_scales"], elem, [None]),
                helper.make_tensor_value_info(names["up_b"], TensorProto.UINT8, [None, 1, BLOCK]),
                helper.make_tensor_value_info(names["up_scales"], elem, [None]),
            ]
        )
        graph.initializer.extend(
            [
                numpy_helper.from_array(np.zeros((0, blocks, BLOCK), np.uint8), names["down_b"]),
                numpy_helper.from_array(np.zeros(0, dtype), names["down_scales"]),
                numpy_helper.from_array(np.zeros((0, 1, BLOCK), np.uint8), names["up_b"]),
                numpy_helper.from_array(np.zeros(0, dtype), names["up_scales"]),
            ]
        )
        x, base_out = node.input[0], node.output[0]
        node.output[0] = f"{base_out}/lora_base"
        down, up = f"{base_out}/lora_down", f"{base_out}/lora_up"
        lora_nodes[node.name] = [
            _matmul_nbits(
                x, names["down_b"], names["down_scales"], down, k=lora.k, n=RANK, name=f"{node.name}/lora_down"
            ),
            _matmul_nbits(down, names["up_b"], names["up_scales"], up, k=RANK, n=lora.n, name=f"{node.name}/lora_up"),
            helper.make_node("Add", [node.output[0], up], [base_out], name=f"{node.name}/lora_add"),
        ]
        targets.append(lora)
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
    (model_dir / LORA_TARGETS_FILE).write_text(json.dumps([asdict(t) for t in targets], indent=1))
    return targets


def read_targets(model_dir: Path) -> list[LoraTarget]:
    """The targets ``add_lora_inputs`` wrote for ``model_dir``."""
    return [LoraTarget(**t) for t in json.loads((model_dir / LORA_TARGETS_FILE).read_text())]


def adapter_tensors(targets: Sequence[LoraTarget], *, up_scale: float, seed: int) -> dict[str, Any]:
    """Random rank-32 INT8 adapter weights for ``targets``, packed as MatMulNBits takes them (implicit
    zero point 128). Scales make the dequantized down weights ``~N(0, 1/K)`` and the up weights
    ``~N(0, up_scale^2)``, so ``up_scale`` sets how far the adapter moves a projection's output."""
    import numpy as np  # noqa: PLC0415

    rng = np.random.default_rng(seed)
    spread = 74.0  # std of (q - 128) for q uniform in 0..255
    tensors = {}
    for lora in targets:
        names = lora.names()
        blocks = lora.k // BLOCK
        tensors[names["down_b"]] = rng.integers(0, 256, size=(RANK, blocks, BLOCK), dtype=np.uint8)
        tensors[names["down_scales"]] = np.full(RANK * blocks, 1 / (spread * np.sqrt(lora.k)), dtype=lora.dtype)
        tensors[names["up_b"]] = rng.integers(0, 256, size=(lora.n, 1, BLOCK), dtype=np.uint8)
        tensors[names["up_scales"]] = np.full(lora.n, up_scale / spread, dtype=lora.dtype)
    return tensors


def write_adapter(path: Path, targets: Sequence[LoraTarget], *, up_scale: float, seed: int) -> Path:
    """An ``.onnx_adapter`` with :func:`adapter_tensors` for ``targets``."""
    export_adapter(path, adapter_tensors(targets, up_scale=up_scale, seed=seed))
    return path


def base_projections(model_dir: Path, targets: Sequence[LoraTarget]) -> dict[str, Any]:
    """What the builder made of the adapted projections: their bits, block sizes and accuracy levels,
    and whether that is the INT4 block-32 accuracy-level-4 base the fusion and the bench assume."""
    import onnx  # noqa: PLC0415

    config = json.loads((model_dir / "genai_config.json").read_text())
    model = onnx.load(str(model_dir / config["model"]["decoder"]["filename"]), load_external_data=False)
    wanted = {t.projection for t in targets}
    found = [_attributes(n) for n in model.graph.node if n.name in wanted]
    seen = {
        "bits": sorted({int(a.get("bits", 4)) for a in found}),
        "block_size": sorted({int(a["block_size"]) for a in found}),
        "accuracy_level": sorted({int(a.get("accuracy_level", 0)) for a in found}),
    }
    expected = {"bits": [4], "block_size": [BLOCK], "accuracy_level": [4]}
    note = (
        "INT4, block 32, accuracy level 4"
        if seen == expected
        else f"not the INT4 block-32 accuracy-level-4 base asked for: {json.dumps(seen)}"
    )
    return {"count": len(found), **seen, "as_asked": seen == expected, "note": note}


def build(out: Path, shape: DecoderShape, ep: str) -> dict[str, Any]:
    """Build the model into ``out`` (a fresh directory); returns what ``manifest.json`` records."""
    out.mkdir(parents=True, exist_ok=False)
    hf_dir = out / "hf"
    train_tokenizer(hf_dir, _random_corpus(), min(shape.vocab, 8192))
    random_llama(hf_dir, shape, "float16")
    model_dir = out / "model"
    # INT4, block 32, accuracy level 4; on WebGPU the attention-mask subgraph stays on the GPU, which
    # graph capture needs.
    options = ["int4_block_size=32", "int4_accuracy_level=4", *(["enable_webgpu_graph=true"] if ep == "webgpu" else [])]
    run_builder(hf_dir, model_dir, precision="int4", ep=ep, cache=out / "builder-cache", extra_options=options)
    # Every decoder projection (attention and MLP), not the LM head.
    targets = add_lora_inputs(model_dir, target="/layers.")
    for seed, filename in enumerate(ADAPTER_FILES.values(), start=1):
        write_adapter(model_dir / filename, targets, up_scale=0.02, seed=seed)
    manifest = {
        "shape": asdict(shape),
        "ep": ep,
        "lora_targets": [t.projection for t in targets],
        "lora": {"rank": RANK, "bits": ADAPTER_BITS, "block_size": BLOCK, "defaults": "zero-sized"},
        "adapters": ADAPTER_FILES,
        "base_projections": base_projections(model_dir, targets),
    }
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
