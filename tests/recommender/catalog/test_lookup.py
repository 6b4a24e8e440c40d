"""Tests for recommender/catalog/lookup.py: bundled catalogs, lookup, user config.json, validation.

Expected figures are written out from the models' published configs and datasheets, not
re-derived from the catalog.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from core.errors import CatalogError, ServeFitError, UnknownCatalogEntryError, UsageError
from recommender.catalog.hf_config import load_model
from recommender.catalog.lookup import (
    DEFAULT_CATALOG_DIR,
    get_gpu,
    get_model,
    load_gpus,
    load_models,
)
from recommender.catalog.specs import GPU, ModelSpec, estimate_params_b

EXPECTED_GPUS = {
    "A10G", "L4", "L40S", "A100-40GB", "A100-80GB",
    "H100-SXM", "H100-PCIe", "H200", "B200", "MI300X",
}  # fmt: skip

EXPECTED_MODELS = {
    "meta-llama/Llama-3.1-8B-Instruct",
    "meta-llama/Llama-3.1-70B-Instruct",
    "meta-llama/Llama-3.1-405B-Instruct",
    "meta-llama/Llama-3.3-70B-Instruct",
    "meta-llama/Llama-4-Scout-17B-16E-Instruct",
    "Qwen/Qwen3-8B",
    "Qwen/Qwen3-14B",
    "Qwen/Qwen3-32B",
    "Qwen/Qwen3-235B-A22B",
    "Qwen/Qwen2.5-7B-Instruct",
    "Qwen/Qwen2.5-72B-Instruct",
    "mistralai/Mistral-7B-Instruct-v0.3",
    "mistralai/Mixtral-8x7B-Instruct-v0.1",
    "openai/gpt-oss-20b",
    "openai/gpt-oss-120b",
    "deepseek-ai/DeepSeek-V3",
    "deepseek-ai/DeepSeek-R1",
}

# Meta's published Llama-3.1-8B config.json (the keys that matter, as shipped).
LLAMA_31_8B_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "max_position_embeddings": 131072,
    "vocab_size": 128256,
    "tie_word_embeddings": False,
    "rope_theta": 500000.0,
    "torch_dtype": "bfloat16",
}


# --- bundled catalogs --------------------------------------------------------------------


def test_every_gpu_loads() -> None:
    gpus = load_gpus()
    assert set(gpus) == EXPECTED_GPUS
    assert all(isinstance(g, GPU) for g in gpus.values())


def test_every_model_loads() -> None:
    models = load_models()
    assert set(models) >= EXPECTED_MODELS
    assert all(isinstance(m, ModelSpec) for m in models.values())


def test_gpu_key_figures() -> None:
    h100 = get_gpu("H100-SXM")
    assert (h100.memory_gb, h100.mem_bandwidth_tb_s) == (80, 3.35)
    assert h100.bf16_dense_tflops == pytest.approx(989, rel=0.01)
    assert h100.compute_capability == "9.0"
    assert h100.compute_capability_tuple == (9, 0)
    assert get_gpu("A100-80GB").int8_dense_tops == 624
    assert get_gpu("H200").memory_gb == 141
    mi300x = get_gpu("MI300X")
    assert (mi300x.vendor, mi300x.compute_capability) == ("amd", "gfx942")
    assert mi300x.compute_capability_tuple is None


@pytest.mark.parametrize(
    ("name", "has_fp8", "has_fp4"),
    [("A100-80GB", False, False), ("A10G", False, False), ("L4", True, False),
     ("H100-SXM", True, False), ("B200", True, True), ("MI300X", True, False)],
)  # fmt: skip
def test_dtype_support_follows_architecture(name: str, has_fp8: bool, has_fp4: bool) -> None:
    gpu = get_gpu(name)
    assert ("fp8" in gpu.weight_dtypes) is has_fp8
    assert (gpu.fp8_dense_tflops is not None) is has_fp8
    assert ("nvfp4" in gpu.weight_dtypes) is has_fp4


def test_low_confidence_is_kept() -> None:
    assert get_gpu("A10G").confidence == "low"


@pytest.mark.parametrize(
    ("name", "bytes_per_token"),
    [
        ("meta-llama/Llama-3.1-8B-Instruct", 2 * 32 * 8 * 128 * 2),  # 131072
        ("meta-llama/Llama-3.1-70B-Instruct", 2 * 80 * 8 * 128 * 2),  # 327680
        ("Qwen/Qwen3-8B", 2 * 36 * 8 * 128 * 2),
        ("deepseek-ai/DeepSeek-V3", 61 * (512 + 64) * 2),  # 70272, MLA latent + rope key
    ],
)
def test_kv_bytes_per_token(name: str, bytes_per_token: int) -> None:
    assert get_model(name).kv_bytes_per_token() == bytes_per_token
    assert get_model(name).kv_bytes_per_token(dtype_bytes=1) == bytes_per_token / 2


def test_kv_bytes_rejects_non_positive_dtype() -> None:
    with pytest.raises(UsageError):
        get_model("qwen3-8b").kv_bytes_per_token(0)


def test_model_key_figures() -> None:
    assert get_model("meta-llama/Llama-3.1-70B-Instruct").kv_bytes_per_token() == 327680
    qwen = get_model("Qwen/Qwen3-8B")
    assert (qwen.num_layers, qwen.num_kv_heads, qwen.head_dim) == (36, 8, 128)
    ds = get_model("deepseek-ai/DeepSeek-V3")
    assert (ds.attention, ds.kv_lora_rank, ds.qk_rope_head_dim) == ("mla", 512, 64)
    assert (ds.num_experts, ds.experts_per_token, ds.num_layers) == (256, 8, 61)
    oss = get_model("openai/gpt-oss-120b")
    assert (oss.attention_window, oss.attention_window_tokens) == ("sliding", 128)
    assert oss.windowed_layers == oss.num_layers // 2
    assert get_model("llama-4-scout").attention_window == "chunked"
    assert not get_model("Qwen/Qwen3-32B").is_moe


def test_published_params_agree_with_shapes() -> None:
    # Total parameters follow from the shapes (within 2 %; Scout's includes its vision tower).
    for model in load_models().values():
        total, _ = estimate_params_b(model)
        assert total == pytest.approx(model.total_params_b, rel=0.02), model.name


# --- lookup ----------------------------------------------------------------------------------


@pytest.mark.parametrize("alias", ["h100", "H100-SXM", "h100 sxm", "H100_SXM", " h100-sxm5 "])
def test_gpu_aliases_case_insensitive(alias: str) -> None:
    assert get_gpu(alias).name == "H100-SXM"


@pytest.mark.parametrize(
    "alias",
    ["meta-llama/Llama-3.1-8B-Instruct", "META-LLAMA/llama-3.1-8b-instruct",
     "Llama-3.1-8B-Instruct", "llama-3.1-8b", "meta-llama/Meta-Llama-3.1-8B-Instruct"],
)  # fmt: skip
def test_model_aliases_case_insensitive(alias: str) -> None:
    assert get_model(alias).name == "meta-llama/Llama-3.1-8B-Instruct"


def test_unknown_gpu_suggests_close_matches() -> None:
    with pytest.raises(UnknownCatalogEntryError, match=r"did you mean .*H100-SXM") as info:
        get_gpu("h100-sxn")
    assert isinstance(info.value, UsageError)
    assert "\n" not in str(info.value)


def test_unknown_model_suggests_close_matches() -> None:
    with pytest.raises(UnknownCatalogEntryError, match=r"did you mean .*Qwen/Qwen3-32B"):
        get_model("qwen3-23b")


# --- a user's own config.json ---------------------------------------------------------------


def _write(tmp_path: Path, cfg: dict, name: str = "config.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(cfg), encoding="utf-8")
    return path


def test_user_config_file_and_folder(tmp_path: Path) -> None:
    path = _write(tmp_path, LLAMA_31_8B_CONFIG)
    for spec in (load_model(path), get_model(str(path)), get_model(tmp_path)):
        assert spec.kv_bytes_per_token() == 131072
        assert spec.head_dim == 128  # default hidden / heads
        assert spec.params_source == "estimated"


def test_user_config_params_match_published_llama_8b(tmp_path: Path) -> None:
    spec = load_model(_write(tmp_path, LLAMA_31_8B_CONFIG))
    assert spec.total_params_b == pytest.approx(8.03, rel=0.02)  # Meta's model card
    assert spec.active_params_b == spec.total_params_b


def test_user_config_mistral_defaults_kv_heads(tmp_path: Path) -> None:
    cfg = {
        "architectures": ["MistralForCausalLM"], "model_type": "mistral",
        "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
        "num_hidden_layers": 32, "max_position_embeddings": 32768, "vocab_size": 32000,
        "sliding_window": 4096,
    }  # fmt: skip
    spec = load_model(_write(tmp_path, cfg))
    assert spec.num_kv_heads == 32  # absent -> multi-head attention
    assert spec.kv_bytes_per_token() == 2 * 32 * 32 * 128 * 2
    assert (spec.attention_window, spec.windowed_layers) == ("sliding", 32)


def test_user_config_deepseek_style_mla_moe(tmp_path: Path) -> None:
    cfg = {
        "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
        "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
        "num_attention_heads": 128, "num_key_value_heads": 128, "num_hidden_layers": 61,
        "max_position_embeddings": 163840, "vocab_size": 129280, "n_routed_experts": 256,
        "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 3,
        "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 128, "v_head_dim": 128,
    }  # fmt: skip
    spec = load_model(_write(tmp_path, cfg))
    assert spec.kv_bytes_per_token() == 70272
    assert spec.total_params_b == pytest.approx(671, rel=0.02)  # DeepSeek-V3 report
    assert spec.active_params_b == pytest.approx(37, rel=0.03)


def test_user_config_multimodal_text_config(tmp_path: Path) -> None:
    text = {
        "model_type": "llama4_text", "hidden_size": 5120, "intermediate_size": 8192,
        "intermediate_size_mlp": 16384, "num_attention_heads": 40, "num_key_value_heads": 8,
        "head_dim": 128, "num_hidden_layers": 48, "max_position_embeddings": 10485760,
        "vocab_size": 202048, "num_local_experts": 16, "num_experts_per_tok": 1,
        "interleave_moe_layer_step": 1, "attention_chunk_size": 8192,
    }  # fmt: skip
    cfg = {"architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4",
           "text_config": text}  # fmt: skip
    spec = load_model(_write(tmp_path, cfg))
    assert spec.kv_bytes_per_token() == 2 * 48 * 8 * 128 * 2
    assert (spec.num_experts, spec.num_shared_experts) == (16, 1)
    assert (spec.attention_window, spec.windowed_layers) == ("chunked", 36)
    assert spec.active_params_b == pytest.approx(17, rel=0.03)  # Meta: 17B active


def test_user_config_missing_key_names_file_and_key(tmp_path: Path) -> None:
    cfg = {k: v for k, v in LLAMA_31_8B_CONFIG.items() if k != "num_hidden_layers"}
    path = _write(tmp_path, cfg)
    with pytest.raises(CatalogError) as info:
        load_model(path)
    message = str(info.value)
    assert str(path) in message and "num_hidden_layers" in message and "\n" not in message


@pytest.mark.parametrize(
    "cfg",
    [
        {"model_type": "bert", "architectures": ["BertModel"], "hidden_size": 768},
        {"model_type": "custom", "architectures": ["BertModel"], "hidden_size": 768},
        {"model_type": "t5", "is_encoder_decoder": True},
        LLAMA_31_8B_CONFIG | {"architectures": ["LlamaForSequenceClassification"]},
    ],
)
def test_non_decoder_config_is_refused(tmp_path: Path, cfg: dict) -> None:
    path = _write(tmp_path, cfg)
    with pytest.raises(CatalogError, match="decoder-only") as info:
        load_model(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize(
    ("text", "needle"),
    [("{not json", "not valid JSON"), ("[1, 2]", "JSON object")],
)
def test_malformed_config_is_refused(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(CatalogError, match=needle):
        load_model(path)


def test_bad_values_in_config_are_refused(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="'hidden_size' must be a positive integer"):
        load_model(_write(tmp_path, LLAMA_31_8B_CONFIG | {"hidden_size": "4096"}))
    with pytest.raises(CatalogError, match="does not divide"):
        load_model(_write(tmp_path, LLAMA_31_8B_CONFIG | {"num_key_value_heads": 5}))


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="no such model config"):
        get_model(str(tmp_path / "nope" / "config.json"))
    with pytest.raises(CatalogError, match="no such model config"):
        get_model(tmp_path)  # a folder without config.json


# --- broken catalogs -------------------------------------------------------------------------


@pytest.fixture
def catalog_copy(tmp_path: Path) -> Path:
    target = tmp_path / "catalog"
    shutil.copytree(DEFAULT_CATALOG_DIR, target)
    return target


def _edit(path: Path, key: str, change: callable) -> None:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    change(data[key])
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")


def test_catalog_copy_loads(catalog_copy: Path) -> None:
    assert set(load_gpus(catalog_copy)) == EXPECTED_GPUS
    assert get_gpu("h100", catalog_copy).name == "H100-SXM"


def test_duplicate_gpu_alias_fails(catalog_copy: Path) -> None:
    _edit(catalog_copy / "gpus.yaml", "gpus", lambda gpus: gpus[-1]["aliases"].append("H100"))
    with pytest.raises(CatalogError, match=r"'h100' is used by both 'H100-SXM' and 'MI300X'"):
        load_gpus(catalog_copy)


def test_duplicate_model_alias_fails(catalog_copy: Path) -> None:
    _edit(catalog_copy / "models.yaml", "models",
          lambda models: models[1]["aliases"].append("llama-3.1-8b"))  # fmt: skip
    with pytest.raises(CatalogError, match="used by both"):
        load_models(catalog_copy)


def test_kv_heads_not_dividing_heads_fails(catalog_copy: Path) -> None:
    _edit(catalog_copy / "models.yaml", "models", lambda m: m[0].update(num_kv_heads=7))
    with pytest.raises(CatalogError, match=r"models.yaml: entry .*does not divide"):
        load_models(catalog_copy)


@pytest.mark.parametrize(
    ("file", "key", "change", "needle"),
    [
        ("gpus.yaml", "gpus", lambda g: g[0].update(memory_gb=-24), "memory_gb"),
        ("gpus.yaml", "gpus", lambda g: g[0].update(typo_field=1), "typo_field"),
        ("gpus.yaml", "gpus", lambda g: g[3].update(fp8_dense_tflops=600), "fp8_dense_tflops"),
        ("models.yaml", "models", lambda m: m[-1].pop("kv_lora_rank"), "kv_lora_rank"),
        ("models.yaml", "models", lambda m: next(x for x in m if "moe_intermediate_size" in x).pop(
            "moe_intermediate_size"), "moe_interm"),
        ("models.yaml", "models", lambda m: m.append(dict(m[0])), "listed twice"),
        ("models.yaml", "models", lambda m: m[0]["quantized_checkpoints"].update(
            none={"name": "org/x", "source": "s"}), "no 'none' format"),
        ("models.yaml", "models", lambda m: m[0]["quantized_checkpoints"]["fp8"].update(
            name="-x"), "must not start with '-'"),
    ],
)
def test_broken_entries_fail(
    catalog_copy: Path, file: str, key: str, change: callable, needle: str
) -> None:
    _edit(catalog_copy / file, key, change)
    loader = load_gpus if key == "gpus" else load_models
    with pytest.raises(CatalogError, match=needle) as info:
        loader(catalog_copy)
    assert isinstance(info.value, ServeFitError) and "\n" not in str(info.value)


def test_missing_catalog_file(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="cannot read catalog"):
        load_gpus(tmp_path)
