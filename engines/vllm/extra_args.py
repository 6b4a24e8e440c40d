"""What `extra_args` may add to a vLLM launch: keys renamed to vLLM's dashed flag names, the
flags EngineConfig owns (never taken from extra args), and the refusals `vllm serve`'s own
parser would make, checked against the flags it knows (`engines.vllm.flags`).
"""

from __future__ import annotations

import difflib
from typing import Any

from engines.errors import CapabilityError
from engines.rendering import Setting
from engines.vllm.flags import KNOWN_FLAGS_VERSION, SWITCHES, VALUE_FLAGS


def flag_name(key: str) -> str:
    """vLLM accepts `_` and `-` in flag names; compare and render the dashed form."""
    return key.replace("_", "-")


# Flags that EngineConfig owns even when a field is unset (so extra_args cannot sneak them in).
RESERVED_FLAGS = frozenset(
    {
        "model", "config", "tensor-parallel-size", "tp", "pipeline-parallel-size", "pp",
        "data-parallel-size", "dp", "enable-expert-parallel", "ep",
        "max-num-seqs", "max-num-batched-tokens", "gpu-memory-utilization",
        "enable-prefix-caching", "enable-chunked-prefill", "kv-cache-dtype", "quantization",
        "speculative-config", "max-model-len", "kv-transfer-config", "host", "port",
    }
)  # fmt: skip


def _switch(name: str, value: Any) -> str:
    """The flag a setting sets: `no-X: true` sets X (to false)."""
    return name[3:] if name.startswith("no-") and value is True else name


def known_flag_once(key: str, name: str, value: Any, so_far: list[Setting]) -> None:
    """vLLM's own refusals of one extra arg (`also_check` of `engines.rendering.extra_settings`):
    a flag `vllm serve` knows, given the kind of value it takes, and a switch set only once."""
    _known_flag(key, name, value)
    _one_switch_once(key, name, value, so_far)


def _known_flag(key: str, name: str, value: Any) -> None:
    """Refuse what `vllm serve`'s own parser would: an unknown flag, a value for a switch, a
    switch for a value flag, or `--no-X` where vLLM has none (`engines.vllm.flags`)."""
    if name not in SWITCHES and name not in VALUE_FLAGS:
        close = difflib.get_close_matches(name, [*SWITCHES, *VALUE_FLAGS], n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise CapabilityError(f"extra_args[{key!r}]: vLLM {KNOWN_FLAGS_VERSION} has no flag "
                              f"--{name}{hint}")
    if name in SWITCHES and not isinstance(value, bool):
        raise CapabilityError(f"extra_args[{key!r}]: --{name} is a switch; give true or false, "
                              f"not {value!r}")
    if name in VALUE_FLAGS and isinstance(value, bool):
        raise CapabilityError(f"extra_args[{key!r}]: --{name} takes a value, not {value}")
    if value is False and f"no-{name}" not in SWITCHES:
        raise CapabilityError(f"extra_args[{key!r}]: vLLM has no --no-{name}; leave it out")


def _one_switch_once(key: str, name: str, value: Any, so_far: list[Setting]) -> None:
    # `--X` and `--no-X` set one switch: the file would read back as one of them only.
    if any(_switch(seen, was) == _switch(name, value) for seen, was in so_far):
        raise CapabilityError(f"extra_args[{key!r}] sets flag --{_switch(name, value)} again")
