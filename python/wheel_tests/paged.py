"""PagedAttention cases shared by the tests and the child-process probes."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from wheel_tests import models, reference

NUM_HEADS, KV_HEADS, HEAD_SIZE = 4, 2, 32
BLOCKS, BLOCK_SIZE = 4, 16  # the WebGPU kernel wants a power-of-two block size of at least 16
PER_HEAD_SCALES = (0.3, 1.0, 3.0, 10.0)
"""Input magnitudes by head (cycled): per-head and full-hidden normalisation then differ clearly."""


@dataclass(frozen=True, kw_only=True)
class PagedCase:
    """One PagedAttention call: sequences with ``new_tokens`` each after ``past`` cached ones."""

    new_tokens: tuple[int, ...]
    past: tuple[int, ...]
    num_heads: int = NUM_HEADS
    kv_heads: int = KV_HEADS
    head_size: int = HEAD_SIZE
    block_size: int = BLOCK_SIZE
    blocks: int = 0
    """Cache blocks; 0: as many as the sequences need, plus one never written."""
    qk_norm: bool = True
    epsilon: float = 1e-6
    rotary: bool = True
    interleaved: bool = False
    packed_qkv: bool = False
    local_window: int = -1
    causal: bool | None = None
    head_scales: tuple[float, ...] = PER_HEAD_SCALES
    """Q/K input magnitude of head n is ``head_scales[n % len]``."""
    magnitude: float = 1.0
    """Multiplies every head scale (fp16 range edge cases)."""

    def blocks_needed(self) -> list[int]:
        return [math.ceil((p + n) / self.block_size) for p, n in zip(self.past, self.new_tokens, strict=True)]

    @property
    def cache_blocks(self) -> int:
        return self.blocks or sum(self.blocks_needed()) + 1

    def spec(self) -> models.PagedSpec:
        return models.PagedSpec(
            num_heads=self.num_heads,
            kv_heads=self.kv_heads,
            head_size=self.head_size,
            blocks=self.cache_blocks,
            block_size=self.block_size,
            qk_norm=self.qk_norm,
            epsilon=self.epsilon,
            rotary=self.rotary,
            interleaved=self.interleaved,
            packed_qkv=self.packed_qkv,
            local_window=self.local_window,
            causal=self.causal,
        )

    def model(self) -> bytes:
        return models.paged_attention(self.spec())


def rotary_tables(positions: int, head_size: int) -> tuple[np.ndarray, np.ndarray]:
    """fp16 cos/sin caches of (positions, head_size / 2), base 10000."""
    angles = np.arange(positions)[:, None] / (10000.0 ** (np.arange(head_size // 2) * 2 / head_size))[None, :]
    return np.cos(angles).astype(np.float16), np.sin(angles).astype(np.float16)


def case_inputs(case: PagedCase, seed: int = 0) -> reference.PagedInputs:
    """Random fp16 Q/K/V (Q/K heads at their own scales), random old K/V in every cache slot, and a
    shuffled block table, so a write to the wrong slot, or a change to an old one, shows."""
    rng = np.random.default_rng(seed + sum(case.new_tokens) * 31 + sum(case.past))
    total = sum(case.new_tokens)
    d = case.head_size

    def heads(count: int) -> np.ndarray:
        scales = np.array([case.head_scales[n % len(case.head_scales)] for n in range(count)]) * case.magnitude
        return (rng.standard_normal((total, count, d)) * scales[None, :, None]).reshape(total, count * d)

    def rand(*shape: int, scale: float = 1.0) -> np.ndarray:
        return rng.standard_normal(shape) * scale

    needed = case.blocks_needed()
    order = rng.permutation(case.cache_blocks)
    table = np.zeros((len(case.past), max(needed)), np.int32)
    used = 0
    for seq, count in enumerate(needed):
        table[seq, :count] = order[used : used + count]
        used += count
    cos, sin = rotary_tables(max(p + n for p, n in zip(case.past, case.new_tokens, strict=True)), d)
    cache_shape = (case.cache_blocks, case.block_size, case.kv_heads, d)
    return reference.PagedInputs(
        query=heads(case.num_heads).astype(np.float16),
        key=heads(case.kv_heads).astype(np.float16),
        value=rand(total, case.kv_heads * d).astype(np.float16),
        key_cache=rand(*cache_shape).astype(np.float16),
        value_cache=rand(*cache_shape).astype(np.float16),
        cumulative_lengths=np.concatenate([[0], np.cumsum(case.new_tokens)]).astype(np.int32),
        past_lengths=np.array(case.past, np.int32),
        block_table=table,
        cos=cos,
        sin=sin,
        num_heads=case.num_heads,
        kv_heads=case.kv_heads,
        head_size=d,
        q_norm=(1.0 + rand(d, scale=0.3)).astype(np.float16) if case.qk_norm else None,
        k_norm=(1.0 + rand(d, scale=0.3)).astype(np.float16) if case.qk_norm else None,
        epsilon=case.epsilon,
        rotary=case.rotary,
        interleaved=case.interleaved,
        local_window=case.local_window,
        causal=case.causal is not False,
    )


def legacy_case(*, new_tokens: tuple[int, ...], past: tuple[int, ...], qk_norm: bool) -> PagedCase:
    """The original suite's two-sequence cases: every head at scale 3, four cache blocks."""
    return PagedCase(new_tokens=new_tokens, past=past, qk_norm=qk_norm, head_scales=(3.0,), blocks=BLOCKS)


def inputs(*, new_tokens: tuple[int, ...], past: tuple[int, ...], qk_norm: bool) -> reference.PagedInputs:
    """Two sequences with cached history (Q/K far from unit RMS, so normalising them matters)."""
    return case_inputs(legacy_case(new_tokens=new_tokens, past=past, qk_norm=qk_norm))


def feeds(p: reference.PagedInputs, *, packed_qkv: bool = False) -> dict[str, np.ndarray]:
    out = {
        "key_cache": p.key_cache,
        "value_cache": p.value_cache,
        "cumulative_sequence_length": p.cumulative_lengths,
        "past_seqlens": p.past_lengths,
        "block_table": p.block_table,
    }
    if packed_qkv:
        out["query"] = np.concatenate([p.query, p.key, p.value], axis=1)
    else:
        out |= {"query": p.query, "key": p.key, "value": p.value}
    if p.rotary:
        out |= {"cos_cache": p.cos, "sin_cache": p.sin}
    if p.q_norm is not None and p.k_norm is not None:
        out |= {"q_norm_weight": p.q_norm, "k_norm_weight": p.k_norm}
    return out


def prenormalised(p: reference.PagedInputs) -> reference.PagedInputs:
    """The same case with Q and K normalised up front (fp16) and no norm weights left."""
    assert p.q_norm is not None
    assert p.k_norm is not None
    q = reference.rms_norm_heads(p.query, p.q_norm, head_size=p.head_size, epsilon=p.epsilon)
    k = reference.rms_norm_heads(p.key, p.k_norm, head_size=p.head_size, epsilon=p.epsilon)
    return dataclasses.replace(p, query=q.astype(np.float16), key=k.astype(np.float16), q_norm=None, k_norm=None)


def written_slots(p: reference.PagedInputs) -> np.ndarray:
    """(blocks, block_size) mask of the cache slots this call writes."""
    written = np.zeros(p.key_cache.shape[:2], bool)
    block_size = p.key_cache.shape[1]
    for seq, past in enumerate(p.past_lengths):
        new = int(p.cumulative_lengths[seq + 1] - p.cumulative_lengths[seq])
        for pos in range(int(past), int(past) + new):
            written[p.block_table[seq, pos // block_size], pos % block_size] = True
    return written


def check(actual: list[np.ndarray], p: reference.PagedInputs) -> None:
    """Output and both caches against the reference; untouched cache slots must be bit-identical."""
    expected = reference.paged_attention(p)
    reference.assert_close(actual[0], expected.output, dtype=np.float16)
    reference.assert_close(actual[1], expected.key_cache, dtype=np.float16)
    reference.assert_close(actual[2], expected.value_cache, dtype=np.float16)
    written = written_slots(p)
    assert np.array_equal(actual[1][~written], p.key_cache[~written]), "cached K changed"
    assert np.array_equal(actual[2][~written], p.value_cache[~written]), "cached V changed"


def model(*, qk_norm: bool, epsilon: float = 1e-6) -> bytes:
    """The original suite's model: its cases all fit in ``BLOCKS`` cache blocks."""
    return dataclasses.replace(legacy_case(new_tokens=(1,), past=(0,), qk_norm=qk_norm), epsilon=epsilon).model()
