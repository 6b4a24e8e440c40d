"""How a config's GPUs are laid out: the parallel layout of one instance (TP, TEP or DEP), and
for a disaggregated config each instance's role, port and range of GPUs.

Engine-neutral: the plug-ins and the performance model share these.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

from engines.config import EngineConfig
from engines.errors import EngineError

Role = Literal["prefill", "decode"]


def instances(config: EngineConfig, base_port: int) -> Iterator[tuple[Role, int, str]]:
    """(role, port, CUDA_VISIBLE_DEVICES) per instance of a disaggregated config: prefill
    first, consecutive ports from `base_port`, disjoint ranges of `gpus_per_instance` GPUs.

    Raises:
        EngineError: the config has no disaggregation section.
    """
    disagg = config.disaggregation
    if disagg is None:
        raise EngineError("config has no disaggregation section")
    per = config.gpus_per_instance
    roles: list[Role] = ["prefill"] * disagg.prefill_instances
    roles += ["decode"] * disagg.decode_instances
    for index, role in enumerate(roles):
        devices = ",".join(str(g) for g in range(index * per, (index + 1) * per))
        yield role, base_port + index, devices


def parallel_layout(config: EngineConfig) -> Literal["TP", "TEP", "DEP"]:
    """How one instance splits a model: TP (experts, if any, tensor-sharded), TEP (TP
    attention, experts whole across the TP group) or DEP (attention data-parallel ranks,
    experts across all of them)."""
    if config.dp > 1:
        return "DEP"
    return "TEP" if config.ep > 1 else "TP"
