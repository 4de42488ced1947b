"""The QLoRA cases shared by the tests and the child-process probes: weights, adapters, runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import onnxruntime as ort

from wheel_bench.genai_model import export_adapter
from wheel_tests import models, reference

if TYPE_CHECKING:
    from pathlib import Path

# K = 2048 is 64 blocks of 32: the fused kernels split a row's blocks over 32 lanes (down projection)
# or 32 threads per output (base), so each lane accumulates 2 blocks and an accumulator that is
# overwritten instead of added to shows. N = 300 is no multiple of any of their output tiles (8, 128,
# 256), so every kernel has a partial last tile.
K, N, RANK = 2048, 300, 32
# N = 336 is a multiple of 16, which onnxruntime's tiled DP4A base kernel needs (with accuracy level 4 and
# four or more rows), but not of its 64-column tile: the kernel that adds the fused up projection in its
# output stage, with a partial last tile.
N_TILED = 336


def spec(dtype: type[np.floating], form: models.AdapterForm, *, n: int = N, **kwargs: object) -> models.QloraSpec:
    return models.QloraSpec(k=K, n=n, rank=RANK, dtype=dtype, form=form, **kwargs)  # type: ignore[arg-type]


def base_weight(dtype: type[np.floating], *, zero_points: bool = False, n: int = N) -> reference.QuantizedWeight:
    rng = np.random.default_rng(100)
    return reference.quantize(rng.standard_normal((K, n)), bits=4, zero_points=zero_points, dtype=dtype)


def base_bias(dtype: type[np.floating], n: int = N) -> reference.FloatArray:
    """A bias of about the size of the outputs (sqrt(K)), so that a dropped or doubled bias shows."""
    bias: reference.FloatArray = (np.random.default_rng(101).standard_normal(n) * np.sqrt(K)).astype(dtype)
    return bias


def adapter_weights(s: models.QloraSpec, seed: int) -> reference.LoraWeights:
    """A rank-32 adapter large enough to move the output well beyond the fp16 tolerance."""
    rng = np.random.default_rng(seed)
    down = rng.standard_normal((s.k, s.rank)) / np.sqrt(s.k)
    up = rng.standard_normal((s.rank, s.n)) * 2.0
    if s.form == "int8":
        return reference.LoraWeights(
            down=reference.quantize(down, bits=8, zero_points=False, dtype=s.dtype),
            up=reference.quantize(up, bits=8, zero_points=False, dtype=s.dtype),
        )
    return reference.LoraWeights(down=down.astype(s.dtype), up=up.astype(s.dtype))


def write_adapter(path: Path, tensors: dict[str, np.ndarray]) -> ort.LoraAdapter:
    """Write an ``.onnx_adapter`` with AdapterFormat and load it back as a LoraAdapter."""
    export_adapter(path, tensors)
    adapter = ort.LoraAdapter()
    adapter.Load(str(path))
    return adapter


def run(session: ort.InferenceSession, x: np.ndarray, adapter: ort.LoraAdapter | None) -> np.ndarray:
    options = ort.RunOptions()
    if adapter is not None:
        options.add_active_adapter(adapter)
    (y,) = session.run(None, {"X": x}, options)
    return np.asarray(y)


def activations(m: int, dtype: type[np.floating], batch: int | None = None, *, seed: int = 0) -> np.ndarray:
    """X of shape (m, K), or (batch, m, K) for a batched model; another ``seed``, other values."""
    shape = (m, K) if batch is None else (batch, m, K)
    return np.random.default_rng((m + 1, seed)).standard_normal(shape).astype(dtype)
