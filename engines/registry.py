"""The engine plug-ins keyed by kind: `ENGINES["vllm"]` renders and checks vLLM configs.

Generic code looks plug-ins up here and never branches on an engine's name.
"""

from __future__ import annotations

from engines.base import EnginePlugin
from engines.errors import UnknownEngineError
from engines.sglang import plugin as sglang
from engines.trtllm import plugin as trtllm
from engines.vllm import plugin as vllm

ENGINES: dict[str, EnginePlugin] = {
    vllm.PLUGIN.kind: vllm.PLUGIN,
    sglang.PLUGIN.kind: sglang.PLUGIN,
    trtllm.PLUGIN.kind: trtllm.PLUGIN,
}


def get_engine(kind: str) -> EnginePlugin:
    """The plug-in registered under `kind`.

    Raises:
        UnknownEngineError: no such kind (the message lists the registered kinds).
    """
    try:
        return ENGINES[kind]
    except KeyError:
        known = ", ".join(sorted(ENGINES))
        raise UnknownEngineError(f"unknown engine {kind!r}; known engines: {known}") from None
