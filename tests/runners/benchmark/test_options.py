"""Tests for runners/benchmark/options.py: docker options refused up front, before any
daemon is asked (no docker here): image references, GPU selections, model cache folders."""

from __future__ import annotations

import pytest

from core.errors import UsageError
from runners.benchmark.options import parse_options

BASE = {"launch": "docker", "config_path": "rec.json", "workload": "concurrency"}


@pytest.mark.parametrize(("field", "value", "says"), [
    ("image", "--privileged", "not a Docker image reference"),
    ("image", "ubuntu; rm -rf /", "not a Docker image reference"),
    ("image", "vllm/vllm-openai:latest\nX", "not a Docker image reference"),
    ("image", "a" * 70_000, "70,000 characters"),
    ("docker_gpus", "99999999999999999999999", "at most 1,024 GPUs"),
    ("docker_gpus", "device=0,0", "names a GPU twice"),
    ("model_cache_dir", "relative/dir", "absolute path"),
    ("model_cache_dir", "/data/x\nfoo", "one line"),
    ("model_cache_dir", "/etc/../usr", "system folder"),
])
def test_hostile_docker_options_are_one_usage_line(field: str, value: str, says: str) -> None:
    with pytest.raises(UsageError, match=says) as info:
        parse_options({**BASE, field: value})
    assert "\n" not in str(info.value).split(": ", 1)[0]
    assert str(info.value).startswith("--" + field.replace("_", "-"))


@pytest.mark.parametrize(("field", "value"), [
    ("image", "vllm/vllm-openai:v0.10.1"),
    ("image", "nvcr.io/nvidia/tensorrt-llm/release:1.0.0rc4"),
    ("image", "localhost:5000/team/vllm@sha256:" + "0" * 64),
    ("docker_gpus", "device=0,3"),
    ("docker_gpus", "1024"),
    ("model_cache_dir", "/data/hf"),
    ("model_cache_dir", "hf-cache"),  # a docker volume
])
def test_ordinary_docker_options_pass(field: str, value: str) -> None:
    assert getattr(parse_options({**BASE, field: value}), field) == value
