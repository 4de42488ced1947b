"""PagedAttention with per-head Q/K RMSNorm before RoPE, against the float64 reference.

Only incoming K is normalised and written to the cache; cached K and V stay bit-identical.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import numpy as np
import pytest

from wheel_tests import capabilities, eps, paged, reference

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import NoReturn

CASES = [
    pytest.param((6, 4), (0, 0), id="prefill"),
    pytest.param((3, 2), (5, 17), id="prefill-after-cache"),
    pytest.param((1, 1), (9, 20), id="decode"),
]
NO_KERNEL = re.compile(r"PagedAttention|Could not find an implementation|not supported", re.IGNORECASE)


def _run(ep: eps.EpKind, model: bytes, p: reference.PagedInputs) -> list[np.ndarray] | Exception:
    """The outputs, or the exception with which the wheel refused the model or the run."""
    try:
        session = eps.make_session(model, ep)
        return [np.asarray(o) for o in session.run(None, paged.feeds(p))]
    except eps.SilentFallbackError:
        raise
    except Exception as exc:  # noqa: BLE001 - the refusal is the evidence the test checks
        return exc


def _no_kernel_is_absent(ep: eps.EpKind, error: Exception, absent: Callable[[str], NoReturn]) -> NoReturn:
    """A wheel may lack the kernel (CPU everywhere, WebGPU in 1.27, any EP in 1.21, which has no
    PagedAttention at all); a build whose patches claim the WebGPU kernel's Q/K norm must have it there."""
    assert NO_KERNEL.search(str(error)), str(error)
    webgpu_claimed = ep != "cpu" and capabilities.kernel_claimed("qk_norm", ep)
    assert not webgpu_claimed, f"{ep} refused plain PagedAttention, though the build claims qk_norm: {error}"
    absent(f"no {ep} PagedAttention kernel: {str(error).splitlines()[0]}")


def _plain_kernel_runs(ep: eps.EpKind) -> list[np.ndarray] | Exception:
    return _run(ep, paged.model(qk_norm=False), paged.inputs(new_tokens=(3, 2), past=(5, 17), qk_norm=False))


@pytest.mark.parametrize(("new_tokens", "past"), CASES)
def test_paged_attention(
    ep: eps.EpKind, new_tokens: tuple[int, ...], past: tuple[int, ...], absent: Callable[[str], NoReturn]
) -> None:
    p = paged.inputs(new_tokens=new_tokens, past=past, qk_norm=False)
    result = _run(ep, paged.model(qk_norm=False), p)
    if isinstance(result, Exception):
        _no_kernel_is_absent(ep, result, absent)
    paged.check(result, p)


@pytest.mark.parametrize(("new_tokens", "past"), CASES)
def test_qk_norm(
    ep: eps.EpKind, new_tokens: tuple[int, ...], past: tuple[int, ...], absent: Callable[[str], NoReturn]
) -> None:
    p = paged.inputs(new_tokens=new_tokens, past=past, qk_norm=True)
    result = _run(ep, paged.model(qk_norm=True), p)
    if not isinstance(result, Exception):
        paged.check(result, p)
        return
    # The claim is the WebGPU kernel's (the patch is WebGPU's); the CPU EP may lack the operator.
    claimed = ep != "cpu" and capabilities.kernel_claimed("qk_norm", ep)
    assert not claimed, f"the build claims Q/K norm in WebGPU PagedAttention, but: {result}"
    if "q_norm_weight" not in capabilities.schema_inputs("PagedAttention"):
        absent(f"schema has no q_norm_weight: {str(result).splitlines()[0]}")
    assert NO_KERNEL.search(str(result)), str(result)
    absent(f"Q/K norm refused: {str(result).splitlines()[0]}")


@pytest.mark.parametrize(("new_tokens", "past"), CASES)
def test_qk_norm_reference_against_the_plain_kernel(
    ep: eps.EpKind, new_tokens: tuple[int, ...], past: tuple[int, ...], absent: Callable[[str], NoReturn]
) -> None:
    """The reference's norm-then-RoPE equals the EP's plain kernel fed pre-normalised Q and K.

    This holds the Q/K norm reference to a real kernel even on wheels without the fused norm.
    """
    p = paged.inputs(new_tokens=new_tokens, past=past, qk_norm=True)
    result = _run(ep, paged.model(qk_norm=False), paged.prenormalised(p))
    if isinstance(result, Exception):
        _no_kernel_is_absent(ep, result, absent)
    paged.check(result, p)
    # And the norm matters: without it the reference differs from this kernel output.
    plain = reference.paged_attention(paged.inputs(new_tokens=new_tokens, past=past, qk_norm=False))
    with pytest.raises(AssertionError):
        reference.assert_close(result[0], plain.output, dtype=np.float16)


@pytest.mark.parametrize("epsilon", [0.0, -1.0])
def test_qk_norm_epsilon_is_validated(ep: eps.EpKind, epsilon: float, absent: Callable[[str], NoReturn]) -> None:
    p = paged.inputs(new_tokens=(3, 2), past=(5, 17), qk_norm=True)
    with pytest.raises(ValueError, match="epsilon must be positive"):
        reference.paged_attention(p.__class__(**{**p.__dict__, "epsilon": epsilon}))
    result = _run(ep, paged.model(qk_norm=True, epsilon=epsilon), p)
    assert isinstance(result, Exception), "a non-positive epsilon was accepted"
    if isinstance(_plain_kernel_runs(ep), Exception):
        assert NO_KERNEL.search(str(result)), str(result)
        absent(f"no kernel to validate epsilon: {str(result).splitlines()[0]}")
    assert "epsilon" in str(result), str(result)
