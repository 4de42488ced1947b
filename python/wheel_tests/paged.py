"""PagedAttention cases shared by the tests and the child-process probes."""

from __future__ import annotations

import dataclasses

import numpy as np

from wheel_tests import models, reference

NUM_HEADS, KV_HEADS, HEAD_SIZE = 4, 2, 32
BLOCKS, BLOCK_SIZE = 4, 16  # the WebGPU kernel wants a power-of-two block size of at least 16
MAX_POSITIONS = 64


def spec(*, qk_norm: bool, epsilon: float = 1e-6) -> models.PagedSpec:
    return models.PagedSpec(
        num_heads=NUM_HEADS,
        kv_heads=KV_HEADS,
        head_size=HEAD_SIZE,
        blocks=BLOCKS,
        block_size=BLOCK_SIZE,
        dtype=np.float16,
        qk_norm=qk_norm,
        epsilon=epsilon,
    )


def inputs(*, new_tokens: tuple[int, ...], past: tuple[int, ...], qk_norm: bool) -> reference.PagedInputs:
    """Two sequences with cached history; cache slots hold random old K/V, so a write to the wrong
    slot, or a change to an old one, shows."""
    rng = np.random.default_rng(sum(new_tokens) * 31 + sum(past))
    total = sum(new_tokens)
    d = HEAD_SIZE

    def rand(*shape: int, scale: float = 1.0) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float16)

    angles = np.arange(MAX_POSITIONS)[:, None] / (10000.0 ** (np.arange(d // 2) * 2 / d))[None, :]
    return reference.PagedInputs(
        # Q/K far from unit RMS so that normalising them changes the attention pattern.
        query=rand(total, NUM_HEADS * d, scale=3.0),
        key=rand(total, KV_HEADS * d, scale=3.0),
        value=rand(total, KV_HEADS * d),
        key_cache=rand(BLOCKS, BLOCK_SIZE, KV_HEADS, d),
        value_cache=rand(BLOCKS, BLOCK_SIZE, KV_HEADS, d),
        cumulative_lengths=np.concatenate([[0], np.cumsum(new_tokens)]).astype(np.int32),
        past_lengths=np.array(past, np.int32),
        block_table=np.array([[0, 2], [1, 3]], np.int32)[: len(past)],
        cos=np.cos(angles).astype(np.float16),
        sin=np.sin(angles).astype(np.float16),
        num_heads=NUM_HEADS,
        kv_heads=KV_HEADS,
        head_size=d,
        q_norm=(1.0 + rand(d, scale=0.3)).astype(np.float16) if qk_norm else None,
        k_norm=(1.0 + rand(d, scale=0.3)).astype(np.float16) if qk_norm else None,
    )


def feeds(p: reference.PagedInputs) -> dict[str, np.ndarray]:
    out = {
        "query": p.query,
        "key": p.key,
        "value": p.value,
        "key_cache": p.key_cache,
        "value_cache": p.value_cache,
        "cumulative_sequence_length": p.cumulative_lengths,
        "past_seqlens": p.past_lengths,
        "block_table": p.block_table,
        "cos_cache": p.cos,
        "sin_cache": p.sin,
    }
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


def check(actual: list[np.ndarray], p: reference.PagedInputs) -> None:
    """Output and both caches against the reference; untouched cache slots must be bit-identical."""
    expected = reference.paged_attention(p)
    reference.assert_close(actual[0], expected.output, dtype=np.float16)
    reference.assert_close(actual[1], expected.key_cache, dtype=np.float16)
    reference.assert_close(actual[2], expected.value_cache, dtype=np.float16)
    written = np.zeros(p.key_cache.shape[:2], bool)
    block_size = p.key_cache.shape[1]
    for seq, past in enumerate(p.past_lengths):
        new = int(p.cumulative_lengths[seq + 1] - p.cumulative_lengths[seq])
        for pos in range(int(past), int(past) + new):
            written[p.block_table[seq, pos // block_size], pos % block_size] = True
    assert np.array_equal(actual[1][~written], p.key_cache[~written]), "cached K changed"
    assert np.array_equal(actual[2][~written], p.value_cache[~written]), "cached V changed"


def model(*, qk_norm: bool, epsilon: float = 1e-6) -> bytes:
    return models.paged_attention(spec(qk_norm=qk_norm, epsilon=epsilon))
