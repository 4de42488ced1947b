"""One worker run: measure every case of a plan with the onnxruntime of this venv, write JSON.

Started by ``ortstack bench`` once per (wheel, round), with the interpreter of that wheel's venv:
``python -m wheel_bench.worker PLAN.json RESULT.json``. The plan says what to run; the result holds
the environment and the raw samples. Nothing here judges a number.
"""

from __future__ import annotations

import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

from wheel_bench import ep, genai_run, ops, paged


def run(plan: dict[str, Any]) -> dict[str, Any]:
    setup = ep.setup(plan["ep"], plan.get("webgpu_options"))
    started = time.time()
    cases: list[dict[str, Any]] = []
    ops_plan = plan.get("ops")
    if ops_plan:
        chain = ops.cases(
            ms=ops_plan["ms"],
            k=ops_plan["k"],
            layers=ops_plan["layers"],
            variants=ops_plan["variants"],
            adapters=ops_plan.get("adapters", [True]),
            captures=ops_plan.get("captures", [False]),
        )
        refused = ops.empty_weights_refusal(plan["ep"]) if any(not case.adapter for case in chain) else None
        cases += [
            ops.measure(setup, case, warmups=plan["warmups"], requests=plan["requests"], empty_weights_refused=refused)
            for case in chain
        ]
    paged_plan = plan.get("paged")
    claims_qk_norm = None
    if paged_plan:
        from wheel_tests import capabilities  # noqa: PLC0415 - build info, read only for this level

        claims_qk_norm = capabilities.kernel_claimed("qk_norm", "plugin" if setup.kind == "plugin" else "webgpu")
        paged_cases = paged.cases(
            context=paged_plan["context"],
            prefill=paged_plan["prefill"],
            layers=paged_plan["layers"],
            variants=paged_plan["variants"],
            num_heads=paged_plan["num_heads"],
            kv_heads=paged_plan["kv_heads"],
            head_size=paged_plan["head_size"],
        )
        cases += paged.measure(
            setup, paged_cases, warmups=plan["warmups"], requests=plan["requests"], claims_qk_norm=claims_qk_norm
        )
    genai_plan = plan.get("genai")
    if genai_plan:
        cases += genai_run.measure(
            setup,
            Path(genai_plan["model_dir"]),
            prompt_lengths=genai_plan["prompt_lengths"],
            generate=genai_plan["generate"],
            capture_modes=genai_plan["capture_modes"],
            graphs=genai_plan.get("graphs", ["fused"]),
            adapters=genai_plan.get("adapters", ["off", "a"]),
            warmups=plan["warmups"],
            requests=plan["requests"],
            round_=plan["round"],
            profile_dir=Path(kept) if (kept := genai_plan.get("profile_dir")) else None,
        )
    return {
        "wheel": plan["wheel"],
        "round": plan["round"],
        "captures": plan.get("captures"),
        "started": started,
        "finished": time.time(),
        "environment": {
            **ep.environment(setup),
            "python": sys.version,
            "platform": platform.platform(),
            "claims_qk_norm": claims_qk_norm,
        },
        "cases": cases,
    }


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    plan_path, result_path = Path(args[0]), Path(args[1])
    result = run(json.loads(plan_path.read_text()))
    result_path.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
