"""Tests for recommender/model/memory.py and footprint.py: weights, reserve, KV capacity and
OOM-risk flags.

Expected figures are written out from the models' published shapes (config.json) and the
reserve constants the module documents (1.5 GiB fixed + 0.5 GiB NCCL when tp×pp > 1, plus
the activations of max_batched_tokens: 32 B × hidden for Llama-3.1-8B at tp 1), not
re-derived through the module.
"""

from __future__ import annotations

import math

import pytest

from core.errors import UsageError
from engines.config import EngineConfig, SpeculativeConfig
from engines.registry import ENGINES
from recommender.catalog.lookup import get_gpu, get_model
from recommender.model.memory import MemoryPlan, max_concurrent_sequences, plan_memory

GIB = 2**30
H100_BYTES = 80e9
# Llama-3.1-8B: 32 layers, hidden 4096, 8 KV heads × 128, vocab 128256, 8.03B params.
LLAMA8_PARAMS = 8.03e9
LLAMA8_VOCAB_MATRIX = 128_256 * 4_096  # 525,336,576 params (embedding; lm_head the same)
LLAMA8_KV_PER_TOKEN = 2 * 32 * 8 * 128 * 2  # K and V × layers × kv heads × head_dim × bf16
# Reserve with vLLM's unset max_batched_tokens → the 8192 fallback: 8192 × 4096 × 32 B = 1 GiB.
RESERVE_TP1 = 1.5 * GIB + 8_192 * 4_096 * 32  # 2,684,354,560 B


def _plan(engine: str = "vllm", model: str = "llama-3.1-8b", gpu: str = "H100-SXM", **kw):
    spec = get_model(model)
    config = EngineConfig(engine=engine, model=spec.name, **kw)
    return plan_memory(config, get_gpu(gpu), spec)


def _codes(plan: MemoryPlan) -> set[str]:
    return {risk.code for risk in plan.risks}


# ---------------------------------------------------------------------------------------------
# Llama-3.1-8B on one H100


def test_llama8b_bf16_weights_kv_and_capacity() -> None:
    plan = _plan(gpu_memory_fraction=0.9)
    assert plan.weights_bytes_total == pytest.approx(LLAMA8_PARAMS * 2)  # 16.06 GB
    assert plan.weights_bytes_per_gpu == pytest.approx(16.06e9)
    assert plan.kv_bytes_per_token_per_gpu == LLAMA8_KV_PER_TOKEN == 131_072
    assert plan.reserve_bytes_per_gpu == RESERVE_TP1
    kv_bytes = 0.9 * H100_BYTES - 16.06e9 - RESERVE_TP1  # 53,255,645,440 B ≈ 49.6 GiB
    assert plan.kv_cache_bytes_per_gpu == pytest.approx(kv_bytes)
    blocks = math.floor(kv_bytes / (131_072 * 16))  # 25,394 blocks of 16 tokens
    assert plan.kv_capacity_blocks == blocks == 25_394
    assert plan.kv_capacity_tokens == 406_304
    assert plan.kv_capacity_tokens == pytest.approx(kv_bytes / 131_072, abs=16)
    assert plan.fits and plan.risks == []
    assert plan.headroom_fraction == pytest.approx(0.10)


def test_fp8_kv_doubles_capacity() -> None:
    bf16 = _plan(gpu_memory_fraction=0.9)
    fp8 = _plan(gpu_memory_fraction=0.9, kv_cache_dtype="fp8")
    assert fp8.kv_bytes_per_token_per_gpu == 65_536
    assert fp8.kv_capacity_blocks == math.floor(53_255_645_440 / (65_536 * 16))  # 50,788
    assert abs(fp8.kv_capacity_blocks - 2 * bf16.kv_capacity_blocks) <= 1


def test_a_checkpoint_declaring_fp8_kv_gets_it_under_auto_where_the_release_serves_it():
    # A ModelOpt checkpoint's kv_cache_quant_algo FP8: vLLM >= 0.13 (PR #29980), SGLang and
    # TRT-LLM cache in fp8 when the dtype is left at auto; vLLM 0.11 cached bf16.
    spec = get_model("llama-3.1-8b").model_copy(update={"checkpoint_kv_dtype": "fp8"})
    config = EngineConfig(engine="vllm", model=spec.name, gpu_memory_fraction=0.9)
    h100 = get_gpu("H100-SXM")
    for version, per_token in (("0.17.0", 65_536), (None, 65_536), ("0.11.0", 131_072)):
        plan = plan_memory(config, h100, spec, engine_version=version)
        assert plan.kv_bytes_per_token_per_gpu == per_token, version
    served = plan_memory(config, h100, spec, engine_version="0.17.0")
    assert any("checkpoint declares it" in note for note in served.notes)
    told = plan_memory(config.model_copy(update={"kv_cache_dtype": "bf16"}), h100, spec)
    assert told.kv_bytes_per_token_per_gpu == 131_072  # an explicit dtype wins
    for engine in ("sglang", "trtllm"):
        plan = plan_memory(EngineConfig(engine=engine, model=spec.name), h100, spec,
                           engine_version="0.1.0")
        assert plan.kv_bytes_per_token_per_gpu == 65_536, engine


def test_fp4_kv_counts_its_scales() -> None:
    plan = _plan(gpu_memory_fraction=0.9, kv_cache_dtype="fp4")
    assert plan.kv_bytes_per_token_per_gpu == pytest.approx(2 * 32 * 8 * 128 * (0.5 + 1 / 16))


@pytest.mark.parametrize(
    ("quant", "body_bytes_per_param"),
    [
        ("fp8", 1.0),
        ("int8", 1.0),
        ("awq", 0.5 + 2.5 / 128),  # group 128: fp16 scale + 4-bit zero point per group
        ("gptq", 0.5 + 2.5 / 128),
        ("nvfp4", 0.5 + 1 / 16),  # one fp8 scale per 16
        ("mxfp4", 0.5 + 1 / 32),  # one E8M0 scale per 32
    ],
)
def test_quantized_weights_keep_embeddings_in_bf16(quant: str, body_bytes_per_param: float):
    plan = _plan(gpu_memory_fraction=0.9, weight_quantization=quant)
    vocab = 2 * LLAMA8_VOCAB_MATRIX  # embedding + untied lm_head, 1,050,673,152 params
    expected = (LLAMA8_PARAMS - vocab) * body_bytes_per_param + vocab * 2
    assert plan.weights_bytes_total == pytest.approx(expected)
    assert plan.weights_format == quant


def test_quantization_none_means_checkpoint_dtype() -> None:
    assert _plan(weight_quantization="none").weights_bytes_total == pytest.approx(16.06e9)


def test_engine_default_fraction_is_used_and_flagged() -> None:
    plan = _plan()  # vLLM's gpu-memory-utilization default: 0.92 of total memory at writing
    default = ENGINES["vllm"].defaults.gpu_memory_fraction
    assert plan.fraction_source == "engine_default"
    assert plan.gpu_memory_fraction == default
    assert ("fraction_above_safe_band" in _codes(plan)) == (default is not None and default > 0.9)
    assert plan.fits  # a warning at most, never a blocker


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_unset_engine_default_falls_back_to_0_9(engine: str, monkeypatch) -> None:
    plugin = ENGINES[engine]
    unset = plugin.defaults.model_copy(update={"gpu_memory_fraction": None})
    monkeypatch.setattr(plugin, "defaults", unset)  # a plug-in that states no fraction
    plan = _plan(engine)
    assert plan.fraction_source == "fallback" and plan.gpu_memory_fraction == 0.9


def test_sglang_states_no_default_fraction_and_gets_the_fallback() -> None:
    # SGLang derives mem-fraction-static from the memory it reserves on each GPU at start-up
    # (its docs quote about 0.9), so the plug-in leaves it unset. A plug-in that starts stating
    # one fails here: check the fallback's users (memory plans, exports) against it.
    assert ENGINES["sglang"].defaults.gpu_memory_fraction is None
    plan = _plan("sglang")
    assert plan.fraction_source == "fallback" and plan.gpu_memory_fraction == 0.9


# ---------------------------------------------------------------------------------------------
# Fraction semantics differ by engine


def test_sglang_static_pool_holds_weights_and_kv_only() -> None:
    plan = _plan("sglang", gpu_memory_fraction=0.9)
    assert plan.fraction_semantics == "static_pool"
    assert plan.kv_cache_bytes_per_gpu == pytest.approx(0.9 * H100_BYTES - 16.06e9)
    assert plan.headroom_bytes_per_gpu == pytest.approx(0.1 * H100_BYTES - RESERVE_TP1)


def test_trtllm_fraction_is_of_free_memory_after_weights() -> None:
    plan = _plan("trtllm", gpu_memory_fraction=0.9)
    free = H100_BYTES - 16.06e9 - RESERVE_TP1
    assert plan.fraction_semantics == "free_after_weights"
    assert plan.kv_cache_bytes_per_gpu == pytest.approx(0.9 * free)
    assert plan.headroom_bytes_per_gpu == pytest.approx(0.1 * free)


# ---------------------------------------------------------------------------------------------
# Llama-3.1-70B: one GPU is not enough, four are


def test_llama70b_bf16_does_not_fit_one_h100() -> None:
    plan = _plan(model="llama-3.1-70b", gpu_memory_fraction=0.9)
    assert plan.weights_bytes_per_gpu == pytest.approx(70.6e9 * 2)  # 141.2 GB
    assert not plan.fits
    assert "weights_exceed_memory" in _codes(plan)
    assert plan.kv_capacity_tokens == 0 and plan.kv_cache_bytes_per_gpu == 0


def test_llama70b_tp4_fits_with_a_quarter_of_the_weights() -> None:
    plan = _plan(model="llama-3.1-70b", gpu_memory_fraction=0.9, tp=4)
    assert plan.weights_bytes_per_gpu == pytest.approx(141.2e9 / 4)  # 35.3 GB
    kv_per_gpu_token = 2 * 80 * (8 // 4) * 128 * 2  # 2 of 8 KV heads per GPU: 81,920 B
    assert plan.kv_bytes_per_token_per_gpu == kv_per_gpu_token
    assert plan.kv_replication_factor == 1
    # Reserve: 1.5 GiB fixed + 0.5 GiB NCCL + activations of the 8192-token budget in bf16:
    # 4 hidden-wide tensors whole (hidden 8192) and, over tp 4, Q/K/V (64 + 2 x 8 heads of
    # 128) and the MLP's gate, up and product (3 x 28672).
    activation = 8192 * 2 * (4 * 8192 + (64 * 128 + 2 * 8 * 128 + 3 * 28672) / 4)  # 0.87 GiB
    assert plan.activation_reserve_bytes_per_gpu == activation
    assert plan.reserve_bytes_per_gpu == 2 * GIB + activation
    kv_bytes = 0.9 * H100_BYTES - 35.3e9 - 2 * GIB - activation
    assert plan.kv_capacity_blocks == math.floor(kv_bytes / (kv_per_gpu_token * 16))
    assert plan.kv_cache_bytes_total == pytest.approx(4 * kv_bytes)
    assert plan.fits and plan.gpus == 4


# ---------------------------------------------------------------------------------------------
# MLA, replication and pipeline stages


def test_deepseek_v3_mla_kv_is_replicated_across_tp() -> None:
    plan = _plan(model="deepseek-v3", gpu="H200", tp=8, gpu_memory_fraction=0.9)
    per_gpu = 61 * (512 + 64) * 2  # one latent + RoPE key per layer, bf16 ("auto"): 70,272 B
    assert plan.kv_bytes_per_token_per_gpu == per_gpu
    assert plan.kv_replication_factor == 8
    assert plan.kv_bytes_per_token_total == 8 * per_gpu
    fp8 = _plan(model="deepseek-v3", gpu="H200", tp=8, kv_cache_dtype="fp8")
    assert fp8.kv_bytes_per_token_per_gpu == 61 * 576 * 1
    assert plan.fits


def test_deepseek_v3_fp8_weights_about_671_gb() -> None:
    plan = _plan(model="deepseek-v3", gpu="H200", tp=8, gpu_memory_fraction=0.9)
    vocab = 2 * 129_280 * 7_168  # embedding + lm_head kept in bf16: 1,853,358,080 params
    expected = (671e9 - vocab) * 1 + vocab * 2  # 672.85 GB
    assert plan.weights_format == "fp8"
    assert plan.weights_bytes_total == pytest.approx(expected)
    assert plan.weights_bytes_total == pytest.approx(671e9, rel=0.005)
    assert plan.weights_bytes_per_gpu == pytest.approx(expected / 8)


def test_gqa_kv_heads_replicate_when_tp_exceeds_them() -> None:
    # Qwen3-8B: 36 layers, 8 KV heads × 128; tp 16 → each GPU keeps one head, twice over.
    plan = _plan(model="qwen3-8b", tp=16, gpu_memory_fraction=0.9)
    assert plan.kv_bytes_per_token_per_gpu == 36 * 1 * 2 * 128 * 2  # 18,432 B
    assert plan.kv_replication_factor == 2
    assert plan.kv_bytes_per_token_total == 2 * (2 * 36 * 8 * 128 * 2)  # 2 × 147,456 B
    sharded = _plan(model="qwen3-8b", tp=4, gpu_memory_fraction=0.9)
    assert sharded.kv_bytes_per_token_per_gpu == 36 * 2 * 2 * 128 * 2
    assert sharded.kv_replication_factor == 1


def test_pipeline_parallel_splits_layers_and_weights() -> None:
    plan = _plan(pp=2, gpu_memory_fraction=0.9)
    assert plan.layers_per_gpu == 16
    assert plan.kv_bytes_per_token_per_gpu == LLAMA8_KV_PER_TOKEN / 2
    body = LLAMA8_PARAMS - 2 * LLAMA8_VOCAB_MATRIX
    # Half the body plus one vocab matrix (embedding on stage 0, lm_head on stage 1).
    assert plan.weights_bytes_per_gpu == pytest.approx(body * 2 / 2 + LLAMA8_VOCAB_MATRIX * 2)


# ---------------------------------------------------------------------------------------------
# OOM-risk flags


def test_weights_exceed_memory_and_no_kv_room() -> None:
    # DeepSeek-V3 on 8 × H100: 84.1 GB of weights per GPU exceed 80 GB outright.
    plan = _plan(model="deepseek-v3", tp=8, gpu_memory_fraction=0.9)
    assert "weights_exceed_memory" in _codes(plan)
    # Llama-3.1-8B at fraction 0.2: 16 GB budget < 16.06 GB weights + 2.7 GB reserve.
    low = _plan(gpu_memory_fraction=0.2)
    assert _codes(low) == {"no_kv_cache_room"} and not low.fits


def test_kv_below_one_max_model_len_sequence() -> None:
    plan = _plan(gpu_memory_fraction=0.3)  # 24 - 16.06 - 2.68 = 5.25 GB ≈ 40k tokens
    assert plan.kv_capacity_tokens < 131_072
    assert _codes(plan) == {"kv_below_max_model_len"} and not plan.fits
    assert _plan(gpu_memory_fraction=0.3, max_model_len=32_768).fits


def test_fraction_above_safe_band_is_a_warning() -> None:
    plan = _plan(gpu_memory_fraction=0.95)
    assert _codes(plan) == {"fraction_above_safe_band"} and plan.fits
    assert "0.95" in plan.risks[0].reason


def test_low_headroom_warns_and_blocks_when_negative() -> None:
    vllm = _plan(gpu_memory_fraction=0.97)  # 3 % left
    assert {"fraction_above_safe_band", "low_headroom"} == _codes(vllm) and vllm.fits
    sglang = _plan("sglang", gpu_memory_fraction=0.97)  # 2.4 GB left < 2.68 GB reserve
    assert sglang.headroom_bytes_per_gpu < 0 and not sglang.fits
    assert any(r.code == "low_headroom" and r.blocking for r in sglang.risks)


def test_speculative_draft_is_noted_as_uncounted() -> None:
    plan = _plan(speculative=SpeculativeConfig(method="ngram", num_tokens=4))
    assert any("speculative" in note for note in plan.notes)


def test_speculative_draft_weights_come_out_of_the_kv_pool() -> None:
    # An EAGLE head for Llama-3.1-8B: one decoder layer ((8.03e9 − 2·128256·4096)/32 params)
    # plus an lm_head (128256·4096), bf16: ≈ 1.47 GB taken from the KV pool (tp = 1).
    plain = _plan(gpu_memory_fraction=0.9)
    eagle = _plan(gpu_memory_fraction=0.9, speculative=SpeculativeConfig(
        method="eagle", num_tokens=3, draft_model="yuhuili/EAGLE-LLaMA3.1-8B"))
    head = 128_256 * 4096
    draft = 2 * ((LLAMA8_PARAMS - 2 * head) / 32 + head)
    assert plain.kv_cache_bytes_per_gpu - eagle.kv_cache_bytes_per_gpu == pytest.approx(
        draft, rel=0.01)
    ngram = _plan(gpu_memory_fraction=0.9,
                  speculative=SpeculativeConfig(method="ngram", num_tokens=3))
    assert ngram.kv_cache_bytes_per_gpu == plain.kv_cache_bytes_per_gpu


# ---------------------------------------------------------------------------------------------
# Concurrency ceiling and bad input


def test_max_concurrent_sequences_counts_whole_blocks() -> None:
    plan = _plan(gpu_memory_fraction=0.9)  # 25,394 blocks of 16 tokens
    assert max_concurrent_sequences(plan, 2_048) == 25_394 // 128  # 198
    assert max_concurrent_sequences(plan, 1_000) == 25_394 // 63  # 1000 tokens → 63 blocks
    assert max_concurrent_sequences(plan, 10_000_000) == 0


def test_bad_arguments_raise_usage_error() -> None:
    plan = _plan(gpu_memory_fraction=0.9)
    with pytest.raises(UsageError):
        max_concurrent_sequences(plan, 0)
    spec = get_model("llama-3.1-8b")
    config = EngineConfig(engine="vllm", model=spec.name)
    with pytest.raises(UsageError):
        plan_memory(config, get_gpu("H100-SXM"), spec, block_size_tokens=0)
    with pytest.raises(UsageError):
        plan_memory(config.model_copy(update={"pp": 64}), get_gpu("H100-SXM"), spec)
