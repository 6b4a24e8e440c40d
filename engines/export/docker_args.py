"""Reading a plug-in's `docker run` argument list into the Container both manifests use.

Parses the options export knows (ports, volumes, env, ipc/shm, ulimits, entrypoint) and refuses
any other, so a manifest never silently drops what the engine needs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from engines.errors import ExportError


@dataclass(slots=True)
class Container:
    """What a plug-in's `docker run` asks for, in a form both manifests can use."""

    image: str
    entrypoint: list[str] | None = None
    command: list[str] = field(default_factory=list)
    ports: list[tuple[int, int]] = field(default_factory=list)  # (host, container)
    volumes: list[tuple[str, str, str]] = field(default_factory=list)  # (source, target, mode)
    env: list[tuple[str, str | None]] = field(default_factory=list)  # None = from the host
    ipc_host: bool = False
    shm_size: str | None = None
    ulimits: dict[str, tuple[int, int]] = field(default_factory=dict)


_NO_VALUE = frozenset({"--rm", "-d", "--detach", "-i", "-t", "-it", "--init"})
_IGNORED = frozenset({"--name", "--gpus", "--runtime"})  # GPUs: config.gpus_per_instance


def parse_docker_run(argv: Sequence[str], image: str, kind: str) -> Container:
    """The Container a plug-in's `docker run … IMAGE COMMAND` asks for (`--gpus` dropped:
    the manifests take the GPU count from the config).

    Raises:
        ExportError: not `docker run`, another image, or an option with no translation.
    """
    if list(argv[:2]) != ["docker", "run"]:
        raise ExportError(f"the {kind} plug-in's docker command does not start with docker run")
    out = Container(image=image)
    i = 2
    while i < len(argv):
        arg = argv[i]
        if not arg.startswith("-"):
            if arg != image:
                raise ExportError(f"the {kind} plug-in's docker command runs {arg!r}, "
                                  f"not the image {image!r}")
            out.command = list(argv[i + 1:])
            return out
        i += 1
        if arg in _NO_VALUE:
            continue
        name, sep, value = arg.partition("=")
        if not sep:
            if i >= len(argv):
                raise ExportError(f"docker option {arg} of the {kind} plug-in has no value")
            value = argv[i]
            i += 1
        try:
            _docker_option(out, name, value, kind)
        except ValueError:
            raise ExportError(f"docker option {name} {value!r} of the {kind} plug-in "
                              "is malformed") from None
    raise ExportError(f"the {kind} plug-in's docker command names no image")


def _docker_option(out: Container, name: str, value: str, kind: str) -> None:
    if name in _IGNORED:
        return
    if name in ("-p", "--publish"):
        host, _, inside = value.rpartition(":")
        out.ports.append((int(host.rpartition(":")[2] or inside), int(inside.partition("/")[0])))
    elif name in ("-v", "--volume"):
        source, _, target = value.partition(":")
        target, _, mode = target.partition(":")
        out.volumes.append((source, target, mode))
    elif name in ("-e", "--env"):
        key, sep, val = value.partition("=")
        out.env.append((key, val if sep else None))
    elif name == "--ipc" and value == "host":
        out.ipc_host = True
    elif name == "--shm-size":
        out.shm_size = value
    elif name == "--ulimit":
        key, _, limits = value.partition("=")
        soft, _, hard = limits.partition(":")
        out.ulimits[key] = (int(soft), int(hard or soft))
    elif name == "--entrypoint":
        out.entrypoint = [value]
    else:
        raise ExportError(f"the {kind} plug-in's docker option {name} {value!r} has no "
                          "compose/Kubernetes translation in export")
