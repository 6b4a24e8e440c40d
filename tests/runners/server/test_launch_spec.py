"""Tests for runners/server/launch_spec.py: a LaunchSpec built by a library caller refuses
the image and cache folder `bench`'s options refuse."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from engines.config import EngineConfig
from runners.server.launch_spec import LaunchSpec

CONFIG = EngineConfig(engine="vllm", model="org/m")


@pytest.mark.parametrize("fields", [
    {"image": "--privileged"},
    {"image": "img\nX"},
    {"model_cache_dir": "relative/dir"},
    {"model_cache_dir": "/"},
])
def test_a_hostile_image_or_cache_is_refused(fields: dict) -> None:
    with pytest.raises(ValidationError):
        LaunchSpec(mode="docker", config=CONFIG, log_dir=Path("logs"), **fields)


def test_an_image_and_a_volume_pass() -> None:
    spec = LaunchSpec(mode="docker", config=CONFIG, log_dir=Path("logs"),
                      image="vllm/vllm-openai:v0.10.1", model_cache_dir="hfcache")
    assert (spec.image, spec.model_cache_dir) == ("vllm/vllm-openai:v0.10.1", "hfcache")
