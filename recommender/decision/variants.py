"""The variants of a ranked config that the later search stages try: scheduler knobs
(max_num_seqs × token budget × chunked prefill), features (prefix caching × speculative
decoding, the latter only where the simulator models it) and the one-knob moves polishing
climbs by. The base grid they start from is `grid`'s.
"""

from __future__ import annotations

import math

import numpy as np

from core.errors import UsageError
from engines.config import EngineConfig, SpeculativeConfig
from engines.registry import ENGINES
from recommender.decision.goals import Target
from recommender.sim.simulator import SimRequests

SEQ_CAPS: tuple[int | None, ...] = (None, 32, 64, 128, 256, 512)
TOKEN_BUDGETS: tuple[int | None, ...] = (None, 2048, 8192, 16384)
SPECULATIVE = SpeculativeConfig(method="ngram", num_tokens=3)


def scheduler_variants(config: EngineConfig) -> list[EngineConfig]:
    """The config with each max_num_seqs × token budget × chunked-prefill setting."""
    return [
        config.model_copy(update={"max_num_seqs": seqs, "max_batched_tokens": budget,
                                  "chunked_prefill": chunked})
        for seqs in SEQ_CAPS
        for budget in TOKEN_BUDGETS
        for chunked in _toggles(config.chunked_prefill,
                                ENGINES[config.engine].defaults.chunked_prefill)
    ]


def _toggles(value: bool | None, default: bool) -> list[bool | None]:
    """The current setting, the engine default (None) and the explicit non-default."""
    return list(dict.fromkeys([value, None, not default]))


def feature_variants(config: EngineConfig, *, hashes: bool, speculative: bool
                     ) -> list[EngineConfig]:
    """Prefix caching on/off (only with block hashes: otherwise it changes nothing we can
    simulate) × speculative decoding none/ngram (only when the simulator models it)."""
    default = ENGINES[config.engine].defaults.prefix_caching
    prefix: list[bool | None] = [None, not default] if hashes else [None]
    spec: list[SpeculativeConfig | None] = [None, SPECULATIVE] if speculative else [None]
    return [config.model_copy(update={"prefix_caching": p, "speculative": s})
            for p in prefix for s in spec]


def simulator_models_speculative(target: Target, model_len: int) -> bool:
    """Whether the simulator's figures change with speculative decoding (a 50-request probe):
    the search only offers what the simulator can predict."""
    from recommender.sim.simulator import SimOptions, simulate

    n = 50
    probe = SimRequests(np.zeros(n), np.full(n, 256), np.full(n, 64))
    base = EngineConfig(engine=next(iter(ENGINES)), model=target.model.name,  # type: ignore[arg-type]
                        max_model_len=model_len)
    try:
        plain, spec = (
            simulate(probe, c, target.gpu, target.model, params=target.params,
                     options=SimOptions(arrival="offline")).summary.e2e_s.mean
            for c in (base, base.model_copy(update={"speculative": SPECULATIVE}))
        )
    except UsageError:
        return False
    if plain is None or spec is None:
        return False
    return not math.isclose(plain, spec, rel_tol=1e-9)


def one_knob_variants(config: EngineConfig, *, hashes: bool, spec: bool
                      ) -> list[tuple[EngineConfig, bool]]:
    """(config with one knob moved, whether the move is back to the engine default): back to
    the default, toggled, or to a neighbouring value (the coarse window's ranking does not
    always carry over to the whole window)."""
    moves: list[tuple[dict[str, object], bool]] = []
    seqs = config.max_num_seqs
    if seqs:
        moves += [({"max_num_seqs": None}, True), ({"max_num_seqs": seqs * 2}, False),
                  ({"max_num_seqs": max(seqs // 2, 1)}, False)]
    else:
        moves.append(({"max_num_seqs": 256}, False))
    moves += [({"max_batched_tokens": v}, v is None) for v in TOKEN_BUDGETS
              if v != config.max_batched_tokens]
    chunked_default = ENGINES[config.engine].defaults.chunked_prefill
    moves.append(({"chunked_prefill": None if config.chunked_prefill is not None
                   else not chunked_default}, config.chunked_prefill is not None))
    if hashes:
        default = ENGINES[config.engine].defaults.prefix_caching
        moves.append(({"prefix_caching": None if config.prefix_caching is not None
                       else not default}, config.prefix_caching is not None))
    if spec:
        moves.append(({"speculative": None if config.speculative else SPECULATIVE},
                      config.speculative is not None))
    if config.kv_cache_dtype != "auto":
        moves.append(({"kv_cache_dtype": "auto"}, True))
    if config.weight_quantization is not None:
        moves.append(({"weight_quantization": None}, True))
    return [(config.model_copy(update=u), simpler) for u, simpler in moves]
