"""Deployment bundle for one EngineConfig, generic over the registered plug-ins.

Renders the engine's config file, local and docker launch scripts, docker-compose and
Kubernetes manifests, a benchmark command and a short report, then writes them atomically.
It only calls the `EnginePlugin` protocol, never branches on an engine's name, and launches
nothing. Each kind of file is rendered by its own module of `engines.export`; this one puts
them together.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from engines.config import EngineConfig
from engines.containers import docker_argv
from engines.errors import ExportError
from engines.export.docker_args import parse_docker_run
from engines.export.install import install, refuse_existing
from engines.export.manifests import COMPOSE_FILE, KUBERNETES_FILE, compose_yaml, kubernetes_yaml
from engines.export.placeholders import BUNDLE_DIR, HF_CACHE
from engines.export.report import REPORT_FILE, render_report
from engines.export.request import ExportRequest
from engines.export.shell import (
    BENCH_SCRIPT,
    DOCKER_SCRIPT,
    HERE,
    LAUNCH_SCRIPT,
    bench_script,
    local_launch_script,
    shell_line,
    shell_script,
)
from engines.registry import get_engine

FIXED_FILES = (LAUNCH_SCRIPT, DOCKER_SCRIPT, COMPOSE_FILE, KUBERNETES_FILE, BENCH_SCRIPT,
               REPORT_FILE)
_FILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_HTTP_PATH = re.compile(r"^/[A-Za-z0-9._~/-]*$")


def export_bundle(request: ExportRequest, out_dir: str | os.PathLike[str], *,
                  replace: bool = False) -> list[Path]:
    """Render every bundle file, then write them into `out_dir` all or nothing.

    Files of `out_dir` that are not part of the bundle are left alone. Bundle files already
    there are refused (nothing is written) unless `replace`; then they are replaced, and
    restored if installing the new ones fails.

    Returns:
        The written paths, the engine's config file first.

    Raises:
        UnknownEngineError: no plug-in registered for `request.config.engine`.
        CapabilityError: the plug-in's check refused the config on the given hardware/model.
        ExportError: an empty `out_dir`, a bundle file already there (without `replace`), a
            plug-in output export cannot package, or a file cannot be written.
    """
    if not str(out_dir).strip():
        raise ExportError("the output folder is empty: name a folder for the bundle")
    files = render_bundle(request)
    out = Path(out_dir)
    if not replace:
        refuse_existing(out, list(files))
    return install(files, out)


def served_config(request: ExportRequest) -> EngineConfig:
    """The config the bundle launches: `request.config` as its plug-in deploys it, with the
    model's pre-quantized checkpoint where the engine cannot quantize on load.

    Raises:
        CapabilityError: the engine cannot deploy the weight quantization asked for.
    """
    config = request.config
    return get_engine(config.engine).served_config(config, request.model_facts)


def render_bundle(request: ExportRequest) -> dict[str, str]:
    """File name → text of every bundle file (nothing written)."""
    plugin = get_engine(request.config.engine)
    if request.hardware is not None and request.model_facts is not None:
        plugin.check(request.config, request.hardware, request.model_facts)
    config = served_config(request)
    config_name, config_text = plugin.config_file(config)
    if not _FILE_NAME.fullmatch(config_name) or config_name in FIXED_FILES:
        raise ExportError(f"the {config.engine} plug-in's config file name {config_name!r} "
                          "cannot be used in the bundle")
    for arg in [*plugin.server_argv(config), request.model_cache_dir or ""]:
        if BUNDLE_DIR in arg or HF_CACHE in arg:
            raise ExportError(f"the request contains reserved text ({BUNDLE_DIR}, {HF_CACHE})")
    host_port = request.host_port or config.port
    image = plugin.docker_image(request.engine_version)
    gpus = config.gpus_per_instance
    run_argv = docker_command(request, bundle_dir=BUNDLE_DIR, hf_cache_dir=HF_CACHE)
    container = parse_docker_run(run_argv, image, config.engine)
    probe = plugin.readiness(config)
    if not _HTTP_PATH.fullmatch(probe.health_path):
        raise ExportError(f"readiness path {probe.health_path!r} is not a plain URL path")
    local_script = local_launch_script(plugin, config, config_name)
    files = {
        config_name: config_text,
        LAUNCH_SCRIPT: local_script,
        DOCKER_SCRIPT: shell_script(f"start {config.engine} in its official image.", HERE,
                                    "exec " + shell_line(run_argv)),
        COMPOSE_FILE: compose_yaml(container, config.engine, probe.health_path, gpus),
        KUBERNETES_FILE: kubernetes_yaml(container, config.engine, probe.health_path, gpus,
                                     {config_name: config_text}),
        BENCH_SCRIPT: bench_script(request.profile, host_port),
    }
    files[REPORT_FILE] = render_report(request, config, plugin, files, local_script=local_script,
                                       image=image, host_port=host_port)
    return files


def docker_command(request: ExportRequest, *, bundle_dir: str, hf_cache_dir: str) -> list[str]:
    """The plug-in's `docker run` for the request, with the bundle at `bundle_dir`.

    `hf_cache_dir` is used when the request names no `model_cache_dir`.
    """
    config = served_config(request)
    plugin = get_engine(config.engine)
    config_name = plugin.config_file(config)[0]
    return docker_argv(
        plugin, config, image=plugin.docker_image(request.engine_version),
        host_port=request.host_port or config.port,
        model_cache_dir=request.model_cache_dir or hf_cache_dir,
        gpus=config.gpus_per_instance, config_file_path=f"{bundle_dir}/{config_name}")
