"""An engine container through the Docker Engine API: the SDK's arguments for a
`ContainerSpec` (GPU requests, ulimits, mounts, environment, network), then create it, copy
files in, start it, copy its logs to a file, say whether it exited, and remove it.

The daemon (its address, the client, `DockerError`) is `docker_engine`'s; the image
`docker_image`'s.
"""

from __future__ import annotations

import contextlib
import io
import os
import posixpath
import re
import tarfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from engines.base import ContainerSpec
from runners.server.docker_engine import DockerError, error_reason

# A named volume (Docker's own rule); any other relative source would be resolved nowhere.
VOLUME_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]+")


def run_kwargs(spec: ContainerSpec, environ: Mapping[str, str]) -> dict[str, Any]:
    """The Docker SDK's `containers.run` arguments for `spec` (detached, not auto-removed:
    the launcher reads the logs of a container that died before it removes it)."""
    from docker.types import DeviceRequest, Ulimit

    gpus = spec.gpus
    devices: list[Any] = []
    if gpus == "all":
        devices = [DeviceRequest(count=-1, capabilities=[["gpu"]])]
    elif isinstance(gpus, int):
        devices = [DeviceRequest(count=gpus, capabilities=[["gpu"]])]
    elif isinstance(gpus, list):
        devices = [DeviceRequest(device_ids=[str(g) for g in gpus], capabilities=[["gpu"]])]
    kwargs: dict[str, Any] = {
        "image": spec.image, "command": list(spec.command), "name": spec.name, "detach": True,
        "device_requests": devices,
        "ulimits": [Ulimit(name=n, soft=v, hard=v) for n, v in spec.ulimits.items()],
        "volumes": {b.source: {"bind": b.target, "mode": "ro" if b.read_only else "rw"}
                    for b in spec.binds},
        "environment": {v: environ[v] for v in spec.env_passthrough if v in environ},
    }
    if spec.ipc_host:
        kwargs["ipc_mode"] = "host"
    if spec.shm_size:
        kwargs["shm_size"] = spec.shm_size
    if spec.network == "host":
        kwargs["network_mode"] = "host"
    else:
        kwargs["ports"] = {f"{spec.container_port}/tcp": spec.host_port}
    return kwargs


def create(client: Any, spec: ContainerSpec, environ: Mapping[str, str]) -> Any:
    """Create (not start) the container; return it.

    Raises:
        DockerError: the daemon refused (a name in use, a bad mount, ...).
    """
    bad = [b.source for b in spec.binds
           if not (os.path.isabs(b.source) or VOLUME_NAME.fullmatch(b.source))]
    if bad:
        raise DockerError(f"mount source {bad[0]!r} must be an absolute host path or a "
                          "volume name")
    kwargs = run_kwargs(spec, environ)
    kwargs.pop("detach")
    try:
        return client.containers.create(**kwargs)
    except Exception as exc:
        raise DockerError(f"could not create container {spec.name}: {error_reason(exc)}"
                          ) from None


def copy_in(container: Any, files: Mapping[str, bytes]) -> None:
    """Copy `files` (absolute container path -> content) into a created container. Copying,
    not mounting, works wherever the caller runs: a bind source is a path on the daemon's
    host, which a caller inside a container does not share.

    Raises:
        DockerError: the daemon refused the archive.
    """
    if not files:
        return
    try:
        container.put_archive("/", _tar(files))
    except Exception as exc:
        raise DockerError(f"could not copy {', '.join(files)} into {container.name}: "
                          f"{error_reason(exc)}") from None


def _tar(files: Mapping[str, bytes]) -> bytes:
    """A tar archive of `files` relative to /, with their folders, readable by everyone."""
    buffer, now = io.BytesIO(), int(time.time())
    folders = sorted({parent for path in files
                      for parent in _parents(posixpath.dirname(path.lstrip("/")))})
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for folder in folders:
            info = tarfile.TarInfo(folder)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, now
            tar.addfile(info)
        for path, content in files.items():
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size, info.mode, info.mtime = len(content), 0o644, now
            tar.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def _parents(folder: str) -> list[str]:
    """'a/b/c' -> ['a', 'a/b', 'a/b/c']; '' -> []."""
    parts = [p for p in folder.split("/") if p]
    return ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]


def start(container: Any) -> None:
    """Start a created container.

    Raises:
        DockerError: the daemon refused (no GPU runtime for a GPU request, a port in use, ...).
    """
    try:
        container.start()
    except Exception as exc:
        raise DockerError(f"could not start container {container.name}: {error_reason(exc)}") \
            from None


def exited(container: Any) -> str | None:
    """Why the container is no longer running ('exited with code N'), None while it runs.
    A container the daemon no longer knows counts as gone."""
    import docker.errors

    try:
        container.reload()
    except docker.errors.NotFound:
        return "container is gone"
    except Exception as exc:
        return f"container state unknown: {error_reason(exc)}"
    if container.status in ("exited", "dead"):
        code = container.attrs.get("State", {}).get("ExitCode")
        return f"container exited with code {code}"
    return None


def remove(client: Any, name: str, grace_s: float) -> str:
    """Stop container `name` (SIGTERM, SIGKILL after `grace_s`: an engine gets to shut down
    cleanly), then force-remove it; '' when it is gone (or never was), else why not."""
    import docker.errors

    interrupted: KeyboardInterrupt | None = None
    try:
        client.api.stop(name, timeout=max(1, round(grace_s)))
    except KeyboardInterrupt as exc:  # a second Ctrl-C: skip the grace, still remove it
        interrupted = exc
    except Exception:  # gone, or already stopped: removal decides
        pass
    try:
        client.api.remove_container(name, force=True)
    except docker.errors.NotFound:
        pass
    except Exception as exc:
        return f"could not remove container {name}: {error_reason(exc)}"
    if interrupted is not None:
        raise interrupted
    return ""


class LogPump:
    """Copies a container's output to a file on a daemon thread until the container ends."""

    def __init__(self, container: Any, path: Path) -> None:
        self._container, self._path = container, path
        self._thread = threading.Thread(target=self._copy, daemon=True,
                                        name=f"logs-{container.name}")

    def start(self) -> LogPump:
        self._thread.start()
        return self

    def _copy(self) -> None:
        with self._path.open("ab") as out, contextlib.suppress(Exception):
            # The stream ends when the container stops or is removed; errors then are expected.
            for chunk in self._container.logs(stream=True, follow=True):
                out.write(chunk)
                out.flush()

    def join(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)
