"""The tests' shorthand for an `EngineConfig` of a catalog model (precision names as the CLI
takes them), and for the steady-state figures of one fixed-length load on it."""

from __future__ import annotations

from core.load import LoadSpec
from engines.config import EngineConfig, SpeculativeConfig
from recommender.catalog.specs import GPU, ModelSpec
from recommender.model.params import EngineParams, PerfParams, load_params
from recommender.model.perf import weight_quantization
from recommender.model.resolve import resolve
from recommender.model.steady import Prediction, steady_state


def deploy(engine: str, model: ModelSpec, *, tp: int = 1, precision: str = "bf16",
           kv_cache_dtype: str = "auto", max_num_seqs: int | None = None,
           max_batched_tokens: int | None = None,
           speculative: SpeculativeConfig | None = None) -> EngineConfig:
    return EngineConfig(engine=engine, model=model.name, tp=tp,  # type: ignore[arg-type]
                        weight_quantization=weight_quantization(precision),
                        kv_cache_dtype=kv_cache_dtype,  # type: ignore[arg-type]
                        max_num_seqs=max_num_seqs, max_batched_tokens=max_batched_tokens,
                        speculative=speculative)


def steady(config: EngineConfig, model: ModelSpec, gpu: GPU, load: LoadSpec, *,
           gpus: int | None = None, params: PerfParams | EngineParams | None = None,
           acceptance: float | None = None) -> Prediction:
    """`recommender.model.steady.steady_state` of `config` under the fixed-length `load` on `gpus`
    GPUs (default one instance; a whole number of instances), resolved for the load's
    longest request with `params` (default fit.json's), as `recommender.sim.predict` resolves it."""
    per = config.gpus_per_instance
    gpus = gpus or per
    assert gpus % per == 0, (gpus, per)
    longest = load.lengths.input_tokens + load.lengths.output_tokens
    res = resolve(config, gpu, model, params if params is not None else load_params(),
                  longest_tokens=longest, acceptance=acceptance)
    return steady_state(res, load, replicas=gpus // per * config.dp)
