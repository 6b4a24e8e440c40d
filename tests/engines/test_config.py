"""EngineConfig validation and the plug-in registry."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from engines.base import EnginePlugin
from engines.config import EngineConfig, SpeculativeConfig
from engines.errors import EngineError, UnknownEngineError
from engines.registry import ENGINES, get_engine


def _config(**overrides: object) -> EngineConfig:
    return EngineConfig.model_validate({"engine": "vllm", "model": "org/m", **overrides})


def test_minimal_config_leaves_knobs_to_the_engine() -> None:
    config = _config()
    assert (config.tp, config.pp, config.port, config.host) == (1, 1, 8000, "0.0.0.0")
    assert config.max_num_seqs is None and config.prefix_caching is None
    assert config.kv_cache_dtype == "auto" and config.weight_quantization is None


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"tensor_parallel": 2}, "Extra inputs are not permitted"),
        ({"engine": "tgi"}, "Input should be 'vllm', 'sglang' or 'trtllm'"),
        ({"kv_cache_dtype": "fp6"}, "kv_cache_dtype"),
        ({"weight_quantization": "int3"}, "weight_quantization"),
        ({"tp": 0}, "greater than or equal to 1"),
        ({"pp": 0}, "greater than or equal to 1"),
        ({"gpu_memory_fraction": 0.0}, "greater than 0"),
        ({"gpu_memory_fraction": 1.2}, "less than or equal to 1"),
        ({"model": "--trust-remote-code"}, "must not start with '-'"),
        ({"model": "a\nb"}, "control characters"),
        ({"host": "0.0.0.0; id"}, "hostname or IP"),
        ({"port": 70000}, "less than or equal to 65535"),
        ({"extra_args": {"--enforce-eager": True}}, "long-flag name"),
        ({"extra_args": {"Block.Size": 16}}, "long-flag name"),
        ({"extra_args": {"block-size": [16]}}, "extra_args"),
        ({"disaggregation": {"prefill_instances": 0, "decode_instances": 1}}, "prefill_instances"),
        # Issue 16: YAML line breaks beyond ASCII, names no exec or path can take, and values
        # the engine's parser would read as a flag.
        ({"model": "org/m\u0085x"}, "control characters (U+0085)"),
        ({"model": "org/m\u2028x"}, "control characters (U+2028)"),
        ({"model": "org/" + "m" * 4093}, "4,097 bytes"),
        ({"model": "org/" + "模" * 2000}, "6,004 bytes"),
        ({"extra_args": {"served-model-name": "a\u0085b"}}, "control characters (U+0085)"),
        ({"extra_args": {"tokenizer": "--trust-remote-code"}}, "starts with '-'"),
        ({"extra_args": {"served-model-name": "x" * (128 * 1024)}}, "131,072 bytes"),
    ],
)
def test_invalid_configs_are_refused(overrides: dict[str, object], fragment: str) -> None:
    with pytest.raises(ValidationError, match=None) as info:
        _config(**overrides)
    assert fragment in str(info.value)


def test_the_longest_names_and_negative_numbers_pass() -> None:
    config = _config(model="org/" + "m" * 4092,
                     extra_args={"served-model-name": "x" * (128 * 1024 - 1), "seed": "-1"})
    assert len(config.model) == 4096 and config.extra_args["seed"] == "-1"


def test_u0085_is_why_controls_are_refused() -> None:
    """PyYAML reads U+0085 as a line break: the compose/K8s YAML would carry another name."""
    import yaml

    name = "org/m\u0085x"
    assert yaml.safe_load(yaml.safe_dump({"model": name}, allow_unicode=True))["model"] != name


@pytest.mark.parametrize("method", ["eagle", "eagle3", "draft_model"])
def test_draft_methods_need_a_draft_model(method: str) -> None:
    with pytest.raises(ValidationError, match=f"{method}' needs a draft_model"):
        SpeculativeConfig(method=method, num_tokens=3)  # type: ignore[arg-type]


@pytest.mark.parametrize("method", ["ngram", "mtp"])
def test_draftless_methods_refuse_a_draft_model(method: str) -> None:
    with pytest.raises(ValidationError, match="takes no draft_model"):
        SpeculativeConfig(method=method, num_tokens=3, draft_model="org/d")  # type: ignore[arg-type]


def test_speculative_num_tokens_at_least_one() -> None:
    with pytest.raises(ValidationError, match="greater than or equal to 1"):
        SpeculativeConfig(method="ngram", num_tokens=0)


def test_extra_args_keep_scalar_types() -> None:
    config = _config(extra_args={"enforce-eager": True, "block_size": 32, "swap-space": 4.5})
    assert config.extra_args == {"enforce-eager": True, "block_size": 32, "swap-space": 4.5}
    assert isinstance(config.extra_args["enforce-eager"], bool)


def test_registry_maps_kind_to_plugin() -> None:
    assert get_engine("vllm") is ENGINES["vllm"]
    for kind, plugin in ENGINES.items():
        assert plugin.kind == kind
        assert isinstance(plugin, EnginePlugin)


def test_unknown_engine_lists_known_kinds() -> None:
    with pytest.raises(UnknownEngineError) as info:
        get_engine("tgi")
    assert str(info.value) == "unknown engine 'tgi'; known engines: sglang, trtllm, vllm"
    assert isinstance(info.value, EngineError)


def test_an_instance_of_more_gpus_than_any_deployment_is_refused():
    # --tp 1000000000 was predicted ("±4 %") and exported as nvidia.com/gpu: 1000000000
    with pytest.raises(ValidationError, match="1,000,000,000 GPUs in one instance: at most "
                       "1,024"):
        EngineConfig(engine="vllm", model="m", tp=1_000_000_000)
    with pytest.raises(ValidationError, match="2,048 GPUs"):
        EngineConfig(engine="vllm", model="m", tp=8, pp=8, dp=32, ep=256)
    assert EngineConfig(engine="vllm", model="m", tp=8, dp=128, ep=1024).gpus_per_instance == 1024


def test_hardware_facts_serialize_their_dtypes_in_one_order():
    # a frozenset's order follows each process's string hashing: rec.json differed run to run
    from engines.facts import HardwareFacts

    facts = HardwareFacts(gpu_name="H100-SXM", native_dtypes=frozenset({"int8", "fp8", "bf16"}),
                          gpu_count=1, memory_per_gpu_gib=74.5)
    assert facts.model_dump(mode="json")["native_dtypes"] == ["bf16", "fp8", "int8"]
    assert HardwareFacts.model_validate_json(facts.model_dump_json()) == facts


@pytest.mark.parametrize("spec", [
    {"method": "eagle", "num_tokens": 3, "draft_model": "--trust-remote-code"},
    {"method": "draft_model", "num_tokens": 3, "draft_model": "org/d\nx"},
    {"method": "ngram", "num_tokens": 65},  # 100,000,000 reached SGLang's flags
])
def test_a_draft_that_reads_as_a_flag_or_a_huge_k_is_refused(spec: dict) -> None:
    # SGLang renders `--speculative-draft-model-path VALUE`: a leading dash was a new flag.
    with pytest.raises(ValidationError):
        SpeculativeConfig.model_validate(spec)
    assert SpeculativeConfig(method="ngram", num_tokens=64).num_tokens == 64
