"""The container of an official engine image, built alike by every plug-in: the image
reference of a release tag, the `--gpus` value, the host folders a model cache must never be,
the `docker run` target, and the ContainerSpec with its `docker run` argument list.

Engine-neutral by construction: callers pass their own repository, tag pattern and wording. It
must not branch on an engine's name.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping, Sequence
from typing import Any

from engines.base import Bind, ContainerSpec, EnginePlugin, GpuSelection
from engines.config import EngineConfig
from engines.errors import EngineError

CONTAINER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
# Docker's image reference grammar (distribution/reference): [registry[:port]/]path[:tag]
# [@digest], path components lower-case. Anything else was passed to the daemon, and shown
# as the `docker run` command, unchecked ('--privileged', 'a; rm -rf /', a line break).
_PATH_PART = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IMAGE = re.compile(
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*"
    r"(?::[0-9]+)?/)?" + _PATH_PART + r"(?:/" + _PATH_PART + r")*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?")
MAX_IMAGE_CHARS = 512  # Docker caps the repository name at 255, the tag at 128
# A named docker volume (Docker's own rule); any other relative source is resolved nowhere.
VOLUME_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]+")


def image_problem(image: str) -> str | None:
    """Why `image` is not a Docker image reference (the reason reads after the image), or
    None."""
    if len(image) > MAX_IMAGE_CHARS:
        return f"is {len(image):,} characters; an image reference has at most {MAX_IMAGE_CHARS}"
    if not _IMAGE.fullmatch(image):
        return ("is not a Docker image reference ([registry/]name[:tag][@digest], e.g. "
                "vllm/vllm-openai:v0.10.1)")
    return None


def cache_dir_problem(path: str) -> str | None:
    """Why `path` cannot be mounted as a container's model cache, or None: an absolute host
    path (no ':' or ',', not a system folder) or a docker volume name, on one line."""
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in path):
        return "model_cache_dir must be one line without control characters"
    is_path = path.startswith("/") and ":" not in path and "," not in path
    if not (is_path or VOLUME_NAME.fullmatch(path)):
        return (f"model_cache_dir {path[:200]!r} must be an absolute path (no ':' or ',') or "
                "a docker volume name")
    return system_path_reason(path) if is_path else None


def check_image(value: str | None) -> str | None:
    """A pydantic field validator: `value` unless it is not an image reference.

    Raises:
        ValueError: `image_problem`'s reason.
    """
    if value is not None and (problem := image_problem(value)) is not None:
        raise ValueError(f"image {value[:60]!r} {problem}")
    return value


def check_cache_dir(value: str | None) -> str | None:
    """A pydantic field validator: `value` unless it cannot be a container's model cache.

    Raises:
        ValueError: `cache_dir_problem`'s reason.
    """
    if value is not None and (problem := cache_dir_problem(value)) is not None:
        raise ValueError(problem)
    return value


def docker_gpus(gpus: GpuSelection) -> str | None:
    """The `--gpus` value: `all`, a count, or `"device=0,1"` (quotes are part of the value,
    because docker parses it as CSV and would split the bare list at the comma); None for
    "none" (no flag)."""
    if gpus in ("all", "none"):
        return None if gpus == "none" else "all"
    if isinstance(gpus, int):
        if gpus < 1:
            raise EngineError(f"gpus must be >= 1, got {gpus}")
        return str(gpus)
    if isinstance(gpus, str) or not gpus or any(not isinstance(g, int) or g < 0 for g in gpus):
        raise EngineError(f"gpus must be 'all', 'none', a count or GPU indices, got {gpus!r}")
    return '"device=' + ",".join(str(g) for g in gpus) + '"'


def image_ref(repository: str, tag: str, pattern: re.Pattern[str], refusal: str, *,
              v_prefix: bool) -> str:
    """`repository:tag` once `tag` matches `pattern`; `v_prefix` adds `v` to numeric tags.

    Raises:
        EngineError: `refusal` (a one-line message) when the tag does not match.
    """
    if not pattern.fullmatch(tag):
        raise EngineError(refusal)
    if v_prefix and tag[0].isdigit():
        tag = f"v{tag}"
    return f"{repository}:{tag}"


# Host folders a model cache must never be: mounted read-write into an engine container,
# "/" handed the container the whole host. Under these nothing is a cache; these exact
# folders hold other people's data.
_SYSTEM_TREES = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/proc", "/sbin",
                 "/sys", "/usr")
_SYSTEM_FOLDERS = frozenset({"/", "/home", "/root", "/var", "/run", "/tmp", "/opt", "/srv",
                             "/mnt", "/media"})


def system_path_reason(path: str) -> str | None:
    """Why `path` (an absolute host path) must not be mounted as a model cache, None when it
    may: "/" and the system's own folders, however written ("//", "/data/..")."""
    normal = posixpath.normpath(re.sub("/+", "/", path))
    if normal in _SYSTEM_FOLDERS or any(
            normal == tree or normal.startswith(tree + "/") for tree in _SYSTEM_TREES):
        return (f"model_cache_dir {path!r} is a system folder ({normal}): the engine "
                "container would mount it read-write; give the Hugging Face cache folder")
    return None


def docker_target(kind: str, host_port: int, model_cache_dir: str,
                  container_name: str | None) -> str:
    """Validate the `docker run` target and return the container name (default per port).

    Raises:
        EngineError: a port outside 1-65535, a cache dir with ':' or empty, a bad name.
    """
    if not 1 <= host_port <= 65535:
        raise EngineError(f"host_port must be 1-65535, got {host_port}")
    if not model_cache_dir or ":" in model_cache_dir:
        raise EngineError(f"model_cache_dir must be a path without ':', got {model_cache_dir!r}")
    if model_cache_dir.startswith("/") and (why := system_path_reason(model_cache_dir)):
        raise EngineError(why)
    name = container_name or f"servefit-{kind}-{host_port}"
    if not CONTAINER_NAME.fullmatch(name):
        raise EngineError(f"invalid container name {name!r}")
    return name


def docker_run(name: str, image: str, command: Sequence[str], *, gpus: GpuSelection,
               host_port: int, port: int, model_cache_dir: str, shm_size: str | None = None,
               ulimits: Mapping[str, int] | None = None, binds: Sequence[Bind] = ()
               ) -> ContainerSpec:
    """The container of an official image: the named container (from `docker_target`),
    GPUs, host IPC, the server port published, the HF cache mounted (weights download once)
    plus `binds`, HF_TOKEN passed through, then the image and `command`."""
    docker_gpus(gpus)  # refuses a bad selection here, whoever starts the container
    return ContainerSpec(
        name=name, image=image, command=list(command),
        gpus=gpus if isinstance(gpus, (int, str)) else list(gpus),
        shm_size=shm_size, ulimits=dict(ulimits or {}), container_port=port,
        host_port=host_port,
        binds=[Bind(source=model_cache_dir, target="/root/.cache/huggingface"), *binds],
        env_passthrough=["HF_TOKEN"])


def docker_run_argv(spec: ContainerSpec) -> list[str]:
    """`docker run --rm …` that starts the container `spec` describes."""
    gpus = docker_gpus(spec.gpus)
    network = (["--network", "host"] if spec.network == "host"
               else ["-p", f"{spec.host_port}:{spec.container_port}"])
    return [
        "docker", "run", "--rm",
        "--name", spec.name,
        *(["--gpus", gpus] if gpus else []),
        *(["--ipc=host"] if spec.ipc_host else []),
        *(["--shm-size", spec.shm_size] if spec.shm_size else []),
        *(arg for name, limit in spec.ulimits.items() for arg in ("--ulimit", f"{name}={limit}")),
        *network,
        *(arg for b in spec.binds
          for arg in ("-v", f"{b.source}:{b.target}" + (":ro" if b.read_only else ""))),
        *(arg for var in spec.env_passthrough for arg in ("--env", var)),
        spec.image,
        *spec.command,
    ]  # fmt: skip


def docker_argv(plugin: EnginePlugin, config: EngineConfig, **container: Any) -> list[str]:
    """`docker run` of `plugin`'s container for `config` (keywords: `container_spec`'s)."""
    return docker_run_argv(plugin.container_spec(config, **container))
