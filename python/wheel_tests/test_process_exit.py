"""A process that used the EP exits cleanly: a runtime that crashes in its own teardown fails here, by name.

onnxruntime 1.25.0-dev's WebGPU EP released its Dawn device and instance in static destructors, after
the NVIDIA Vulkan driver's exit handlers had run: every process that had used it died of SIGSEGV while
exiting, its work done. A child process runs one session and exits; its exit status is the verdict.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wheel_tests import capabilities

if TYPE_CHECKING:
    from wheel_tests import eps


def test_a_process_that_used_the_ep_exits_cleanly(ep: eps.EpKind) -> None:
    # The probe that decided the lane runs: its child's exit status is this test's verdict.
    result = capabilities.device_probe(ep)
    assert result.outcome == "ok", result.describe()
    assert result.exit_crash is None, result.describe()
