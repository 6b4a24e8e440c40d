"""Tests for models found by HF id in aiconfigurator-core's bundled configs
(recommender/catalog/lookup.py `get_model`, recommender/catalog/bundled.py `find_bundled`,
recommender/catalog/hf_config.py), their weight precision, the one-line refusals, and the
measured provider's use of them.

Expected shapes are read from the bundled JSON in the test; parameter counts are the
model cards' published figures; the refused models are listed here by hand, with why.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

from core.errors import CatalogError, UnknownCatalogEntryError, UsageError
from engines.config import EngineConfig
from recommender.catalog.bundled import bundled_configs, bundled_model, find_bundled
from recommender.catalog.hf_config import load_model
from recommender.catalog.lookup import get_gpu, get_model
from recommender.model.aic_cells import MODELS

BUNDLED = bundled_configs()
if not BUNDLED:
    pytest.skip("aiconfigurator-core is not installed", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[3]
MAVERICK = "meta-llama/Llama-4-Maverick-17B-128E-Instruct"
MIXTRAL = "mistralai/Mixtral-8x7B-v0.1"
ONE_SHAPE = "ServeFit models decoders whose layers are all attention of one shape"

# Bundled configs (aiconfigurator-core 0.12.0) whose layers one attention shape cannot
# describe, and the words their refusal must use.
LINEAR = "linear-attention"  # Qwen3.5/3.6 Gated DeltaNet, Kimi-K3 (Kimi Linear)
MAMBA = "Mamba"  # Nemotron-H, Nemotron 3
COMPRESSED = "compress_ratios"  # DeepSeek-V4's compressed KV
REFUSED = {
    **dict.fromkeys([
        "Qwen/Qwen3.5-122B-A10B", "Qwen/Qwen3.5-27B", "Qwen/Qwen3.5-35B-A3B",
        "Qwen/Qwen3.5-397B-A17B", "nvidia/Qwen3.5-122B-A10B-NVFP4",
        "nvidia/Qwen3.5-397B-A17B-NVFP4", "nvidia/Qwen3.6-27B-NVFP4",
        "nvidia/Qwen3.6-35B-A3B-NVFP4", "moonshotai/Kimi-K3"], LINEAR),
    **dict.fromkeys([
        "nvidia/Nemotron-H-56B-Base-8K", "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",
        "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4",
        "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-FP8",
        "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4",
        "nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16",
        "nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-FP8",
        "nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-NVFP4",
        "nvidia/NVIDIA-Nemotron-3.5-Lightning-30B-A3B-NVFP4"], MAMBA),
    **dict.fromkeys([
        "deepseek-ai/DeepSeek-V4-Flash", "deepseek-ai/DeepSeek-V4-Pro",
        "nvidia/DeepSeek-V4-Flash-NVFP4", "nvidia/DeepSeek-V4-Pro-NVFP4",
        "sgl-project/DeepSeek-V4-Flash-FP8", "sgl-project/DeepSeek-V4-Pro-FP8"], COMPRESSED),
    # Gemma 4: global layers 512-wide heads vs 256 on sliding ones
    **dict.fromkeys(["google/gemma-4-26B-A4B", "nvidia/Gemma-4-26B-A4B-NVFP4",
                     "nvidia/Gemma-4-31B-IT-NVFP4"], "global_head_dim"),
    "XiaomiMiMo/MiMo-V2-Flash": "swa_num_key_value_heads",  # 8 KV heads on SWA layers, 4 else
    "nvidia/Llama-3_3-Nemotron-Super-49B-v1": "block_configs",  # NAS: every layer differs
}  # fmt: skip


def _json(hf_id: str) -> dict[str, Any]:
    raw = json.loads(BUNDLED[hf_id].config.read_text(encoding="utf-8"))
    return raw["text_config"] if isinstance(raw.get("text_config"), dict) else raw


# --- every bundled config: a spec, or one line saying why not --------------------------------


@pytest.mark.parametrize("hf_id", sorted(BUNDLED))
def test_every_bundled_config_loads_or_is_refused_in_one_line(hf_id: str) -> None:
    if hf_id in REFUSED:
        with pytest.raises(CatalogError) as info:
            bundled_model(hf_id)
        message = str(info.value)
        assert not isinstance(info.value, UnknownCatalogEntryError)
        assert "\n" not in message and message.startswith(f"{hf_id} (aiconfigurator-core")
        assert REFUSED[hf_id] in message and ONE_SHAPE in message
        return
    spec = bundled_model(hf_id)
    cfg = _json(hf_id)
    assert spec.name == hf_id and spec.params_source == "estimated"
    assert spec.source.startswith("aiconfigurator-core") and "bundled config" in spec.source
    assert (spec.num_layers, spec.hidden_size) == (cfg["num_hidden_layers"], cfg["hidden_size"])


def test_how_many_bundled_configs_load() -> None:
    loaded = [h for h in BUNDLED if h not in REFUSED]
    assert set(REFUSED) <= set(BUNDLED)
    if version("aiconfigurator-core") == "0.12.0":
        assert (len(BUNDLED), len(loaded), len(REFUSED)) == (89, 60, 29)


# --- shapes against the JSON, parameters against the model cards ----------------------------


def test_mixtral_shapes_from_its_json() -> None:
    cfg, spec = _json(MIXTRAL), bundled_model(MIXTRAL)  # get_model: the catalog's alias
    assert spec.num_layers == cfg["num_hidden_layers"] == 32
    assert spec.num_kv_heads == cfg["num_key_value_heads"] == 8
    assert spec.num_experts == cfg["num_local_experts"] == 8
    assert spec.experts_per_token == cfg["num_experts_per_tok"] == 2
    assert spec.head_dim == cfg["hidden_size"] // cfg["num_attention_heads"] == 128
    assert spec.moe_intermediate_size == cfg["intermediate_size"]
    assert spec.kv_bytes_per_token() == 2 * 32 * 8 * 128 * 2
    assert spec.total_params_b == pytest.approx(46.7, rel=0.01)  # Mistral: 46.7B / 12.9B
    assert spec.active_params_b == pytest.approx(12.9, rel=0.01)


def test_llama4_maverick_shapes_from_its_text_config() -> None:
    cfg, spec = _json(MAVERICK), get_model(MAVERICK)
    assert spec.num_layers == cfg["num_hidden_layers"] == 48
    assert (spec.num_kv_heads, spec.head_dim) == (cfg["num_key_value_heads"], cfg["head_dim"])
    assert spec.num_experts == cfg["num_local_experts"] == 128
    assert spec.num_dense_layers == 48 - 48 // cfg["interleave_moe_layer_step"] == 24
    assert spec.intermediate_size == cfg["intermediate_size_mlp"]
    assert (spec.attention_window, spec.attention_window_tokens) == ("chunked", 8192)
    assert spec.total_params_b == pytest.approx(400, rel=0.02)  # Meta: 400B total, 17B active
    assert spec.active_params_b == pytest.approx(17, rel=0.03)


SHAPES = ("model_type", "attention", "num_layers", "hidden_size", "num_attention_heads",
          "num_kv_heads", "head_dim", "intermediate_size", "moe_intermediate_size",
          "vocab_size", "num_experts", "experts_per_token", "num_shared_experts",
          "num_dense_layers", "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim",
          "attention_window", "attention_window_tokens", "windowed_layers",
          "tie_word_embeddings", "checkpoint_dtype", "max_context_tokens")


@pytest.mark.parametrize(("name", "hf_id"), sorted(MODELS.items()))
def test_bundled_shapes_equal_the_catalogs_typed_entry(name: str, hf_id: str) -> None:
    """The catalog's entries were typed from the model cards; the same models' bundled
    configs, read here, must give the same shapes (instruct = base shapes)."""
    typed, read = get_model(name), bundled_model(hf_id)
    assert {f: getattr(read, f) for f in SHAPES} == {f: getattr(typed, f) for f in SHAPES}


@pytest.mark.parametrize(("hf_id", "total_b", "active_b"), [
    ("mistralai/Mixtral-8x22B-v0.1", 141, 39),  # Mistral's card
    ("Qwen/Qwen3-Coder-480B-A35B-Instruct", 480, 35),  # Qwen's card
    ("moonshotai/Kimi-K2-Instruct", 1040, 32),  # Moonshot: 1T total (1.04T), 32B active
    ("Qwen/Qwen3-VL-235B-A22B-Instruct", 235, 22),  # the text part of a VL config
])
def test_bundled_params_agree_with_model_cards(hf_id: str, total_b: float,
                                               active_b: float) -> None:
    spec = get_model(hf_id)
    assert spec.total_params_b == pytest.approx(total_b, rel=0.02)
    assert spec.active_params_b == pytest.approx(active_b, rel=0.04)


def test_mla_config_with_sparse_attention_is_read_and_says_so() -> None:
    cfg, spec = _json("zai-org/GLM-5"), get_model("zai-org/GLM-5")
    assert spec.attention == "mla" and spec.kv_lora_rank == cfg["kv_lora_rank"]
    assert spec.num_dense_layers == cfg["first_k_dense_replace"]
    assert spec.kv_bytes_per_token() == cfg["num_hidden_layers"] * (
        cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"]) * 2
    assert f"top-{cfg['index_topk']}" in spec.notes


@pytest.mark.parametrize(("hf_id", "dtype"), [
    ("nvidia/DeepSeek-V3.1-NVFP4", "nvfp4"),  # hf_quant_config.json: quant_algo NVFP4
    ("nvidia/Llama-3.1-70B-Instruct-FP8", "fp8"),  # hf_quant_config.json: quant_algo FP8
    ("Qwen/Qwen3-32B-FP8", "fp8"),  # quantization_config: quant_method fp8
    ("moonshotai/Kimi-K2.5", "int4"),  # compressed-tensors, 4-bit int weights
    ("nvidia/MiniMax-M3-NVFP4", "nvfp4"),  # MIXED_PRECISION, mostly NVFP4 layers
    ("meta-llama/Meta-Llama-3.1-8B", "bf16"),
])
def test_checkpoint_precision_from_the_quant_configs(hf_id: str, dtype: str) -> None:
    assert get_model(hf_id).checkpoint_dtype == dtype


# --- lookup order and messages ----------------------------------------------------------------


def test_catalog_comes_before_the_bundled_config() -> None:
    spec = get_model("qwen/qwen3-32b")  # bundled too, under the same id
    assert spec.params_source == "published" and find_bundled("Qwen/Qwen3-32B") is not None


def test_bundled_ids_match_case_insensitively_and_by_unique_name() -> None:
    assert get_model(MAVERICK.upper()).name == MAVERICK
    assert get_model("Llama-4-Maverick-17B-128E-Instruct").name == MAVERICK
    found = find_bundled("NVIDIA/llama 3_3 nemotron super 49b v1")  # spaces, _ and - alike
    assert found is not None and found.hf_id == "nvidia/Llama-3_3-Nemotron-Super-49B-v1"


def test_local_folder_comes_before_the_bundled_config(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "mistralai" / "Mixtral-8x22B-v0.1"
    folder.mkdir(parents=True)
    cfg = {"architectures": ["MistralForCausalLM"], "model_type": "mistral",
           "hidden_size": 1024, "intermediate_size": 4096, "num_attention_heads": 8,
           "num_hidden_layers": 4, "max_position_embeddings": 4096, "vocab_size": 32000}
    (folder / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    spec = get_model("mistralai/Mixtral-8x22B-v0.1")
    assert spec.num_layers == 4 and spec.source.startswith("user config")


def test_refused_bundled_model_is_one_line_through_get_model() -> None:
    with pytest.raises(CatalogError) as info:
        get_model("nvidia/Nemotron-H-56B-Base-8K")
    message = str(info.value)
    assert "\n" not in message and "Mamba" in message and "hybrid_override_pattern" in message


def test_unknown_model_suggests_catalog_and_bundled_names_in_one_line() -> None:
    with pytest.raises(UnknownCatalogEntryError) as info:
        get_model("meta-llama/Llama-4-Maverik-17B-128E")
    message = str(info.value)
    assert isinstance(info.value, UsageError)
    assert f"did you mean {MAVERICK}" in message
    assert "catalog models" in message and f"{len(BUNDLED)} aiconfigurator-core configs" in message
    assert "config.json path" in message
    assert "\n" not in message and len(message) < 300


def test_nothing_close_says_so() -> None:
    with pytest.raises(UnknownCatalogEntryError, match="no close match"):
        get_model("zzzz-qqqq")
    with pytest.raises(UnknownCatalogEntryError, match="no aiconfigurator-core bundled config"):
        bundled_model("Qwen/Qwen3-14B")  # in the catalog only


# --- a user's config.json: the same precision and refusals -----------------------------------

LLAMA_LIKE = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
    "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "max_position_embeddings": 131072, "vocab_size": 128256,
}  # fmt: skip


def test_user_config_quantization(tmp_path: Path) -> None:
    fp8 = LLAMA_LIKE | {"quantization_config": {"quant_method": "fp8",
                                                "weight_block_size": [128, 128]}}
    (tmp_path / "config.json").write_text(json.dumps(fp8), encoding="utf-8")
    assert load_model(tmp_path).checkpoint_dtype == "fp8"
    (tmp_path / "hf_quant_config.json").write_text(
        json.dumps({"quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8"}}))
    assert load_model(tmp_path).checkpoint_dtype == "nvfp4"  # ModelOpt's file, beside it
    odd = LLAMA_LIKE | {"quantization_config": {"quant_method": "bitsandbytes"}}
    (tmp_path / "hf_quant_config.json").unlink()
    (tmp_path / "config.json").write_text(json.dumps(odd), encoding="utf-8")
    spec = load_model(tmp_path)
    assert spec.checkpoint_dtype == "bf16" and "'bitsandbytes' not recognised" in spec.notes


def test_user_config_declared_kv_cache_format(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA_LIKE), encoding="utf-8")
    assert load_model(path).checkpoint_kv_dtype is None
    scheme = {"quant_method": "modelopt", "quant_algo": "NVFP4",
              "kv_cache_scheme": {"dynamic": False, "num_bits": 8, "type": "float"}}
    path.write_text(json.dumps(LLAMA_LIKE | {"quantization_config": scheme}), encoding="utf-8")
    assert load_model(path).checkpoint_kv_dtype == "fp8"
    int8 = scheme | {"kv_cache_scheme": {"num_bits": 8, "type": "int"}}
    path.write_text(json.dumps(LLAMA_LIKE | {"quantization_config": int8}), encoding="utf-8")
    assert load_model(path).checkpoint_kv_dtype is None  # not a format the project sizes
    path.write_text(json.dumps(LLAMA_LIKE), encoding="utf-8")
    (tmp_path / "hf_quant_config.json").write_text(
        json.dumps({"quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8"}}))
    assert load_model(path).checkpoint_kv_dtype == "fp8"


def test_bundled_nvfp4_checkpoint_declares_its_fp8_kv_cache() -> None:
    found = find_bundled("nvidia/Kimi-K2.5-NVFP4")
    assert found is not None
    raw = json.loads(found.config.read_text(encoding="utf-8"))["quantization_config"]
    assert (raw["kv_cache_scheme"]["num_bits"], raw["kv_cache_scheme"]["type"]) == (8, "float")
    assert get_model("nvidia/Kimi-K2.5-NVFP4").checkpoint_kv_dtype == "fp8"
    assert get_model("moonshotai/Kimi-K2.5").checkpoint_kv_dtype is None


def test_user_config_hybrid_linear_attention_is_refused(tmp_path: Path) -> None:
    cfg = LLAMA_LIKE | {"model_type": "qwen3_next", "linear_num_key_heads": 16}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg), encoding="utf-8")
    with pytest.raises(CatalogError) as info:
        load_model(path)
    message = str(info.value)
    assert message.startswith(str(path)) and "linear_num_key_heads" in message
    assert "\n" not in message


# --- the measured provider and the CLI -------------------------------------------------------


def test_bundled_model_runs_aiconfigurators_tables_without_the_hub() -> None:
    pytest.importorskip("aiconfigurator_core.sdk")
    from recommender.model.aic_cells import model_reference
    from recommender.model.perf import deployment

    hf_id = "mistralai/Mixtral-8x22B-v0.1"  # bundled, not in its SDK's pre-downloaded list
    spec = get_model(hf_id)
    assert spec.params_source == "estimated" and model_reference(spec) == hf_id
    dep = deployment(EngineConfig(engine="vllm", model=spec.name, tp=4), get_gpu("H100-SXM"),
                     spec, step_time="measured")
    assert dep.kernels is not None and dep.kernels.kind == "measured"


def test_cli_predicts_a_bundled_model_and_warns_it_is_not_in_the_catalog() -> None:
    args = ["--engine", "vllm", "--model", MAVERICK, "--gpu", "H200", "--gpus", "8", "--tp", "8",
            "--isl", "1000", "--osl", "1000", "--concurrency", "64", "--json"]
    done = subprocess.run([sys.executable, "-m", "app", "predict", *args], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["output_throughput_tok_s"] > 0 and out["tpot_ms"]["mean"] > 0
    assert any(f"model {MAVERICK} is not in the catalog" in w and "aiconfigurator-core" in w
               for w in out["warnings"])
