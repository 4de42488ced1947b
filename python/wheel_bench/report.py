"""Turn a bench document into a summary, a Markdown report and PNG plots.

Op level: per-layer time (t_L / L) and marginal cost per layer ((t_L - t_1) / (L - 1)) with the bytes
a layer moves and the bandwidth floor. Model level: TTFT and decode tokens/s per case, in the
layout of the adapter fusion PR's performance table, and fused / raw graph on the same wheel per
prompt, adapter and capture mode with bootstrap intervals. With two wheels, every figure gets the
B/A ratio, its bootstrap interval and a verdict. Lavapipe results are labelled as CPU-measured; cold
first runs (shader compilation) are listed apart from warm ones.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from wheel_bench.stats import (
    PROCESS_STATE_FACTOR,
    PROCESS_STATE_SPREAD,
    RoundSpread,
    Spread,
    bootstrap_interval,
    compare,
    marginal,
    ratio,
)

if TYPE_CHECKING:
    from pathlib import Path

# Stated peak bandwidths (GB/s) for devices a result may name; a measured figure can be passed instead.
STATED_BANDWIDTH_GBS = {"H200": 4800.0, "H100": 3350.0}
TIMED_LEVELS = ("ops", "paged")
"""Levels whose cases carry ``samples_ms`` of whole runs (the genai level carries TTFT and tokens/s)."""
NOT_AS_NAMED = "none: the graphs are not fused and raw"
"""The fused / raw verdict where a graph check failed (see ``genai_run.graph_check``)."""
ROUNDS_DISAGREE = "rounds disagree"
"""Marks an A/B verdict whose interval could not see what moved between rounds (``_rounds_disagree``)."""
ROUNDS_DISAGREE_SLACK = 0.01
NORM_BUDGET = 1.10
"""The Q/K norm's budget: a node with norm may cost at most 10 % more than without."""


RoundSamples = dict[tuple[str, str], dict[str, dict[int, list[float]]]]
"""(wheel, case key) -> metric -> round -> samples."""


def _samples_by_round(document: dict[str, Any]) -> RoundSamples:
    out: RoundSamples = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for run in document["runs"]:
        for case in run["cases"]:
            if "error" in case:
                continue
            metrics = out[(run["wheel"], case["key"])]
            if case["level"] in TIMED_LEVELS:
                metrics["ms"][run["round"]] += case["samples_ms"]
                # absent from results written before it
                metrics["host_cpu_ms"][run["round"]] += case.get("host_cpu_ms", [])
                # The profiled session's GPU time per run (absent where the EP gives none).
                metrics["gpu_us"][run["round"]] += case.get("gpu", {}).get("run_us", [])
            else:
                metrics["ttft_ms"][run["round"]] += case["ttft_ms"]
                metrics["decode_tok_s"][run["round"]] += case["decode_tok_s"]
    return out


def _samples(by_round: RoundSamples) -> dict[tuple[str, str], dict[str, list[float]]]:
    """(wheel, case key) -> metric -> samples over all rounds."""
    return {
        wheel_key: {metric: [x for r in sorted(rounds) for x in rounds[r]] for metric, rounds in metrics.items()}
        for wheel_key, metrics in by_round.items()
    }


def _paired_rounds(
    rounds_a: dict[int, list[float]], rounds_b: dict[int, list[float]]
) -> tuple[list[list[float]], list[list[float]]]:
    """A's and B's samples by round, over the rounds in which both were measured, in round order."""
    both = sorted(set(rounds_a) & set(rounds_b))
    return [rounds_a[r] for r in both], [rounds_b[r] for r in both]


def _cases(document: dict[str, Any], wheel: str | None = None) -> dict[str, dict[str, Any]]:
    """Case key -> the case's description from the first run (of ``wheel``, when given) that has it."""
    out: dict[str, dict[str, Any]] = {}
    for run in document["runs"]:
        if wheel is not None and run["wheel"] != wheel:
            continue
        for case in run["cases"]:
            out.setdefault(case["key"], case)
    return out


def _bandwidth(document: dict[str, Any], given: float | None) -> tuple[float | None, str]:
    if given is not None:
        return given, "given"
    for gpu in document["host"].get("gpus", []):
        for name, gbs in STATED_BANDWIDTH_GBS.items():
            if name in gpu:
                return gbs, f"stated for {name}"
    return None, "unknown"


def summarize(document: dict[str, Any], *, bandwidth_gbs: float | None = None) -> dict[str, Any]:
    by_round = _samples_by_round(document)
    samples = _samples(by_round)
    cases = _cases(document)
    wheels = [w["id"] for w in document["wheels"]]
    bandwidth, bandwidth_source = _bandwidth(document, bandwidth_gbs)
    rows: list[dict[str, Any]] = []
    for key, case in cases.items():
        if "error" in case:
            rows.append({"key": key, "level": case["level"], "error": case["error"]})
            continue
        metrics = ["ms", "gpu_us"] if case["level"] in TIMED_LEVELS else ["ttft_ms", "decode_tok_s"]
        for metric in metrics:
            if metric == "gpu_us" and not any(samples.get((wheel, key), {}).get(metric) for wheel in wheels):
                continue
            row: dict[str, Any] = {"key": key, "level": case["level"], "metric": metric, "wheels": {}}
            for wheel in wheels:
                values = samples.get((wheel, key), {}).get(metric)
                if values:
                    row["wheels"][wheel] = Spread.of(values).__dict__
            if len(row["wheels"]) == 2:
                a, b = samples[(wheels[0], key)][metric], samples[(wheels[1], key)][metric]
                rounds = _paired_rounds(by_round[(wheels[0], key)][metric], by_round[(wheels[1], key)][metric])
                medians_a, medians_b = ([statistics.median(r) for r in side] for side in rounds)
                if min(medians_a + medians_b) <= 0:
                    # A dispatch shorter than the profiler's microsecond reads 0: no ratio to take.
                    row["not_compared"] = "a round's median is 0 (below the timer's resolution)"
                    rows.append(row)
                    continue
                comparison = compare(a, b, higher_is_better=metric == "decode_tok_s", rounds=rounds)
                row["b_over_a"] = comparison.as_dict()
                # Each round's own ratio: what the order of the wheels did to it, round by round.
                row["b_over_a_by_round"] = [mb / ma for ma, mb in zip(medians_a, medians_b, strict=True)]
                row["round_spread"] = {
                    wheel: RoundSpread.of(by_wheel).as_dict() for wheel, by_wheel in zip(wheels, rounds, strict=True)
                }
            rows.append(row)
    return {
        "bandwidth_gbs": bandwidth,
        "bandwidth_source": bandwidth_source,
        "rows": rows,
        "ops": _ops_table(document, samples, bandwidth),
        "paged": paged_table(document, samples),
        "fused_vs_raw": fused_vs_raw(document, by_round),
        "cold_vs_warm": _cold_vs_warm(document),
    }


def _ops_table(
    document: dict[str, Any], samples: dict[tuple[str, str], dict[str, list[float]]], bandwidth: float | None
) -> list[dict[str, Any]]:
    """Per wheel, variant, M, adapter and capture: per-layer and marginal µs, ratio to base, bytes and floor.

    The ratio to base compares the longest chains of the same wheel, M and capture mode: the ratio of
    medians with its bootstrap interval (``compare``), so a variant within base's spread says so.
    """
    out = []
    for wheel in (w["id"] for w in document["wheels"]):
        # Per wheel: what a case found (fused nodes, its fusion note) differs between wheels.
        chains: dict[tuple[str, int, int, bool, bool], dict[int, dict[str, Any]]] = defaultdict(dict)
        for key, case in _cases(document, wheel).items():
            if case["level"] == "ops" and "error" not in case:
                group = (case["variant"], case["m"], case["k"], case.get("adapter", True), case.get("capture", False))
                chains[group][case["layers"]] = {"key": key, **case}
        medians: dict[tuple[str, int, int, bool, bool], tuple[float, float | None, list[float]]] = {}
        for group, by_layers in chains.items():
            longest = max(by_layers)
            long_samples = samples.get((wheel, by_layers[longest]["key"]), {}).get("ms")
            if not long_samples:
                continue
            ms_long = statistics.median(long_samples)
            marginal = None
            one = samples.get((wheel, by_layers[1]["key"]), {}).get("ms") if 1 in by_layers else None
            if one and longest > 1:
                marginal = (ms_long - statistics.median(one)) / (longest - 1) * 1e3
            host_cpu = samples[(wheel, by_layers[longest]["key"])].get("host_cpu_ms")
            host_cpu_us = statistics.median(host_cpu) / longest * 1e3 if host_cpu else None
            medians[group] = (ms_long / longest * 1e3, marginal, long_samples, host_cpu_us)
        for group, (per_layer, marginal, long_samples, host_cpu_us) in medians.items():
            variant, m, k, adapter, capture = group
            base = medians.get(("base", m, k, True, capture))
            case = chains[group][max(chains[group])]
            base_case = chains.get(("base", m, k, True, capture), {}).get(case["layers"])
            nbytes = case["bytes_per_layer"]
            x_base = compare(base[2], long_samples, higher_is_better=False) if base and variant != "base" else None
            gpu = _gpu_figures(case, base_case if variant != "base" else None)
            out.append(
                {
                    "wheel": wheel,
                    "variant": variant,
                    "m": m,
                    "k": k,
                    "adapter": adapter,
                    "capture": capture,
                    "layers": case["layers"],
                    "per_layer_us": per_layer,
                    "host_cpu_us": host_cpu_us,
                    "marginal_us": marginal,
                    "x_base": per_layer / base[0] if base else None,
                    "x_base_ci": [x_base.ci_low, x_base.ci_high] if x_base else None,
                    "marginal_x_base": marginal / base[1] if base and base[1] and marginal is not None else None,
                    "bytes_per_layer": nbytes,
                    "floor_us": nbytes / (bandwidth * 1e9) * 1e6 if bandwidth else None,
                    "fused_nodes": case.get("fused_nodes"),
                    "fusion": case.get("fusion"),
                    **gpu,
                }
            )
    return out


def _gpu_figures(case: dict[str, Any], base: dict[str, Any] | None) -> dict[str, Any]:
    """GPU µs per layer of a chain (median over its profiled runs / L) with its interval, the ratio
    to base's with its interval, and each kernel's µs per layer; or why there are none."""
    gpu = case.get("gpu") or {"error": "not measured (a result from before GPU timing)"}
    if "error" in gpu:
        return {"gpu_error": gpu["error"]}
    layers = case["layers"]
    runs = gpu["run_us"]
    figures: dict[str, Any] = {
        "gpu_us": statistics.median(runs) / layers,
        "gpu_ci_us": list(bootstrap_interval(lambda c: statistics.median(c[0]) / layers, [runs])),
        "gpu_kernels_us": {name: us / layers for name, us in gpu["by_program"].items()},
    }
    base_runs = ((base or {}).get("gpu") or {}).get("run_us")
    if base_runs:
        figures["gpu_x_base"] = ratio(statistics.median(runs), statistics.median(base_runs))
        figures["gpu_x_base_ci"] = list(
            bootstrap_interval(lambda c: ratio(statistics.median(c[0]), statistics.median(c[1])), [runs, base_runs])
        )
    return figures


def paged_table(
    document: dict[str, Any], samples: dict[tuple[str, str], dict[str, list[float]]]
) -> list[dict[str, Any]]:
    """Per wheel, phase and variant: chain / L and the marginal cost of a node with its interval, and the
    ratio of marginals to ``norm_off`` (and, for ``norm_unfused``, to ``norm``: what the fusion buys).

    Intervals are paired bootstraps over the requests, which ran every case of a phase interleaved.
    A variant the wheel refused is a row with no figures and ``not_measured``: ``absent: `` and the refusal.
    """
    out = []
    for wheel in (w["id"] for w in document["wheels"]):
        chains, columns = _paged_chains(document, samples, wheel)
        for (phase, variant), by_layers in chains.items():
            case = by_layers[max(by_layers)]
            row: dict[str, Any] = {"wheel": wheel, "phase": phase, "variant": variant, "layers": case["layers"]}
            row |= {key: case[key] for key in ("new_tokens", "past", "num_heads", "kv_heads", "head_size")}
            error = next((c["error"] for c in by_layers.values() if "error" in c), None)
            if error is not None or (phase, variant) not in columns:
                out.append(row | {"not_measured": error or "no chains of 1 and L nodes to take a marginal from"})
                continue
            long, one, layers = columns[(phase, variant)]
            row |= _marginal_figures(long, one, layers)
            row["cache_in_place"] = all(c.get("cache_in_place") is not False for c in by_layers.values())
            if variant != "norm_off" and (phase, "norm_off") in columns:
                row["x_norm_off"], row["x_norm_off_ci"] = _marginal_ratio(
                    long, one, layers, columns[(phase, "norm_off")]
                )
            if variant == "norm_unfused" and (phase, "norm") in columns:
                row["x_norm"], row["x_norm_ci"] = _marginal_ratio(long, one, layers, columns[(phase, "norm")])
            if "x_norm_off_ci" in row:
                row["norm_budget"] = _budget(row["x_norm_off_ci"])
            norm_off = chains.get((phase, "norm_off"), {}).get(case["layers"])
            row |= _gpu_figures(case, norm_off if variant != "norm_off" else None)
            out.append(row)
    return out


Columns = tuple[list[float], list[float], int]
"""A chain's samples with L nodes, with one node, and L."""


def _paged_chains(
    document: dict[str, Any], samples: dict[tuple[str, str], dict[str, list[float]]], wheel: str
) -> tuple[dict[tuple[str, str], dict[int, dict[str, Any]]], dict[tuple[str, str], Columns]]:
    """(phase, variant) -> layers -> case of ``wheel``; and the samples of those with a chain of 1 and of L."""
    chains: dict[tuple[str, str], dict[int, dict[str, Any]]] = defaultdict(dict)
    for key, case in _cases(document, wheel).items():
        if case["level"] == "paged":
            chains[(case["phase"], case["variant"])][case["layers"]] = {"key": key, **case}
    columns: dict[tuple[str, str], Columns] = {}
    for group, by_layers in chains.items():
        longest = max(by_layers)
        long = samples.get((wheel, by_layers[longest]["key"]), {}).get("ms")
        one = samples.get((wheel, by_layers[1]["key"]), {}).get("ms") if 1 in by_layers else None
        if long and one and longest > 1:
            columns[group] = (long, one, longest)
    return chains, columns


def _marginal_figures(long: list[float], one: list[float], layers: int) -> dict[str, Any]:
    interval = bootstrap_interval(lambda c: marginal(c[0], c[1], layers), [long, one])
    return {
        "chain_ms": statistics.median(long),
        "one_ms": statistics.median(one),
        "per_node_us": statistics.median(long) / layers * 1e3,
        "marginal_us": marginal(long, one, layers) * 1e3,
        "marginal_ci_us": [interval[0] * 1e3, interval[1] * 1e3],
    }


def _marginal_ratio(long: list[float], one: list[float], layers: int, base: Columns) -> tuple[float, list[float]]:
    """marginal(variant) / marginal(base), and its bootstrap interval over the four columns."""
    base_long, base_one, base_layers = base

    def statistic(c: list[list[float]]) -> float:
        return ratio(marginal(c[0], c[1], layers), marginal(c[2], c[3], base_layers))

    low, high = bootstrap_interval(statistic, [long, one, base_long, base_one])
    return statistic([long, one, base_long, base_one]), [low, high]


def _budget(interval: list[float]) -> str:
    """Whether the norm's cost is within ``NORM_BUDGET``: only an interval wholly on one side decides."""
    low, high = interval
    if high <= NORM_BUDGET:
        return "within 10 %"
    if low > NORM_BUDGET:
        return "over 10 %"
    return "undecided"


def adapter_label(case: dict[str, Any]) -> str:
    """``off``, ``a`` or ``b``; results written before two adapters say on or off."""
    adapter = case["adapter"]
    if isinstance(adapter, bool):
        return "on" if adapter else "off"
    return str(adapter)


def fused_vs_raw(document: dict[str, Any], by_round: RoundSamples) -> list[dict[str, Any]]:
    """Per wheel, prompt, adapter and capture mode: median(fused) / median(raw) of TTFT and decode
    tokens/s with their bootstrap intervals and verdicts (``compare`` with raw as A; both graphs ran in
    each round's worker, so from four rounds on the interval draws rounds), whether both graphs decoded
    the same greedy tokens, and what each graph's check found."""
    samples = _samples(by_round)
    outputs = _outputs(document)
    out = []
    for wheel in (w["id"] for w in document["wheels"]):
        cases = _cases(document, wheel)
        for key, fused in cases.items():
            raw_key = key.replace("graph=fused", "graph=raw")
            # A model the wheel refused to load has no prompt: it is listed under "Not measured".
            if (
                fused["level"] != "genai"
                or fused.get("graph") != "fused"
                or raw_key not in cases
                or "prompt" not in fused
            ):
                continue
            row: dict[str, Any] = {
                "wheel": wheel,
                "prompt": fused["prompt"],
                "adapter": adapter_label(fused),
                "capture": fused["capture"],
                "fused_check": fused["graph_check"],
                "raw_check": cases[raw_key]["graph_check"],
            }
            fused_samples, raw_samples = samples.get((wheel, key)), samples.get((wheel, raw_key))
            if not fused_samples or not raw_samples:
                error = fused.get("error") or cases[raw_key].get("error") or "not measured"
                out.append(row | {"not_measured": error})
                continue
            # A wheel that fused nothing (or a raw graph that fused) has no fusion to judge: figures, no verdict.
            as_named = row["fused_check"]["ok"] and row["raw_check"]["ok"]
            for metric in ("ttft_ms", "decode_tok_s"):
                rounds = _paired_rounds(by_round[(wheel, raw_key)][metric], by_round[(wheel, key)][metric])
                comparison = compare(
                    raw_samples[metric], fused_samples[metric], higher_is_better=metric != "ttft_ms", rounds=rounds
                )
                row[metric] = {
                    "fused": statistics.median(fused_samples[metric]),
                    "raw": statistics.median(raw_samples[metric]),
                    "ratio": comparison.ratio,
                    "ci": [comparison.ci_low, comparison.ci_high],
                    "resampled": comparison.resampled,
                    "verdict": comparison.verdict.replace("B ", "fused ") if as_named else NOT_AS_NAMED,
                }
            row["same_tokens"] = outputs[(wheel, key)] == outputs[(wheel, raw_key)]
            if "logits_vs_raw" in fused:
                row["logits_vs_raw"] = fused["logits_vs_raw"]
            out.append(row)
    return out


def _cold_vs_warm(document: dict[str, Any]) -> list[dict[str, Any]]:
    """First run of each case per round: round 1 compiles shaders cold, the rounds after it find them cached."""
    out = []
    for run in document["runs"]:
        for case in run["cases"]:
            if "error" in case:
                continue
            first = case["first_run_ms"] if case["level"] in TIMED_LEVELS else case["first_request"]["ttft_ms"]
            out.append({"wheel": run["wheel"], "round": run["round"], "key": case["key"], "first_ms": first})
    return out


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _spread(spread: dict[str, float] | None, digits: int = 1) -> str:
    if not spread:
        return "-"
    return f"{_fmt(spread['median'], digits)} ({_fmt(spread['min'], digits)}-{_fmt(spread['max'], digits)})"


def on_off(flag: bool) -> str:  # noqa: FBT001 - a table cell or a worker's name
    return "on" if flag else "off"


def _ratio(row: dict[str, Any]) -> str:
    interval = row.get("x_base_ci")
    text = _fmt(row["x_base"], 2)
    return f"{text} ({interval[0]:.2f}-{interval[1]:.2f})" if interval else text


def _label(row: dict[str, Any]) -> str:
    """A bar's name: the variant, with the adapter and capture modes that are not the default."""
    return (
        str(row["variant"])
        + ("" if row.get("adapter", True) else " adapter off")
        + (" capture" if row.get("capture", False) else "")
    )


def _fused(row: dict[str, Any]) -> str:
    """Results written before the ``fusion`` note carry only the fused-node count."""
    if row.get("fusion"):
        return str(row["fusion"])
    return "-" if row["fused_nodes"] is None else str(row["fused_nodes"])


def _environment_line(run: dict[str, Any]) -> str:
    env = run["environment"]
    claims = env.get("claims_qk_norm")  # recorded by runs with the paged level
    return (
        f"- {run['wheel']} ran onnxruntime {env['ort_version']} with EP {env['ep']} ({env['ep_kind']}"
        + (f", plugin {env['plugin_version']}" if env.get("plugin_version") else "")
        + f"), MatMulNBitsQLoRA schema: {'yes' if env['has_qlora_schema'] else 'no'}"
        + ("" if claims is None else f", Q/K norm claimed by its build: {'yes' if claims else 'no'}")
    )


def _software_lines(document: dict[str, Any]) -> list[str]:
    """What each wheel ran, with which WebGPU EP options, and which onnxruntime-genai (and why) the model
    level used."""
    first_run: dict[str, dict[str, Any]] = {}  # a wheel's first worker, for each wheel in order
    for run in document["runs"]:
        first_run.setdefault(run["wheel"], run)
    lines = [_environment_line(run) for run in first_run.values()]
    if given := document["options"].get("webgpu_options"):  # absent from results written before the option
        lines.append("- WebGPU EP options given to every session: " + ", ".join(f"`{n}={v}`" for n, v in given))
    if document.get("genai"):  # absent from results written before genai was chosen per run
        lines.append(f"- {document['genai']['reason']}")
    return lines


def _worker_order(order: list[dict[str, Any]]) -> str:
    """``A1 B1 B2 A2``; where a round ran one worker per capture mode, each named with its mode."""
    split = len({(o["wheel"], o["round"]) for o in order}) < len(order)
    if not split:
        return " ".join(f"{o['wheel']}{o['round']}" for o in order)
    names = " ".join(f"{o['wheel']}{o['round']} (capture {on_off(o['captures'][0])})" for o in order)
    return f"{names}, each capture mode in a process of its own"


def markdown(document: dict[str, Any]) -> str:
    summary = document["summary"]
    labels = {w["id"]: w["label"] for w in document["wheels"]}
    lines = ["# ortstack bench", ""]
    if document["software_adapter"]:
        lines += [
            "**CPU-measured:** WebGPU ran on Mesa's lavapipe (a software Vulkan driver). These numbers",
            "measure a CPU; do not compare them with GPU runs.",
            "",
        ]
    lines += [f"- {wid}: `{label}`" for wid, label in labels.items()]
    lines += _software_lines(document)
    host = document["host"]
    lines += [f"- host: {host['platform']}" + (f"; GPU: {', '.join(host['gpus'])}" if host.get("gpus") else "")]
    order = _worker_order(document["order"])
    options = document["options"]
    lines += [
        (
            f"- order of worker runs: {order}; {options['warmups']} warmups and {options['requests']} requests "
            "per case and round; figures are medians over all rounds with (min-max)"
        ),
        f"- command: `{' '.join(document['command'])}`" if document["command"] else "",
        "",
    ]
    if summary["ops"]:
        floor_note = (
            f"bandwidth floor at {summary['bandwidth_gbs']:.0f} GB/s ({summary['bandwidth_source']})"
            if summary["bandwidth_gbs"]
            else "no bandwidth figure for this device (pass --bandwidth-gbs)"
        )
        lines += [
            "## Op level: per-layer cost of a MatMulNBits chain",
            "",
            (
                f"µs per layer = median run time / L; marginal = (t_L - t_1)/(L - 1); {floor_note}. x base: ratio of "
                "medians to `base` of the same wheel, M and capture mode, with its 95 % bootstrap interval; "
                "adapter off: zero-sized adapter weights. Host CPU µs: the calling thread's CPU time per run / L "
                "(what the host computes; the rest of a run is waiting). GPU µs: the chain's dispatches timed by the "
                "WebGPU EP's "
                "profiler (timestamp queries) in a profiled session of their own, per layer, median over its runs "
                "with a 95 % bootstrap interval (with capture on: the replays' dispatches); none on the CPU EP."
            ),
            "",
            (
                "| wheel | variant | M | adapter | capture | per layer µs | x base (95 %) | host CPU µs | "
                "marginal µs | x base | GPU µs (95 %) | GPU x base (95 %) | MB/layer | floor µs | fused |"
            ),
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        ordered = sorted(
            summary["ops"],
            key=lambda r: (r["m"], r.get("capture", False), r["variant"], not r.get("adapter", True), r["wheel"]),
        )
        lines += [
            f"| {r['wheel']} | {r['variant']} | {r['m']} | {on_off(r.get('adapter', True))} | "
            f"{on_off(r.get('capture', False))} | {_fmt(r['per_layer_us'])} | {_ratio(r)} | "
            f"{_fmt(r.get('host_cpu_us'))} | {_fmt(r['marginal_us'])} | {_fmt(r['marginal_x_base'], 2)} | "
            f"{_interval(r.get('gpu_us'), r.get('gpu_ci_us'), 1)} | "
            f"{_interval(r.get('gpu_x_base'), r.get('gpu_x_base_ci'), 3)} | {r['bytes_per_layer'] / 1e6:.2f} | "
            f"{_fmt(r['floor_us'], 2)} | {_fused(r)} |"
            for r in ordered
        ]
        lines.append("")
        lines += _kernel_lines(ordered)
    if summary.get("paged"):
        lines += _paged_section(document)
    genai_rows = [r for r in summary["rows"] if r["level"] == "genai"]
    if genai_rows:
        lines += _genai_table(document, genai_rows)
    if summary.get("fused_vs_raw"):
        lines += _fused_vs_raw_section(summary["fused_vs_raw"])
    ab_rows = [r for r in summary["rows"] if "b_over_a" in r]
    if ab_rows:
        lines += [
            "## A/B",
            "",
            "Ratio B/A of medians with a 95 % bootstrap interval; a difference inside the spread is no difference."
            + (
                " The intervals draw whole rounds (A's and B's of one round together), then requests within them: "
                "a difference some rounds show and others do not is no difference."
                if any(r["b_over_a"].get("resampled") == "rounds and requests" for r in ab_rows)
                else ""
            )
            + (
                " gpu_us: the case's dispatches per run, timed by the EP's profiler in a profiled session of each "
                "worker: the kernels without a run's fixed cost."
                if any(r["metric"] == "gpu_us" for r in ab_rows)
                else ""
            )
            + (
                f" {ROUNDS_DISAGREE}: a round's own B/A lies more than {ROUNDS_DISAGREE_SLACK:.0%} outside an "
                "interval that drew requests only, so the "
                "interval is narrower than what moved between worker processes; more rounds (`--rounds 6`) let "
                "it draw them."
                if any(_rounds_disagree(r) for r in ab_rows)
                else ""
            ),
            "",
            "| case | metric | A | B | B/A | 95 % interval | verdict | B/A by round |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in ab_rows:
            c = r["b_over_a"]
            by_round = " ".join(f"{x:.3f}" for x in r.get("b_over_a_by_round", [])) or "-"
            digits = 1 if r["metric"] == "gpu_us" else 2
            lines.append(
                f"| {r['key']} | {r['metric']} | {_spread(r['wheels']['A'], digits)} | "
                f"{_spread(r['wheels']['B'], digits)} | "
                f"{c['ratio']:.3f} | {c['ci_low']:.3f}-{c['ci_high']:.3f} | {c['verdict']}"
                f"{'; ' + ROUNDS_DISAGREE if _rounds_disagree(r) else ''} | {by_round} |"
            )
        lines.append("")
        lines += _process_level_lines(ab_rows)
    errors = [
        f"- {run['wheel']}{run['round']} {case['key']}: {case['error'].strip()}"
        for run in document["runs"]
        for case in run["cases"]
        if "error" in case
    ]
    if errors:
        lines += ["## Not measured", "", *errors, ""]
    totals: dict[tuple[str, int], float] = defaultdict(float)
    for r in summary["cold_vs_warm"]:
        totals[(r["wheel"], r["round"])] += r["first_ms"]
    lines += [
        "## First run per worker (cold shader compilation in round 1, warm cache in the rounds after it)",
        "",
        "Sum of first runs: "
        + "; ".join(f"{wheel} round {round_}: {_fmt(ms / 1e3, 2)} s" for (wheel, round_), ms in sorted(totals.items())),
        "",
        "| wheel | round | case | first run ms |",
        "|---|---|---|---|",
    ]
    lines += [f"| {r['wheel']} | {r['round']} | {r['key']} | {_fmt(r['first_ms'])} |" for r in summary["cold_vs_warm"]]
    return "\n".join(lines) + "\n"


def _rounds_disagree(row: dict[str, Any]) -> bool:
    """Whether a round's own B/A falls outside an interval that resampled requests only (by more than
    ``ROUNDS_DISAGREE_SLACK``: a tenth of a percent between two profiled rounds is no news)."""
    comparison = row["b_over_a"]
    low, high = comparison["ci_low"] - ROUNDS_DISAGREE_SLACK, comparison["ci_high"] + ROUNDS_DISAGREE_SLACK
    return comparison.get("resampled") == "requests" and any(
        not low <= x <= high for x in row.get("b_over_a_by_round", [])
    )


def _process_level_lines(ab_rows: list[dict[str, Any]]) -> list[str]:
    """The A/B rows whose round medians spread far beyond the requests within a round, with each
    wheel's round medians: what the worker processes did, which more rounds average and more requests
    per round do not."""
    rows = [r for r in ab_rows if any(s["process_level"] for s in r.get("round_spread", {}).values())]
    if not rows:
        return []
    note = (
        "Rounds that differ far more than their requests (round medians spread over more than "
        f"{PROCESS_STATE_SPREAD:.0%} of their median and {PROCESS_STATE_FACTOR:g} times a round's interquartile "
        "range): each worker process settled in a state of its own, so the interval is as wide as those states "
        "are unevenly drawn; more rounds narrow it, more requests per round do not."
    )
    lines = [
        note,
        "",
        "| case | metric | wheel | round medians | between rounds | within a round (IQR) |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        for wheel, spread in r["round_spread"].items():
            medians = " ".join(_fmt(m, 2) for m in spread["medians"])
            lines.append(
                f"| {r['key']} | {r['metric']} | {wheel} | {medians} | {spread['between']:.0%} | "
                f"{spread['within']:.0%} |"
            )
    return [*lines, ""]


def _kernel_lines(
    rows: list[dict[str, Any]], columns: tuple[str, ...] = ("variant", "m", "adapter", "capture")
) -> list[str]:
    """Each kernel's GPU µs per layer (``columns`` name the row), and why a row has no GPU figures."""
    timed = [r for r in rows if r.get("gpu_kernels_us")]
    untimed = sorted({r["gpu_error"] for r in rows if r.get("gpu_error")})
    lines = []

    def cell(row: dict[str, Any], column: str) -> str:
        if column in {"adapter", "capture"}:
            return on_off(row.get(column, column == "adapter"))
        return str(row[column])

    if timed:
        lines += [
            "GPU µs per layer by kernel (`op_type&program`, median per run / L):",
            "",
            f"| wheel | {' | '.join(columns)} | kernel | GPU µs |",
            "|---|" + "---|" * len(columns) + "---|---|",
        ]
        lines += [
            f"| {r['wheel']} | {' | '.join(cell(r, c) for c in columns)} | `{name}` | {_fmt(us)} |"
            for r in timed
            for name, us in r["gpu_kernels_us"].items()
        ]
        lines.append("")
    lines += [f"No GPU time: {reason}." for reason in untimed]
    return [*lines, ""] if untimed else lines


def _interval(value: float | None, interval: list[float] | None, digits: int) -> str:
    if value is None:
        return "-"
    text = _fmt(value, digits)
    return f"{text} ({_fmt(interval[0], digits)}-{_fmt(interval[1], digits)})" if interval else text


def _paged_section(document: dict[str, Any]) -> list[str]:
    rows = document["summary"]["paged"]
    lines = [
        "## PagedAttention: cost of the Q/K norm per node",
        "",
        (
            "A chain of L PagedAttention nodes (fp16, GQA, rotary, own caches bound on the device and appended in "
            "place) and the same with one node, every case of a phase interleaved request by request. "
            "marginal = (t_L - t_1)/(L - 1), the node's cost without the fixed cost of a run; chain/L keeps that "
            "cost in. Intervals: 95 % paired bootstrap over the requests. x norm_off: marginal / marginal of "
            "`norm_off`, the budget is ≤ 1.10 (decided only when the whole interval is on one side); "
            "x norm (unfused only): what fusing the norm into the rotary pass buys. `norm_unfused` differs from "
            "`norm` only on a wheel that reads ORT_WEBGPU_PAGED_ATTENTION_QK_NORM_UNFUSED. GPU µs: the chain's "
            "dispatches timed by the WebGPU EP's profiler in a profiled session of their own, per node, and their "
            "ratio to `norm_off`'s (95 % bootstrap over the profiled runs)."
        ),
        "",
        (
            "| wheel | phase | heads | past | new | variant | L | chain ms | chain/L µs | marginal µs (95 %) | "
            "x norm_off (95 %) | ≤ 10 % | x norm (95 %) | GPU µs (95 %) | GPU x norm_off (95 %) |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    order = {"norm_off": 0, "norm": 1, "norm_unfused": 2}
    for r in sorted(rows, key=lambda r: (r["phase"] != "decode", r["wheel"], order.get(r["variant"], 3))):
        head = (
            f"| {r['wheel']} | {r['phase']} | {r['num_heads']}/{r['kv_heads']}x{r['head_size']} | {r['past']} | "
            f"{r['new_tokens']} | {r['variant']} | {r['layers']} |"
        )
        if "not_measured" in r:  # "absent: " and the wheel's refusal, or why the wheel could not be measured
            lines.append(f"{head} {r['not_measured']} | | | | | | | |")
            continue
        note = "" if r["cache_in_place"] else " (caches not appended in place)"
        lines.append(
            f"{head} {_fmt(r['chain_ms'], 3)} | {_fmt(r['per_node_us'])} | "
            f"{_interval(r['marginal_us'], r['marginal_ci_us'], 1)}{note} | "
            f"{_interval(r.get('x_norm_off'), r.get('x_norm_off_ci'), 3)} | {r.get('norm_budget', '-')} | "
            f"{_interval(r.get('x_norm'), r.get('x_norm_ci'), 3)} | "
            f"{_interval(r.get('gpu_us'), r.get('gpu_ci_us'), 1)} | "
            f"{_interval(r.get('gpu_x_base'), r.get('gpu_x_base_ci'), 3)} |"
        )
    lines.append("")
    return lines + _kernel_lines([r for r in rows if "not_measured" not in r], columns=("phase", "variant"))


def _genai_table(document: dict[str, Any], rows: list[dict[str, Any]]) -> list[str]:
    by_key: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for r in rows:
        if "metric" in r:
            by_key[r["key"]][r["metric"]] = r
    cases = _cases(document)
    lines = [
        "## Model level (onnxruntime-genai): TTFT and decode",
        "",
        (
            "Batch 1, greedy, every generated token read back; median (min-max) of all requests. graph: fused is "
            "the wheel's own optimized graph, raw the same model with MatMulNBitsQLoRAFusion disabled; adapter off "
            "runs zero-sized adapter weights (the base alone)."
        ),
        "",
        "| graph | adapter | capture | prompt | generated | wheel | TTFT ms | decode tok/s | output |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    outputs = _outputs(document)
    order = {name: index for index, name in enumerate(("fused", "raw", "off", "on", "a", "b"))}

    def place(key: str) -> tuple[Any, ...]:
        """Prompt, capture, graph, adapter off before A and B."""
        case = cases[key]
        graph, adapter = order.get(case.get("graph", ""), -1), order.get(adapter_label(case), len(order))
        return (case["prompt"], case["capture"], graph, adapter, key)

    for key, metrics in sorted(by_key.items(), key=lambda kv: place(kv[0])):
        case = cases[key]
        for wheel in (w["id"] for w in document["wheels"]):
            ttft = metrics["ttft_ms"]["wheels"].get(wheel)
            decode = metrics["decode_tok_s"]["wheels"].get(wheel)
            lines.append(
                f"| {case.get('graph', '-')} | {adapter_label(case)} | {'on' if case['capture'] else 'off'} | "
                f"{case['prompt']} | {case['generate']} | {wheel} | {_spread(ttft)} | {_spread(decode)} | "
                f"{_output_note(outputs, wheel, case)} |"
            )
    isolated = sorted({c["capture_isolation"] for c in cases.values() if c.get("capture_isolation")})
    lines += ["", *(f"Graph capture: {note}." for note in isolated), ""]
    return lines + _genai_profile_table(document)


def _genai_profile_table(document: dict[str, Any]) -> list[str]:
    """The profiled requests (``--genai-profile``): GPU time of their dispatches against their wall time."""
    profiled = [
        (run["wheel"], case)
        for run in document["runs"]
        for case in run["cases"]
        if isinstance(case.get("gpu_profile"), dict)
    ]
    if not profiled:
        return []
    lines = [
        "### Where a request's time goes (one profiled request per graph, capture off)",
        "",
        (
            "The second of two requests on a model of its own with onnxruntime's profiler on: wall ms (TTFT and "
            "decode, slowed somewhat by the profiler), the GPU time of its dispatches (timestamp queries) and the "
            "busiest programs. GPU time far below wall time: the host sets the pace. On the host: the decoder's "
            "runs (in Run; wall time outside them is genai's own), and over the runs for which onnxruntime wrote "
            "node events, their time in Run split into before the executor (feeds copied in, adapter parameters "
            "among them; the EPs' run start), the executor (kernels enqueued) and after it (fetches copied out; "
            "the EPs' run end), the nodes' own time by EP, and each run's longest node (median and range over the "
            "runs, and the node most often longest): milliseconds where its kind takes microseconds are a wait "
            "inside the run. Each profile is kept beside this report as "
            "`profiles/<wheel>/<file>` (gzip-compressed; Perfetto and chrome://tracing open it)."
        ),
        "",
        (
            "| wheel | graph | prompt | generated | adapter | wall ms | GPU ms (busy) | dispatches | "
            "runs: in Run ms | runs with node events: in Run ms | before executor ms | executor ms | "
            "after executor ms | node host ms by EP | longest node per run ms | busiest programs, GPU ms |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for wheel, case in profiled:
        profile = case["gpu_profile"]
        head = f"| {wheel} | {case['graph']} | {case['prompt']} | {case['generate']} | {profile.get('adapter', '-')} |"
        if "error" in profile:
            lines.append(f"{head} - | {profile['error']} | - | - | - | - | - | - | - | - | - |")
            continue
        busy = profile["gpu_ms"] / profile["wall_ms"] if profile["wall_ms"] else float("nan")
        busiest = ", ".join(f"`{name}` {ms:.1f}" for name, ms in profile["busiest_programs_ms"].items())
        lines.append(
            f"{head} {profile['wall_ms']:.1f} | {profile['gpu_ms']:.1f} ({busy:.0%}) | {profile['dispatches']} | "
            f"{_host_phases(profile)} | {busiest} |"
        )
    return [*lines, ""]


def _host_phases(profile: dict[str, Any]) -> str:
    """The host cells; results written before they were kept (or kept without the recorded runs) say so."""
    if "recorded_runs" not in profile:
        return " | ".join([profile.get("host_error", "not recorded"), "-", "-", "-", "-", "-", "-"])
    nodes = ", ".join(f"{ep} {ms:.1f}" for ep, ms in sorted(profile["node_host_ms"].items(), key=lambda i: -i[1]))
    split = [profile.get(k) for k in ("before_executor_ms", "executing_ms", "after_executor_ms")]
    return (
        f"{profile['runs']}: {profile['in_run_ms']:.1f} | {profile['recorded_runs']}: "
        f"{profile['recorded_in_run_ms']:.1f} | "
        + " | ".join("-" if ms is None else f"{ms:.1f}" for ms in split)
        + f" | {nodes or '-'} | {_longest_node(profile)}"
    )


def _longest_node(profile: dict[str, Any]) -> str:
    longest = profile.get("longest_node")
    if not longest:
        return "-"
    return (
        f"{longest['median_ms']:.2f} ({longest['min_ms']:.2f}-{longest['max_ms']:.2f}): `{longest['node']}` in "
        f"{longest['runs_with_that_node']} of {profile['recorded_runs']} runs"
    )


def _fused_vs_raw_section(rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        "## Fused / raw graph on the same wheel",
        "",
        (
            "median(fused) / median(raw) over all requests of all rounds, with its 95 % bootstrap interval (from "
            "four rounds on it draws whole rounds, then requests within them); a "
            "difference inside the spread is no difference. TTFT below 1 and decode above 1 favour the fusion. "
            "The checks count MatMulNBitsQLoRA nodes in the graph this onnxruntime optimizes with the same "
            "session config entry (genai cannot save its own)."
        ),
        "",
        (
            "| wheel | prompt | adapter | capture | TTFT fused/raw (95 %) | verdict | decode fused/raw (95 %) | "
            "verdict | same tokens | prompt logits fused vs raw | fused graph | raw graph |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(rows, key=lambda r: (r["wheel"], r["capture"], r["prompt"], r["adapter"])):
        head = f"| {r['wheel']} | {r['prompt']} | {r['adapter']} | {on_off(r['capture'])} |"
        checks = f"{_check(r['fused_check'])} | {_check(r['raw_check'])} |"
        if "not_measured" in r:
            lines.append(f"{head} {r['not_measured']} | | | | | | {checks}")
            continue
        ttft, decode = r["ttft_ms"], r["decode_tok_s"]
        lines.append(
            f"{head} {_interval(ttft['ratio'], ttft['ci'], 3)} | {ttft['verdict']} | "
            f"{_interval(decode['ratio'], decode['ci'], 3)} | {decode['verdict']} | "
            f"{'yes' if r['same_tokens'] else 'no'} | {_logits_agreement(r.get('logits_vs_raw'))} | {checks}"
        )
    lines.append("")
    return lines


def _logits_agreement(agreement: dict[str, Any] | None) -> str:
    if agreement is None:
        return "-"
    argmax = "same" if agreement["same_argmax"] else "other"
    return (
        f"P = {agreement['prompt']}: RMSE {agreement['rmse']:.3g} ({agreement['relative']:.2%} of raw RMS), "
        f"max {agreement['max_abs']:.3g}, {argmax} argmax"
    )


def _check(check: dict[str, Any]) -> str:
    return f"{check['note']}" + ("" if check["ok"] else " (not as named)")


def _outputs(document: dict[str, Any]) -> dict[tuple[str, str], set[str]]:
    """(wheel, case key) -> hashes of the greedy outputs seen."""
    out: dict[tuple[str, str], set[str]] = defaultdict(set)
    for run in document["runs"]:
        for case in run["cases"]:
            if "error" not in case:
                out[(run["wheel"], case["key"])] |= set(case.get("output_sha256", []))
    return out


def _output_note(outputs: dict[tuple[str, str], set[str]], wheel: str, case: dict[str, Any]) -> str:
    """Whether an adapter's greedy tokens differ from adapter off (they must, if it applies), and
    whether the fused graph decoded the raw graph's tokens."""
    notes = []
    on = outputs.get((wheel, case["key"]))
    if adapter_label(case) != "off":
        off_key = case["key"].replace(f"adapter={adapter_label(case)}", "adapter=off")
        off = outputs.get((wheel, off_key))
        if on and off:
            notes.append("same as adapter off" if on == off else "differs from adapter off")
    if case.get("graph") == "fused":
        raw = outputs.get((wheel, case["key"].replace("graph=fused", "graph=raw")))
        if on and raw:
            notes.append("tokens = raw" if on == raw else "tokens differ from raw")
    return "; ".join(notes) or "-"


def _name_wheels(fig: Any, document: dict[str, Any]) -> None:
    """Say under the plots which wheel each legend letter stands for."""
    names = "    ".join(f"{w['id']}: {w['label']}" for w in document["wheels"])
    fig.text(0.5, 0.01, names, ha="center", fontsize=8)
    fig.tight_layout(rect=(0, 0.05, 1, 1))


def plots(document: dict[str, Any], out_dir: Path) -> list[Path]:
    import matplotlib as mpl  # noqa: PLC0415 - only the report needs matplotlib

    mpl.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    summary = document["summary"]
    suffix = " (CPU-measured: lavapipe)" if document["software_adapter"] else ""
    written = []
    if summary["ops"]:
        ms = sorted({r["m"] for r in summary["ops"]})
        fig, axes = plt.subplots(1, len(ms), figsize=(4.5 * len(ms), 4), squeeze=False)
        for ax, m in zip(axes[0], ms, strict=True):
            rows = [r for r in summary["ops"] if r["m"] == m]
            variants = sorted({_label(r) for r in rows})
            wheels = sorted({r["wheel"] for r in rows})
            width = 0.8 / len(wheels)
            for i, wheel in enumerate(wheels):
                values = [
                    next((r["per_layer_us"] for r in rows if r["wheel"] == wheel and _label(r) == v), 0.0)
                    for v in variants
                ]
                ax.bar([x + i * width for x in range(len(variants))], values, width, label=wheel)
            floor = next((r["floor_us"] for r in rows if _label(r) == "base"), None)
            if floor:
                ax.axhline(floor, color="gray", linestyle="--", linewidth=1, label="base floor")
            ticks = [x + width * (len(wheels) - 1) / 2 for x in range(len(variants))]
            ax.set_xticks(ticks, variants, rotation=20, ha="right")
            ax.set_title(f"M={m}")
            ax.set_ylabel("µs per layer")
            ax.legend()
        fig.suptitle("MatMulNBits chain, per-layer time" + suffix)
        _name_wheels(fig, document)
        path = out_dir / "ops.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    measured = [r for r in summary.get("paged", []) if "marginal_us" in r]
    if measured:
        written.append(_paged_plot(plt, document, measured, out_dir / "paged.png", suffix))
    genai = [r for r in summary["rows"] if r["level"] == "genai" and "metric" in r]
    if genai:
        fig, axes = plt.subplots(1, 2, figsize=(11, 4))
        for ax, metric, label in ((axes[0], "ttft_ms", "TTFT ms"), (axes[1], "decode_tok_s", "decode tok/s")):
            rows = [r for r in genai if r["metric"] == metric]
            keys = [r["key"].removeprefix("genai/") for r in rows]
            wheels = sorted({w for r in rows for w in r["wheels"]})
            width = 0.8 / max(len(wheels), 1)
            for i, wheel in enumerate(wheels):
                values = [r["wheels"].get(wheel, {}).get("median", 0.0) for r in rows]
                ax.barh([y + i * width for y in range(len(rows))], values, width, label=wheel)
            ax.set_yticks([y + width * (len(wheels) - 1) / 2 for y in range(len(rows))], keys, fontsize=7)
            ax.set_xlabel(label)
            ax.legend()
        fig.suptitle("onnxruntime-genai decoder" + suffix)
        _name_wheels(fig, document)
        path = out_dir / "genai.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def _paged_plot(plt: Any, document: dict[str, Any], rows: list[dict[str, Any]], path: Path, suffix: str) -> Path:
    """Marginal µs per node by variant, one panel per phase, bars per wheel with their 95 % intervals."""
    phases = [phase for phase in ("decode", "prefill") if any(r["phase"] == phase for r in rows)]
    fig, axes = plt.subplots(1, len(phases), figsize=(5 * len(phases), 4), squeeze=False)
    for ax, phase in zip(axes[0], phases, strict=True):
        here = [r for r in rows if r["phase"] == phase]
        variants = [v for v in ("norm_off", "norm", "norm_unfused") if any(r["variant"] == v for r in here)]
        wheels = sorted({r["wheel"] for r in here})
        width = 0.8 / len(wheels)
        for i, wheel in enumerate(wheels):
            found = [next((r for r in here if r["wheel"] == wheel and r["variant"] == v), None) for v in variants]
            values = [r["marginal_us"] if r else 0.0 for r in found]
            # A percentile interval of medians may leave out its own point estimate: no negative whiskers.
            errors = [
                [max(r["marginal_us"] - r["marginal_ci_us"][0], 0.0) if r else 0.0 for r in found],
                [max(r["marginal_ci_us"][1] - r["marginal_us"], 0.0) if r else 0.0 for r in found],
            ]
            ax.bar([x + i * width for x in range(len(variants))], values, width, yerr=errors, capsize=3, label=wheel)
        ax.set_xticks([x + width * (len(wheels) - 1) / 2 for x in range(len(variants))], variants)
        ax.set_title(f"{phase}: {here[0]['new_tokens']} new, {here[0]['past']} past")
        ax.set_ylabel("marginal µs per node (95 %)")
        ax.legend()
    fig.suptitle("PagedAttention, Q/K norm off / fused / unfused" + suffix)
    _name_wheels(fig, document)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write(document: dict[str, Any], out_dir: Path, *, with_plots: bool = True) -> dict[str, Path]:
    """bench.json, bench.md and, ``with_plots`` (they need matplotlib), the PNGs."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": out_dir / "bench.json", "markdown": out_dir / "bench.md"}
    paths["json"].write_text(json.dumps(document, indent=1))
    paths["markdown"].write_text(markdown(document))
    for index, path in enumerate(plots(document, out_dir) if with_plots else []):
        paths[f"png{index}"] = path
    return paths
