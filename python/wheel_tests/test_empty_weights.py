"""MatMulNBits with zero-sized packed weights: zeros, or the broadcast bias, with the logical shape.

Stock wheels refuse such weights, several by crashing, so each case runs in a child process. Every
case on an EP must agree with that EP's row in the feature matrix; wrong numbers always fail.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from wheel_tests import capabilities, eps

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import NoReturn


@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
def test_empty_packed_weight(
    ep: eps.EpKind, dtype: str, bits: int, *, bias: bool, absent: Callable[[str], NoReturn]
) -> None:
    result = capabilities.empty_weight_probe(ep, dtype, bits=bits, bias=bias)
    assert result.outcome != "mismatch", result.describe()
    supported = capabilities.empty_weight_probe(ep).outcome == "ok"
    if supported or capabilities.claimed("empty_weights"):
        assert result.outcome == "ok", result.describe()
        return
    assert result.outcome in {"error", "crash"}, result.describe()
    absent(f"empty B refused: {result.describe()}")
