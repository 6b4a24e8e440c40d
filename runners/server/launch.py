"""Launch an engine (local process, docker container, or an existing endpoint), wait until it
serves, and always tear it down. Commands and readiness probes come from the `engines/`
plug-ins; this module never branches on an engine's name and never measures load.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import logging
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Self, TypeVar

import aiohttp
from pydantic import Field, model_validator

from core.errors import RunnerError
from core.records import Record
from engines.base import ContainerSpec, GpuSelection, ReadinessProbe
from engines.common import docker_run_argv
from engines.config import EngineConfig
from engines.registry import get_engine
from runners.load.client import get_status, send
from runners.load.schemas import RequestSpec
from runners.server import docker_engine
from runners.server.docker_engine import PullPolicy
from runners.server.ports import free_port

LaunchMode = Literal["local", "docker", "endpoint"]
# Where the benchmarked server comes from, in the words the front ends show.
LAUNCH_MODES: dict[LaunchMode, str] = {
    "endpoint": "An endpoint that already runs",
    "local": "Launch the engine locally",
    "docker": "Launch the engine's official Docker image",
}

_LOG = logging.getLogger(__name__)
_TAIL_LINES = 20
_TAIL_BYTES = 64 * 1024
_HEALTH_TIMEOUT_S = 2.0
_REAP_BOUND_S = 10.0  # after SIGKILL: how long orphaned members may take to be reaped
_SECRET_HINTS = ("TOKEN", "KEY", "SECRET", "PASSWORD")
_T = TypeVar("_T")


class LaunchError(RunnerError):
    """The engine did not become ready (died, timed out) or could not be removed.

    The message holds the reason, the last log lines and the command that was run.
    """

    def __init__(self, reason: str, *, command: str = "", log_tail: str = "") -> None:
        self.reason, self.command, self.log_tail = reason, command, log_tail
        parts = [reason]
        if command:
            parts.append(f"command: {command}")
        if log_tail:
            parts.append(f"last log lines:\n{log_tail}")
        super().__init__("\n".join(parts))


class LaunchSpec(Record):
    """How to bring up (or reach) one OpenAI-compatible server, and the bounds on doing so."""

    mode: LaunchMode = Field(description="local process, docker container, or existing URL.")
    config: EngineConfig | None = Field(
        default=None,
        description="Engine config: gives the plug-in's command (unless argv is given) and "
        "its readiness probe. Required for docker.",
    )
    argv: list[str] | None = Field(
        default=None,
        description="local only: explicit command instead of the plug-in's server_argv; "
        "'{port}' and '{host}' inside any element are replaced by the chosen values.",
    )
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment variables.")
    venv: Path | None = Field(
        default=None,
        description="local only: virtual environment to run in (its bin/ leads PATH; argv[0] "
        "is taken from it when a file of that name is there, e.g. python or vllm).",
    )
    log_dir: Path | None = Field(
        default=None, description="Folder for the server's captured stdout+stderr (required "
        "for local and docker).",
    )
    cwd: Path | None = Field(default=None, description="local: working directory.")
    host: str = Field(default="127.0.0.1", description="Interface the server binds (local).")
    port: int | None = Field(
        default=None, ge=1, le=65535, description="Host port; None = a free one (bind to 0)."
    )
    url: str | None = Field(default=None, description="endpoint only: the server's base URL.")
    probe: ReadinessProbe | None = Field(
        default=None, description="Readiness probe; None = the plug-in's for `config`."
    )
    ready_timeout_s: float = Field(default=600.0, gt=0, description="Bound on readiness.")
    poll_interval_s: float = Field(default=0.5, gt=0, description="Health poll period.")
    stop_timeout_s: float = Field(
        default=30.0, gt=0, description="SIGTERM → SIGKILL grace for the process group (or "
        "the container)."
    )
    check_completion: bool = Field(
        default=True, description="After health, require one 1-token streaming completion."
    )
    image: str | None = Field(default=None, description="docker: image; None = plug-in's pin.")
    model_cache_dir: str = Field(
        default=str(Path.home() / ".cache" / "huggingface"),
        description="docker: host folder mounted as the container's HF cache.",
    )
    gpus: GpuSelection = Field(default="all", description="docker: GPUs requested ('none' "
                               "for an image that needs none).")
    container_name: str | None = Field(
        default=None, description="docker: container name; None = unique servefit-KIND-PORT-ID."
    )
    docker_host: str | None = Field(
        default=None, description="docker: the daemon's address; None = $DOCKER_HOST or the "
        "default socket.")
    docker_network: Literal["bridge", "host"] = Field(
        default="bridge", description="docker: publish the port (bridge), or share the host's "
        "network (the engine listens on the chosen port itself).")
    pull: PullPolicy = Field(default="missing", description="docker: pull the image when it is "
                             "missing, always, or never.")
    pull_timeout_s: float = Field(default=3600.0, gt=0, description="docker: bound on a pull.")

    @model_validator(mode="after")
    def _check_mode(self) -> Self:
        if self.probe is None and self.config is None:
            raise ValueError("give a config (for the plug-in's probe) or an explicit probe")
        if self.mode == "endpoint" and not self.url:
            raise ValueError("endpoint mode needs url")
        if self.mode != "endpoint" and self.url:
            raise ValueError("url is only for endpoint mode")
        if self.mode == "docker" and self.config is None:
            raise ValueError("docker mode needs a config")
        if self.mode != "local" and (self.argv is not None or self.venv is not None):
            raise ValueError("argv and venv are only for local mode")
        if self.mode == "local" and self.argv is not None and not self.argv:
            raise ValueError("argv must not be empty")
        if self.mode != "endpoint" and self.log_dir is None:
            raise ValueError(f"{self.mode} mode needs log_dir")
        return self


class Endpoint(Record):
    """A server that answered its health check and one completion: where it is, and how it ran."""

    mode: LaunchMode = Field(description="How it was brought up.")
    url: str = Field(description="Base URL (http://host:port) for runners.load.client.send.")
    served_model_name: str = Field(description="Model name to put in requests.")
    command: list[str] = Field(default_factory=list, description="argv run; empty for endpoint.")
    pid: int | None = Field(default=None, description="Leader pid = process group id (local); "
                            "None for docker and endpoint.")
    container_name: str | None = Field(default=None, description="docker: the container.")
    log_path: Path | None = Field(default=None, description="Captured server output.")
    ready_s: float = Field(description="Seconds from start to ready (health + completion).")


@dataclass(slots=True)
class _Running:
    """What teardown needs; filled in as start-up proceeds."""

    command: list[str] = field(default_factory=list)
    env_shown: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    container: str | None = None  # docker: the name, set before it is created
    client: Any = None  # docker: the Engine API client
    handle: Any = None  # docker: the started container
    pump: docker_engine.LogPump | None = None
    status: Callable[[str], None] = field(default=lambda _: None)

    def display(self) -> str:
        """The command for messages (shlex-quoted; secrets in env masked)."""
        shown = [f"{k}={_mask(k, v)}" for k, v in sorted(self.env_shown.items())]
        return shlex.join([*shown, *self.command]) if self.command else ""


def _mask(key: str, value: str) -> str:
    return "***" if any(h in key.upper() for h in _SECRET_HINTS) else value


@contextlib.contextmanager
def launched(spec: LaunchSpec, status: Callable[[str], None] | None = None
             ) -> Iterator[Endpoint]:
    """Bring up the server `spec` describes, yield it once ready, and always tear it down.

    Teardown runs on normal exit, an exception in the body, KeyboardInterrupt, a readiness
    timeout and a crashed engine: SIGTERM to the process group, SIGKILL after
    `stop_timeout_s`, then wait (bounded) until no member is left; a container is
    force-removed through the Docker Engine API. Endpoint mode starts and stops nothing.

    Args:
        spec: what to launch and the bounds.
        status: told, one line at a time, what the launch is doing (connecting, pulling with
            its progress, starting, waiting for the engine's health), for a live view.

    Raises:
        LaunchError: the process exited or `ready_timeout_s` passed before readiness (message
            has the reason, the command and the last ~20 log lines), or the container could
            not be removed after an otherwise clean run.
    """
    running = _Running(status=status or (lambda _: None))
    started = time.perf_counter()
    try:
        base = _start(spec, running) if spec.mode != "endpoint" else (spec.url or "").rstrip("/")
        probe = _probe(spec)
        _wait_ready(spec, running, base, probe)
        yield Endpoint(
            mode=spec.mode,
            url=base,
            served_model_name=probe.served_model_name,
            command=running.command,
            pid=running.proc.pid if running.proc else None,
            container_name=running.container,
            log_path=running.log_path,
            ready_s=time.perf_counter() - started,
        )
    finally:
        unwinding = sys.exc_info()[0] is not None
        _teardown(spec, running, unwinding=unwinding)


def _probe(spec: LaunchSpec) -> ReadinessProbe:
    if spec.probe is not None:
        return spec.probe
    assert spec.config is not None  # the validator guarantees one of them
    return get_engine(spec.config.engine).readiness(spec.config)


# -- prerequisites -----------------------------------------------------------------------------

_MODULE_CHECK = ("import importlib.util, sys; "
                 "sys.exit(importlib.util.find_spec(sys.argv[1]) is None)")
_MODULE_CHECK_TIMEOUT_S = 30.0


def _search_path(path: str, venv: Path | None) -> str:
    """`path` with `venv`'s bin first: where a local launch looks for the engine's program."""
    return path if venv is None else os.pathsep.join([str(venv / "bin"), path])


def local_prerequisite(config: EngineConfig, venv: Path | None = None) -> str | None:
    """Why `config`'s engine cannot start here as a local process, in one line; None when its
    program (and, for `python -m X`, the package X) is found: on PATH, or in `venv`'s bin
    first, as the launch resolves it. Said before a run, not after it failed."""
    argv = get_engine(config.engine).server_argv(config)
    path = _search_path(os.environ.get("PATH", ""), venv)
    where = "PATH" if venv is None else f"{venv / 'bin'} or PATH"
    program = shutil.which(argv[0], path=path)
    if program is None:
        return (f"`{argv[0]}` is not in {where}: install {config.engine} here, or name the "
                "virtual environment that holds it")
    if len(argv) > 2 and argv[1] == "-m":
        package = argv[2].split(".")[0]
        try:
            found = subprocess.run([program, "-c", _MODULE_CHECK, package],
                                   capture_output=True, timeout=_MODULE_CHECK_TIMEOUT_S,
                                   check=False).returncode == 0
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"`{argv[0]}` did not answer whether it has `{package}` ({exc})"
        if not found:
            return (f"`{argv[0]} -m {argv[2]}` needs the `{package}` package, which "
                    f"`{argv[0]}` in {where} does not have: install {config.engine} there, "
                    "or name the virtual environment that holds it")
    return None


# -- start -------------------------------------------------------------------------------------


def _start(spec: LaunchSpec, running: _Running) -> str:
    """Start the local process or the container; return the base URL to probe."""
    port = spec.port or free_port(spec.host)
    running.env_shown = dict(spec.env)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    kind = spec.config.engine if spec.config else "server"
    assert spec.log_dir is not None  # the validator guarantees it
    try:
        spec.log_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LaunchError(f"cannot create the log folder {spec.log_dir}: "
                          f"{exc.strerror or exc}") from None
    running.log_path = spec.log_dir / f"{kind}-{spec.mode}-{port}-{stamp}.log"
    if spec.mode == "docker":
        _start_container(spec, port, running)
        host = "127.0.0.1" if spec.docker_network == "host" else spec.host
        return f"http://{_connect_host(host)}:{port}"
    env = {**os.environ, **spec.env}
    argv = _local_argv(spec, port, env)
    running.command = argv
    running.status(f"starting {shlex.join(argv[:1])}")
    with running.log_path.open("wb") as log:
        try:
            running.proc = subprocess.Popen(
                argv, env=env, cwd=spec.cwd, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True,
            )
        except OSError as exc:
            raise LaunchError(f"could not start the server: {exc}",
                              command=running.display()) from exc
    return f"http://{_connect_host(spec.host)}:{port}"


def _local_argv(spec: LaunchSpec, port: int, env: dict[str, str]) -> list[str]:
    if spec.argv is not None:
        argv = [a.replace("{port}", str(port)).replace("{host}", spec.host) for a in spec.argv]
    else:
        assert spec.config is not None
        config = spec.config.model_copy(update={"host": spec.host, "port": port})
        argv = get_engine(config.engine).server_argv(config)
    if spec.venv is not None:
        bin_dir = spec.venv / "bin"
        env["PATH"] = _search_path(env.get("PATH", ""), spec.venv)
        env["VIRTUAL_ENV"] = str(spec.venv)
        if "/" not in argv[0] and (bin_dir / argv[0]).exists():
            argv = [str(bin_dir / argv[0]), *argv[1:]]
    return argv


def container_of(spec: LaunchSpec, port: int, name: str,
                 config_file_path: str | None = None) -> ContainerSpec:
    """The container `spec` starts on host port `port`: the plug-in's, on the chosen network
    (on the host's, the engine itself listens on `port`)."""
    assert spec.config is not None
    plugin = get_engine(spec.config.engine)
    config = spec.config
    if spec.docker_network == "host":
        config = config.model_copy(update={"port": port})
    container = plugin.container_spec(
        config, image=spec.image or plugin.docker_image(), host_port=port,
        model_cache_dir=spec.model_cache_dir, gpus=spec.gpus, container_name=name,
        config_file_path=config_file_path)
    return container.model_copy(update={"network": spec.docker_network})


def _start_container(spec: LaunchSpec, port: int, running: _Running) -> None:
    """Pull (per policy), create and start the container; its logs go to the log file."""
    assert spec.config is not None and spec.log_dir is not None and running.log_path
    plugin = get_engine(spec.config.engine)
    name = spec.container_name or f"servefit-{plugin.kind}-{port}-{uuid.uuid4().hex[:8]}"
    # The engine's config file, for a plug-in that mounts it (the others ignore the path).
    file_name, text = plugin.config_file(spec.config)
    config_path = (spec.log_dir / f"{name}-{file_name}").resolve()
    try:
        config_path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise LaunchError(f"cannot write {config_path}: {exc.strerror or exc}") from None
    container = container_of(spec, port, name, str(config_path))
    running.command = docker_run_argv(container)  # what a user would type: the file mounted
    # Through the API the file is copied in instead: the daemon reads bind sources on its
    # own host, which an app running in a container does not share.
    files = {b.target: text.encode() for b in container.binds if b.source == str(config_path)}
    container = container.model_copy(update={"binds": [
        b for b in container.binds if b.source != str(config_path)]})
    try:
        running.status(f"connecting to Docker at {docker_engine.daemon_url(spec.docker_host)}")
        running.client = docker_engine.connect(spec.docker_host)
        docker_engine.ensure_image(running.client, container.image, spec.pull,
                                   running.log_path, timeout_s=spec.pull_timeout_s,
                                   status=running.status)
        running.status(f"starting container {name}")
        running.handle = docker_engine.create(running.client, container,
                                              {**os.environ, **spec.env})
        running.container = name  # created by us: from here on, teardown removes it
        docker_engine.copy_in(running.handle, files)
        docker_engine.start(running.handle)
    except docker_engine.DockerError as exc:
        raise _failure(str(exc), running) from None
    running.pump = docker_engine.LogPump(running.handle, running.log_path).start()


def _connect_host(host: str) -> str:
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


# -- readiness ---------------------------------------------------------------------------------


def _wait_ready(spec: LaunchSpec, running: _Running, base: str, probe: ReadinessProbe) -> None:
    """Poll health, then one tiny completion, until ready, dead, or past the bound."""
    deadline = time.monotonic() + spec.ready_timeout_s
    last = "no health answer yet"
    while True:
        proc = running.proc
        if proc is not None and proc.poll() is not None:
            raise _failure(f"server exited with code {proc.returncode} before ready "
                           f"(last probe: {last})", running)
        gone = docker_engine.exited(running.handle) if running.handle is not None else None
        if gone:
            raise _failure(f"{gone} before ready (last probe: {last})", running)
        last = _health(base + probe.health_path)
        running.status(f"waiting for the engine at {base} ({last or 'healthy'})")
        if not last and spec.check_completion:
            last = _completion(base, probe, timeout_s=max(1.0, deadline - time.monotonic()))
        if not last:
            return
        if time.monotonic() >= deadline:
            raise _failure(f"server not ready after {spec.ready_timeout_s:g} s at {base} "
                           f"(last probe: {last})", running)
        time.sleep(spec.poll_interval_s)


def _health(url: str) -> str:
    """'' when GET `url` answers 200, else why not."""
    try:
        status = get_status(url, timeout_s=_HEALTH_TIMEOUT_S)
        return "" if status == 200 else f"health HTTP {status}"
    except (OSError, ValueError, http.client.HTTPException) as exc:  # incl. non-HTTP bytes
        return f"health: {type(exc).__name__}: {exc}"


def _completion(base: str, probe: ReadinessProbe, *, timeout_s: float) -> str:
    """'' when one 1-token streaming completion succeeds, else its error."""
    prompt = probe.completion_body.get("prompt", "Hello")
    spec = RequestSpec(model=probe.served_model_name, prompt=prompt, max_tokens=1)

    async def go() -> str:
        async with aiohttp.ClientSession() as session:
            result = await send(session, base + probe.completion_path, spec,
                                timeout_s=min(timeout_s, 60.0))
        return "" if result.success else f"completion: {result.error}"

    return _run_coroutine(go())


def _run_coroutine(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run `coro` to completion from sync code, even if this thread already runs a loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: list[_T] = []
    errors: list[BaseException] = []

    def target() -> None:
        try:
            box.append(asyncio.run(coro))
        except BaseException as exc:  # handed back to the caller's thread
            errors.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return box[0]


def _failure(reason: str, running: _Running) -> LaunchError:
    return LaunchError(reason, command=running.display(), log_tail=_tail(running.log_path))


def _tail(path: Path | None, n: int = _TAIL_LINES) -> str:
    if path is None or not path.exists():
        return ""
    with path.open("rb") as f:
        f.seek(max(0, path.stat().st_size - _TAIL_BYTES))
        lines = f.read().decode("utf-8", "replace").splitlines()
    return "\n".join(lines[-n:])


# -- teardown ----------------------------------------------------------------------------------


def _teardown(spec: LaunchSpec, running: _Running, *, unwinding: bool) -> None:
    """Remove the container, then end the process group. Never leaves either."""
    problem = ""
    try:
        if running.container is not None and running.client is not None:
            problem = docker_engine.remove(running.client, running.container,
                                           spec.stop_timeout_s)
            if running.pump is not None:
                running.pump.join(_REAP_BOUND_S)
    finally:
        if running.client is not None:
            with contextlib.suppress(Exception):
                running.client.close()
        if running.proc is not None:
            stop_group(running.proc, spec.stop_timeout_s)
    if problem:
        if unwinding:  # do not hide the body's own exception
            _LOG.error("%s", problem)
        else:
            raise LaunchError(problem, command=running.display())


def group_alive(pgid: int) -> bool:
    """True while any process (zombies included) is in process group `pgid`."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_group(proc: subprocess.Popen[Any], grace_s: float) -> None:
    """SIGTERM the process group led by `proc`, SIGKILL after `grace_s`, wait until it is gone.

    A Ctrl-C while waiting escalates to SIGKILL at once (and is re-raised afterwards).
    Members reparented to init after the leader exits are waited for too (bounded).
    """
    pgid = proc.pid  # start_new_session=True: the leader's pid is the group id
    interrupted: KeyboardInterrupt | None = None
    _signal_group(pgid, signal.SIGTERM)
    try:
        _wait_gone(proc, pgid, grace_s)
    except KeyboardInterrupt as exc:
        interrupted = exc
    if group_alive(pgid) or proc.poll() is None:
        _signal_group(pgid, signal.SIGKILL)
        _wait_gone(proc, pgid, _REAP_BOUND_S)
    if group_alive(pgid):
        _LOG.error("process group %d still present after SIGKILL", pgid)
    if interrupted is not None:
        raise interrupted


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _wait_gone(proc: subprocess.Popen[Any], pgid: int, bound_s: float) -> None:
    deadline = time.monotonic() + bound_s
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=bound_s)
    while group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)

