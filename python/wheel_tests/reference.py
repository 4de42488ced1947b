"""numpy references, accumulated in float64, for the operators the suites check.

Quantized weights follow the ``com.microsoft.MatMulNBits`` layout: the logical weight W has shape
(K, N) and Y = A @ W; B is stored as (N, K / block, block * bits / 8) bytes, element k of a column
in the low bits first; scales are (N * K / block) in A's type; zero points are packed the same
way as B, one per block, and default to 2 ** (bits - 1).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.floating]
BLOCK = 32


@dataclass(frozen=True, kw_only=True)
class QuantizedWeight:
    """A (K, N) weight quantized per column in blocks along K."""

    k: int
    n: int
    bits: int
    block: int
    packed: npt.NDArray[np.uint8]
    """(N, K / block, block * bits / 8)."""
    scales: FloatArray
    """(N * K / block,) in the activation type."""
    zero_points: npt.NDArray[np.uint8] | None
    """(N * ceil(K / block * bits / 8),) packed, or None for the default 2 ** (bits - 1)."""

    @property
    def blocks(self) -> int:
        return self.k // self.block

    def with_scale_flipped(self, index: int = 0) -> QuantizedWeight:
        """A deliberately wrong copy: one scale negated (used to prove comparisons can fail)."""
        scales = self.scales.copy()
        scales[index] = -scales[index]
        return dataclasses.replace(self, scales=scales)


def _pack(values: npt.NDArray[np.integer], bits: int) -> npt.NDArray[np.uint8]:
    """Pack unsigned ``bits``-wide values along the last axis, lowest bits first."""
    if bits == 8:
        return values.astype(np.uint8)
    per_byte = 8 // bits
    padded = values
    if values.shape[-1] % per_byte:
        pad = per_byte - values.shape[-1] % per_byte
        padded = np.concatenate([values, np.zeros((*values.shape[:-1], pad), values.dtype)], axis=-1)
    grouped = padded.reshape(*padded.shape[:-1], -1, per_byte).astype(np.uint8)
    out = np.zeros(grouped.shape[:-1], np.uint8)
    for i in range(per_byte):
        out |= grouped[..., i] << (bits * i)
    return out


def _unpack(packed: npt.NDArray[np.uint8], bits: int, count: int) -> npt.NDArray[np.int64]:
    if bits == 8:
        return packed[..., :count].astype(np.int64)
    per_byte = 8 // bits
    mask = (1 << bits) - 1
    parts = [(packed >> (bits * i)) & mask for i in range(per_byte)]
    return np.stack(parts, axis=-1).reshape(*packed.shape[:-1], -1)[..., :count].astype(np.int64)


def quantize(
    weight: FloatArray, *, bits: int, block: int = BLOCK, zero_points: bool, dtype: type[np.floating]
) -> QuantizedWeight:
    """Quantize a (K, N) weight; symmetric around 2 ** (bits - 1) without zero points."""
    k, n = weight.shape
    blocks = weight.astype(np.float64).T.reshape(n, k // block, block)
    top = (1 << bits) - 1
    if zero_points:
        low = np.minimum(blocks.min(axis=-1), 0.0)
        high = np.maximum(blocks.max(axis=-1), 0.0)
        scale = np.where(high > low, (high - low) / top, 1.0)
        zp = np.clip(np.round(-low / scale), 0, top).astype(np.int64)
    else:
        scale = np.maximum(np.abs(blocks).max(axis=-1), 1e-8) / (1 << (bits - 1))
        zp = np.full(scale.shape, 1 << (bits - 1), np.int64)
    scale = scale.astype(dtype)
    q = np.clip(np.round(blocks / scale.astype(np.float64)[..., None]) + zp[..., None], 0, top).astype(np.int64)
    return QuantizedWeight(
        k=k,
        n=n,
        bits=bits,
        block=block,
        packed=_pack(q, bits),
        scales=scale.reshape(-1),
        zero_points=_pack(zp, bits).reshape(-1) if zero_points else None,
    )


def dequantize(w: QuantizedWeight) -> npt.NDArray[np.float64]:
    """The (K, N) float64 weight the packed data stands for."""
    q = _unpack(w.packed, w.bits, w.block)  # (N, blocks, block)
    if w.zero_points is None:
        zp = np.full((w.n, w.blocks), 1 << (w.bits - 1), np.int64)
    else:
        zp = _unpack(w.zero_points.reshape(w.n, -1), w.bits, w.blocks)
    scales = w.scales.astype(np.float64).reshape(w.n, w.blocks)
    return ((q - zp[..., None]) * scales[..., None]).reshape(w.n, w.k).T


@dataclass(frozen=True, kw_only=True)
class BlockMajor:
    """A quantized weight stored offline-transposed (``lora_*_layout = 1``): block index first."""

    packed: npt.NDArray[np.uint8]
    """(K / block, N, block * bits / 8): ``packed.transpose(1, 0, 2)`` is MatMulNBits' B."""
    scales: FloatArray
    """(K / block, N): its transpose is MatMulNBits' (N, K / block) scales."""


def block_major(w: QuantizedWeight) -> BlockMajor:
    """The offline-transposed storage of ``w`` (symmetric weights only: adapters have no zero points)."""
    if w.zero_points is not None:
        msg = "the block-major layout is defined for weights without zero points"
        raise ValueError(msg)
    return BlockMajor(
        packed=np.ascontiguousarray(w.packed.transpose(1, 0, 2)),
        scales=np.ascontiguousarray(w.scales.reshape(w.n, w.blocks).T),
    )


def dequantize_block_major(stored: BlockMajor, *, bits: int, block: int = BLOCK) -> npt.NDArray[np.float64]:
    """The (K, N) weight that block-major storage stands for, read in that order.

    Written apart from ``dequantize`` (block by block, in storage order) so that a test can check the
    two layouts against each other instead of one transpose against itself.
    """
    blocks, n, _ = stored.packed.shape
    scales = stored.scales.astype(np.float64)
    weight = np.empty((blocks * block, n))
    zero_point = 1 << (bits - 1)
    for kb in range(blocks):
        q = _unpack(stored.packed[kb], bits, block)  # (N, block): block kb of every column
        weight[kb * block : (kb + 1) * block] = ((q - zero_point) * scales[kb][:, None]).T
    return weight


def matmul_nbits(a: FloatArray, w: QuantizedWeight, bias: FloatArray | None = None) -> npt.NDArray[np.float64]:
    y = a.astype(np.float64) @ dequantize(w)
    return y + bias.astype(np.float64) if bias is not None else y


@dataclass(frozen=True, kw_only=True)
class LoraWeights:
    """A rank-r adapter: down (K, r) and up (r, N), float, or quantized INT8 block 32."""

    down: FloatArray | QuantizedWeight
    up: FloatArray | QuantizedWeight


def _as_float(w: FloatArray | QuantizedWeight) -> npt.NDArray[np.float64]:
    return dequantize(w) if isinstance(w, QuantizedWeight) else w.astype(np.float64)


def qlora(
    a: FloatArray, base: QuantizedWeight, adapter: LoraWeights | None, *, bias: FloatArray | None = None
) -> npt.NDArray[np.float64]:
    """Base INT4 projection (+ its bias) plus the adapter's up(down(a)); None means no adapter."""
    y = matmul_nbits(a, base, bias)
    if adapter is None:
        return y
    x = a.astype(np.float64)
    return y + (x @ _as_float(adapter.down)) @ _as_float(adapter.up)


def rms_norm_heads(x: FloatArray, weight: FloatArray, *, head_size: int, epsilon: float) -> npt.NDArray[np.float64]:
    """RMSNorm over each head of (tokens, heads * head_size) separately, times ``weight``.

    The arithmetic a WebGPU/CUDA kernel does: sum of squares, inverse RMS and gain in float32, the
    result rounded to float16 (the normalised Q/K are materialised in fp16 before RoPE).
    """
    if not (epsilon > 0 and np.isfinite(epsilon)):
        msg = f"epsilon must be positive and finite, got {epsilon}"
        raise ValueError(msg)
    heads = x.astype(np.float32).reshape(x.shape[0], -1, head_size)
    mean_square = np.mean(heads * heads, axis=-1, keepdims=True, dtype=np.float32)
    inv_rms = np.float32(1.0) / np.sqrt(mean_square + np.float32(epsilon))
    normalised = (heads * inv_rms * weight.astype(np.float32)).astype(np.float16)
    return normalised.reshape(x.shape).astype(np.float64)


def rms_norm_hidden(x: FloatArray, weight: FloatArray, *, head_size: int, epsilon: float) -> npt.NDArray[np.float64]:
    """The wrong reading of Q/K norm: one RMS over the whole hidden row, ``weight`` tiled per head.

    Kept only so that a regression test can show its cases tell this apart from ``rms_norm_heads``.
    """
    row = x.astype(np.float32)
    inv_rms = np.float32(1.0) / np.sqrt(np.mean(row * row, axis=-1, keepdims=True) + np.float32(epsilon))
    gain = np.tile(weight.astype(np.float32), row.shape[-1] // head_size)
    wrong: npt.NDArray[np.float64] = (row * inv_rms * gain).astype(np.float16).astype(np.float64)
    return wrong


def rotary(
    x: FloatArray,
    positions: npt.NDArray[np.integer],
    cos: FloatArray,
    sin: FloatArray,
    head_size: int,
    *,
    interleaved: bool = False,
) -> npt.NDArray[np.float64]:
    """RoPE of (tokens, heads * head_size) at the given positions, over the whole head.

    Split halves (x1, x2) by default; ``interleaved`` rotates the pairs (x0, x1), (x2, x3), ...
    """
    heads = x.astype(np.float64).reshape(x.shape[0], -1, head_size)
    c = cos.astype(np.float64)[positions][:, None, :]
    s = sin.astype(np.float64)[positions][:, None, :]
    if interleaved:
        first, second = heads[..., 0::2], heads[..., 1::2]
        out = np.empty_like(heads)
        out[..., 0::2] = first * c - second * s
        out[..., 1::2] = second * c + first * s
        return out.reshape(x.shape)
    half = head_size // 2
    first, second = heads[..., :half], heads[..., half:]
    return np.concatenate([first * c - second * s, second * c + first * s], axis=-1).reshape(x.shape)


@dataclass(frozen=True, kw_only=True)
class PagedInputs:
    query: FloatArray
    key: FloatArray
    value: FloatArray
    key_cache: FloatArray
    """(blocks, block_size, kv_heads, head_size)."""
    value_cache: FloatArray
    cumulative_lengths: npt.NDArray[np.int32]
    past_lengths: npt.NDArray[np.int32]
    block_table: npt.NDArray[np.int32]
    cos: FloatArray
    sin: FloatArray
    num_heads: int
    kv_heads: int
    head_size: int
    q_norm: FloatArray | None = None
    k_norm: FloatArray | None = None
    epsilon: float = 1e-6
    rotary: bool = True
    interleaved: bool = False
    local_window: int = -1
    """Keys a query sees, counted back from its own position (itself included); -1: all."""
    causal: bool = True
    """False: every new token also sees the later new tokens of its sequence (a block drafter)."""


@dataclass(frozen=True, kw_only=True)
class PagedOutputs:
    output: npt.NDArray[np.float64]
    key_cache: npt.NDArray[np.float64]
    value_cache: npt.NDArray[np.float64]


def paged_attention(p: PagedInputs) -> PagedOutputs:
    """Paged attention with optional RoPE; Q/K RMSNorm per head before RoPE when norm weights are given.

    Only the incoming keys are normalised and written to the cache; what the cache held stays.
    """
    d = p.head_size
    query, key = p.query.astype(np.float64), p.key.astype(np.float64)
    if p.q_norm is not None and p.k_norm is not None:
        query = rms_norm_heads(query, p.q_norm, head_size=d, epsilon=p.epsilon)
        key = rms_norm_heads(key, p.k_norm, head_size=d, epsilon=p.epsilon)
    key_cache = p.key_cache.astype(np.float64).copy()
    value_cache = p.value_cache.astype(np.float64).copy()
    block_size = key_cache.shape[1]
    output = np.zeros((query.shape[0], p.num_heads * d))
    group = p.num_heads // p.kv_heads
    for seq in range(len(p.past_lengths)):
        start, end = int(p.cumulative_lengths[seq]), int(p.cumulative_lengths[seq + 1])
        past = int(p.past_lengths[seq])
        positions = np.arange(past, past + end - start)
        q, k = query[start:end], key[start:end]
        if p.rotary:
            q = rotary(q, positions, p.cos, p.sin, d, interleaved=p.interleaved)
            k = rotary(k, positions, p.cos, p.sin, d, interleaved=p.interleaved)
        q, k = q.reshape(-1, p.num_heads, d), k.reshape(-1, p.kv_heads, d)
        v = p.value[start:end].astype(np.float64).reshape(-1, p.kv_heads, d)
        for i, pos in enumerate(positions):
            blk, off = p.block_table[seq, pos // block_size], pos % block_size
            key_cache[blk, off], value_cache[blk, off] = k[i], v[i]
        total = past + end - start
        slots = [(p.block_table[seq, t // block_size], t % block_size) for t in range(total)]
        keys = np.stack([key_cache[b, o] for b, o in slots])  # (total, kv_heads, d)
        values = np.stack([value_cache[b, o] for b, o in slots])
        for i, pos in enumerate(positions):
            last = pos + 1 if p.causal else total
            first = max(0, pos + 1 - p.local_window) if p.local_window > 0 else 0
            for h in range(p.num_heads):
                logits = keys[first:last, h // group] @ q[i, h] / np.sqrt(d)
                weights = np.exp(logits - logits.max())
                weights /= weights.sum()
                output[start + i, h * d : (h + 1) * d] = weights @ values[first:last, h // group]
    return PagedOutputs(output=output, key_cache=key_cache, value_cache=value_cache)


def assert_close(
    actual: npt.ArrayLike,
    expected: npt.NDArray[np.float64],
    *,
    dtype: type[np.floating],
    quantized_x: bool = False,
    what: str = "",
) -> None:
    """Compare with the suite's tolerances, relative to the largest reference value: 1e-5 for fp32, 1e-2 for fp16,
    3e-2 where the EP may quantize X to INT8 (``quantized_x``: MatMulNBits' accuracy level 4, DP4A kernels).

    Why these hold for the projections here (K up to a few thousand, 32-value blocks): fp32 kernels
    accumulate in f32, a rounding walk of about 2^-24 * sqrt(K) (< 1e-6 at K = 4096) of an output's
    size. fp16 rounds the output and, in the raw pattern, its intermediates (2^-11 each), and kernels
    that accumulate in fp16 do so per block and then over K / 32 partial sums, about
    2^-11 * (sqrt(32) + sqrt(K / 32)) (0.6% at K = 1024). A lost K block is far outside either: one
    block of 32 of K terms carries about sqrt(32 / K) of an output (18% at K = 1024). Accuracy level 4
    rounds each X value to one of 255 levels of its 128-value block's maximum: for normal X an error of
    about max|x| / (254 * sqrt(3)) (0.6% of X's spread) per term, so of about 0.6% of an output's spread,
    up to 2-3% of the largest output at the tails of 10^5 outputs; a lost block or adapter stays far outside.

    ``what`` names the compared output in the message (which session, which adapter state).
    """
    prefix = f"{what}: " if what else ""
    got = np.asarray(actual, dtype=np.float64)
    if got.shape != expected.shape:
        msg = f"{prefix}shape {got.shape} != reference {expected.shape}"
        raise AssertionError(msg)
    scale = max(float(np.abs(expected).max(initial=0.0)), 1.0)
    tolerance = (3e-2 if quantized_x else 1e-5 if dtype == np.float32 else 1e-2) * scale
    error = float(np.abs(got - expected).max(initial=0.0))
    if not error <= tolerance:  # also catches NaN
        msg = (
            f"{prefix}max abs error {error:.3g} > tolerance {tolerance:.3g}"
            f" (max |ref| {scale:.3g}, {np.dtype(dtype).name})"
        )
        raise AssertionError(msg)
