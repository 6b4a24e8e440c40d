"""Turning a plug-in's `docker run` argument list into a compose service and Kubernetes objects.

Parses the options export knows (ports, volumes, env, ipc/shm, ulimits, entrypoint) and refuses
any other, so a manifest never silently drops what the engine needs.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from engines.errors import ExportError

KUBERNETES_FILE = "kubernetes.yaml"
# Placeholders for paths known only where the bundle runs; each output format substitutes its own.
BUNDLE_DIR = "/@SERVEFITBUNDLE_DIR@"
HF_CACHE = "/@SERVEFITHF_CACHE@"
MODEL_CACHE_STORAGE = "200Gi"  # a 70B model in BF16 is ~140 GB; smaller ones fit with room
_COMPOSE_PATHS = {BUNDLE_DIR: ".", HF_CACHE: "${HOME}/.cache/huggingface"}
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
STARTUP_BUDGET_S = 1200  # weights download, compile and CUDA-graph capture can take minutes


def substitute(arg: str, paths: dict[str, str], quote: Any) -> str:
    """`arg` with each placeholder replaced by `paths[...]` and the rest passed to `quote`."""
    pattern = "|".join(re.escape(key) for key in paths)
    pieces: list[str] = []
    pos = 0
    for match in re.finditer(pattern, arg):
        if match.start() > pos:
            pieces.append(quote(arg[pos:match.start()]))
        pieces.append(paths[match.group()])
        pos = match.end()
    if pos < len(arg) or not pieces:
        pieces.append(quote(arg[pos:]))
    return "".join(pieces)



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


def _compose_escape(value: str) -> str:
    # Compose interpolates $VAR and ${VAR} in every string; $$ is a literal $. Placeholders
    # become paths relative to the compose file, or the user's HF cache.
    return substitute(value, _COMPOSE_PATHS, lambda text: text.replace("$", "$$"))


def _health_test(port: int, path: str) -> list[str]:
    # python3 ships in every engine image; curl does not.
    url = f"http://localhost:{port}{path}"
    code = f"import urllib.request; urllib.request.urlopen({url!r}, timeout=5)"
    return ["CMD", "python3", "-c", code]


class _PlainDumper(yaml.SafeDumper):
    """Safe YAML without anchors/aliases, which some manifest tools reject."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _dump_yaml(*docs: Any) -> str:
    # Without a stream dump_all returns the text (str() for the checker: PyYAML is untyped).
    return str(yaml.dump_all(docs, Dumper=_PlainDumper, sort_keys=False, allow_unicode=True,
                             width=10**6))


def compose_yaml(c: Container, kind: str, health_path: str, gpus: int) -> str:
    """docker-compose.yaml of one service reserving `gpus` (the config's GPUs per instance)."""
    service: dict[str, Any] = {"image": c.image}
    if c.entrypoint is not None:
        service["entrypoint"] = [_compose_escape(a) for a in c.entrypoint]
    service["command"] = [_compose_escape(a) for a in c.command]
    service["ports"] = [f"{host}:{inside}" for host, inside in c.ports]
    if c.ipc_host:
        service["ipc"] = "host"
    if c.shm_size is not None:
        service["shm_size"] = c.shm_size
    if c.ulimits:
        service["ulimits"] = {k: {"soft": s, "hard": h} for k, (s, h) in c.ulimits.items()}
    if c.env:
        service["environment"] = [k if v is None else f"{k}={_compose_escape(v)}"
                                  for k, v in c.env]
    service["volumes"] = [_compose_escape(":".join(filter(None, v))) for v in c.volumes]
    service["deploy"] = {"resources": {"reservations": {"devices": [
        {"driver": "nvidia", "count": gpus, "capabilities": ["gpu"]}]}}}
    port = c.ports[0][1] if c.ports else None
    if port is not None:
        service["healthcheck"] = {"test": _health_test(port, health_path), "interval": "15s",
                                  "timeout": "10s", "retries": 3,
                                  "start_period": f"{STARTUP_BUDGET_S}s"}
    doc: dict[str, Any] = {"services": {kind: service}}
    named = [s for s, _, _ in c.volumes if not s.startswith("/")]
    if named:
        doc["volumes"] = {_compose_escape(s): {} for s in named}
    return f"# Generated by ServeFit: `docker compose up -d` serves {kind}.\n" + _dump_yaml(doc)


def kubernetes_yaml(c: Container, kind: str, health_path: str, gpus: int,
                config_files: dict[str, str]) -> str:
    """Deployment + Service asking `nvidia.com/gpu: gpus`, with a ConfigMap of `config_files`
    and a PersistentVolumeClaim for the model cache when the container mounts them.

    Raises:
        ExportError: no published port, a host path in the container command, a bad env name.
    """
    name = f"servefit-{kind}"
    config_map: dict[str, Any] = {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": f"{name}-config", "labels": {}}, "data": {}}
    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "servefit"}
    port = c.ports[0][1] if c.ports else None
    if port is None:
        raise ExportError(f"the {kind} plug-in's docker command publishes no port")
    # Weights download once into the claim, not at every pod start (an emptyDir would).
    claim: dict[str, Any] = {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": f"{name}-models", "labels": labels},
        "spec": {"accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": MODEL_CACHE_STORAGE}}}}
    claimed = False
    volumes: list[dict[str, Any]] = [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    mounts: list[dict[str, Any]] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    for index, (source, target, mode) in enumerate(c.volumes):
        vol = f"volume-{index}"
        mount: dict[str, Any] = {"name": vol, "mountPath": target}
        file_name = source.removeprefix(f"{BUNDLE_DIR}/")
        if file_name in config_files:  # a bundle file: ship it in a ConfigMap
            config_map["data"][file_name] = config_files[file_name]
            spec: dict[str, Any] = {"configMap": {"name": config_map["metadata"]["name"]}}
            mount["subPath"] = file_name
        elif source.startswith("/") and HF_CACHE not in source and BUNDLE_DIR not in source:
            spec = {"hostPath": {"path": source, "type": "DirectoryOrCreate"}}
        else:  # the model cache (or a docker named volume): a claim that outlives the pod
            spec = {"persistentVolumeClaim": {"claimName": claim["metadata"]["name"]}}
            claimed = True
        if mode == "ro":
            mount["readOnly"] = True
        volumes.append({"name": vol, **spec})
        mounts.append(mount)
    probe = {"httpGet": {"path": health_path, "port": port}, "periodSeconds": 10}
    container: dict[str, Any] = {"name": kind, "image": c.image}
    if any(BUNDLE_DIR in a or HF_CACHE in a for a in [*(c.entrypoint or []), *c.command]):
        raise ExportError(f"the {kind} plug-in's container command names a host path")
    if c.entrypoint is not None:
        container["command"] = [_k8s_escape(a) for a in c.entrypoint]
    container["args"] = [_k8s_escape(a) for a in c.command]
    container["ports"] = [{"name": "http", "containerPort": port}]
    if c.env:
        container["env"] = [_k8s_env(k, v) for k, v in c.env]
    container |= {
        "resources": {"limits": {"nvidia.com/gpu": gpus}},
        "startupProbe": {**probe, "failureThreshold": STARTUP_BUDGET_S // 10},
        "readinessProbe": {**probe, "failureThreshold": 3},
        "volumeMounts": mounts,
    }
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels},
                              "spec": {"containers": [container], "volumes": volumes}}},
    }
    service = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "labels": labels},
        "spec": {"selector": labels,
                 "ports": [{"name": "http", "port": port, "targetPort": port}]},
    }
    config_map["metadata"]["labels"] = labels
    docs = [config_map] if config_map["data"] else []
    head = (f"# Generated by ServeFit: `kubectl apply -f {KUBERNETES_FILE}` serves {kind}.\n"
            "# Host environment variables become optional keys of the Secret servefit-env.\n")
    if claimed:
        head += (f"# The model cache is the claim {name}-models ({MODEL_CACHE_STORAGE}, the "
                 "default StorageClass): weights\n# download once, not at every pod start; "
                 "size it to the model's checkpoint.\n")
    return head + _dump_yaml(*docs, deployment, service, *([claim] if claimed else []))


def _k8s_escape(value: str) -> str:
    # Kubernetes expands $(VAR) in command/args; $$ is a literal $.
    return value.replace("$", "$$")


def _k8s_env(key: str, value: str | None) -> dict[str, Any]:
    if not _ENV_NAME.fullmatch(key):
        raise ExportError(f"environment variable name {key!r} is not valid")
    if value is not None:
        return {"name": key, "value": _k8s_escape(value)}
    ref = {"name": "servefit-env", "key": key, "optional": True}
    return {"name": key, "valueFrom": {"secretKeyRef": ref}}
