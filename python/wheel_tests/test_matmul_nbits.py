"""MatMulNBits 4/8-bit, block 32, against the float64 reference on each execution provider."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pytest

from wheel_tests import capabilities, eps, models, reference
from wheel_tests.capabilities import assert_refused

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import NoReturn

    import onnxruntime as ort

K, N = 256, 128
DTYPES = [pytest.param(np.float32, id="fp32"), pytest.param(np.float16, id="fp16")]


_SESSIONS: dict[
    tuple[object, ...], tuple[ort.InferenceSession, reference.QuantizedWeight, reference.FloatArray | None]
] = {}


def _case(
    ep: eps.EpKind, dtype: type[np.floating], bits: int, *, zero_points: bool, bias: bool
) -> tuple[ort.InferenceSession, reference.QuantizedWeight, reference.FloatArray | None]:
    """One session per weight configuration, shared by the M values (shader compiles dominate)."""
    key = (ep, np.dtype(dtype).name, bits, zero_points, bias)
    if key in _SESSIONS:
        return _SESSIONS[key]
    rng = np.random.default_rng(bits * 10 + zero_points * 2 + bias)
    weight = reference.quantize(rng.standard_normal((K, N)), bits=bits, zero_points=zero_points, dtype=dtype)
    bias_values = rng.standard_normal(N).astype(dtype) if bias else None
    session = eps.make_session(models.matmul_nbits(weight, dtype=dtype, bias=bias_values), ep)
    _SESSIONS[key] = (session, weight, bias_values)
    return _SESSIONS[key]


def _name(dtype: type[np.floating]) -> str:
    return "fp16" if dtype == np.float16 else "fp32"


def _activations(m: int, dtype: type[np.floating]) -> reference.FloatArray:
    return np.random.default_rng(m).standard_normal((m, K)).astype(dtype)


# Every level of every factor, and every pair of levels of two factors, appears (a pairwise design):
# the full cross would compile about three times as many shaders, which dominates on lavapipe.
CONFIGS = [
    pytest.param(np.float32, 4, False, False, id="fp32-4-symmetric-nobias"),
    pytest.param(np.float32, 8, True, True, id="fp32-8-zero_points-bias"),
    pytest.param(np.float32, 4, True, False, id="fp32-4-zero_points-nobias"),
    pytest.param(np.float16, 4, True, True, id="fp16-4-zero_points-bias"),
    pytest.param(np.float16, 8, False, False, id="fp16-8-symmetric-nobias"),
    pytest.param(np.float16, 8, False, True, id="fp16-8-symmetric-bias"),
]


@pytest.mark.parametrize("m", [1, 16, 128])
@pytest.mark.parametrize(("dtype", "bits", "zero_points", "bias"), CONFIGS)
def test_matmul_nbits(
    ep: eps.EpKind,
    dtype: type[np.floating],
    bits: int,
    *,
    zero_points: bool,
    bias: bool,
    m: int,
    absent: Callable[[str], NoReturn],
) -> None:
    """Where the EP has no kernel for these bits (onnxruntime 1.21's CPU EP: 4 only), its refusal is
    the test ends absent; where it has one, the numbers must match."""
    refusal = capabilities.absent_because(capabilities.matmul_nbits_probe(ep, bits, _name(dtype)))
    if refusal is not None:
        assert_refused(lambda: _case(ep, dtype, bits, zero_points=zero_points, bias=bias), refusal)
        absent(f"no {bits}-bit {_name(dtype)} MatMulNBits on {ep}: {refusal}")
    session, weight, bias_values = _case(ep, dtype, bits, zero_points=zero_points, bias=bias)
    a = _activations(m, dtype)
    (y,) = session.run(None, {"A": a})
    assert y.dtype == dtype
    reference.assert_close(y, reference.matmul_nbits(a, weight, bias_values), dtype=dtype)


@pytest.mark.parametrize("bits", [4, 8])
def test_a_smaller_than_one_subgroup_matrix(ep: eps.EpKind, bits: int, absent: Callable[[str], NoReturn]) -> None:
    """fp16, K = 32, M = 4 to 8: a rank-32 LoRA up projection over a short prompt. On GPUs with subgroup
    matrices, onnxruntime 1.30.0 gives M >= 4 to a kernel whose pipeline needs A to hold one 16 x 16 matrix
    (512 bytes): Dawn refused the dispatch for M < 8 ("bound with size 256 ... is too small")."""
    rng = np.random.default_rng(40 + bits)
    weight = reference.quantize(rng.standard_normal((32, 64)), bits=bits, zero_points=False, dtype=np.float16)
    model = models.matmul_nbits(weight, dtype=np.float16)
    refusal = capabilities.absent_because(capabilities.matmul_nbits_probe(ep, bits, "fp16"))
    if refusal is not None:
        assert_refused(lambda: eps.make_session(model, ep), refusal)
        absent(f"no {bits}-bit fp16 MatMulNBits on {ep}: {refusal}")
    session = eps.make_session(model, ep)
    for m in (4, 7, 8):
        a = rng.standard_normal((m, 32)).astype(np.float16)
        (y,) = session.run(None, {"A": a})
        reference.assert_close(y, reference.matmul_nbits(a, weight, None), dtype=np.float16, what=f"M = {m}")


def test_configs_are_pairwise_complete() -> None:
    """The reduced design still covers every pair of factor levels."""
    rows = [p.values for p in CONFIGS]
    for i in range(4):
        for j in range(i + 1, 4):
            levels_i = {r[i] for r in rows}
            levels_j = {r[j] for r in rows}
            pairs = {(r[i], r[j]) for r in rows}
            assert pairs == {(a, b) for a in levels_i for b in levels_j}, (i, j)


@pytest.mark.parametrize("dtype", DTYPES)
def test_flipped_scale_makes_the_comparison_fail(ep: eps.EpKind, dtype: type[np.floating]) -> None:
    """The harness is not vacuous: a reference with one scale negated must not match the EP."""
    session, weight, bias_values = _case(ep, dtype, 4, zero_points=False, bias=False)
    a = _activations(16, dtype)
    (y,) = session.run(None, {"A": a})
    reference.assert_close(y, reference.matmul_nbits(a, weight, bias_values), dtype=dtype)
    with pytest.raises(AssertionError, match="max abs error"):
        reference.assert_close(y, reference.matmul_nbits(a, weight.with_scale_flipped(), bias_values), dtype=dtype)


def test_fallback_to_another_ep_is_caught(ep: eps.EpKind) -> None:
    """A session that ended up on another EP is an error, whichever EP was asked for."""
    session, _, _ = _case(ep, np.float32, 4, zero_points=False, bias=False)
    eps.assert_runs_on(session, ep)
    other: eps.EpKind = "webgpu" if ep == "cpu" else "cpu"
    with pytest.raises(eps.SilentFallbackError, match="but the session runs on"):
        eps.assert_runs_on(session, other)


def test_quantization_round_trip() -> None:
    """The reference's packing is exact: dequantize(quantize(w)) is w to within half a step."""
    rng = np.random.default_rng(7)
    w = rng.standard_normal((64, 8))
    for bits in (4, 8):
        for zero_points in (False, True):
            q = reference.quantize(w, bits=bits, zero_points=zero_points, dtype=np.float32)
            step = q.scales.astype(np.float64).reshape(8, 2).repeat(32, axis=1).T
            error = np.abs(reference.dequantize(q) - w)
            assert np.all(error <= step * 0.5 + 1e-6 + (0 if zero_points else step)), (bits, zero_points)
