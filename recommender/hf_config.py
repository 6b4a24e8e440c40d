"""A user's own Hugging Face `config.json` (any decoder-only model) as a `ModelSpec`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from core.errors import CatalogError
from recommender.specs import ModelSpec, estimate_params_b

# Decoder-only detection for user configs: refuse these outright...
_NON_DECODER_MODEL_TYPES = frozenset(
    {
        "bert",
        "roberta",
        "xlm-roberta",
        "distilbert",
        "albert",
        "electra",
        "deberta",
        "deberta-v2",
        "mpnet",
        "t5",
        "mt5",
        "umt5",
        "bart",
        "mbart",
        "pegasus",
        "marian",
        "whisper",
        "clip",
        "vit",
        "modernbert",
    }
)
# ...and require a generative head when `architectures` is given (BertModel, *ForMaskedLM fail).
_DECODER_ARCH_MARKERS = ("ForCausalLM", "ForConditionalGeneration", "LMHeadModel")


# ---------------------------------------------------------------------------------------------
# A user's own Hugging Face config.json


def _positive_int(cfg: Mapping[str, Any], key: str, path: Path, default: Any = None) -> int:
    value = cfg.get(key, default)
    if value is None:
        raise CatalogError(f"{path}: missing required key {key!r} (decoder-only HF config?)")
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise CatalogError(f"{path}: key {key!r} must be a positive integer, got {value!r}")
    return value


def _optional_int(cfg: Mapping[str, Any], keys: tuple[str, ...], path: Path) -> int | None:
    for key in keys:
        if cfg.get(key) is not None:
            return _positive_int(cfg, key, path)
    return None


def _read_config(path: Path) -> tuple[Path, dict[str, Any]]:
    file = path / "config.json" if path.is_dir() else path
    try:
        raw = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise CatalogError(f"{file}: no such model config (expected a config.json)") from exc
    except OSError as exc:
        raise CatalogError(f"{file}: cannot read model config ({exc.strerror})") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CatalogError(f"{file}: not valid JSON ({exc})") from exc
    if not isinstance(raw, dict):
        raise CatalogError(f"{file}: expected a JSON object at the top level")
    return file, raw


def _check_decoder_only(cfg: Mapping[str, Any], file: Path) -> None:
    model_type = str(cfg.get("model_type", "")).lower()
    archs = cfg.get("architectures") or []
    if cfg.get("is_encoder_decoder") or model_type in _NON_DECODER_MODEL_TYPES:
        raise CatalogError(
            f"{file}: model_type {model_type!r} is not a decoder-only language model"
        )
    if archs and not any(m in str(a) for a in archs for m in _DECODER_ARCH_MARKERS):
        raise CatalogError(
            f"{file}: architectures {archs} have no causal-LM head (decoder-only models only)"
        )


def _window(cfg: Mapping[str, Any], num_layers: int) -> dict[str, Any]:
    """Sliding/chunked attention as (kind, tokens, number of windowed layers), if any."""
    chunk = cfg.get("attention_chunk_size")
    if chunk:  # Llama 4: RoPE layers are chunked; every `no_rope_layer_interval`-th is global.
        flags = cfg.get("no_rope_layers")
        interval = cfg.get("no_rope_layer_interval") or 4
        chunked = sum(1 for f in flags if f) if flags else num_layers - num_layers // interval
        return {
            "attention_window": "chunked",
            "attention_window_tokens": chunk,
            "windowed_layers": chunked or None,
        }
    window = cfg.get("sliding_window")
    if not window or cfg.get("use_sliding_window") is False:
        return {}
    layer_types = cfg.get("layer_types")
    count = sum(1 for t in layer_types if "sliding" in str(t)) if layer_types else num_layers
    if not count:
        return {}
    return {
        "attention_window": "sliding",
        "attention_window_tokens": window,
        "windowed_layers": count,
    }


def _moe_fields(cfg: Mapping[str, Any], num_layers: int, file: Path) -> dict[str, Any]:
    experts = _optional_int(cfg, ("num_local_experts", "num_experts", "n_routed_experts"), file)
    if experts is None:
        return {}
    top_k = _optional_int(cfg, ("num_experts_per_tok", "experts_per_token"), file)
    if top_k is None:
        raise CatalogError(f"{file}: missing required key 'num_experts_per_tok' for a MoE model")
    expert_width = _optional_int(cfg, ("moe_intermediate_size",), file) or _positive_int(
        cfg, "intermediate_size", file
    )
    dense_layers = int(cfg.get("first_k_dense_replace") or 0) + len(
        cfg.get("mlp_only_layers") or []
    )
    step = int(cfg.get("interleave_moe_layer_step") or cfg.get("decoder_sparse_step") or 1)
    if step > 1:  # every step-th layer is MoE, the rest dense
        dense_layers += num_layers - num_layers // step
    shared = int(cfg.get("n_shared_experts") or 0)
    if str(cfg.get("model_type", "")).startswith("llama4"):
        shared = 1  # Llama 4 always adds one shared expert; the config has no key for it
    return {
        "num_experts": experts,
        "experts_per_token": top_k,
        "moe_intermediate_size": expert_width,
        "num_shared_experts": shared,
        "num_dense_layers": dense_layers,
    }


def load_model(path: str | Path) -> ModelSpec:
    """Read a decoder-only Hugging Face `config.json` (or a folder holding one) as a ModelSpec.

    Uses the standard keys (num_hidden_layers, hidden_size, num_attention_heads,
    num_key_value_heads [default: heads], head_dim [default: hidden / heads],
    intermediate_size, vocab_size, max_position_embeddings, the expert-count keys of
    Mixtral/Qwen-MoE/DeepSeek/gpt-oss, kv_lora_rank and qk_*_head_dim for MLA), looking
    inside `text_config` for multimodal models. Parameters are estimated from the shapes
    with `estimate_params_b` (params_source = "estimated").

    Args:
        path: a config.json file, or a folder containing config.json.

    Returns:
        The model's spec, named after `_name_or_path` or the folder.

    Raises:
        CatalogError: unreadable or non-JSON file, a non-decoder model, a missing or
            non-positive required key, or shapes that fail validation; one line naming the file.
    """
    file, top = _read_config(Path(path))
    _check_decoder_only(top, file)
    text = top.get("text_config")
    cfg: dict[str, Any] = text if isinstance(text, dict) else top
    num_layers = _positive_int(cfg, "num_hidden_layers", file)
    hidden = _positive_int(cfg, "hidden_size", file)
    heads = _positive_int(cfg, "num_attention_heads", file)
    mla = cfg.get("kv_lora_rank") is not None
    fields: dict[str, Any] = {
        "name": str(top.get("_name_or_path") or file.parent.name or file),
        "model_type": str(cfg.get("model_type") or top.get("model_type") or "unknown"),
        "attention": "mla" if mla else "gqa",
        "num_layers": num_layers,
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_kv_heads": _positive_int(cfg, "num_key_value_heads", file, default=heads),
        "intermediate_size": _positive_int(
            cfg,
            "intermediate_size_mlp" if "intermediate_size_mlp" in cfg else "intermediate_size",
            file,
        ),
        "vocab_size": _positive_int(cfg, "vocab_size", file),
        "max_context_tokens": _positive_int(cfg, "max_position_embeddings", file),
        "tie_word_embeddings": bool(top.get("tie_word_embeddings", cfg.get("tie_word_embeddings"))),
        "total_params_b": 1.0,  # placeholders, replaced by the estimate below
        "active_params_b": 1.0,
        "params_source": "estimated",
        "source": f"user config {file}",
    }
    if mla:
        rope = _positive_int(cfg, "qk_rope_head_dim", file)
        nope = _positive_int(cfg, "qk_nope_head_dim", file)
        fields |= {
            "kv_lora_rank": _positive_int(cfg, "kv_lora_rank", file),
            "q_lora_rank": _optional_int(cfg, ("q_lora_rank",), file),
            "qk_rope_head_dim": rope,
            "qk_nope_head_dim": nope,
            "v_head_dim": _positive_int(cfg, "v_head_dim", file),
            "head_dim": rope + nope,
        }
    elif cfg.get("head_dim") is not None:
        fields["head_dim"] = _positive_int(cfg, "head_dim", file)
    elif hidden % heads:
        raise CatalogError(
            f"{file}: no 'head_dim' and hidden_size {hidden} is not a multiple of "
            f"num_attention_heads {heads}"
        )
    else:
        fields["head_dim"] = hidden // heads
    fields |= _moe_fields(cfg, num_layers, file) | _window(cfg, num_layers)
    try:
        spec = ModelSpec.model_validate(fields)
        total, active = estimate_params_b(spec)
        return ModelSpec.model_validate(
            fields | {"total_params_b": round(total, 3), "active_params_b": round(active, 3)}
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "config"
        raise CatalogError(f"{file}: {where}: {first['msg']}") from exc
