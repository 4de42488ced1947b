"""Benchmark one or two wheels the same way, interleaved, and write JSON, Markdown and PNG.

Each wheel spec gets its own venv; a worker process per (wheel, round) runs ``wheel_bench.worker``
with that venv's interpreter. Rounds alternate the order (A B, then B A, then A B, ...), so drift
spreads over both wheels and each wheel runs first as often as last. Without a GPU, WebGPU runs on
Mesa's lavapipe: such numbers measure a CPU and are labelled so, and each wheel gets its own shader
cache, cold in round 1 and warm in the rounds after it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import importlib.util
import json
import platform
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import wheel_bench
from ortstack import _run, log
from ortstack.errors import ConfigError, SuiteError, UsageError
from ortstack.lockfile import write_atomic
from ortstack.suites import genai_choice, packages, venv, vulkan
from wheel_bench import report

if TYPE_CHECKING:
    import os
    from collections.abc import Mapping

WORKER_EXTRAS = ("numpy", "onnx")
BUILDER_REQUIREMENTS = ("torch", "transformers", "tokenizers", "onnx", "onnx_ir")
CAPTURE_OPTION = "enableGraphCapture"
PLOTS_TIP = "pip install matplotlib, or run the bench through `nox -s bench`"
OP_VARIANTS = ("base", "lora_fp16", "lora_fp16_adapter", "lora_int8", "lora_int8_raw")
"""What ``wheel_bench.ops`` builds (its ``VARIANTS``; that package needs onnx, the orchestrator does not)."""
PAGED_VARIANTS = ("norm_off", "norm", "norm_unfused")
"""What ``wheel_bench.paged`` builds (its ``VARIANTS``)."""
GENAI_GRAPHS = ("fused", "raw")
"""What ``wheel_bench.genai_run`` runs (its ``GRAPHS``): the wheel's own graph, and the fusion disabled."""
GENAI_ADAPTERS = ("off", "a", "b")
"""``wheel_bench.genai_run.ADAPTERS``: zero-sized defaults, or one of the model's two adapters."""
MODEL_SHAPES = ("h200", "realistic", "tiny")
"""``wheel_bench.genai_model.SHAPES``: h200 is a whole Llama-shaped model for the GPU."""
LEVELS = ("ops", "genai", "paged")
DEFAULT_LEVELS = ("ops", "genai")
"""``paged`` is asked for by name: it measures one operator for the Q/K norm work, which the default
wheels cannot show (1.27 places no OrtValue on the WebGPU device; plugin 0.4.0 refuses the norm
weights), and on lavapipe its cold shader compilation adds about a minute to the quick bench."""


@dataclass(frozen=True, kw_only=True)
class BenchOptions:
    wheels: tuple[str, ...]
    ep: str = "webgpu"
    out_dir: Path
    cache_dir: Path
    levels: tuple[str, ...] = DEFAULT_LEVELS
    warmups: int = 3
    requests: int = 5
    """Timed requests per round; the default two rounds make ten per wheel."""
    rounds: int = 2
    """Worker rounds per wheel, the order reversed in every other one: an even count, so that each wheel
    runs first as often as last (more rounds spread a machine's drift and its first process's warm-up)."""
    ms: tuple[int, ...] = (1, 128, 1024)
    k: int = 4096
    layers: int = 16
    variants: tuple[str, ...] = OP_VARIANTS
    adapter_modes: tuple[bool, ...] = (True, False)
    """Op level, INT8 variants: adapter on, and off (zero-sized adapter weights)."""
    prompt_lengths: tuple[int, ...] = (128, 1024)
    generate: int = 128
    genai_graphs: tuple[str, ...] = GENAI_GRAPHS
    """Model level: the fused graph and the raw one (the fusion disabled), on the same wheel."""
    genai_adapters: tuple[str, ...] = GENAI_ADAPTERS
    genai_profile: bool = False
    """Model level: one more request per graph with onnxruntime's profiler on (GPU time against wall time)."""
    paged_context: int = 4096
    """PagedAttention level: tokens in the cache at decode."""
    paged_prefill: int = 1024
    """PagedAttention level: new tokens at prefill (no past)."""
    paged_layers: int = 16
    paged_variants: tuple[str, ...] = PAGED_VARIANTS
    paged_heads: tuple[int, int] = (32, 8)
    """Query heads, KV heads."""
    paged_head_size: int = 128
    capture_modes: tuple[bool, ...] = (False, True)
    """Graph capture off / on, at both levels."""
    webgpu_options: tuple[tuple[str, str], ...] = ()
    """WebGPU EP options (name, value) every session of every level gets; graph capture is ``capture_modes``' choice."""
    model_shape: str = "realistic"
    model_dir: Path | None = None
    """A model made by ``wheel_bench.genai_model``; built (and cached) when not given."""
    builder_python: Path | None = None
    """An interpreter that has the model builder's requirements; a venv is made when not given."""
    genai_version: str | None = None
    """The user's onnxruntime-genai; by default the newest whose onnxruntime requirement every wheel meets."""
    pip_args: tuple[str, ...] = ()
    system_site_packages: bool = False
    bandwidth_gbs: float | None = None
    command: tuple[str, ...] = field(default_factory=tuple)


def replace(options: BenchOptions, **changes: Any) -> BenchOptions:
    return dataclasses.replace(options, **changes)


def quick(options: BenchOptions) -> BenchOptions:
    """Small shapes that finish on a 2-core machine with CPU or lavapipe in minutes."""
    return replace(
        options,
        warmups=1,
        requests=3,
        ms=(1, 16),
        k=256,
        layers=4,
        prompt_lengths=(16,),
        generate=8,
        genai_adapters=("off", "a"),
        adapter_modes=(True,),
        capture_modes=(False,),
        model_shape="tiny",
        paged_context=64,
        paged_prefill=16,
        paged_layers=4,
    )


def _worker_env(options: BenchOptions, base: Mapping[str, str], wheel_index: int) -> dict[str, str]:
    env = dict(base)
    env["PYTHONPATH"] = str(packages.suite_pythonpath(options.cache_dir))
    env["PYTHONUNBUFFERED"] = "1"
    if options.ep == "webgpu" and _software_adapter(env):
        env["ORT_WEBGPU_EP_ALLOW_SOFTWARE_ADAPTER"] = "1"
        env["MESA_SHADER_CACHE_DIR"] = str(options.out_dir / "shader-cache" / f"wheel{wheel_index}")
    return env


def _software_adapter(env: Mapping[str, str]) -> bool:
    return "lvp" in env.get("VK_DRIVER_FILES", "")


def check_before_installing(options: BenchOptions, env: Mapping[str, str]) -> None:
    """What can be known before any venv or model is made: the wheels are wheels, the EP has a driver."""
    if not 1 <= len(options.wheels) <= 2:  # noqa: PLR2004 - A or A/B
        msg = f"give one or two wheels, not {len(options.wheels)}"
        raise UsageError(msg, tip="--wheel A [--wheel B]")
    if options.rounds < 2 or options.rounds % 2:  # noqa: PLR2004 - A B, then B A
        msg = f"--rounds {options.rounds}: the rounds reverse the order in pairs, so give an even count of 2 or more"
        raise UsageError(msg, tip="--rounds 2 (the default), 4, 6, ...")
    for spec in options.wheels:
        venv.parse_wheel_spec(spec)
    if "paged" in options.levels:
        _check_paged_sizes(options)
    if "genai" in options.levels and options.builder_python is not None and options.model_dir is None:
        _check_builder_python(options.builder_python, env)
    if options.genai_profile and ("genai" not in options.levels or False not in options.capture_modes):
        msg = (
            "--genai-profile profiles a genai request without graph capture "
            "(a replay skips the executor whose node events split its host time)"
        )
        raise UsageError(msg, tip="run it with the genai level and capture off: --levels genai --capture off or off,on")
    if options.webgpu_options:
        _check_webgpu_options(options)
    missing = vulkan.missing_driver(env) if options.ep == "webgpu" else None
    if missing is not None:
        msg = f"the webgpu bench cannot run: {missing} (a machine setup problem: nothing was run)"
        raise ConfigError(msg, tip=vulkan.LAVAPIPE_TIP.replace("`--ep cpu`", "`ortstack bench --ep cpu`"))


def _check_webgpu_options(options: BenchOptions) -> None:
    if options.ep != "webgpu":
        msg = f"--webgpu-option is for the WebGPU EP, and this bench runs --ep {options.ep}"
        raise UsageError(msg, tip="drop --webgpu-option, or run --ep webgpu")
    if any(name == CAPTURE_OPTION for name, _ in options.webgpu_options):
        msg = f"--webgpu-option {CAPTURE_OPTION}: each case sets graph capture itself"
        raise UsageError(msg, tip="choose it with --capture off|on|off,on")


def _check_paged_sizes(options: BenchOptions) -> None:
    """Sizes the paged level can build and take a marginal cost from."""
    problems = []
    if options.paged_layers < 2:  # noqa: PLR2004 - a marginal needs a chain longer than one node
        problems.append(f"--paged-layers {options.paged_layers}: a marginal cost needs L >= 2")
    if options.paged_head_size <= 0 or options.paged_head_size % 2:
        problems.append(f"--paged-head-size {options.paged_head_size}: rotary needs an even, positive head size")
    if options.paged_context < 0 or options.paged_prefill < 1:
        problems.append("--paged-context must be >= 0 and --paged-prefill >= 1")
    if problems:
        raise UsageError("the paged level cannot run: " + "; ".join(problems), tip="see ortstack bench --help")


# The model builder is a module of onnxruntime-genai; the rest is what it imports.
BUILDER_MODULES = (*BUILDER_REQUIREMENTS, "onnxruntime_genai")
_MISSING_MODULES = (
    "import importlib.util, sys; print(*(m for m in sys.argv[1:] if importlib.util.find_spec(m) is None))"
)


def _check_builder_python(python: Path, env: Mapping[str, str]) -> None:
    """``--builder-python`` imports everything the genai model build needs: said before any venv is made."""
    argv: list[str | os.PathLike[str]] = [python, "-c", _MISSING_MODULES, *BUILDER_MODULES]
    try:
        done = _run.run(argv, env=env, capture=True, quiet=True, check=False)
    except OSError as exc:
        msg = f"--builder-python {python} cannot run: {exc.strerror or exc}"
        tip = "give an interpreter that exists, or leave --builder-python out to have a venv made"
        raise UsageError(msg, tip=tip) from None
    if done.returncode != 0:
        msg = f"--builder-python {python} failed ({done.returncode}): {(done.stderr or '').strip()[-500:]}"
        raise UsageError(msg, tip="give a working Python 3 interpreter, or leave --builder-python out")
    missing = done.stdout.split()
    if missing:
        msg = f"--builder-python {python} cannot build the genai model: it lacks {', '.join(missing)}"
        tip = (
            "install them into that interpreter (onnxruntime-genai with --no-deps: only its model builder is used), "
            "or leave --builder-python out to have a venv made"
        )
        raise UsageError(msg, tip=tip)


def finished_result(result_path: Path) -> bool:
    """A worker's result file that it completed (it writes ``finished`` last)."""
    try:
        return "finished" in json.loads(result_path.read_text())
    except (OSError, ValueError):
        return False


def _host() -> dict[str, Any]:
    host: dict[str, Any] = {"platform": platform.platform(), "machine": platform.machine(), "python": sys.version}
    if shutil.which("nvidia-smi") is not None:
        query = ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"]
        result = _run.run(query, capture=True, check=False, quiet=True)
        host["gpus"] = [line.strip() for line in result.stdout.splitlines() if line.strip()]
    return host


def choose_genai(options: BenchOptions, env: Mapping[str, str]) -> genai_choice.GenaiChoice:
    """One onnxruntime-genai for every wheel, so that an A/B compares the runtimes and not two genai
    versions: the newest whose onnxruntime requirement each wheel's onnxruntime meets."""
    with log.step("choose onnxruntime-genai"):
        versions = [
            genai_choice.onnxruntime_version(venv.parse_wheel_spec(spec), env=env, pip_args=options.pip_args)
            for spec in options.wheels
        ]
        return genai_choice.choose(versions, env=env, pip_args=options.pip_args, override=options.genai_version)


def ensure_model(options: BenchOptions, env: Mapping[str, str], genai: genai_choice.GenaiChoice) -> Path:
    """The genai model for this run: given, cached, or built now in a builder venv with ``genai``'s builder."""
    if options.model_dir is not None:
        return options.model_dir
    source = (Path(wheel_bench.__file__).resolve().parent / "genai_model.py").read_bytes()
    recipe = f"{options.model_shape}/{options.ep}/{genai.version}"
    key = hashlib.sha256(source + recipe.encode()).hexdigest()[:16]
    root = options.cache_dir / "genai-models" / key
    if (root / "model" / "manifest.json").is_file():
        log.info(f"reusing genai model {root}")
        return root / "model"
    if options.builder_python is not None:
        python = options.builder_python
    else:
        # The builder's own venv, apart from the wheels: genai may bring the stock onnxruntime it requires.
        builder = venv.ensure(
            genai.requirement,
            cache_dir=options.cache_dir,
            env=env,
            extras=BUILDER_REQUIREMENTS,
            pip_args=options.pip_args,
            system_site_packages=options.system_site_packages,
        )
        python = builder.python
    if root.exists():
        shutil.rmtree(root)
    build_env = {**env, "PYTHONPATH": str(packages.suite_pythonpath(options.cache_dir))}
    argv: list[str | os.PathLike[str]] = [
        python,
        "-m",
        "wheel_bench.genai_model",
        "--out",
        root,
        "--shape",
        options.model_shape,
        "--ep",
        options.ep,
    ]
    with log.step(f"build the {options.model_shape} genai model"):
        try:
            _run.run(argv, env=build_env)
        except subprocess.CalledProcessError as exc:
            shutil.rmtree(root, ignore_errors=True)
            msg = f"building the genai model failed (exit {exc.returncode})"
            raise SuiteError(msg, tip="see the builder output above; --genai-model DIR uses a prebuilt one") from None
    return root / "model"


def interleaved_order(wheel_count: int, rounds: int = 2) -> list[tuple[int, int]]:
    """(wheel index, round) pairs: A B, then B A, and so on for ``rounds``; one wheel simply runs once a round."""
    wheels = list(range(wheel_count))
    return [(w, r) for r in range(1, rounds + 1) for w in (wheels if r % 2 else reversed(wheels))]


def worker_captures(options: BenchOptions) -> list[tuple[bool, ...]]:
    """The graph capture modes of each worker process of a round: one process per mode where a level
    captures. A captured session can slow every later session of its process, captured or not (an
    H200's Vulkan driver: the base chain's kernels 3x slower after captured runs), so no uncaptured
    case runs after a captured one in the same process."""
    if "ops" in options.levels or "genai" in options.levels:
        return [(capture,) for capture in options.capture_modes]
    return [options.capture_modes]


def _plan(
    options: BenchOptions,
    wheel_id: str,
    round_: int,
    model_dir: Path | None,
    captures: tuple[bool, ...] | None = None,
) -> dict[str, Any]:
    """One worker's plan; ``captures`` narrows the capture modes (default: all), and the PagedAttention
    level, which does not capture, runs in the worker of the first mode."""
    captures = options.capture_modes if captures is None else captures
    plan: dict[str, Any] = {
        "wheel": wheel_id,
        "round": round_,
        "captures": list(captures),
        "ep": options.ep,
        "warmups": options.warmups,
        "requests": options.requests,
        "webgpu_options": dict(options.webgpu_options),
    }
    if "ops" in options.levels:
        plan["ops"] = {
            "ms": list(options.ms),
            "k": options.k,
            "layers": options.layers,
            "variants": list(options.variants),
            "adapters": list(options.adapter_modes),
            "captures": list(captures),
        }
    if "paged" in options.levels and captures[:1] == options.capture_modes[:1]:
        plan["paged"] = {
            "context": options.paged_context,
            "prefill": options.paged_prefill,
            "layers": options.paged_layers,
            "variants": list(options.paged_variants),
            "num_heads": options.paged_heads[0],
            "kv_heads": options.paged_heads[1],
            "head_size": options.paged_head_size,
        }
    if "genai" in options.levels and model_dir is not None:
        plan["genai"] = {
            "model_dir": str(model_dir),
            "prompt_lengths": list(options.prompt_lengths),
            "generate": options.generate,
            "capture_modes": list(captures),
            "graphs": list(options.genai_graphs),
            "adapters": list(options.genai_adapters),
            # The profiles themselves are kept for a trace viewer, one folder per wheel.
            "profile_dir": str(options.out_dir / "profiles" / wheel_id) if options.genai_profile else None,
        }
    return plan


def run(options: BenchOptions, env: Mapping[str, str]) -> dict[str, Path]:
    """Run the whole bench; returns the paths of the JSON, Markdown and PNG outputs."""
    check_before_installing(options, env)
    # Said before the run, not after it: the plots are the one part of the report that needs matplotlib.
    plotting = importlib.util.find_spec("matplotlib") is not None
    if not plotting:
        log.warn(f"matplotlib is not installed in {sys.executable}: the report will have no plots ({PLOTS_TIP})")
    env = vulkan.webgpu_env(env, options.out_dir / "shader-cache") if options.ep == "webgpu" else dict(env)
    options.out_dir.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(options.out_dir / "shader-cache", ignore_errors=True)
    ids = ["A", "B"][: len(options.wheels)]
    genai = choose_genai(options, env) if "genai" in options.levels else None
    venvs = [
        venv.ensure(
            spec,
            cache_dir=options.cache_dir,
            env=env,
            # genai without its dependencies: they would pull a second onnxruntime beside the wheel's.
            extras=(*WORKER_EXTRAS, *(genai.dependencies if genai else ())),
            extras_no_deps=(genai.requirement,) if genai else (),
            pip_args=options.pip_args,
            system_site_packages=options.system_site_packages,
        )
        for spec in options.wheels
    ]
    model_dir = ensure_model(options, env, genai) if genai else None
    runs: list[dict[str, Any]] = []
    order = []
    work = options.out_dir / "raw"
    work.mkdir(exist_ok=True)
    split = worker_captures(options)
    for wheel_index, round_ in interleaved_order(len(options.wheels), options.rounds):
        wheel_id = ids[wheel_index]
        for captures in split:
            mode = report.on_off(captures[0]) if len(split) > 1 else None
            name = f"{wheel_id}{round_}" + (f"-capture-{mode}" if mode else "")
            plan_path = work / f"plan-{name}.json"
            result_path = work / f"result-{name}.json"
            plan_path.write_text(json.dumps(_plan(options, wheel_id, round_, model_dir, captures), indent=1))
            argv: list[str | os.PathLike[str]] = [
                venvs[wheel_index].python,
                "-m",
                "wheel_bench.worker",
                plan_path,
                result_path,
            ]
            label = venv.spec_label(options.wheels[wheel_index])
            step = f"round {round_}, wheel {wheel_id}" + (f", capture {mode}" if mode else "")
            with log.step(f"{step}: {label}"):
                try:
                    _run.run(argv, env=_worker_env(options, env, wheel_index))
                except subprocess.CalledProcessError as exc:
                    if not (exc.returncode < 0 and finished_result(result_path)):
                        msg = f"the bench worker for {step} failed (exit {exc.returncode})"
                        raise SuiteError(msg, tip="its output is above; earlier results stay in " + str(work)) from None
                    # Every case was measured and written; the runtime crashed while the process exited.
                    log.warn(f"the bench worker for {step} finished, then died at exit ({exc.returncode})")
            result = json.loads(result_path.read_text())
            runs.append(result)
            order.append(
                {
                    "wheel": wheel_id,
                    "round": round_,
                    "captures": list(captures),
                    "started": result["started"],
                    "finished": result["finished"],
                }
            )
    document = {
        "schema": 1,
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": list(options.command),
        "options": json.loads(json.dumps(asdict(options), default=str)),
        "host": _host(),
        "software_adapter": options.ep == "webgpu" and _software_adapter(env),
        "wheels": [
            {"id": i, "spec": spec, "label": venv.spec_label(spec)} for i, spec in zip(ids, options.wheels, strict=True)
        ],
        "genai": genai.record() if genai else None,
        "order": order,
        "runs": runs,
    }
    document["summary"] = report.summarize(document, bandwidth_gbs=options.bandwidth_gbs)
    return report.write(document, options.out_dir, with_plots=plotting)


def rewrite_report(where: Path, *, bandwidth_gbs: float | None = None) -> dict[str, Path]:
    """Summarize a finished bench again from its ``bench.json`` (``where`` is the file or its folder)
    and rewrite its report with this version's analysis: the measured runs are kept as they are."""
    path = where / "bench.json" if where.is_dir() else where
    tip = "give the --out folder of a finished `ortstack bench`, or its bench.json"
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        msg = f"{path}: no such file"
        raise UsageError(msg, tip=tip) from None
    except OSError as exc:
        msg = f"{path}: cannot be read ({exc.strerror})"
        raise UsageError(msg, tip=tip) from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        msg = f"{path}: not a bench result ({exc})"
        raise UsageError(msg, tip=tip) from None
    if not isinstance(document, dict) or document.get("schema") != 1 or not {"wheels", "runs"} <= document.keys():
        msg = f"{path}: not a bench result (expected schema 1 with wheels and runs)"
        raise UsageError(msg, tip=tip)
    try:
        document["summary"] = report.summarize(document, bandwidth_gbs=bandwidth_gbs)
        markdown = report.markdown(document)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        msg = f"{path}: a bench result this version cannot read ({type(exc).__name__}: {exc}); nothing was written"
        raise UsageError(msg, tip="rewrite it with the ortstack version that wrote it") from None
    paths = {"json": path, "markdown": path.with_name("bench.md")}
    # Replaced whole, never torn: bench.json holds the only copy of the measurements.
    write_atomic(paths["json"], json.dumps(document, indent=1).encode())
    write_atomic(paths["markdown"], markdown.encode())
    if importlib.util.find_spec("matplotlib") is None:
        log.warn(f"matplotlib is not installed in {sys.executable}: the plots were left as they were ({PLOTS_TIP})")
    else:
        paths |= {f"png{index}": png for index, png in enumerate(report.plots(document, path.parent))}
    return paths
