"""A Hugging Face `config.json` (any decoder-only model) as a `ModelSpec`: a user's own, or
one aiconfigurator-core bundles (`catalog.get_model` finds those by id).

Reads the shapes, the checkpoint's weight precision and the KV-cache format it declares
(`quantization_config`, or NVIDIA ModelOpt's `hf_quant_config.json` beside it) and refuses,
in one line, models whose layers are not all attention of one shape (hybrid Mamba or linear
attention, per-layer blocks, compressed KV): their state is not the KV cache the project sizes.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from core.errors import CatalogError
from recommender.catalog.specs import Dtype, ModelSpec, estimate_params_b

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
# Attention shapes some layers override (Gemma 4's global layers, MiMo-V2's sliding ones):
# (override key, the key it overrides). Different values = more than one attention shape.
_PER_LAYER_SHAPES = (
    ("global_head_dim", "head_dim"),
    ("num_global_key_value_heads", "num_key_value_heads"),
    ("swa_head_dim", "head_dim"),
    ("swa_num_key_value_heads", "num_key_value_heads"),
    ("swa_num_attention_heads", "num_attention_heads"),
)
# Weight formats a checkpoint's quantization names (ModelOpt quant_algo, HF quant_method).
_QUANT_DTYPES: dict[str, Dtype] = {
    "fp8": "fp8", "fp8_block": "fp8", "fp8_pb_wo": "fp8", "mxfp8": "fp8", "fbgemm_fp8": "fp8",
    "nvfp4": "nvfp4", "mxfp4": "mxfp4", "w4a16_mxfp4": "mxfp4", "w4a8_mxfp4_fp8": "mxfp4",
    "int8": "int8", "int8_wo": "int8", "w8a8_sq_per_channel": "int8",
    "int4": "int4", "int4_wo": "int4", "w4a16_awq": "int4", "w4a8_awq": "int4",
}  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Reading keys


def _positive_int(cfg: Mapping[str, Any], key: str, where: str, default: Any = None) -> int:
    value = cfg.get(key, default)
    if value is None:
        raise CatalogError(f"{where}: missing required key {key!r} (decoder-only HF config?)")
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise CatalogError(f"{where}: key {key!r} must be a positive integer, got {value!r}")
    return value


def _optional_int(cfg: Mapping[str, Any], keys: tuple[str, ...], where: str) -> int | None:
    for key in keys:
        if cfg.get(key) is not None:
            return _positive_int(cfg, key, where)
    return None


def _read_json(file: Path, what: str) -> dict[str, Any]:
    try:
        raw = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise CatalogError(f"{file}: no such {what} (expected a config.json)") from exc
    except OSError as exc:
        raise CatalogError(f"{file}: cannot read {what} ({exc.strerror})") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CatalogError(f"{file}: not valid JSON ({exc})") from exc
    except RecursionError:  # `[[[[…` a hundred thousand deep: no config.json is
        raise CatalogError(f"{file}: JSON nested too deeply") from None
    if not isinstance(raw, dict):
        raise CatalogError(f"{file}: expected a JSON object at the top level")
    return raw


# ---------------------------------------------------------------------------------------------
# What the shapes cannot say


def _check_decoder_only(cfg: Mapping[str, Any], where: str) -> None:
    model_type = str(cfg.get("model_type", "")).lower()
    archs = cfg.get("architectures") or []
    if cfg.get("is_encoder_decoder") or model_type in _NON_DECODER_MODEL_TYPES:
        raise CatalogError(
            f"{where}: model_type {model_type!r} is not a decoder-only language model"
        )
    if archs and not any(m in str(a) for a in archs for m in _DECODER_ARCH_MARKERS):
        raise CatalogError(
            f"{where}: architectures {archs} have no causal-LM head (decoder-only models only)"
        )


def _unsupported(cfg: Mapping[str, Any]) -> str | None:
    """Why one attention shape over every layer cannot describe this model, or None."""
    layer_types = [str(t) for t in cfg.get("layer_types") or []]
    linear = [k for k in cfg if k.startswith("linear_")]
    if any("linear" in t for t in layer_types):
        return "interleaves linear-attention layers with full attention (layer_types)"
    if linear:
        return f"interleaves linear-attention layers with full attention ({linear[0]})"
    mamba = [k for k in cfg if k.startswith("mamba") or k in ("ssm_state_size",
                                                              "hybrid_override_pattern")]
    if mamba:
        key = "hybrid_override_pattern" if "hybrid_override_pattern" in cfg else mamba[0]
        return f"interleaves Mamba state-space layers with attention ({key})"
    if cfg.get("compress_ratios"):
        return "compresses its KV cache by a per-layer ratio (compress_ratios)"
    if cfg.get("block_configs"):
        return "has a different block on each layer (block_configs of a NAS-pruned model)"
    for override, base in _PER_LAYER_SHAPES:
        if cfg.get(override) is not None and cfg.get(override) != cfg.get(base):
            return (f"uses another attention shape on some layers ({override} "
                    f"{cfg.get(override)} vs {base} {cfg.get(base)})")
    v, k = cfg.get("v_head_dim"), cfg.get("head_dim")
    if cfg.get("kv_lora_rank") is None and v is not None and k is not None and v != k:
        return f"has value heads of another width than key heads (v_head_dim {v} vs head_dim {k})"
    return None


def _approximations(cfg: Mapping[str, Any]) -> list[str]:
    """What the spec describes only approximately (sparse attention read as dense)."""
    out = []
    if cfg.get("index_topk"):
        out.append(f"sparse attention (top-{cfg['index_topk']} indexer) sized as dense "
                   "attention; the indexer's keys are not in the KV size")
    sparse = cfg.get("sparse_attention_config")
    if isinstance(sparse, dict) and sparse.get("use_sparse_attention"):
        out.append("block-sparse attention (sparse_attention_config) sized as dense attention")
    return out


# ---------------------------------------------------------------------------------------------
# The checkpoint's weight precision


def _compressed_tensors_dtype(quant: Mapping[str, Any]) -> Dtype | None:
    """compressed-tensors' first config group: float8 → fp8, float4 in groups of 16 → nvfp4
    (of 32, or an mxfp4 format → mxfp4), int4 / int8 → int4 / int8."""
    groups = quant.get("config_groups")
    group = next(iter(groups.values()), None) if isinstance(groups, dict) else None
    if not isinstance(group, dict) or not isinstance(group.get("weights"), dict):
        return None
    weights = group["weights"]
    bits, kind = weights.get("num_bits"), str(weights.get("type", ""))
    if "mxfp4" in str(group.get("format", "")):
        return "mxfp4"
    if kind == "float" and bits == 8:
        return "fp8"
    if kind == "float" and bits == 4:
        return "nvfp4" if weights.get("group_size") == 16 else "mxfp4"
    if kind == "int" and bits in (4, 8):
        return "int4" if bits == 4 else "int8"
    return None


def _mixed_dtype(section: Mapping[str, Any]) -> str | None:
    """ModelOpt MIXED_PRECISION: the format most quantized layers use."""
    layers = section.get("quantized_layers")
    if not isinstance(layers, dict):
        return None
    algos = Counter(str(v.get("quant_algo")).lower() for v in layers.values()
                    if isinstance(v, dict) and v.get("quant_algo"))
    return algos.most_common(1)[0][0] if algos else None


def _checkpoint_dtype(cfgs: list[Mapping[str, Any]], hf_quant: Mapping[str, Any] | None
                      ) -> tuple[Dtype, list[str]]:
    """(weight format of the body, notes) from ModelOpt's hf_quant_config.json first, then
    the config's `quantization_config` (the text part's, then the top level's); bf16 when
    neither quantizes. A format the project does not size is bf16 with a note saying so."""
    sections: list[Mapping[str, Any]] = []
    if hf_quant and isinstance(hf_quant.get("quantization"), dict):
        sections.append(hf_quant["quantization"])
    sections += [c["quantization_config"] for c in cfgs
                 if isinstance(c.get("quantization_config"), dict)]
    if not sections:
        return "bf16", []
    section = sections[0]
    method = str(section.get("quant_algo") or section.get("quant_method") or "").lower()
    notes = []
    if method in ("mixed_precision", "mixed-precision"):
        method = _mixed_dtype(section) or method
        notes.append(f"mixed-precision checkpoint: weights sized as {method} throughout")
    dtype: Dtype | None = _QUANT_DTYPES.get(method)
    if dtype is None and method == "compressed-tensors":
        dtype = _compressed_tensors_dtype(section)
    if dtype is None and method in ("awq", "gptq", "awq_marlin", "gptq_marlin"):
        bits = section.get("bits") or section.get("w_bit") or 4
        dtype = "int4" if bits == 4 else "int8" if bits == 8 else None
    if dtype is None:
        return "bf16", [f"quantization {method or 'config'!r} not recognised: weights sized "
                        "as bf16"]
    return dtype, notes


def _checkpoint_kv_dtype(cfgs: list[Mapping[str, Any]], hf_quant: Mapping[str, Any] | None
                         ) -> Literal["fp8"] | None:
    """The KV-cache format the checkpoint declares, if any: ModelOpt's `kv_cache_quant_algo`
    ("FP8") or a `kv_cache_scheme` of 8-bit floats (ModelOpt and compressed-tensors write
    it into config.json). Engines serve it under --kv-cache-dtype auto
    (`EnginePlugin.serves_checkpoint_kv_dtype`); other declared formats are not sized."""
    sections: list[Mapping[str, Any]] = []
    if hf_quant and isinstance(hf_quant.get("quantization"), dict):
        sections.append(hf_quant["quantization"])
    sections += [c["quantization_config"] for c in cfgs
                 if isinstance(c.get("quantization_config"), dict)]
    for section in sections:
        if str(section.get("kv_cache_quant_algo") or "").upper() == "FP8":
            return "fp8"
        scheme = section.get("kv_cache_scheme")
        if isinstance(scheme, dict) and scheme.get("num_bits") == 8 \
                and scheme.get("type") == "float":
            return "fp8"
    return None


# ---------------------------------------------------------------------------------------------
# Shapes


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


def _moe_fields(cfg: Mapping[str, Any], num_layers: int, where: str) -> dict[str, Any]:
    experts = _optional_int(cfg, ("num_local_experts", "num_experts", "n_routed_experts"), where)
    if experts is None:
        return {}
    top_k = _optional_int(cfg, ("num_experts_per_tok", "experts_per_token"), where)
    if top_k is None:
        raise CatalogError(f"{where}: missing required key 'num_experts_per_tok' for a MoE model")
    expert_width = _optional_int(cfg, ("moe_intermediate_size",), where) or _positive_int(
        cfg, "intermediate_size", where
    )
    freq = cfg.get("moe_layer_freq")
    if isinstance(freq, list):  # MiniMax-M3, MiMo: 0 = a dense layer, 1 = a MoE layer
        dense_layers = sum(1 for f in freq if not f)
    else:
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


def _dense_width_key(cfg: Mapping[str, Any]) -> str:
    """The dense-MLP width's key: Llama 4's and MiniMax-M3's own, else intermediate_size."""
    for key in ("intermediate_size_mlp", "dense_intermediate_size"):
        if key in cfg:
            return key
    return "intermediate_size"


def load_model(path: str | Path, *, name: str | None = None, source: str | None = None,
               quant_path: str | Path | None = None) -> ModelSpec:
    """Read a decoder-only Hugging Face `config.json` (or a folder holding one) as a ModelSpec.

    Uses the standard keys (num_hidden_layers, hidden_size, num_attention_heads,
    num_key_value_heads [default: heads], head_dim [default: hidden / heads],
    intermediate_size, vocab_size, max_position_embeddings, the expert-count keys of
    Mixtral/Qwen-MoE/DeepSeek/gpt-oss, kv_lora_rank and qk_*_head_dim for MLA), looking
    inside `text_config` for multimodal models. Parameters are estimated from the shapes
    with `estimate_params_b` (params_source = "estimated"). The weight format
    (`checkpoint_dtype`) comes from ModelOpt's `hf_quant_config.json` (`quant_path`, default:
    the one beside the config, if any) or the config's `quantization_config`.

    Args:
        path: a config.json file, or a folder containing config.json.
        name: the spec's name (default: `_name_or_path`, else the folder's name).
        source: where the config came from (default: "user config <file>"); with `name`, it
            also names the model in error messages instead of the file.
        quant_path: an hf_quant_config.json to read instead of the one beside the config.

    Returns:
        The model's spec.

    Raises:
        CatalogError: unreadable or non-JSON file, a non-decoder model, layers that are not
            all attention of one shape (hybrid Mamba / linear attention, per-layer blocks or
            attention shapes, compressed KV), a missing or non-positive required key, or
            shapes that fail validation; one line naming the file (or `name (source)`).
    """
    given = Path(path)
    file = given / "config.json" if given.is_dir() else given
    top = _read_json(file, "model config")
    where = f"{name} ({source})" if name and source else str(file)
    quant_file = Path(quant_path) if quant_path is not None else file.with_name(
        "hf_quant_config.json")
    hf_quant = _read_json(quant_file, "quantization config") if quant_file.is_file() else None
    _check_decoder_only(top, where)
    text = top.get("text_config")
    cfg: dict[str, Any] = text if isinstance(text, dict) else top
    # the checkpoint's own type, as the catalog names it ('llama4', not its text part's)
    model_type = str(top.get("model_type") or cfg.get("model_type") or "unknown")
    why = _unsupported(cfg)
    if why is not None:
        raise CatalogError(f"{where}: model_type {model_type!r} {why}; ServeFit models "
                           "decoders whose layers are all attention of one shape")
    num_layers = _positive_int(cfg, "num_hidden_layers", where)
    hidden = _positive_int(cfg, "hidden_size", where)
    heads = _positive_int(cfg, "num_attention_heads", where)
    mla = cfg.get("kv_lora_rank") is not None
    dtype, notes = _checkpoint_dtype([cfg, top], hf_quant)
    fields: dict[str, Any] = {
        "name": name or str(top.get("_name_or_path") or file.parent.name or file),
        "model_type": model_type,
        "attention": "mla" if mla else "gqa",
        "num_layers": num_layers,
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_kv_heads": _positive_int(cfg, "num_key_value_heads", where, default=heads),
        "intermediate_size": _positive_int(cfg, _dense_width_key(cfg), where),
        "vocab_size": _positive_int(cfg, "vocab_size", where),
        "max_context_tokens": _positive_int(cfg, "max_position_embeddings", where),
        "tie_word_embeddings": bool(top.get("tie_word_embeddings", cfg.get("tie_word_embeddings"))),
        "checkpoint_dtype": dtype,
        "checkpoint_kv_dtype": _checkpoint_kv_dtype([cfg, top], hf_quant),
        "total_params_b": 1.0,  # placeholders, replaced by the estimate below
        "active_params_b": 1.0,
        "params_source": "estimated",
        "source": source or f"user config {file}",
        "notes": "; ".join(_approximations(cfg) + notes),
    }
    if mla:
        rope = _positive_int(cfg, "qk_rope_head_dim", where)
        nope = _positive_int(cfg, "qk_nope_head_dim", where)
        fields |= {
            "kv_lora_rank": _positive_int(cfg, "kv_lora_rank", where),
            "q_lora_rank": _optional_int(cfg, ("q_lora_rank",), where),
            "qk_rope_head_dim": rope,
            "qk_nope_head_dim": nope,
            "v_head_dim": _positive_int(cfg, "v_head_dim", where),
            "head_dim": rope + nope,
        }
    elif cfg.get("head_dim") is not None:
        fields["head_dim"] = _positive_int(cfg, "head_dim", where)
    elif hidden % heads:
        raise CatalogError(
            f"{where}: no 'head_dim' and hidden_size {hidden} is not a multiple of "
            f"num_attention_heads {heads}"
        )
    else:
        fields["head_dim"] = hidden // heads
    fields |= _moe_fields(cfg, num_layers, where) | _window(cfg, num_layers)
    try:
        spec = ModelSpec.model_validate(fields)
        total, active = estimate_params_b(spec)
        return ModelSpec.model_validate(
            fields | {"total_params_b": round(total, 3), "active_params_b": round(active, 3)}
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        where_field = ".".join(str(p) for p in first["loc"]) or "config"
        raise CatalogError(f"{where}: {where_field}: {first['msg']}") from exc
