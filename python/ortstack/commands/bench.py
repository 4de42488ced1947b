"""``ortstack bench``: measure one wheel, or two A/B, at op and model level."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ortstack import log
from ortstack.commands import add_genai_version_option, add_install_options, install_args
from ortstack.errors import UsageError
from ortstack.suites import bench

if TYPE_CHECKING:
    from ortstack.settings import Settings

HELP = "Benchmark one or two wheels, interleaved A B B A: op chains, PagedAttention, genai TTFT/decode; JSON, MD, PNG."


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(","))


EXAMPLES = """examples:
  ortstack bench --quick --ep cpu           the stock baselines, small shapes, on the CPU EP (minutes)
  ortstack bench --wheel dist/A.whl --wheel dist/B.whl --ep webgpu   A/B of two wheels on WebGPU"""
COMMON = ("--cache-dir", "--work-dir")


def _name_value(text: str) -> tuple[str, str]:
    name, equals, value = text.partition("=")
    if not name or not equals:
        msg = f"expected NAME=VALUE, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return name, value


def _on_off(text: str) -> tuple[bool, ...]:
    """``on``, ``off`` or both as a comma list, in the order given."""
    words = text.split(",")
    if not words or any(w not in {"on", "off"} for w in words) or len(set(words)) != len(words):
        msg = f"expected a comma list of on and off, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return tuple(w == "on" for w in words)


def _names(text: str, known: tuple[str, ...]) -> tuple[str, ...]:
    """A comma list of names from ``known``, each once."""
    names = tuple(text.split(","))
    unknown = [n for n in names if n not in known]
    if unknown or len(set(names)) != len(names):
        msg = f"expected a comma list of {', '.join(known)} (each once), got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return names


def _variants(text: str) -> tuple[str, ...]:
    return _names(text, bench.OP_VARIANTS)


def _paged_variants(text: str) -> tuple[str, ...]:
    return _names(text, bench.PAGED_VARIANTS)


def _genai_graphs(text: str) -> tuple[str, ...]:
    return _names(text, bench.GENAI_GRAPHS)


def _genai_adapters(text: str) -> tuple[str, ...]:
    return _names(text, bench.GENAI_ADAPTERS)


def _levels(text: str) -> tuple[str, ...]:
    return _names(text, bench.LEVELS)


def _heads(text: str) -> tuple[int, int]:
    """``Q/KV``: query heads and KV heads, the query heads a multiple of the KV heads (GQA)."""
    query, _, kv = text.partition("/")
    if not (query.isdigit() and kv.isdigit() and int(kv) > 0 and int(query) % int(kv) == 0):
        msg = f"expected Q/KV heads with Q a multiple of KV, e.g. 32/8, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return int(query), int(kv)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--wheel",
        action="append",
        default=[],
        help="a .whl path or requirement(s) joined with '+', e.g. onnxruntime==1.31.1+onnxruntime-ep-webgpu==0.4.0;"
        " give twice for A/B",
    )
    parser.add_argument("--ep", choices=["cpu", "webgpu"], default="webgpu", help="execution provider (default webgpu)")
    parser.add_argument("--quick", action="store_true", help="small shapes that finish in minutes on a CPU")
    parser.add_argument("--out", type=Path, help="output directory (default: WORK_DIR/bench)")
    parser.add_argument(
        "--levels",
        type=_levels,
        help="comma list of ops, genai, paged (default ops,genai; paged: PagedAttention with and without Q/K norm)",
    )
    parser.add_argument("--requests", type=int, help="timed requests per case and round")
    parser.add_argument(
        "--rounds",
        type=int,
        help="worker rounds per wheel, the order reversed in every other one: A B B A for 2 (default), "
        "A B B A A B B A for 4; more spread a machine's drift over both wheels",
    )
    parser.add_argument("--warmups", type=int, help="warmup requests per case and round")
    parser.add_argument("--m", type=_ints, help="op level: comma list of M")
    parser.add_argument("--k", type=int, help="op level: K = N")
    parser.add_argument("--layers", type=int, help="op level: chain length L")
    parser.add_argument(
        "--variants",
        type=_variants,
        help=f"op level: comma list of {', '.join(bench.OP_VARIANTS)} (default all); lora_int8 is fused where "
        "the wheel has MatMulNBitsQLoRA, lora_int8_raw the same model with the fusion disabled",
    )
    parser.add_argument(
        "--adapter",
        type=_on_off,
        help="op level, INT8 variants: on, off (zero-sized adapter weights) or on,off (default on,off; --quick: on)",
    )
    parser.add_argument(
        "--webgpu-option",
        type=_name_value,
        action="append",
        metavar="NAME=VALUE",
        help="a WebGPU EP option for every session of every level, as onnxruntime names it without its prefix, "
        "e.g. storageBufferCacheMode=simple or validationMode=disabled (repeatable; graph capture is --capture)",
    )
    parser.add_argument("--paged-context", type=int, help="paged level: tokens in the cache at decode (default 4096)")
    parser.add_argument("--paged-prefill", type=int, help="paged level: new tokens at prefill (default 1024)")
    parser.add_argument("--paged-layers", type=int, help="paged level: chain length L (default 16)")
    parser.add_argument(
        "--paged-variants",
        type=_paged_variants,
        help=f"paged level: comma list of {', '.join(bench.PAGED_VARIANTS)} (default all)",
    )
    parser.add_argument("--paged-heads", type=_heads, help="paged level: query/KV heads (default 32/8)")
    parser.add_argument("--paged-head-size", type=int, help="paged level: head size (default 128)")
    parser.add_argument("--prompts", type=_ints, help="model level: comma list of prompt lengths")
    parser.add_argument("--generate", type=int, help="model level: tokens to generate")
    parser.add_argument(
        "--model-shape",
        choices=bench.MODEL_SHAPES,
        help="model level: the decoder built (default realistic; --quick: tiny; h200: Llama 3.2 1B's shape, 16 layers)",
    )
    parser.add_argument(
        "--genai-graphs",
        type=_genai_graphs,
        help="model level: comma list of fused (the wheel's graph) and raw (MatMulNBitsQLoRAFusion disabled)"
        " (default fused,raw)",
    )
    parser.add_argument(
        "--genai-adapters",
        type=_genai_adapters,
        help="model level: comma list of off (zero-sized adapter weights), a, b (default off,a,b; --quick: off,a)",
    )
    parser.add_argument(
        "--genai-profile",
        action="store_true",
        help="model level: also run the longest prompt once per graph with onnxruntime's profiler on (capture off) "
        "and report its GPU time beside its wall time: where a request's time goes",
    )
    capture = parser.add_mutually_exclusive_group()
    capture.add_argument(
        "--capture",
        type=_on_off,
        help=(
            "WebGPU graph capture at the op and model levels: on, off or off,on (default off,on; --quick: off); "
            "each mode runs in a worker process of its own"
        ),
    )
    capture.add_argument("--no-capture", action="store_true", help="the same as --capture off")
    parser.add_argument("--genai-model", type=Path, help="a model made by wheel_bench.genai_model (skips the build)")
    parser.add_argument("--builder-python", type=Path, help="interpreter with torch/transformers for the model build")
    add_genai_version_option(parser)
    parser.add_argument("--bandwidth-gbs", type=float, help="device bandwidth for the floor column")
    parser.add_argument(
        "--report-from",
        type=Path,
        metavar="DIR",
        help="measure nothing: summarize the finished bench in DIR (its --out, or its bench.json) again and rewrite "
        "its report with this version's analysis; its measured runs are kept",
    )
    add_install_options(parser)


def options_from_args(args: argparse.Namespace, config: Settings) -> bench.BenchOptions:
    """The bench's options: defaults, then ``--quick``'s small shapes, then what was given."""
    default_wheel = "onnxruntime-webgpu==1.27.0"
    wheels = tuple(args.wheel) or (default_wheel, "onnxruntime==1.31.1+onnxruntime-ep-webgpu==0.4.0")
    options = bench.BenchOptions(
        wheels=wheels,
        ep=args.ep,
        out_dir=(args.out or config.work_dir / "bench").resolve(),
        cache_dir=config.cache_dir,
        builder_python=args.builder_python,
        model_dir=args.genai_model.resolve() if args.genai_model else None,
        genai_version=args.genai_version,
        pip_args=install_args(args),
        system_site_packages=args.system_site_packages,
        bandwidth_gbs=args.bandwidth_gbs,
        command=("ortstack", *sys.argv[1:]),
    )
    if args.quick:
        options = bench.quick(options)
    overrides = {
        "levels": args.levels,
        "requests": args.requests,
        "rounds": args.rounds,
        "warmups": args.warmups,
        "ms": args.m,
        "k": args.k,
        "layers": args.layers,
        "variants": args.variants,
        "adapter_modes": args.adapter,
        "prompt_lengths": args.prompts,
        "generate": args.generate,
        "model_shape": args.model_shape,
        "genai_graphs": args.genai_graphs,
        "genai_adapters": args.genai_adapters,
        "genai_profile": args.genai_profile or None,
        "capture_modes": (False,) if args.no_capture else args.capture,
        "paged_context": args.paged_context,
        "paged_prefill": args.paged_prefill,
        "paged_layers": args.paged_layers,
        "paged_variants": args.paged_variants,
        "paged_heads": args.paged_heads,
        "paged_head_size": args.paged_head_size,
        "webgpu_options": tuple(args.webgpu_option) if args.webgpu_option else None,
    }
    return bench.replace(options, **{k: v for k, v in overrides.items() if v is not None})


def main(args: argparse.Namespace, config: Settings) -> int:
    if args.report_from is not None:
        if args.wheel:
            msg = "--report-from measures nothing, so it takes no --wheel"
            raise UsageError(msg, tip="ortstack bench --report-from DIR (the wheels are those DIR's bench measured)")
        paths = bench.rewrite_report(args.report_from, bandwidth_gbs=args.bandwidth_gbs)
        done = f"report rewritten from {paths['json']}"
    else:
        options = options_from_args(args, config)
        paths = bench.run(options, config.env)
        done = f"bench written to {options.out_dir}"
    for kind, path in paths.items():
        log.info(f"{kind}: {path}")
    log.success(done)
    return 0
