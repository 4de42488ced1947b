"""Orchestrator benchmark on the miniature upstream: what incremental building and the shared cache buy.

Run: ``nox -s bench-orchestrator`` (or ``python tests/bench_build.py [--json FILE]``). Needs cmake,
ninja, a compiler, sccache and redis-server; the distributed row also root and bubblewrap
(``--no-distributed`` leaves it out). Runs of ``ortstack patch`` + ``ortstack build`` (both variants),
each timed as a whole:

1. cold: empty build dirs, empty shared cache;
2. no-op: nothing changed;
3. one patch changed: the vendored patch rewritten (and its pin updated);
4. clean rebuild, warm shared cache: build dirs deleted, sccache restarted, Redis kept;
5. cold through a build server: build dirs deleted, Redis emptied, every compile sent through an
   sccache-dist scheduler to one build server, both on 127.0.0.1. On one machine the build server
   shares the cores the build would use, so no speed-up is expected: the figure is the overhead
   distributing adds to each compile (preprocessing here, packaging and sending, the sandbox there).

Targets: no-op <= 3 s and <= 2 % of cold; one patch <= 20 % of cold; >= 95 % sccache hits in 4.

The miniature compiles a handful of files, so the fixed cost of a build (Python start-up,
scikit-build-core, cmake's checks, auditwheel) would decide every ratio. ``--kernels N`` (default
60) adds N generated CPU kernel files to the pinned commit, so that, as in onnxruntime, compiling
dominates a cold build; ``--kernels 0`` measures the bare miniature.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import dist_cluster
from dist_cluster import free_port
from upstream import LoopbackServer, Upstream, git, publish_upstream, stack_toml

ROOT = Path(__file__).resolve().parents[1]
KERNEL = "onnxruntime/contrib_ops/webgpu/bert/paged_attention.cc"


KERNEL_SOURCE = """// A generated CPU kernel: enough templates and containers to cost a real compile.
#include <algorithm>
#include <map>
#include <numeric>
#include <string>
#include <vector>

namespace mini_ort::cpu {{

template <typename T>
T Reduce{n}(const std::vector<T>& values) {{
  std::map<std::string, T> by_name;
  for (size_t i = 0; i < values.size(); ++i) by_name["v" + std::to_string(i)] = values[i];
  std::vector<T> sorted(values);
  std::sort(sorted.begin(), sorted.end());
  return std::accumulate(sorted.begin(), sorted.end(), T{{}}) + static_cast<T>(by_name.size());
}}

int Kernel{n}(const std::string& spec) {{
  const auto digits = spec.find_first_of("0123456789");
  const int base = digits == std::string::npos ? {n} : std::stoi(spec.substr(digits));
  return static_cast<int>(Reduce{n}<double>({{1.0, 2.0, 3.0}}) + Reduce{n}<int>({{base}}));
}}

}}  // namespace mini_ort::cpu
"""


def heavier_base(upstream: Upstream, kernels: int) -> str:
    """The pinned commit plus ``kernels`` generated kernel files, published as a pull-request head."""
    if not kernels:
        return upstream.commit
    files: dict[str, str | None] = {
        f"onnxruntime/core/providers/cpu/kernel_{n:04d}.cc": KERNEL_SOURCE.format(n=n) for n in range(kernels)
    }
    return upstream.add_pull_request(1, files, f"{kernels} CPU kernels")


def format_patch(upstream: Upstream, base: str, head_size_text: str) -> str:
    original = upstream.file_at(base, KERNEL).decode()
    changed = original.replace("// paged attention\\n", f"// paged attention, {head_size_text}\\n")
    commit = upstream.add_commit({KERNEL: changed}, f"Tune the kernel: {head_size_text}", parent=base)
    return git("format-patch", "--full-index", "-1", "--stdout", commit, cwd=upstream.work, env=upstream.env) + "\n"


def write_project(project: Path, upstream: Upstream, base: str, patch_text: str, redis_url: str) -> None:
    (project / "patches").mkdir(parents=True, exist_ok=True)
    patch_file = project / "patches" / "0001-tune-kernel.patch"
    patch_file.write_text(patch_text, encoding="utf-8")
    digest = hashlib.sha256(patch_file.read_bytes()).hexdigest()
    (project / "stack.toml").write_text(
        stack_toml(repository=upstream.url, commit=base)
        + f"""
[[patch]]
id = "tune-kernel"
file = "patches/0001-tune-kernel.patch"
sha256 = "{digest}"

[variant.webgpu]
kind = "webgpu"

[variant.plugin]
kind = "plugin"
dawn = "static"
min_onnxruntime = "1.24.4"

[build]
compiler_cache = "sccache"
sccache_redis = "{redis_url}"
jobs = 2
""",
        encoding="utf-8",
    )


def ortstack(project: Path, env: dict[str, str], *args: str) -> None:
    common = ["--stack", str(project / "stack.toml"), "--cache-dir", str(project / "cache")]
    common += ["--work-dir", str(project / "work"), "--dist-dir", str(project / "dist")]
    result = subprocess.run(
        [sys.executable, "-m", "ortstack", *args, *common], check=False, env=env, capture_output=True, text=True
    )
    if result.returncode:
        sys.exit(f"ortstack {' '.join(args)} failed:\n{result.stderr[-3000:]}")


def pipeline(project: Path, env: dict[str, str], figures: dict[str, float], name: str) -> None:
    """Time ``patch`` then ``build`` (the pipeline ``nox -s build`` runs) as ``name``, and each part."""
    start = time.perf_counter()
    ortstack(project, env, "patch")
    patched = time.perf_counter()
    ortstack(project, env, "build")
    end = time.perf_counter()
    figures[name] = end - start
    figures[f"{name}_patch"] = patched - start
    figures[f"{name}_build"] = end - patched


def sccache(env: dict[str, str], *args: str) -> str:
    return subprocess.run(["sccache", *args], check=False, env=env, capture_output=True, text=True).stdout


def hit_rate(env: dict[str, str]) -> tuple[int, int]:
    stats = json.loads(sccache(env, "--show-stats", "--stats-format=json"))["stats"]
    return sum(stats["cache_hits"]["counts"].values()), sum(stats["cache_misses"]["counts"].values())


def compile_figures(env: dict[str, str], figures: dict[str, float], name: str) -> None:
    """sccache's count of compiles it ran, how many a build server ran, and the mean time of one."""
    stats = json.loads(sccache(env, "--show-stats", "--stats-format=json"))["stats"]
    spent = stats["compiler_write_duration"]
    compiles = int(stats["compilations"])
    figures[f"{name}_compiles"] = float(compiles)
    figures[f"{name}_distributed_compiles"] = float(sum(stats["dist_compiles"].values()))
    figures[f"{name}_mean_compile_ms"] = 1000 * (spent["secs"] + spent["nanos"] / 1e9) / max(1, compiles)


def cold_distributed(
    workdir: Path, project: Path, env: dict[str, str], redis_port: int, figures: dict[str, float]
) -> None:
    """The cold build again, every compile through a loopback scheduler and build server."""
    sccache(env, "--stop-server")
    subprocess.run(["redis-cli", "-p", str(redis_port), "flushall"], check=True, capture_output=True)
    shutil.rmtree(project / "work" / "cmake")
    with dist_cluster.running(workdir / "cluster") as cluster:
        through = {
            **env,
            "ORTSTACK_SCCACHE_SCHEDULER": cluster.url,
            "ORTSTACK_SCCACHE_SCHEDULER_TOKEN": dist_cluster.CLIENT_TOKEN,
        }
        pipeline(project, through, figures, "cold_distributed")
        compile_figures(env, figures, "cold_distributed")
    ran = figures["cold_distributed_distributed_compiles"], figures["cold_distributed_compiles"]
    if ran[0] != ran[1]:
        sys.exit(f"only {ran[0]:.0f} of {ran[1]:.0f} compiles ran on the build server: the row would mislead")


def run(workdir: Path, kernels: int, *, distributed: bool) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ORTSTACK_", "SCCACHE_"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "python"), env.get("PYTHONPATH", "")]))
    env["SCCACHE_SERVER_PORT"] = str(free_port())
    redis_port = free_port()
    redis = subprocess.Popen(
        ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        cwd=workdir,
        stdout=subprocess.DEVNULL,
    )
    server = LoopbackServer()
    try:
        time.sleep(0.3)
        upstream = publish_upstream(workdir / "upstream", server, env)
        base = heavier_base(upstream, kernels)
        project = workdir / "project"
        redis_url = f"redis://127.0.0.1:{redis_port}"
        write_project(project, upstream, base, format_patch(upstream, base, "first"), redis_url)
        ortstack(project, env, "fetch", "--deps")
        figures: dict[str, float] = {}
        pipeline(project, env, figures, "cold")
        compile_figures(env, figures, "cold")
        pipeline(project, env, figures, "noop")
        write_project(project, upstream, base, format_patch(upstream, base, "second"), redis_url)
        pipeline(project, env, figures, "one_patch")
        sccache(env, "--stop-server")
        shutil.rmtree(project / "work" / "cmake")
        pipeline(project, env, figures, "clean_warm_cache")
        hits, misses = hit_rate(env)
        figures["clean_warm_cache_hit_percent"] = 100.0 * hits / max(1, hits + misses)
        figures["clean_warm_cache_compiles"] = float(hits + misses)
        if distributed:
            cold_distributed(workdir, project, env, redis_port, figures)
        return figures
    finally:
        sccache(env, "--stop-server")
        server.close()
        redis.terminate()
        redis.wait(timeout=10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--kernels", type=int, default=60, help="generated kernel files added (default 60)")
    parser.add_argument("--no-distributed", action="store_true", help="leave out the build-server row")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ortstack-bench-") as tmp:
        try:
            figures = run(Path(tmp), args.kernels, distributed=not args.no_distributed)
        except dist_cluster.ClusterError as exc:
            sys.exit(f"the distributed row cannot run here ({exc}); --no-distributed leaves it out")
    print(f"miniature upstream + {args.kernels} generated kernels, both variants, 2 jobs")
    cold = figures["cold"]
    print(f"{'scenario':<34}{'seconds':>9}{'of cold':>10}{'patch s':>9}{'build s':>9}")
    for key, label in (
        ("cold", "cold build (empty caches)"),
        ("noop", "no-op build"),
        ("one_patch", "one patch changed"),
        ("clean_warm_cache", "clean rebuild, warm shared cache"),
        ("cold_distributed", "cold, through a build server"),
    ):
        if key not in figures:
            continue
        parts = f"{figures[key + '_patch']:>9.2f}{figures[key + '_build']:>9.2f}"
        print(f"{label:<34}{figures[key]:>9.2f}{100 * figures[key] / cold:>9.1f}%{parts}")
    hits = figures["clean_warm_cache_hit_percent"]
    compiles = int(figures["clean_warm_cache_compiles"])
    print(f"sccache hits on the clean rebuild: {hits:.1f} % of {compiles} compiles")
    if "cold_distributed" in figures:
        local_ms, remote_ms = figures["cold_mean_compile_ms"], figures["cold_distributed_mean_compile_ms"]
        remote = int(figures["cold_distributed_compiles"])
        wall_ms = 1000 * (figures["cold_distributed_build"] - figures["cold_build"]) / remote
        print(
            f"through the build server: build step {figures['cold_distributed_build'] / figures['cold_build']:.2f}x "
            f"the local cold build's; {remote} compiles, all on the build server; one compile {remote_ms:.0f} ms "
            f"vs {local_ms:.0f} ms locally (sccache's mean); wall time added per compile {wall_ms:+.0f} ms"
        )
        print("one machine: the build server shares its cores with the build, so this is overhead, not speed-up")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
