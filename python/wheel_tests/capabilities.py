"""What the installed wheel set can do: schema registry, build info and probes in a child process.

Each feature is ``present``, ``absent`` or ``unknown`` with the evidence beside it. The matrix is
printed at the start of a run; tests consult it to pick between checking a feature's numbers and
asserting the baseline behaviour of a wheel that lacks it.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import onnxruntime as ort

from ortstack.build.buildinfo import BuildInfo, read_from_installed
from wheel_tests import eps
from wheel_tests.probes import ProbeResult, run_probe

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

State = Literal["present", "absent", "unknown"]
QLORA_OP = "MatMulNBitsQLoRA"


@dataclass(frozen=True, kw_only=True)
class Feature:
    name: str
    state: State
    evidence: str


@dataclass(frozen=True, kw_only=True)
class EpStatus:
    ep: eps.EpKind
    runnable: bool
    reason: str
    """Why not runnable, or which device/version runs it."""


@cache
def _schemas() -> dict[str, object]:
    from onnxruntime.capi import onnxruntime_pybind11_state as state  # noqa: PLC0415 - private module, looked up lazily

    return {f"{s.domain}.{s.name}": s for s in state.get_all_operator_schema()}


def schema(name: str, domain: str = "com.microsoft") -> object | None:
    return _schemas().get(f"{domain}.{name}")


def schema_inputs(name: str) -> list[str]:
    found = schema(name)
    return [i.name for i in getattr(found, "inputs", [])]


def schema_attributes(name: str) -> list[str]:
    found = schema(name)
    return sorted(getattr(found, "attributes", {}))


def has_qlora_schema() -> bool:
    return schema(QLORA_OP) is not None


def has_lora_api() -> bool:
    return all(hasattr(ort, n) for n in ("AdapterFormat", "LoraAdapter")) and hasattr(
        ort.RunOptions, "add_active_adapter"
    )


@cache
def build_info() -> BuildInfo | None:
    return read_from_installed()


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def distributions_of_the_package() -> list[str]:
    """Every installed distribution whose files hold the ``onnxruntime`` package imported here, e.g.
    ``["onnxruntime 1.32.0", "onnxruntime-webgpu 1.30.0"]``: more than one means their files overwrote
    each other (pip puts the stock onnxruntime a plugin EP wheel requires beside a core of another name)."""
    imported = Path(ort.__file__).resolve()
    found = []
    for dist in importlib.metadata.distributions():
        files = dist.files or []
        if any(
            f.parts == ("onnxruntime", "__init__.py") and Path(str(dist.locate_file(f))).resolve() == imported
            for f in files
        ):
            found.append(f"{dist.metadata['Name']} {dist.version}")
    return sorted(found)


def wheel_set() -> str:
    """The distributions under test, e.g. ``onnxruntime 1.31.1 + onnxruntime-ep-webgpu 0.4.0``."""
    names = ["onnxruntime", "onnxruntime-webgpu", "onnxruntime-ep-webgpu", "onnxruntime-genai"]
    return " + ".join(f"{n} {v}" for n in names if (v := _version(n)) is not None) or f"onnxruntime {ort.__version__}"


@cache
def device_probe(ep: eps.EpKind) -> ProbeResult:
    """A tiny session on ``ep`` in a child process: whether it answered, and how that process exited."""
    return run_probe("device", "--ep", ep)


@cache
def ep_status(ep: eps.EpKind) -> EpStatus:
    """Whether ``ep`` can run here: offered by the wheel set, and a device answers a real session."""
    absent = eps.why_absent(ep)
    if absent is not None:
        return EpStatus(ep=ep, runnable=False, reason=absent)
    probe = device_probe(ep)
    if probe.outcome != "ok":
        return EpStatus(ep=ep, runnable=False, reason=f"no usable device ({probe.describe()})")
    answered = "device answered a probe session"
    return EpStatus(ep=ep, runnable=True, reason=f"{answered} ({probe.detail})" if probe.detail else answered)


@cache
def empty_weight_probe(ep: eps.EpKind, dtype: str = "fp32", *, bits: int = 4, bias: bool = False) -> ProbeResult:
    args = ["--ep", ep, "--dtype", dtype, "--bits", str(bits)]
    return run_probe("empty-weight", *args, *(["--bias"] if bias else []))


@cache
def matmul_nbits_probe(ep: eps.EpKind, bits: int, dtype: str = "fp32") -> ProbeResult:
    """Whether ``ep`` runs a ``bits``-bit MatMulNBits (onnxruntime 1.21's CPU EP refuses 8 bits)."""
    return run_probe("matmul-nbits", "--ep", ep, "--bits", str(bits), "--dtype", dtype)


@cache
def paged_attention_probe(ep: eps.EpKind) -> ProbeResult:
    """Whether ``ep`` has a PagedAttention kernel that gives the reference's numbers."""
    return run_probe("paged-attention", "--ep", ep)


def absent_because(probe: ProbeResult) -> str | None:
    """Why a feature counts as absent, from its probe: only a refusal (an error) is absence.

    ``ok`` is present; ``mismatch`` is present but wrong and ``crash`` is present but broken, both
    for the test to fail on. The reason is the wheel's own first line of refusal.
    """
    return probe.detail if probe.outcome == "error" else None


def assert_refused(make_session: Callable[[], object], reason: str) -> None:
    """The refusal a probe saw happens in this process too: the session is not made."""
    try:
        make_session()
    except Exception:  # noqa: BLE001 - onnxruntime refuses with several exception types
        return
    msg = f"a probe saw the wheel refuse ({reason}), but this process made the session"
    raise AssertionError(msg)


def claimed(feature: str) -> bool:
    """Whether an ortstack build says its patches add ``feature`` (build info ``extra.features``).

    Names: ``qlora``, ``empty_weights``, ``qk_norm``. A claimed feature that does not work fails the
    suite instead of being recorded as a baseline.
    """
    return _claims(build_info(), feature)


def _claims(info: BuildInfo | None, feature: str) -> bool:
    return info is not None and feature in info.extra.get("features", ())


@cache
def plugin_build_info() -> BuildInfo | None:
    return read_from_installed("onnxruntime_ep_webgpu")


def kernel_claimed(feature: str, ep: eps.EpKind) -> bool:
    """Whether the build that holds ``ep``'s kernels claims ``feature``: the plugin EP wheel's for the plugin
    lane (its kernels are in that library, whatever core hosts it), the core's otherwise. For kernel
    features only (``qk_norm``): a schema, as MatMulNBitsQLoRA's, lives in the core whichever EP runs it."""
    return _claims(plugin_build_info(), feature) if ep == "plugin" else claimed(feature)


def matrix(runnable: Iterable[eps.EpKind]) -> list[Feature]:
    """The feature matrix for the EPs that can run (probes run only on those)."""
    runnable = list(runnable)
    info = build_info()
    rows = [
        Feature(
            name="build info",
            state="present" if info else "absent",
            evidence=f"ortstack build {info.version}: ORT {info.ort_commit[:12]}, variant {info.variant}, "
            f"{len(info.patches)} patches"
            if info
            else "stock wheel (no ortstack build info)",
        ),
        Feature(
            name="MatMulNBits weight_prepacked",
            state="present" if "weight_prepacked" in schema_attributes("MatMulNBits") else "absent",
            evidence="schema attribute",
        ),
        Feature(
            name=f"{QLORA_OP} schema",
            state="present" if has_qlora_schema() else "absent",
            evidence="schema registry" + (" (build info claims it)" if claimed("qlora") else ""),
        ),
        Feature(
            name="QLoRA fusion",
            state="unknown" if has_qlora_schema() else "absent",
            evidence="checked by test_qlora_fusion on each WebGPU EP"
            if has_qlora_schema()
            else f"no {QLORA_OP} operator to fuse into",
        ),
        Feature(
            name="PagedAttention q/k norm schema",
            state="present" if "q_norm_weight" in schema_inputs("PagedAttention") else "absent",
            evidence="q_norm_weight input in the schema",
        ),
        Feature(
            name="LoRA adapters",
            state="present" if has_lora_api() else "absent",
            evidence="AdapterFormat, LoraAdapter, RunOptions.add_active_adapter",
        ),
    ]
    for ep in runnable:
        probe = matmul_nbits_probe(ep, 8)
        rows.append(
            Feature(
                name=f"MatMulNBits 8-bit ({ep})",
                state="present" if absent_because(probe) is None else "absent",
                evidence=probe.describe(),
            )
        )
        probe = paged_attention_probe(ep)
        rows.append(
            Feature(
                name=f"PagedAttention kernel ({ep})",
                state="present" if absent_because(probe) is None else "absent",
                evidence=probe.describe(),
            )
        )
    for ep in runnable:
        probe = empty_weight_probe(ep)
        rows.append(
            Feature(
                name=f"empty-weight MatMulNBits ({ep})",
                state="present" if probe.outcome == "ok" else "absent",
                evidence=probe.describe(),
            )
        )
    for ep in runnable:
        probe = run_probe("qk-norm", "--ep", ep)
        rows.append(
            Feature(
                name=f"PagedAttention q/k norm ({ep})",
                state="present" if probe.outcome == "ok" else "absent",
                evidence=probe.describe(),
            )
        )
    genai = _version("onnxruntime-genai")
    rows.append(
        Feature(
            name="genai capture identity",
            state="unknown",
            evidence=f"onnxruntime-genai {genai}: settled by the genai tests (see the end of the run)"
            if genai
            else "onnxruntime-genai not installed (ortstack test --genai)",
        )
    )
    return rows
