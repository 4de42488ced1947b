"""GPU time of each dispatch, from the WebGPU EP's own profiler, so a case's kernels are measured
without the fixed cost of a run (uploads, readback, submission).

With session profiling on, onnxruntime's WebGPU EP brackets every dispatch with timestamp queries
and writes one profiler event per dispatch (``WebGpuContext::CollectProfilingData``): name
``node&op_type&program``, ``dur`` in µs, ``args.cache_key``. A profiled session of its own runs the
case again; its events are cut into runs by count (every run of a case dispatches the same kernels),
and the first runs, which compile pipelines, are dropped. With graph capture on, onnxruntime 1.30.0's
EP times the replays (``WebGpuContext::Replay`` restores each captured dispatch's profiling entry) and
not the capturing run, which is replayed once within the same run: one run still gives one set of
dispatch events. An EP that does not time replays gives no events or uneven runs, the WebGPU plugin EP
writes no dispatch events at all, and the CPU EP has no dispatches: such cases say so instead.
"""

from __future__ import annotations

import json
import statistics
import tempfile
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable


@dataclass(frozen=True, kw_only=True)
class KernelTimes:
    """The profiled runs of one case."""

    run_us: list[float]
    """GPU µs of each kept run: the sum of its dispatches."""
    by_program: dict[str, float]
    """Median µs per run of each ``op_type&program`` (several nodes of one kind add up)."""
    dispatches: int
    """Dispatches per run."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class NoKernelTimes(Exception):  # noqa: N818 - a reason, carried to the results, not a failure
    """Why a profile gave no per-run GPU times."""


class NoDispatchEvents(NoKernelTimes):
    """The profile holds no dispatch at all: why depends on the EP that ran it."""


NO_EVENTS_CAUSE = {
    "builtin": "no timestamp-query support on this adapter?",
    # onnxruntime's C API lets a plugin EP add events through an OrtEpProfilerImpl; the WebGPU plugin
    # (core/providers/webgpu/ep/) implements none, so its dispatches never reach the session's profile.
    "plugin": "a plugin EP's dispatches reach the session's profile only through its own EP profiler, "
    "which the WebGPU plugin does not implement",
}


def kernel_events(profile: Path | list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The WebGPU EP's dispatch events of an onnxruntime profile (its file or its events), in the order
    it wrote them."""
    events = json.loads(profile.read_text(encoding="utf-8")) if isinstance(profile, Path) else profile
    return [e for e in events if isinstance(e.get("args"), dict) and "cache_key" in e["args"]]


def per_run(events: list[dict[str, Any]], runs: int, *, skip: int) -> KernelTimes:
    """Split ``events`` of ``runs`` runs into equal runs, drop the first ``skip``, sum each run."""
    if not events:
        msg = "the profile has no GPU dispatch events"
        raise NoDispatchEvents(msg)
    if len(events) % runs:
        msg = f"{len(events)} dispatch events do not split into {runs} equal runs"
        raise NoKernelTimes(msg)
    size = len(events) // runs
    kept = [events[i * size : (i + 1) * size] for i in range(skip, runs)]
    programs: dict[str, list[float]] = defaultdict(list)
    for run in kept:
        sums: dict[str, float] = defaultdict(float)
        for event in run:
            sums[event["name"].split("&", 1)[-1]] += float(event["dur"])
        for program, total in sums.items():
            programs[program].append(total)
    return KernelTimes(
        run_us=[sum(float(e["dur"]) for e in run) for run in kept],
        by_program={program: statistics.median(totals) for program, totals in sorted(programs.items())},
        dispatches=size,
    )


def profile_runs(
    open_session: Callable[[str], tuple[Any, Callable[[], object]]], prefix: Path, *, runs: int, skip: int
) -> KernelTimes:
    """Open a profiled session (``open_session(profile_prefix)`` gives it and one request), make
    ``runs`` requests, and read their GPU times back."""
    session, request = open_session(str(prefix))
    for _ in range(runs):
        request()
    # The prefix is absolute, so is the file onnxruntime names.
    return per_run(kernel_events(Path(session.end_profiling())), runs, skip=skip)


def measure(
    ep_kind: str, open_session: Callable[[str], tuple[Any, Callable[[], object]]], *, warmups: int, requests: int
) -> dict[str, Any]:
    """A case's GPU times as a result entry: ``warmups`` then ``requests`` profiled runs after the first
    (which compiles pipelines), in a profile of its own; or ``{"error": why}``."""
    if ep_kind == "cpu":
        return {"error": "the CPU EP has no GPU dispatches"}
    skip = 1 + warmups
    with tempfile.TemporaryDirectory() as tmp:
        try:
            times = profile_runs(open_session, Path(tmp) / "profile", runs=skip + requests, skip=skip)
        except NoDispatchEvents as exc:
            return {"error": f"{exc} ({NO_EVENTS_CAUSE[ep_kind]})"}
        except NoKernelTimes as exc:
            return {"error": str(exc)}
    return times.as_dict()
