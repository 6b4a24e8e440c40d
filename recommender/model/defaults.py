"""The one place an `EngineConfig`'s unset knobs are filled for a GPU, a model and a load.

Owns `fill` (every scheduler knob the engine would choose itself: running-sequence cap, step
token budget, chunked prefill, prefix caching, `max_model_len` sized to the workload),
`size_max_model_len` / `workload_max_model_len` (the longest request + 10 %, in 1,024s,
never the model's full context), `memory_fraction` (the engine's fraction knob: the
config's, the measured release's default, the plug-in's, or the fallback) and
`SchedulerCaps`, the caps the simulated scheduler applies. The values come from the engine
plug-ins (`engines.registry.ENGINES[kind].defaults` and `scheduler_defaults`); the simulator, the
memory model, the steady-state algebra, capacity and reasons read them from here (through
`recommender.model.resolve`), so a default the engine's scheduler uses and the one its memory plan
assumes cannot disagree.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from core.errors import UsageError
from engines.config import EngineConfig
from engines.registry import ENGINES
from recommender.catalog.specs import GPU, ModelSpec
from recommender.sim.policies import policy_for

# max_model_len sized to a workload when none is given (`workload_max_model_len`): the longest
# request plus LEN_MARGIN, rounded up to MAX_MODEL_LEN_STEP (a multiple of every engine's KV
# block: vLLM 16, SGLang 1, TRT-LLM 32 tokens), never above the model's context. Deployments
# set it so (vLLM --max-model-len, SGLang --context-length, TRT-LLM max_seq_len); checking the
# KV pool against the full context would refuse configs an engine serves.
MAX_MODEL_LEN_STEP = 1024
LEN_MARGIN = 1.1
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


def release_key(version: str | None) -> str | None:
    """"major.minor" of an engine version string (`release_of`), None when it names none."""
    release = release_of(version)
    return f"{release[0]}.{release[1]}" if release is not None else None


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
         longest_tokens: int | None = None, engine_version: str | None = None) -> Filled:
    """`config` with every scheduler knob the engine would choose written in (the choices of
    `engine_version`'s release where they differ from today's, `release_knobs`), and
    `max_model_len` sized to the workload's longest request when unset
    (`size_max_model_len`, said in `warnings`).

    Raises:
        UsageError: the config's max_model_len exceeds the model's context.
    """
    warnings: tuple[str, ...] = ()
    if longest_tokens is not None:
        config, sized = size_max_model_len(config, model, longest_tokens)
        warnings = (sized,) if sized else ()
    chosen = release_knobs(config, engine_version)
    if chosen:
        said = ", ".join(f"{k} {v}" for k, v in sorted(chosen.items()))
        warnings += (f"{config.engine} {engine_version} runs its own defaults where they differ "
                     f"from today's: {said}",)
        config = config.model_copy(update=chosen)
    caps = scheduler_caps(config, gpu, longest_tokens)
    seqs_default, _ = ENGINES[config.engine].scheduler_defaults(gpu.name, gpu.memory_gb)
    update = {"max_batched_tokens": caps.budget_tokens, "chunked_prefill": caps.chunked_prefill,
              "prefix_caching": caps.prefix_caching,
              "max_num_seqs": config.max_num_seqs or seqs_default}
    return Filled(config.model_copy(update=update), caps, warnings)


def release_knobs(config: EngineConfig, engine_version: str | None) -> dict[str, int | bool]:
    """The scheduler knobs `config` leaves unset that `engine_version`'s release chose
    otherwise than today's (`release_scheduler_defaults` of the engine's plug-in, e.g. vLLM's
    V0 engine before 0.8), as `EngineConfig` fields; knobs the config sets are kept."""
    release = release_of(engine_version)
    if release is None:
        return {}
    chosen = ENGINES[config.engine].release_scheduler_defaults(release, config.max_model_len)
    return {k: v for k, v in chosen.items() if getattr(config, k) is None}


def workload_max_model_len(longest_tokens: int, model: ModelSpec) -> int:
    """max_model_len for a workload whose longest request (prompt + output) is
    `longest_tokens`: + LEN_MARGIN, in MAX_MODEL_LEN_STEP multiples, capped at the context.

    Raises:
        UsageError: longest_tokens < 1.
    """
    if longest_tokens < 1:
        raise UsageError(f"longest_tokens must be >= 1, got {longest_tokens}")
    wanted = math.ceil(longest_tokens * LEN_MARGIN / MAX_MODEL_LEN_STEP) * MAX_MODEL_LEN_STEP
    return min(wanted, model.max_context_tokens)


def size_max_model_len(
    config: EngineConfig, model: ModelSpec, longest_tokens: int
) -> tuple[EngineConfig, str | None]:
    """(config with max_model_len set, the warning saying it was sized, or None).

    A config that sets max_model_len is returned as it is; otherwise it is sized to the
    workload (`workload_max_model_len`), never to the model's full context.

    Raises:
        UsageError: the config's max_model_len exceeds the model's context.
    """
    if config.max_model_len is not None:
        if config.max_model_len > model.max_context_tokens:
            raise UsageError(f"max_model_len {config.max_model_len} exceeds {model.name}'s "
                             f"context of {model.max_context_tokens} tokens")
        return config, None
    length = workload_max_model_len(longest_tokens, model)
    warning = (
        f"max_model_len not given: sized to the workload, {length} tokens (longest request "
        f"{longest_tokens} + {LEN_MARGIN - 1:.0%}, in {MAX_MODEL_LEN_STEP}s; the model's "
        f"context is {model.max_context_tokens}); set --max-model-len to choose it"
    )
    return config.model_copy(update={"max_model_len": length}), warning


__all__ = [
    "FALLBACK_MEMORY_FRACTION",
    "LEN_MARGIN",
    "MAX_MODEL_LEN_STEP",
    "NO_CAP_SEQS",
    "Filled",
    "SchedulerCaps",
    "fill",
    "memory_fraction",
    "release_key",
    "release_knobs",
    "release_of",
    "scheduler_caps",
    "size_max_model_len",
    "workload_max_model_len",
]
