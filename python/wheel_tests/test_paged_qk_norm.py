"""Per-head Q/K RMSNorm in PagedAttention across its layouts and edges, against the numpy reference.

Every Q and K head carries its own input scale (``paged.PER_HEAD_SCALES``), so a kernel that
normalises the whole hidden row instead of each head fails. Sessions never fall back to the CPU EP
(``eps.make_session``). On a wheel whose kernel refuses a feature the row is skipped as *absent*,
with the wheel's own refusal as the reason; a build that claims ``qk_norm`` must run the Q/K norm rows.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import TYPE_CHECKING, NoReturn

import numpy as np
import pytest

from wheel_tests import capabilities, eps, models, paged, reference
from wheel_tests.paged import PagedCase

if TYPE_CHECKING:
    import onnxruntime as ort

QK_NORM = "Q/K norm"
REFUSAL = re.compile(
    r"PagedAttention|GroupQueryAttention|Could not find an implementation|not supported|NOT_IMPLEMENTED",
    re.IGNORECASE,
)
UNFUSED_SWITCH = "ORT_WEBGPU_PAGED_ATTENTION_QK_NORM_UNFUSED"
"""Our patch's switch to the unfused norm (SimplifiedLayerNorm dispatches, then rotary); others ignore it."""

CASES = [
    pytest.param(PagedCase(new_tokens=(1,), past=(9,)), id="decode-gqa"),
    pytest.param(PagedCase(new_tokens=(1, 1, 1), past=(5, 17, 30)), id="decode-batch"),
    pytest.param(PagedCase(new_tokens=(12,), past=(0,)), id="prefill"),
    pytest.param(PagedCase(new_tokens=(3, 2), past=(5, 17)), id="prefill-after-cache"),
    pytest.param(PagedCase(new_tokens=(7, 1, 4), past=(0, 20, 3)), id="ragged"),
    pytest.param(PagedCase(new_tokens=(1,), past=(40,), packed_qkv=True), id="packed-decode"),
    pytest.param(PagedCase(new_tokens=(5, 2, 3), past=(0, 8, 1), packed_qkv=True), id="packed-ragged"),
    pytest.param(PagedCase(new_tokens=(1, 1), past=(6, 25), rotary=False), id="no-rotary-decode"),
    pytest.param(PagedCase(new_tokens=(6, 3), past=(0, 4), rotary=False), id="no-rotary-prefill"),
    pytest.param(PagedCase(new_tokens=(4, 1), past=(2, 9), rotary=False, packed_qkv=True), id="no-rotary-packed"),
    pytest.param(PagedCase(new_tokens=(5,), past=(3,), interleaved=True), id="interleaved-rotary"),
    pytest.param(PagedCase(new_tokens=(2, 3), past=(4, 0), kv_heads=4), id="mha"),
    pytest.param(PagedCase(new_tokens=(1, 2), past=(11, 3), num_heads=8, kv_heads=1), id="gqa-8-to-1"),
    pytest.param(PagedCase(new_tokens=(1,), past=(200,)), id="decode-long-past"),
    # The direct paged-prefill path (>= 32 new tokens, head size 64/128, block size 32).
    pytest.param(PagedCase(new_tokens=(40,), past=(8,), head_size=128, block_size=32), id="prefill-40-head-128"),
    pytest.param(PagedCase(new_tokens=(33, 16), past=(0, 5), head_size=64, block_size=32), id="prefill-ragged-33"),
    # Head scales 30..1000: every square overflows fp16, so the sum of squares must be fp32.
    pytest.param(PagedCase(new_tokens=(3,), past=(2,), magnitude=100.0), id="fp16-large"),
    # Head scales 3e-4..1e-2, some inputs fp16 subnormals; epsilon matters for the smallest heads.
    pytest.param(PagedCase(new_tokens=(3,), past=(2,), magnitude=1e-3), id="fp16-tiny"),
    pytest.param(PagedCase(new_tokens=(2, 1), past=(0, 6), epsilon=1.0, magnitude=0.1), id="epsilon-large"),
    # An all-zero head normalises to zero (epsilon keeps it finite).
    pytest.param(PagedCase(new_tokens=(2,), past=(1,), head_scales=(0.0, 1.0, 3.0, 10.0)), id="zero-head"),
]


def _absent(ep: eps.EpKind, error: Exception, feature: str) -> NoReturn:
    """Skip as absent when the wheel refuses ``feature``; fail when the build claims it or the error is another."""
    first = (str(error).strip().splitlines() or [type(error).__name__])[0]
    if feature == QK_NORM and ep != "cpu" and capabilities.kernel_claimed("qk_norm", ep):
        pytest.fail(f"the build claims {QK_NORM} in WebGPU PagedAttention, but {ep} refused: {first}")
    if not REFUSAL.search(str(error)):
        raise error
    pytest.skip(f"absent: {feature} on {ep}: {first}")


def _session(ep: eps.EpKind, model: bytes, feature: str) -> ort.InferenceSession:
    try:
        return eps.make_session(model, ep)
    except eps.SilentFallbackError:
        raise
    except Exception as exc:  # noqa: BLE001 - the refusal decides absent or failed
        _absent(ep, exc, feature)


def _run(session: ort.InferenceSession, feeds: dict[str, np.ndarray], ep: eps.EpKind, feature: str) -> list[np.ndarray]:
    try:
        return [np.asarray(o) for o in session.run(None, feeds)]
    except Exception as exc:  # noqa: BLE001 - the refusal decides absent or failed
        _absent(ep, exc, feature)


def _paged(ep: eps.EpKind, case: PagedCase, p: reference.PagedInputs, feature: str = QK_NORM) -> list[np.ndarray]:
    return _run(_session(ep, case.model(), feature), paged.feeds(p, packed_qkv=case.packed_qkv), ep, feature)


@pytest.mark.parametrize("case", CASES)
def test_matches_reference(ep: eps.EpKind, case: PagedCase) -> None:
    p = paged.case_inputs(case)
    paged.check(_paged(ep, case, p), p)


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(PagedCase(new_tokens=(1, 1), past=(12, 3)), id="decode"),
        pytest.param(PagedCase(new_tokens=(6, 2), past=(0, 5)), id="prefill"),
    ],
)
def test_norm_is_per_head_not_full_hidden(ep: eps.EpKind, case: PagedCase) -> None:
    """The kernel matches per-head RMSNorm and not one RMS over the hidden row (the wrong reading)."""
    p = paged.case_inputs(case)
    assert p.q_norm is not None
    assert p.k_norm is not None
    wrong = dataclasses.replace(
        p,
        query=reference.rms_norm_hidden(p.query, p.q_norm, head_size=p.head_size, epsilon=p.epsilon),
        key=reference.rms_norm_hidden(p.key, p.k_norm, head_size=p.head_size, epsilon=p.epsilon),
        q_norm=None,
        k_norm=None,
    )
    right_output = reference.paged_attention(p).output
    wrong_output = reference.paged_attention(wrong).output
    tolerance = 1e-2 * max(float(np.abs(right_output).max()), 1.0)
    gap = float(np.abs(right_output - wrong_output).max())
    assert gap > 5 * tolerance, f"the case cannot tell the readings apart: {gap:.3g} vs tolerance {tolerance:.3g}"
    result = _paged(ep, case, p)
    paged.check(result, p)
    with pytest.raises(AssertionError):
        reference.assert_close(result[0], wrong_output, dtype=np.float16)


@pytest.mark.parametrize("packed_qkv", [False, True], ids=["separate", "packed"])
def test_cached_k_unchanged_across_calls(ep: eps.EpKind, packed_qkv: bool) -> None:  # noqa: FBT001 - a parameter
    """Prefill, then two decode steps through one session, each fed the caches the previous call returned:
    every slot an earlier call wrote stays bit-identical, and only the new K is normalised."""
    steps = [((1, 1), (5, 3)), ((1, 1), (6, 4))]
    first = PagedCase(new_tokens=(5, 3), past=(0, 0), packed_qkv=packed_qkv)
    cos, sin = paged.rotary_tables(16, first.head_size)  # every step's positions
    session = _session(ep, first.model(), QK_NORM)
    p = dataclasses.replace(paged.case_inputs(first), cos=cos, sin=sin)
    result = _run(session, paged.feeds(p, packed_qkv=packed_qkv), ep, QK_NORM)
    paged.check(result, p)
    for seed, (new_tokens, past) in enumerate(steps, start=1):
        fresh = paged.case_inputs(dataclasses.replace(first, new_tokens=new_tokens, past=past), seed=seed)
        p = dataclasses.replace(
            fresh,
            key_cache=result[1],
            value_cache=result[2],
            block_table=p.block_table,
            q_norm=p.q_norm,
            k_norm=p.k_norm,
            cos=cos,
            sin=sin,
        )
        result = _run(session, paged.feeds(p, packed_qkv=packed_qkv), ep, QK_NORM)
        paged.check(result, p)  # every slot this call does not write, earlier calls' included, is bit-identical


def _run_with_epsilon(ep: eps.EpKind, case: PagedCase, p: reference.PagedInputs, epsilon: float) -> None:
    session = eps.make_session(dataclasses.replace(case, epsilon=epsilon).model(), ep)
    session.run(None, paged.feeds(p))


@pytest.mark.parametrize("epsilon", [0.0, -1e-6, math.inf, math.nan], ids=["zero", "negative", "inf", "nan"])
def test_epsilon_is_validated(ep: eps.EpKind, epsilon: float) -> None:
    case = PagedCase(new_tokens=(2,), past=(3,))
    p = paged.case_inputs(case)
    with pytest.raises(ValueError, match="epsilon must be positive"):
        reference.rms_norm_heads(p.query, np.ones(case.head_size), head_size=case.head_size, epsilon=epsilon)
    _paged(ep, case, p)  # the norm itself runs here (absent otherwise)
    with pytest.raises(Exception, match="epsilon") as refused:
        _run_with_epsilon(ep, case, p, epsilon)
    assert not isinstance(refused.value, eps.SilentFallbackError)


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "non-causal"])
def test_local_window(ep: eps.EpKind, causal: bool) -> None:  # noqa: FBT001 - a parameter
    """Sliding window of 4 keys with Q/K norm; non-causal (a block drafter) needs the ``is_causal`` attribute."""
    feature = "local window" if causal else "non-causal local window"
    if not causal and "is_causal" not in capabilities.schema_attributes("PagedAttention"):
        pytest.skip(f"absent: {feature}: the PagedAttention schema has no is_causal attribute")
    case = PagedCase(new_tokens=(6, 2), past=(4, 9), local_window=4, causal=None if causal else False)
    p = paged.case_inputs(case)
    paged.check(_paged(ep, case, p, feature), p)


@pytest.mark.parametrize(
    ("new_tokens", "past"), [pytest.param(1, 20, id="decode-with-past"), pytest.param(12, 0, id="prefill")]
)
def test_matches_group_query_attention(ep: eps.EpKind, new_tokens: int, past: int) -> None:
    """The same tokens through upstream's GroupQueryAttention Q/K norm and through PagedAttention's agree."""
    case = PagedCase(new_tokens=(new_tokens,), past=(past,), head_size=64)
    p = paged.case_inputs(case)
    d, total = case.head_size, past + new_tokens
    cos, sin = paged.rotary_tables(total + 16, d)  # GQA wants room past the last position
    p = dataclasses.replace(p, cos=cos, sin=sin)
    assert p.q_norm is not None
    assert p.k_norm is not None
    block_size = case.block_size
    slots = [(p.block_table[0, t // block_size], t % block_size) for t in range(past)]
    gqa_feeds = {
        "query": p.query[None],
        "key": p.key[None],
        "value": p.value[None],
        "seqlens_k": np.array([total - 1], np.int32),
        "total_sequence_length": np.array(total, np.int32),
        "cos_cache": cos,
        "sin_cache": sin,
        "q_norm_weight": p.q_norm,
        "k_norm_weight": p.k_norm,
    }
    if past:
        # The paged cache's history, as GQA's BNSH past: (1, kv_heads, past, head_size).
        gqa_feeds["past_key"] = np.stack([p.key_cache[b, o] for b, o in slots], axis=1)[None]
        gqa_feeds["past_value"] = np.stack([p.value_cache[b, o] for b, o in slots], axis=1)[None]
    spec = models.GqaSpec(num_heads=case.num_heads, kv_heads=case.kv_heads, head_size=d, with_past=past > 0)
    gqa_session = _session(ep, models.group_query_attention(spec), f"GroupQueryAttention {QK_NORM}")
    gqa = _run(gqa_session, gqa_feeds, ep, f"GroupQueryAttention {QK_NORM}")
    result = _paged(ep, case, p)
    paged.check(result, p)
    reference.assert_close(gqa[0][0], result[0].astype(np.float64), dtype=np.float16)
    new_keys = np.stack(
        [result[1][p.block_table[0, t // block_size], t % block_size] for t in range(past, total)], axis=1
    )
    reference.assert_close(gqa[1][0, :, past:], new_keys.astype(np.float64), dtype=np.float16)


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(PagedCase(new_tokens=(1, 1), past=(7, 30)), id="decode"),
        pytest.param(PagedCase(new_tokens=(5, 2, 3), past=(0, 8, 1), packed_qkv=True), id="packed-ragged"),
    ],
)
def test_unfused_norm_matches_reference(ep: eps.EpKind, case: PagedCase, monkeypatch: pytest.MonkeyPatch) -> None:
    """The unfused norm dispatches (our patch's measuring switch) give the reference's numbers too."""
    monkeypatch.setenv(UNFUSED_SWITCH, "1")
    p = paged.case_inputs(case)
    paged.check(_paged(ep, case, p), p)
