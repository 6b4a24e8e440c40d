"""What a launch runs, from the engine's plug-in: the local command (the chosen host and port
filled in, a virtual environment's bin first), the container on the chosen network, and
whether the local program is installed at all (`local_prerequisite`, said before a run).
Running either is `launch`'s.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from engines.base import ContainerSpec
from engines.config import EngineConfig
from engines.registry import get_engine
from runners.server.launch_spec import LaunchSpec

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


def local_argv(spec: LaunchSpec, port: int, env: dict[str, str]) -> list[str]:
    """The command `spec` runs locally on `port` (the venv's program when it has one); a
    virtual environment's bin and VIRTUAL_ENV go into `env`."""
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
