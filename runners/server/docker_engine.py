"""The Docker daemon through its Engine API (the `docker` package): its address, a client that
answered a ping, and `DockerError`, the one line (`error_reason`) every error of the Docker SDK
(and of `requests` under it) is mapped to, naming the daemon or the image. No Docker CLI binary
is needed, in the image or on the host.

Images are `docker_image`'s, containers `docker_container`'s; `runners.server.launch` owns the
waits and the teardown order, and adds the command and the log tail.
"""

from __future__ import annotations

import os
from typing import Any

from core.errors import RunnerError

DEFAULT_HOST = "unix:///var/run/docker.sock"
_API_TIMEOUT_S = 60


class DockerError(RunnerError):
    """The daemon could not be reached, or refused or failed an operation."""


def daemon_url(host: str | None = None) -> str:
    """The daemon's address: `host`, else $DOCKER_HOST, else the default socket."""
    return host or os.environ.get("DOCKER_HOST") or DEFAULT_HOST


def connect(host: str | None = None) -> Any:
    """A client of the daemon at `daemon_url(host)` that answered a ping.

    Raises:
        DockerError: the daemon is not there or refuses us (one line, with what to do).
    """
    import docker

    url = daemon_url(host)
    try:
        client = docker.DockerClient(base_url=url, timeout=_API_TIMEOUT_S)
        client.ping()
    except Exception as exc:  # the SDK raises DockerException, requests' and OS errors
        raise DockerError(
            f"cannot reach the Docker daemon at {url} ({error_reason(exc)}): start Docker, or "
            "run the app with the daemon's socket mounted and its group added (README, Docker)"
        ) from None
    return client


def error_reason(exc: BaseException) -> str:
    """The daemon's own explanation when it gave one, else the exception's first line."""
    explanation = getattr(exc, "explanation", None)
    text = str(explanation or exc).strip() or type(exc).__name__
    return text.splitlines()[0]
