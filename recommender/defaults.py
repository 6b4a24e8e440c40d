"""The one place an `EngineConfig`'s unset knobs are filled for a GPU, a model and a load.

Owns `fill` (every scheduler knob the engine would choose itself: running-sequence cap, step
token budget, chunked prefill, prefix caching, `max_model_len` sized to the workload),
`memory_fraction` (the engine's fraction knob: the config's, the measured release's default,
the plug-in's, or the fallback) and `SchedulerCaps`, the caps the simulated scheduler
applies. The values come from the engine plug-ins (`engines.ENGINES[kind].defaults` and
`scheduler_defaults`); the simulator, the memory model, the steady-state algebra, capacity
and reasons read them from here (through `recommender.resolve`), so a default the engine's
scheduler uses and the one its memory plan assumes cannot disagree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from engines import ENGINES
from engines.config import EngineConfig
from recommender.policies import policy_for
from recommender.specs import GPU, ModelSpec

# A running-sequence cap that stands for "none" (SGLang derives it from the KV pool).
NO_CAP_SEQS = 4096
FALLBACK_MEMORY_FRACTION = 0.9  # engine leaves it GPU-dependent (SGLang docs: about 0.9)


@dataclass(frozen=True, slots=True)
class SchedulerCaps:
    """What bounds one scheduler step of one replica (one attention DP rank)."""

    max_running: int  # running sequences (NO_CAP_SEQS where the engine has no fixed cap)
    budget_tokens: int  # tokens one step schedules (max_batched_tokens / max_num_tokens)
    chunked_prefill: bool
    prefix_caching: bool


@dataclass(frozen=True, slots=True)
class Filled:
    """A config with the engine's choices written in, and what was sized for the load."""

    config: EngineConfig  # every knob set but max_num_seqs where the engine has no fixed cap
    caps: SchedulerCaps
    warnings: tuple[str, ...]


def release_of(version: str | None) -> tuple[int, int] | None:
    """(major, minor) of an engine version string such as "0.10.1" or "v1.0rc2"."""
    found = re.search(r"(\d+)\.(\d+)", version or "")
    return (int(found.group(1)), int(found.group(2))) if found else None


def memory_fraction(config: EngineConfig, engine_version: str | None = None
                    ) -> tuple[float, str]:
    """(the engine's memory-fraction knob, where it came from: config, engine_release,
    engine_default or fallback)."""
    if config.gpu_memory_fraction is not None:
        return config.gpu_memory_fraction, "config"
    plugin = ENGINES[config.engine]
    release = release_of(engine_version)
    if release is not None and (old := plugin.release_memory_fraction(release)) is not None:
        return old, "engine_release"
    if plugin.defaults.gpu_memory_fraction is not None:
        return plugin.defaults.gpu_memory_fraction, "engine_default"
    return FALLBACK_MEMORY_FRACTION, "fallback"


def scheduler_caps(config: EngineConfig, gpu: GPU, longest_tokens: int | None = None
                   ) -> SchedulerCaps:
    """The caps of `config` on `gpu`: the config's knobs, else the engine's own choice there.
    Without chunked prefill an unset budget grows to the longest request (`longest_tokens`),
    as trtllm-bench sizes max_num_tokens to its dataset: a prompt must fit one step."""
    plugin = ENGINES[config.engine]
    seqs, budget = plugin.scheduler_defaults(gpu.name, gpu.memory_gb)
    chunked = plugin.defaults.chunked_prefill if config.chunked_prefill is None \
        else config.chunked_prefill
    prefix = plugin.defaults.prefix_caching if config.prefix_caching is None \
        else config.prefix_caching
    if config.max_batched_tokens is not None:
        budget = config.max_batched_tokens
    elif not chunked and longest_tokens is not None:
        budget = max(budget, longest_tokens)
    running = config.max_num_seqs or seqs or NO_CAP_SEQS
    if config.max_num_seqs is not None and policy_for(config).cap_per_instance:
        running = max(1, running // config.dp)  # one DP rank's share of the instance's cap
    return SchedulerCaps(running, budget, chunked, prefix)


def fill(config: EngineConfig, gpu: GPU, model: ModelSpec, *,
         longest_tokens: int | None = None) -> Filled:
    """`config` with every scheduler knob the engine would choose written in, and
    `max_model_len` sized to the workload's longest request when unset
    (`memory.size_max_model_len`, said in `warnings`).

    Raises:
        UsageError: the config's max_model_len exceeds the model's context.
    """
    from recommender.memory import size_max_model_len  # memory reads this module's values

    caps = scheduler_caps(config, gpu, longest_tokens)
    seqs_default, _ = ENGINES[config.engine].scheduler_defaults(gpu.name, gpu.memory_gb)
    update = {"max_batched_tokens": caps.budget_tokens, "chunked_prefill": caps.chunked_prefill,
              "prefix_caching": caps.prefix_caching,
              "max_num_seqs": config.max_num_seqs or seqs_default}
    filled = config.model_copy(update=update)
    warnings: tuple[str, ...] = ()
    if longest_tokens is not None:
        filled, sized = size_max_model_len(filled, model, longest_tokens)
        warnings = (sized,) if sized else ()
    return Filled(filled, caps, warnings)


__all__ = ["FALLBACK_MEMORY_FRACTION", "NO_CAP_SEQS", "Filled", "SchedulerCaps", "fill",
           "memory_fraction", "release_of", "scheduler_caps"]
