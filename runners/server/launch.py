"""Launch an engine (local process, docker container, or an existing endpoint), wait until it
serves, and always tear it down. Commands and readiness probes come from the `engines/`
plug-ins; this module never branches on an engine's name and never measures load.

What a launch is asked for and gives is `launch_spec`'s; the command it runs
`server_command`'s, the wait `readiness`'s, ending a process group `process_group`'s, and the
Docker Engine API `docker_engine`, `docker_image` and `docker_container`'s.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator

from engines.base import ReadinessProbe
from engines.containers import docker_run_argv
from engines.registry import get_engine
from runners.server import docker_container, docker_engine, docker_image
from runners.server.launch_spec import Endpoint, LaunchError, LaunchSpec
from runners.server.launch_state import Running, failure
from runners.server.ports import free_port
from runners.server.process_group import REAP_BOUND_S, stop_group
from runners.server.readiness import wait_ready
from runners.server.server_command import container_of, local_argv

_LOG = logging.getLogger(__name__)


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
    running = Running(status=status or (lambda _: None))
    started = time.perf_counter()
    try:
        base = _start(spec, running) if spec.mode != "endpoint" else (spec.url or "").rstrip("/")
        probe = _probe(spec)
        wait_ready(spec, running, base, probe)
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


# -- start -------------------------------------------------------------------------------------


def _start(spec: LaunchSpec, running: Running) -> str:
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
    argv = local_argv(spec, port, env)
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


def _start_container(spec: LaunchSpec, port: int, running: Running) -> None:
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
        docker_image.ensure_image(running.client, container.image, spec.pull,
                                  running.log_path, timeout_s=spec.pull_timeout_s,
                                  status=running.status)
        running.status(f"starting container {name}")
        running.handle = docker_container.create(running.client, container,
                                                 {**os.environ, **spec.env})
        running.container = name  # created by us: from here on, teardown removes it
        docker_container.copy_in(running.handle, files)
        docker_container.start(running.handle)
    except docker_engine.DockerError as exc:
        raise failure(str(exc), running) from None
    running.pump = docker_container.LogPump(running.handle, running.log_path).start()


def _connect_host(host: str) -> str:
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


# -- teardown ----------------------------------------------------------------------------------


def _teardown(spec: LaunchSpec, running: Running, *, unwinding: bool) -> None:
    """Remove the container, then end the process group. Never leaves either."""
    problem = ""
    try:
        if running.container is not None and running.client is not None:
            problem = docker_container.remove(running.client, running.container,
                                              spec.stop_timeout_s)
            if running.pump is not None:
                running.pump.join(REAP_BOUND_S)
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
