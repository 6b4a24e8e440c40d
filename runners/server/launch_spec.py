"""What a launch is asked for and what it gives: the launch modes, `LaunchSpec` (how to bring
up or reach one server, and the bounds on doing so), `Endpoint` (the server once ready) and
`LaunchError`. Bringing it up is `launch`'s; this module starts nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Self

from pydantic import Field, field_validator, model_validator

from core.errors import RunnerError
from core.records import Record
from engines.base import GpuSelection, ReadinessProbe
from engines.config import EngineConfig
from engines.containers import check_cache_dir, check_image
from runners.server.docker_image import PullPolicy

LaunchMode = Literal["local", "docker", "endpoint"]
# Where the benchmarked server comes from, in the words the front ends show.
LAUNCH_MODES: dict[LaunchMode, str] = {
    "endpoint": "An endpoint that already runs",
    "local": "Launch the engine locally",
    "docker": "Launch the engine's official Docker image",
}


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

    _image = field_validator("image")(check_image)
    _cache_dir = field_validator("model_cache_dir")(check_cache_dir)

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
