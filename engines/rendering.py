"""What the plug-ins share when rendering a config into an engine's settings: the (flag name,
value) pair, an engine's spelling of a value looked up in its table (or refused with its
reason), `extra_args` renamed and checked for collisions, block YAML, and the readiness probe
of an OpenAI-compatible server.

Engine-neutral by construction: callers pass their own tables, renaming and wording.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import yaml

from engines.base import ReadinessProbe
from engines.config import EngineConfig
from engines.errors import CapabilityError

Setting = tuple[str, str | int | float | bool]
_T = TypeVar("_T")


def lookup(field: str, value: str, table: Mapping[str, _T], refused: Mapping[str, str]) -> _T:
    """`table[value]`, or CapabilityError with the engine's reason from `refused`."""
    if value in refused:
        raise CapabilityError(f"{field}={value}: {refused[value]}")
    return table[value]


def openai_readiness(name: str) -> ReadinessProbe:
    """`/health`, `/v1/models`, then a one-token `/v1/completions` for served name `name`."""
    return ReadinessProbe(
        health_path="/health",
        models_path="/v1/models",
        served_model_name=name,
        completion_path="/v1/completions",
        completion_body={"model": name, "prompt": "Hello", "max_tokens": 1},
    )


def extra_settings(
    config: EngineConfig,
    reserved: set[str] | frozenset[str],
    rename: Callable[[str], str],
    also_check: Callable[[str, str, Any, list[Setting]], None] | None = None,
) -> list[Setting]:
    """`config.extra_args` as (flag name, value), renamed to the engine's spelling.

    `also_check(key, name, value, so_far)` adds an engine's own refusals per item.

    Raises:
        CapabilityError: an extra arg naming a flag in `reserved`, two extra args renamed to
            one flag (`a_b` and `a-b`: the config file would keep only one of them), or what
            `also_check` refuses.
    """
    out: list[Setting] = []
    for key, value in config.extra_args.items():
        name = rename(key)
        if name in reserved:
            raise CapabilityError(
                f"extra_args[{key!r}] collides with a setting EngineConfig renders itself"
            )
        if any(seen == name for seen, _ in out):
            raise CapabilityError(f"extra_args[{key!r}] repeats flag --{name}")
        if also_check is not None:
            also_check(key, name, value, out)
        out.append((name, value))
    return out


def dump_yaml(data: Mapping[str, Any]) -> str:
    """Block YAML in insertion order; a huge width keeps each value on one line."""
    # Without a stream safe_dump returns the text; str() says so to the type checker, which
    # sees PyYAML as untyped.
    return str(yaml.safe_dump(dict(data), sort_keys=False, allow_unicode=True, width=10**6))
