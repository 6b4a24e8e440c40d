"""Candidate search: which configurations exist, which fit, and coarse-to-fine ranking.

Owns the grid (every engine plug-in × tp × weight and KV formats × scheduler knobs ×
prefix caching × speculative decoding), pruning (the plug-in's own capability check, then
`memory.plan_memory`), and the staged search: engine/parallelism/formats on a short busy
window, then scheduler knobs, then features, each stage keeping the best few per engine,
and finally the leaders re-simulated on the whole window. Scores come from `scoring.py`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

from core.errors import UsageError
from engines.config import EngineConfig, SpeculativeConfig
from engines.errors import EngineError
from engines.registry import ENGINES
from recommender.catalog.specs import GPU, ModelSpec
from recommender.decision.scoring import Evaluation, Goals, Target, evaluate
from recommender.model.defaults import workload_max_model_len
from recommender.model.memory import SAFE_FRACTION_MAX, plan_memory
from recommender.sim.simulator import SimRequests

SEQ_CAPS: tuple[int | None, ...] = (None, 32, 64, 128, 256, 512)
TOKEN_BUDGETS: tuple[int | None, ...] = (None, 2048, 8192, 16384)
WEIGHT_FORMATS: tuple[tuple[str | None, str], ...] = ((None, "bf16"), ("fp8", "fp8"),
                                                      ("awq", "int4"))
SPECULATIVE = SpeculativeConfig(method="ngram", num_tokens=3)
COARSE_REQUESTS = 2000
KEEP_PER_ENGINE = 2
FINAL_TOP = 6
POLISH_ROUNDS = 3

Progress = Callable[[float, str], None]


@dataclass(slots=True)
class SearchResult:
    """Every full-window evaluation (ranked best first) and what the search did."""

    ranked: list[Evaluation]
    simulated: int
    pruned: dict[str, int] = field(default_factory=dict)  # reason → configs
    speculative_modelled: bool = False
    # Whole-window evaluations by (config JSON, replicas), for counterfactuals to reuse.
    full: dict[tuple[str, int], Evaluation] = field(default_factory=dict)


def max_model_len(requests: SimRequests, model: ModelSpec) -> int:
    """The window's longest request (prompt + output) sized by `workload_max_model_len`."""
    return workload_max_model_len(int(np.max(requests.input_tokens + requests.output_tokens)),
                                  model)


def tp_options(gpus: int, model: ModelSpec) -> list[int]:
    """Divisors of `gpus` that divide the attention heads (the plug-ins check the rest)."""
    return [t for t in range(1, gpus + 1) if gpus % t == 0 and model.num_attention_heads % t == 0]


def layouts(gpus: int, model: ModelSpec) -> list[tuple[int, int, int]]:
    """(tp, dp, ep) of one instance: TP at every tp option; for an MoE model also TEP
    (experts over the TP group) at tp > 1 and DEP (attention DP ranks of one GPU each,
    experts over all of them) at every divisor of `gpus` above 1."""
    out = [(tp, 1, 1) for tp in tp_options(gpus, model)]
    if model.is_moe:
        out += [(tp, 1, tp) for tp in tp_options(gpus, model) if tp > 1]
        out += [(1, g, g) for g in range(2, gpus + 1) if gpus % g == 0]
    return out


def weight_formats(gpu: GPU, model: ModelSpec) -> list[str | None]:
    """None (the checkpoint as it is) plus FP8 / 4-bit where the GPU runs them and the
    checkpoint is unquantized. An engine that cannot quantize into a format on load
    (TensorRT-LLM any, vLLM and SGLang awq) refuses it, in `prune`, when the model has no
    known pre-quantized checkpoint in it (the `served_config` its export would deploy), so
    every kept candidate can be exported."""
    if model.checkpoint_dtype not in ("bf16", "fp16"):
        return [None]
    return [q for q, dtype in WEIGHT_FORMATS if q is None or dtype in gpu.weight_dtypes]


def kv_formats(gpu: GPU) -> list[str]:
    return ["auto", "fp8"] if "fp8" in gpu.kv_cache_dtypes else ["auto"]


def prune(config: EngineConfig, target: Target) -> str | None:
    """Why `config` cannot run here (plug-in check, then memory), or None when it can."""
    try:
        ENGINES[config.engine].check(config, target.hardware, target.model_facts)
    except EngineError as exc:
        return f"{config.engine}: {exc}"
    plan = plan_memory(config, target.gpu, target.model)
    blocking = [r for r in plan.risks if r.blocking]
    return f"memory: {blocking[0].code}" if blocking else None


def base_grid(target: Target, model_len: int) -> list[EngineConfig]:
    """Every engine × parallel layout (TP, and TEP / DEP for MoE) × weight format × KV
    format, engine defaults elsewhere."""
    return [
        EngineConfig(engine=kind, model=target.model.name, tp=tp, dp=dp, ep=ep,  # type: ignore[arg-type]
                     weight_quantization=quant, kv_cache_dtype=kv,  # type: ignore[arg-type]
                     max_model_len=model_len, gpu_memory_fraction=safe_fraction(kind),
                     chunked_prefill=chunked)
        for kind in ENGINES
        for chunked in _chunked_options(kind)
        for tp, dp, ep in layouts(target.gpus, target.model)
        for quant in weight_formats(target.gpu, target.model)
        for kv in kv_formats(target.gpu)
    ]


def _chunked_options(kind: str) -> list[bool | None]:
    """The default, plus chunked prefill on where the engine leaves it off (without it a
    long prompt must fit one step's budget, which can rule the engine out)."""
    return [None] if ENGINES[kind].defaults.chunked_prefill else [None, True]


def safe_fraction(kind: str) -> float | None:
    """SAFE_FRACTION_MAX where the engine's default memory fraction is above the safe band
    (DESIGN §4.9: 0.85-0.90; higher risks OOM under bursts), else None (the default)."""
    default = ENGINES[kind].defaults.gpu_memory_fraction
    return SAFE_FRACTION_MAX if default is not None and default > SAFE_FRACTION_MAX else None


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


class _Runner:
    """Simulates configs, caching by (config, window) and counting simulations."""

    def __init__(self, target: Target, goals: Goals, progress: Progress | None) -> None:
        self.target, self.goals, self.progress = target, goals, progress
        self.simulated = 0
        self.pruned: dict[str, int] = {}
        self._cache: dict[tuple[str, str], Evaluation | None] = {}

    def run(self, pairs: Iterable[tuple[EngineConfig, int]], requests: SimRequests,
            window: str) -> list[Evaluation]:
        """Evaluate each (config, replicas) on `window` ('coarse' or 'full')."""
        out = []
        for config, replicas in pairs:
            key = (config.model_dump_json() + f"|{replicas}", window)
            if key not in self._cache:
                self._cache[key] = self._one(config, requests, replicas)
            if (evaluation := self._cache[key]) is not None:
                out.append(evaluation)
        return out

    def _one(self, config: EngineConfig, requests: SimRequests, replicas: int
             ) -> Evaluation | None:
        reason = prune(config, self.target)
        if reason is not None:
            self.pruned[reason] = self.pruned.get(reason, 0) + 1
            return None
        self.simulated += 1
        try:
            return evaluate(config, requests, replicas, self.target, self.goals)
        except UsageError as exc:
            why = f"simulation: {str(exc)[:80]}"
            self.pruned[why] = self.pruned.get(why, 0) + 1
            return None


def _best_per_engine(evals: list[Evaluation], k: int) -> list[Evaluation]:
    ranked = sorted(evals, key=lambda e: -e.score)
    kept: list[Evaluation] = []
    for kind in ENGINES:
        kept += [e for e in ranked if e.config.engine == kind][:k]
    return kept


def search(requests: SimRequests, coarse: SimRequests, target: Target, goals: Goals, *,
           quick: bool = False, seeds: Iterable[EngineConfig] = (),
           progress: Progress | None = None) -> SearchResult:
    """Staged search; `coarse` is the short busy window the first stages rank on.

    quick: formats and parallelism only (no scheduler or feature stage), fewer finalists,
    and only the overall best polished — for what-if questions (more GPUs, another GPU,
    one routed segment). seeds: configs that go straight to the final stage (e.g. the
    single deployment's pick when a routed part is searched).
    """
    model_len = max_model_len(requests, target.model)
    runner = _Runner(target, goals, progress)
    spec = not quick and simulator_models_speculative(target, model_len)
    hashes = requests.block_hashes is not None
    _tell(progress, 0.05, "formats and parallelism")
    base = [(c, r) for c in base_grid(target, model_len)
            for r in replica_choices(c, target.gpus, goals)]
    stage = runner.run(base, coarse, "coarse")
    if not quick:
        _tell(progress, 0.25, "scheduler knobs")
        leaders = _best_per_engine(stage, KEEP_PER_ENGINE)
        stage += runner.run(((v, e.replicas) for e in leaders
                             for v in scheduler_variants(e.config)), coarse, "coarse")
        _tell(progress, 0.55, "prefix caching and speculative decoding")
        leaders = _best_per_engine(stage, KEEP_PER_ENGINE)
        stage += runner.run(((v, e.replicas) for e in leaders for v in feature_variants(
            e.config, hashes=hashes, speculative=spec)), coarse, "coarse")
    _tell(progress, 0.7, "finalists on the whole window")
    top = sorted(stage, key=lambda e: -e.score)[: (3 if quick else FINAL_TOP)]
    finalists = {(e.config.model_dump_json(), e.replicas): (e.config, e.replicas)
                 for e in [*top, *_best_per_engine(stage, 1 if quick else KEEP_PER_ENGINE)]}
    pairs = [*finalists.values(),
             *((c, r) for c in seeds for r in replica_choices(c, target.gpus, goals))]
    final = runner.run(pairs, requests, "full")
    _tell(progress, 0.85, "polishing on the whole window")
    leaders = sorted(final, key=lambda e: -e.score)[:1] if quick else _best_per_engine(final, 1)
    for leader in leaders:
        final += polish(leader, requests, runner, hashes=hashes, spec=spec)
    ranked = sorted({id(e): e for e in final}.values(), key=lambda e: -e.score)
    full = {(e.config.model_dump_json(), e.replicas): e for e in ranked}
    return SearchResult(ranked, runner.simulated, runner.pruned, spec, full)


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


def polish(best: Evaluation, requests: SimRequests, runner: _Runner, *, hashes: bool,
           spec: bool) -> list[Evaluation]:
    """Hill-climb one knob at a time on the whole window (POLISH_ROUNDS at most); the
    score's knob cost (`scoring.KNOB_COST`) lets a move back to a default win a near tie."""
    seen: list[Evaluation] = []
    for _ in range(POLISH_ROUNDS):
        pairs = [(c, best.replicas)
                 for c, _ in one_knob_variants(best.config, hashes=hashes, spec=spec)]
        if runner.goals.objective == "cost" and best.replicas > 1:
            pairs.append((best.config, best.replicas - 1))  # one GPU group fewer
        evals = runner.run(pairs, requests, "full")
        seen += evals
        better = max(evals, key=lambda e: e.score, default=None)
        if better is None or better.score <= best.score:
            break
        best = better
    return seen


def replica_choices(config: EngineConfig, gpus: int, goals: Goals) -> list[int]:
    """Replicas to try: all the GPUs; the cost objective also tries 1, 2, 4, ... fewer
    (polishing then steps down one at a time)."""
    most = max(1, gpus // config.gpus_per_instance)
    if goals.objective != "cost":
        return [most]
    return sorted({most, *(r for r in (1, 2, 4, 8, 16, 32) if r < most)})


def _tell(progress: Progress | None, fraction: float, what: str) -> None:
    if progress is not None:
        progress(fraction, what)
