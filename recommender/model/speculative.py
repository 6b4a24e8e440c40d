"""Speculative decoding's figures: acceptance, expected tokens per step, and the draft's shape.

Owns the per-method defaults (acceptance rate with its band and sources, what the draft
costs) and `draft_for`, which turns `EngineConfig.speculative` into a `SpecDraft` that
the step formula (`perf`) prices with the same
roofline as the target. No timing here and no `if` on batch size: the gain at small batch and
the loss at large batch come out of the roofline (verification of batch×(k+1) tokens turns
compute-bound), not from rules.

Model: a decode step of a speculating sequence drafts k tokens (k sequential draft forwards
over the batch), then the target verifies all k+1 positions in one forward. With a per-token
acceptance rate a (independent, as in Leviathan et al. 2023, "Fast Inference from Transformers
via Speculative Decoding", eq. 1), the tokens emitted per step are
E = (1 − a^(k+1)) / (1 − a) (k+1 when a = 1). Tree drafts (SGLang EAGLE topk > 1) are not
modelled: a chain of k tokens is.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import Field, ValidationError

from core.errors import UsageError
from core.records import Record
from engines.config import SpeculativeConfig
from recommender.catalog.specs import ModelSpec


class AcceptanceDefault(Record):
    """A method's default per-token acceptance a, its band, and where the figures come from.

    Published figures are mostly mean acceptance lengths E (tokens per verification step) at
    a draft length k; a is the rate whose (1 − a^(k+1)) / (1 − a) equals E at that k
    (`profiler.analysis.ngram_acceptance.solve_acceptance`). `sources` names each figure, its
    workload and the a it converts to; a figure not re-checked in a retrieved source says so.
    """

    acceptance: float = Field(ge=0, le=1, description="default per-token acceptance a")
    low: float = Field(ge=0, le=1, description="lowest a among the figures found")
    high: float = Field(ge=0, le=1, description="highest a among the figures found")
    sources: tuple[str, ...]


# Chat-like load (MT-Bench / ShareGPT) where a figure was found. Spec-Bench's (Xia et al.
# 2024) prompt-lookup figures on MT-Bench and the EAGLE/EAGLE-3 papers' own tables were
# searched for and not found in the sources available to this change: not used.
ACCEPTANCE_DEFAULTS: dict[str, AcceptanceDefault] = {
    # ngram: the one open-prose figure is the default; the vLLM log's figures count only
    # steps that found a match (vLLM's "mean acceptance length"), which overstates open
    # chat, so they bound the band from above. A trace with conversation text replaces this
    # with its own replay (Profile.format.ngram_acceptance).
    "ngram": AcceptanceDefault(
        acceptance=0.255, low=0.255, high=0.772,
        sources=(
            "github.com/kekzl/imp PR #1460: ordinary prose, n-gram at its defaults, 11.2 % of "
            "drafted tokens accepted -> E = 1 + 3 x 0.112 at k = 3 (k not stated) -> a = 0.255",
            "github.com/vllm-project/vllm issue #19254: Qwen3-32B-FP8, k = 3, vLLM 0.9.0.1, "
            "workload not stated: mean acceptance length 2.16-2.83 over drafting steps "
            "-> a = 0.595-0.772",
        )),
    "eagle": AcceptanceDefault(
        acceptance=0.75, low=0.7, high=0.8,
        sources=("EAGLE (Li et al. 2024): acceptance rates 0.7-0.8 for chain drafts, as "
                 "cited before this change; not re-checked in a retrieved source",)),
    "eagle3": AcceptanceDefault(
        acceptance=0.8, low=0.793, high=0.912,
        sources=(
            "huggingface.co/AQ-MedAI/Qwen3.5-397B-A17B-eagle3: MT-Bench average acceptance "
            "length 3.03 (bs 1; chain of 3 assumed, as on the same author's GLM-5.1-eagle3 "
            "card) -> a = 0.817",
            "huggingface.co/xinjiahui/Qwen3-Coder-30B-A3B-Instruct-FP8-EAGLE3: mtbench "
            "accept_length 3.50 (bs 1; k = 3 assumed) -> a = 0.912",
            "github.com/ggml-org/llama.cpp PR #24536: EAGLE-3, k = 3, mean acceptance length "
            "2.92 (one prompt) -> a = 0.793",
        )),
    "draft_model": AcceptanceDefault(
        acceptance=0.7, low=0.5, high=0.9,
        sources=("Leviathan et al. 2023: a = 0.5-0.9 across model pairs, as cited before "
                 "this change; no chat figure found in a retrieved source",)),
    "mtp": AcceptanceDefault(
        acceptance=0.85, low=0.85, high=0.9,
        sources=(
            "DeepSeek-V3 report (2024, 5.4.3): 85-90 % acceptance of the 2nd token, as cited "
            "before this change; not re-checked in a retrieved source",
            "huggingface.co/AQ-MedAI/Qwen3.5-397B-A17B-eagle3: MTP on MT-Bench, average "
            "acceptance length 3.28 (k = 3 assumed) -> a = 0.869",
        )),
}
# Per-token acceptance rate by method: the default when the caller gives none.
DEFAULT_ACCEPTANCE: dict[str, float] = {m: d.acceptance for m, d in ACCEPTANCE_DEFAULTS.items()}
# EAGLE-3 drafts over a reduced vocabulary (32 k tokens in the paper) instead of the target's.
EAGLE3_DRAFT_VOCAB = 32_000
# ngram proposals run on the CPU (suffix matching over the context): assumed 10 µs per
# sequence per step, independent of k (one match yields up to k tokens).
NGRAM_CPU_S_PER_SEQ = 10e-6
DRAFT_BYTES_PER_PARAM = 2.0  # drafts and draft heads ship in bf16


@dataclass(slots=True, frozen=True)
class SpecDraft:
    """What one speculative decode step costs beyond the target's own forward.

    Per draft forward (k of them per step): 2·draft_params FLOPs per sequence, the draft's
    weights read once, its KV read per context token; plus `overhead_share` of the target's
    per-step framework overhead (launches of a smaller graph) and `cpu_s_per_seq` (ngram).
    """

    method: str
    k: int
    acceptance: float
    draft_params: float  # FLOP-bearing parameters per draft token (not divided by TP)
    draft_weights_bytes: float  # whole draft, all GPUs (perf divides by TP)
    draft_kv_bytes_per_token: float  # draft KV read per context token, all GPUs
    overhead_share: float
    cpu_s_per_seq: float

    @property
    def tokens_per_step(self) -> float:
        """Expected tokens a sequence emits per decode step, (1 − a^(k+1)) / (1 − a)."""
        return expected_tokens(self.acceptance, self.k)


def speculative_config(
    method: str, num_tokens: int, draft_model: str | None = None
) -> SpeculativeConfig:
    """A validated SpeculativeConfig; bad combinations become one UsageError line.

    Raises:
        UsageError: unknown method, num_tokens < 1, or a draft_model missing / not allowed.
    """
    try:
        return SpeculativeConfig(method=method, num_tokens=num_tokens,  # type: ignore[arg-type]
                                 draft_model=draft_model)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise UsageError(f"speculative decoding: {first['msg']}") from exc


def expected_tokens(acceptance: float, k: int) -> float:
    """E = (1 − a^(k+1)) / (1 − a): accepted draft prefix plus the target's own token."""
    if not 0.0 <= acceptance <= 1.0 or k < 0:
        raise UsageError(f"acceptance must be in [0, 1] and k >= 0, got {acceptance}, {k}")
    if acceptance == 1.0:
        return float(k + 1)
    return (1.0 - acceptance ** (k + 1)) / (1.0 - acceptance)


def _layer_params(model: ModelSpec) -> tuple[float, float]:
    """(active, stored) parameters of one decoder layer, embeddings and lm_head excluded."""
    embed = model.vocab_size * model.hidden_size * (1 if model.tie_word_embeddings else 2)
    active = max(model.active_params_b * 1e9 - embed, 0.0) / model.num_layers
    stored = max(model.total_params_b * 1e9 - embed, 0.0) / model.num_layers
    return active, stored


def draft_for(
    spec: SpeculativeConfig, target: ModelSpec, acceptance: float | None = None
) -> SpecDraft:
    """The draft's shape for `spec` on `target`.

    eagle/eagle3/mtp: one decoder layer of the target's shape plus an lm_head (the target's
    vocabulary; EAGLE-3's reduced 32 k vocabulary), KV of one layer. draft_model: the catalog
    model named by `spec.draft_model`. ngram: no GPU work, a CPU lookup per sequence.

    Raises:
        UsageError: acceptance outside [0, 1], or a draft_model not in the catalog.
    """
    a = DEFAULT_ACCEPTANCE[spec.method] if acceptance is None else acceptance
    expected_tokens(a, spec.num_tokens)  # validates a and k
    if spec.method == "ngram":
        return SpecDraft("ngram", spec.num_tokens, a, 0.0, 0.0, 0.0, 0.0, NGRAM_CPU_S_PER_SEQ)
    if spec.method == "draft_model":
        from recommender.catalog.lookup import get_model

        draft = get_model(spec.draft_model or "")
        head = draft.vocab_size * draft.hidden_size
        return SpecDraft(
            "draft_model", spec.num_tokens, a,
            draft_params=draft.active_params_b * 1e9 - (head if not draft.tie_word_embeddings
                                                         else 0.0),
            draft_weights_bytes=draft.total_params_b * 1e9 * DRAFT_BYTES_PER_PARAM,
            draft_kv_bytes_per_token=draft.kv_bytes_per_token(2),
            overhead_share=min(1.0, draft.num_layers / target.num_layers),
            cpu_s_per_seq=0.0,
        )
    active, stored = _layer_params(target)
    vocab = EAGLE3_DRAFT_VOCAB if spec.method == "eagle3" else target.vocab_size
    head = vocab * target.hidden_size
    return SpecDraft(
        spec.method, spec.num_tokens, a,
        draft_params=active + head,
        draft_weights_bytes=(stored + head) * DRAFT_BYTES_PER_PARAM,
        draft_kv_bytes_per_token=target.kv_bytes_per_token(2) / target.num_layers,
        overhead_share=max(0.1, 1.0 / target.num_layers),
        cpu_s_per_seq=0.0,
    )


def draft_weights_bytes(spec: SpeculativeConfig | None, target: ModelSpec) -> float:
    """Bytes the draft's weights occupy over the whole group (0 without speculation)."""
    if spec is None:
        return 0.0
    return draft_for(spec, target).draft_weights_bytes
