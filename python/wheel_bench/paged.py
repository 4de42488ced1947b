"""PagedAttention level: the cost of per-head Q/K RMSNorm, fused into the rotary pass and unfused.

A chain of L fp16 PagedAttention nodes (GQA, rotary on), each with its own key and value cache; the
output of node i is the query of node i + 1, and every node appends the same new K/V tokens (graph
inputs). Each case also runs with one node, so a result gives the marginal cost of a node
((t_L - t_1) / (L - 1)) beside chain / L, which carries the fixed cost of a run. Phases:

- ``decode``: one new token, batch 1, ``context`` tokens already in the cache.
- ``prefill``: ``prefill`` new tokens, no past.

Variants, one model for both norm variants:

- ``norm_off``: no ``q_norm_weight`` / ``k_norm_weight``.
- ``norm``: with the norm weights; the session our patch builds fuses the norm into the rotary pass.
- ``norm_unfused``: the same model, its session created with ``ORT_WEBGPU_PAGED_ATTENTION_QK_NORM_UNFUSED=1``
  (read when the kernel is constructed, at session creation): two norm dispatches, then rotary. A
  wheel without that switch ignores it and runs this variant as ``norm``.

Every input and both caches of every node are device OrtValues bound once (IOBinding); each cache
is bound as its node's input and cache output, so the kernel appends in place and nothing but the
last node's output (bound to the CPU, which also waits for the device) crosses the bus per run. A
wheel that cannot place OrtValues on the device is reported as such, not measured with uploads.
The variants and chain lengths of a phase run interleaved request by request, the order rotated
each request. A wheel whose PagedAttention refuses a variant (stock wheels refuse the norm weights)
reports it *absent*, with the refusal.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from wheel_bench import gpu_time
from wheel_tests import models
from wheel_tests.paged import rotary_tables
from wheel_tests.probes import first_line

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

    from wheel_bench.ep import EpSetup

VARIANTS = ("norm_off", "norm", "norm_unfused")
PHASES = ("decode", "prefill")
UNFUSED_SWITCH = "ORT_WEBGPU_PAGED_ATTENTION_QK_NORM_UNFUSED"
BLOCK_SIZE = 32
"""Cache block size: a power of two the WebGPU kernel takes, and the one its direct paged prefill needs."""
EPSILON = 1e-6
REFUSAL = re.compile(r"Could not find an implementation|not supported|NOT_IMPLEMENTED", re.IGNORECASE)
"""What a wheel says when it has no PagedAttention on this EP, or none that takes this variant."""
FINAL_OUTPUT = "output"


@dataclass(frozen=True, kw_only=True)
class PagedCase:
    variant: str
    phase: str
    new_tokens: int
    past: int
    layers: int
    num_heads: int = 32
    kv_heads: int = 8
    head_size: int = 128

    @property
    def key(self) -> str:
        heads = f"H={self.num_heads}/{self.kv_heads}x{self.head_size}"
        return f"paged/{self.phase}/{self.variant}/{heads}/past={self.past}/new={self.new_tokens}/L={self.layers}"

    @property
    def qk_norm(self) -> bool:
        return self.variant != "norm_off"

    @property
    def unfused(self) -> bool:
        return self.variant == "norm_unfused"

    @property
    def blocks(self) -> int:
        return math.ceil((self.past + self.new_tokens) / BLOCK_SIZE)

    def spec(self) -> models.PagedSpec:
        return models.PagedSpec(
            num_heads=self.num_heads,
            kv_heads=self.kv_heads,
            head_size=self.head_size,
            blocks=self.blocks,
            block_size=BLOCK_SIZE,
            qk_norm=self.qk_norm,
            epsilon=EPSILON,
        )


def cases(
    *, context: int, prefill: int, layers: int, variants: list[str], num_heads: int, kv_heads: int, head_size: int
) -> list[PagedCase]:
    """Every variant of both phases, each with 1 and ``layers`` nodes."""
    phases = {"decode": (1, context), "prefill": (prefill, 0)}
    return [
        PagedCase(
            variant=variant,
            phase=phase,
            new_tokens=new,
            past=past,
            layers=n,
            num_heads=num_heads,
            kv_heads=kv_heads,
            head_size=head_size,
        )
        for phase, (new, past) in phases.items()
        for variant in variants
        for n in sorted({1, layers})
    ]


def cache_names(layer: int) -> tuple[str, str, str, str]:
    """Node ``layer``'s key and value cache inputs, then its key and value cache outputs."""
    return f"key_cache{layer}", f"value_cache{layer}", f"key_cache_out{layer}", f"value_cache_out{layer}"


def build(case: PagedCase, seed: int = 0) -> bytes:
    """The chain of ``case`` as ONNX bytes, checked by ``onnx.checker``; norm weights are initializers."""
    rng = np.random.default_rng(seed)
    spec = case.spec()
    d = case.head_size
    elem = TensorProto.FLOAT16
    cache_shape = [case.blocks, BLOCK_SIZE, case.kv_heads, d]
    inputs = [
        helper.make_tensor_value_info("query", elem, ["T", case.num_heads * d]),
        helper.make_tensor_value_info("key", elem, ["T", case.kv_heads * d]),
        helper.make_tensor_value_info("value", elem, ["T", case.kv_heads * d]),
        helper.make_tensor_value_info("cumulative_sequence_length", TensorProto.INT32, ["B1"]),
        helper.make_tensor_value_info("past_seqlens", TensorProto.INT32, ["B"]),
        helper.make_tensor_value_info("block_table", TensorProto.INT32, ["B", "MB"]),
        helper.make_tensor_value_info("cos_cache", elem, ["P", d // 2]),
        helper.make_tensor_value_info("sin_cache", elem, ["P", d // 2]),
    ]
    outputs = []
    nodes = []
    initializers = []
    query = "query"
    for layer in range(case.layers):
        key_cache, value_cache, key_cache_out, value_cache_out = cache_names(layer)
        inputs += [helper.make_tensor_value_info(name, elem, cache_shape) for name in (key_cache, value_cache)]
        outputs += [helper.make_tensor_value_info(name, elem, cache_shape) for name in (key_cache_out, value_cache_out)]
        names = [query, "key", "value", key_cache, value_cache, "cumulative_sequence_length", "past_seqlens"]
        names += ["block_table", "cos_cache", "sin_cache"]
        if case.qk_norm:
            names += [""] * (models.NORM_WEIGHT_SLOT - len(names))  # slot_mapping, head_sink
            names += [f"q_norm_weight{layer}", f"k_norm_weight{layer}"]
            initializers += [
                numpy_helper.from_array((1.0 + 0.3 * rng.standard_normal(d)).astype(np.float16), name)
                for name in names[-2:]
            ]
        out = FINAL_OUTPUT if layer == case.layers - 1 else f"attention{layer}"
        nodes.append(
            models.paged_attention_node(spec, names, [out, key_cache_out, value_cache_out], name=f"attn{layer}")
        )
        query = out
    outputs.insert(0, helper.make_tensor_value_info(FINAL_OUTPUT, elem, ["T", case.num_heads * d]))
    graph = helper.make_graph(nodes, "paged_chain", inputs, outputs, initializers)
    model = helper.make_model(graph, opset_imports=list(models.OPSETS), ir_version=models.IR_VERSION)
    onnx.checker.check_model(model)
    return bytes(model.SerializeToString())


def shared_inputs(case: PagedCase, seed: int = 0) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The inputs every node reads, and one random cache every node's own caches start from.

    One sequence; its blocks in a shuffled order, as an allocator hands them out.
    """
    rng = np.random.default_rng(seed)
    d = case.head_size
    total = case.past + case.new_tokens
    cos, sin = rotary_tables(total, d)

    def rand(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape, dtype=np.float32).astype(np.float16)

    feeds = {
        "query": rand(case.new_tokens, case.num_heads * d),
        "key": rand(case.new_tokens, case.kv_heads * d),
        "value": rand(case.new_tokens, case.kv_heads * d),
        "cumulative_sequence_length": np.array([0, case.new_tokens], np.int32),
        "past_seqlens": np.array([case.past], np.int32),
        "block_table": rng.permutation(case.blocks).astype(np.int32)[None, :],
        "cos_cache": cos,
        "sin_cache": sin,
    }
    return feeds, rand(case.blocks, BLOCK_SIZE, case.kv_heads, d)


@contextlib.contextmanager
def unfused_switch(*, on: bool) -> Iterator[None]:
    """``ORT_WEBGPU_PAGED_ATTENTION_QK_NORM_UNFUSED`` set to 1 (on) or unset (off) while sessions are made.

    The kernel reads it when it is constructed, at session creation, so sessions of both designs
    live in one worker and their requests interleave.
    """
    before = os.environ.pop(UNFUSED_SWITCH, None)
    if on:
        os.environ[UNFUSED_SWITCH] = "1"
    try:
        yield
    finally:
        os.environ.pop(UNFUSED_SWITCH, None)
        if before is not None:
            os.environ[UNFUSED_SWITCH] = before


def device_of(setup: EpSetup) -> str:
    """The OrtValue device the EP's inputs live on."""
    return "cpu" if setup.kind == "cpu" else "webgpu"


def device_refusal(setup: EpSetup) -> str | None:
    """None when this wheel places OrtValues on the EP's device, else why not."""
    import onnxruntime as ort  # noqa: PLC0415 - the worker's own runtime

    device = device_of(setup)
    try:
        value = ort.OrtValue.ortvalue_from_numpy(np.zeros(4, np.float16), device, 0)
    except Exception as exc:  # noqa: BLE001 - any refusal is the answer
        return (
            f"this wheel cannot place OrtValues on the {device} device ({first_line(exc)}); with the caches "
            "uploaded every run, the time would be the upload's, not the kernel's"
        )
    # onnxruntime names every GPU device without a vendor it knows "cuda" (GetDeviceName), the built-in
    # WebGPU EP's too: what matters is that the value is not in host memory.
    if device != "cpu" and value.device_name().lower() == "cpu":
        return f"an OrtValue asked for on {device} landed on the CPU"
    return None


class Absent(Exception):  # noqa: N818 - a verdict, not a failure
    """This wheel's PagedAttention refused the case."""


def refusal(case: PagedCase, exc: Exception, *, claims_qk_norm: bool) -> Absent | None:
    """``Absent`` with the wheel's own words when ``exc`` is a refusal of ``case``, else None (a failure).

    A build that claims Q/K norm and refuses a norm variant has failed, not lacked it.
    """
    text = str(exc)
    if not REFUSAL.search(text) or (case.qk_norm and claims_qk_norm):
        return None
    words = text.split("Status Message:", 1)[-1]
    return Absent((words.strip().splitlines() or [type(exc).__name__])[0])


@dataclass(kw_only=True)
class Runner:
    """One case's session with every value bound once; ``request`` runs it and returns the seconds taken."""

    case: PagedCase
    session: Any
    binding: Any
    values: dict[str, Any]
    feeds: dict[str, np.ndarray]
    cache: np.ndarray
    """What every cache held before the first run."""
    created_s: float

    def request(self) -> float:
        start = time.perf_counter()
        self.session.run_with_iobinding(self.binding)
        return time.perf_counter() - start

    def output(self) -> np.ndarray:
        return np.asarray(self.binding.get_outputs()[0].numpy())


def runner(
    setup: EpSetup,
    case: PagedCase,
    feeds: dict[str, np.ndarray],
    cache: np.ndarray,
    *,
    claims_qk_norm: bool,
    profile_prefix: str | None = None,
) -> Runner:
    """The session of ``case`` with its inputs and caches on the device; raises ``Absent`` on a refusal.
    ``profile_prefix``: onnxruntime's profiler on (``gpu_time``)."""
    import onnxruntime as ort  # noqa: PLC0415 - the worker's own runtime

    device = device_of(setup)
    model = build(case)
    start = time.perf_counter()
    try:
        with unfused_switch(on=case.unfused):
            session = setup.session(model, profile_prefix=profile_prefix)
    except Exception as exc:
        absent = refusal(case, exc, claims_qk_norm=claims_qk_norm)
        if absent is None:
            raise
        raise absent from exc
    created = time.perf_counter() - start
    binding = session.io_binding()
    values = {}
    for name, array in feeds.items():
        values[name] = ort.OrtValue.ortvalue_from_numpy(array, device, 0)
        binding.bind_ortvalue_input(name, values[name])
    for layer in range(case.layers):
        key_cache, value_cache, key_cache_out, value_cache_out = cache_names(layer)
        for cache_in, cache_out in ((key_cache, key_cache_out), (value_cache, value_cache_out)):
            # A CPU OrtValue wraps the array itself: each cache needs its own.
            values[cache_in] = ort.OrtValue.ortvalue_from_numpy(cache.copy() if device == "cpu" else cache, device, 0)
            binding.bind_ortvalue_input(cache_in, values[cache_in])
            binding.bind_ortvalue_output(cache_out, values[cache_in])  # the kernel appends in place
    binding.bind_output(FINAL_OUTPUT, "cpu")
    return Runner(
        case=case, session=session, binding=binding, values=values, feeds=feeds, cache=cache, created_s=created
    )


def first_run(run: Runner, *, claims_qk_norm: bool) -> tuple[float, bool | None]:
    """The first (cold) run's seconds, and whether it wrote the new K into node 0's own cache buffer
    (None: this onnxruntime cannot read a device buffer back)."""
    case = run.case
    try:
        seconds = run.request()
    except Exception as exc:
        absent = refusal(run.case, exc, claims_qk_norm=claims_qk_norm)
        if absent is None:
            raise
        raise absent from exc
    slot = case.past  # the first new token's position
    block = int(run.feeds["block_table"][0, slot // BLOCK_SIZE])
    cache = to_numpy(run.values["key_cache0"])
    if cache is None:
        return seconds, None
    return seconds, not np.array_equal(cache[block, slot % BLOCK_SIZE], run.cache[block, slot % BLOCK_SIZE])


def to_numpy(value: Any) -> np.ndarray | None:
    """A device OrtValue's contents, copied to the host; None where this onnxruntime has no ``copy_tensors``."""
    import onnxruntime as ort  # noqa: PLC0415 - the worker's own runtime

    if value.device_name().lower() == "cpu":
        return np.asarray(value.numpy())
    if not hasattr(ort, "copy_tensors"):
        return None
    host = ort.OrtValue.ortvalue_from_numpy(np.empty(value.shape(), np.float16))
    ort.copy_tensors([value], [host])
    return np.asarray(host.numpy())


def _describe(case: PagedCase) -> dict[str, Any]:
    return {
        "level": "paged",
        "key": case.key,
        "variant": case.variant,
        "phase": case.phase,
        "new_tokens": case.new_tokens,
        "past": case.past,
        "layers": case.layers,
        "num_heads": case.num_heads,
        "kv_heads": case.kv_heads,
        "head_size": case.head_size,
        "block_size": BLOCK_SIZE,
    }


def measure(
    setup: EpSetup, chain: list[PagedCase], *, warmups: int, requests: int, claims_qk_norm: bool = False
) -> list[dict[str, Any]]:
    """Each phase's cases interleaved request by request; refused variants come back absent.

    ``claims_qk_norm``: the wheel's build info says its patches add Q/K norm, so a refusal of it fails.
    """
    refused = device_refusal(setup)
    if refused is not None:
        return [{**_describe(case), "error": f"not measured: {refused}"} for case in chain]
    results: list[dict[str, Any]] = []
    for phase in PHASES:
        phase_cases = [c for c in chain if c.phase == phase]
        results += _measure_phase(setup, phase_cases, warmups=warmups, requests=requests, claims_qk_norm=claims_qk_norm)
    return results


def _measure_phase(
    setup: EpSetup, chain: list[PagedCase], *, warmups: int, requests: int, claims_qk_norm: bool
) -> list[dict[str, Any]]:
    if not chain:
        return []
    runners, found, absent = _open(setup, chain, claims_qk_norm=claims_qk_norm)
    samples = interleave(runners, warmups=warmups, requests=requests)
    results = []
    for case in chain:
        if case.variant in absent:
            results.append({**_describe(case), "error": absent[case.variant]})
            continue
        results.append(
            {
                **_describe(case),
                **found[case.key],
                "samples_ms": samples[case.key],
                "output_finite": bool(np.isfinite(runners[case.key].output()).all()),
                "gpu": _gpu_times(setup, case, warmups=warmups, requests=requests, claims_qk_norm=claims_qk_norm),
            }
        )
    return results


def _gpu_times(setup: EpSetup, case: PagedCase, *, warmups: int, requests: int, claims_qk_norm: bool) -> dict[str, Any]:
    """The case's dispatches timed on the GPU in a profiled session of its own (``gpu_time``), or why not."""

    def open_profiled(prefix: str) -> tuple[Any, Callable[[], object]]:
        feeds, cache = shared_inputs(case)
        run = runner(setup, case, feeds, cache, claims_qk_norm=claims_qk_norm, profile_prefix=prefix)
        return run.session, run.request

    return gpu_time.measure(setup.kind, open_profiled, warmups=warmups, requests=requests)


def _open(
    setup: EpSetup, chain: list[PagedCase], *, claims_qk_norm: bool
) -> tuple[dict[str, Runner], dict[str, dict[str, Any]], dict[str, str]]:
    """Every case's runner after its first run, what that run found, and the refused variants with why.

    Both chain lengths of a refused variant are absent: a marginal cost needs both.
    """
    feeds, cache = shared_inputs(chain[0])
    runners: dict[str, Runner] = {}
    found: dict[str, dict[str, Any]] = {}
    absent: dict[str, str] = {}
    for case in chain:
        if case.variant in absent:
            continue
        try:
            run = runner(setup, case, feeds, cache, claims_qk_norm=claims_qk_norm)
            first, in_place = first_run(run, claims_qk_norm=claims_qk_norm)
        except Absent as refusal:
            absent[case.variant] = f"absent: {refusal}"
            continue
        runners[case.key] = run
        found[case.key] = {
            "session_create_ms": run.created_s * 1e3,
            "first_run_ms": first * 1e3,
            "cache_in_place": in_place,
            "unfused_switch": case.unfused,
        }
    return {key: run for key, run in runners.items() if run.case.variant not in absent}, found, absent


class Timed(Protocol):
    def request(self) -> float: ...


def interleave(runners: Mapping[str, Timed], *, warmups: int, requests: int) -> dict[str, list[float]]:
    """Milliseconds per request of each runner: every request runs each case once, the order rotated."""
    keys = list(runners)
    for _ in range(warmups):
        for key in keys:
            runners[key].request()
    samples: dict[str, list[float]] = {key: [] for key in keys}
    for index in range(requests if keys else 0):
        shift = index % len(keys)
        for key in keys[shift:] + keys[:shift]:  # so that no case always runs first
            samples[key].append(runners[key].request() * 1e3)
    return samples
