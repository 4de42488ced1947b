"""Driver for the H200 runs: stock built-in WebGPU 1.27 (A) against onnxruntime + plugin 0.4.0 (B).

That machine reaches no package registry: the wheels travel in a folder (``--wheels``), venvs see
the image's numpy/onnx/torch (``system_site_packages``) and install nothing else from an index.
B's onnxruntime is the image's 1.30.0 unless ``--core`` names another whose wheel is in ``--wheels``.
Usage: ``python run_h200.py --wheels DIR --out DIR --levels ops|genai [--core REQ] [--smoke]``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ortstack import bench


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--wheels", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--cache", type=Path, default=Path("/tmp/ortstack-cache"))
    parser.add_argument("--levels", default="ops")
    parser.add_argument("--capture", choices=["off", "on", "both"], default="both", help="genai graph capture")
    parser.add_argument("--core", default="onnxruntime==1.30.0", help="B's onnxruntime requirement")
    parser.add_argument("--smoke", action="store_true", help="genai: one short request per case (a check)")
    args = parser.parse_args()
    wheels = args.wheels.resolve()
    builtin = next(wheels.glob("onnxruntime_webgpu-1.27.0-*.whl"))
    plugin = next(wheels.glob("onnxruntime_ep_webgpu-0.4.0-*.whl"))
    options = bench.BenchOptions(
        wheels=(str(builtin), f"{args.core}+{plugin}"),
        ep="webgpu",
        out_dir=args.out.resolve(),
        cache_dir=args.cache,
        levels=tuple(args.levels.split(",")),
        pip_args=("--no-index", "--no-deps", "--find-links", str(wheels)),
        system_site_packages=True,
        command=("python", "run_h200.py", *sys.argv[1:]),
    )
    capture = {"off": (False,), "on": (True,), "both": (False, True)}[args.capture]
    options = bench.replace(options, capture_modes=capture)
    if args.smoke:
        options = bench.replace(options, warmups=1, requests=1, generate=16)
    paths = bench.run(options, dict(os.environ))
    print(*paths.values(), sep="\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
