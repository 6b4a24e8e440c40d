"""Shared fixtures for the slow real-vLLM tests (../shared/reference/vllm_cpu.md): the tiny
model built once per session, and the `local` launch spec that serves it on the CPU.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from engines.config import EngineConfig
from runners.server.launch import launched
from runners.server.launch_spec import LaunchSpec
from runners.server.process_group import group_alive

ROOT = Path(__file__).resolve().parents[2]
VLLM_VENV = ROOT / ".venv-vllm"
VLLM_PY = VLLM_VENV / "bin" / "python"
READY_TIMEOUT_S = 300.0
VLLM_ENV = {
    "VLLM_TARGET_DEVICE": "cpu",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
}


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """The tiny random-weight Llama, built by the vLLM venv's interpreter."""
    if not VLLM_PY.exists():
        pytest.skip(f"no vLLM venv at {VLLM_PY} (see ../shared/reference/vllm_cpu.md)")
    model_dir = tmp_path_factory.mktemp("tiny") / "model"
    subprocess.run([str(VLLM_PY), str(ROOT / "tests/runners/tiny_model.py"), str(model_dir)],
                   check=True, timeout=180, capture_output=True)
    return model_dir


def vllm_spec(model_dir: Path, log_dir: Path) -> LaunchSpec:
    """`local` launch of vLLM's CPU server for the tiny model on a free port.

    `vllm serve` does not exist in the vllm-cpu distribution, so the argv is the API server's
    module entry point. float32, not the doc's bfloat16: on CPUs with AMX, vLLM 0.32 picks its
    AMX bf16 attention kernel and the worker dies at the first request ("Worker proc
    VllmWorker-0 died unexpectedly"); float32 takes the AVX-512 path and works.
    """
    argv = [
        "python", "-m", "vllm.entrypoints.launchers.api_server.entry",
        "--model", str(model_dir), "--served-model-name", "tiny",
        "--host", "{host}", "--port", "{port}",
        "--dtype", "float32", "--max-model-len", "2048",
        "--enable-prefix-caching", "--enforce-eager",
    ]  # fmt: skip
    config = EngineConfig(engine="vllm", model=str(model_dir), max_model_len=2048,
                          prefix_caching=True, extra_args={"served-model-name": "tiny"})
    return LaunchSpec(mode="local", config=config, argv=argv, venv=VLLM_VENV, env=VLLM_ENV,
                      log_dir=log_dir, cwd=log_dir, ready_timeout_s=READY_TIMEOUT_S,
                      stop_timeout_s=30.0)


@pytest.fixture(scope="module")
def vllm_url(tiny_model_dir, tmp_path_factory) -> Iterator[str]:
    """Base URL of a running tiny-model vLLM server (torn down after the module)."""
    log_dir = tmp_path_factory.mktemp("vllm")
    with launched(vllm_spec(tiny_model_dir, log_dir)) as ep:
        yield ep.url
        assert ep.pid is not None and group_alive(ep.pid), "vLLM died during the tests"
    assert not group_alive(ep.pid), "vLLM processes left behind"
