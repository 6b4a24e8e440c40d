"""EngineConfig → config file (+ launch argv) → parsed back: equal up to normalisations."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from engines import ENGINES
from engines.config import EngineConfig
from engines.errors import CapabilityError, EngineError

KINDS = ("vllm", "sglang", "trtllm")
PATH = "/cfg/file.yaml"


def _normalise(config: EngineConfig) -> EngineConfig:
    """What each plug-in documents it cannot tell apart in its file (and argv)."""
    upd: dict[str, Any] = {}
    kv, quant, extra = config.kv_cache_dtype, config.weight_quantization, dict(config.extra_args)
    if config.engine == "vllm":
        upd["kv_cache_dtype"] = "auto" if kv in ("bf16", "fp16") else kv
        upd["weight_quantization"] = None if quant == "none" else quant
        out: dict[str, Any] = {}
        for key, value in extra.items():
            name = key.replace("_", "-")
            negated = name.startswith("no-") and value is True
            out[name[3:] if negated else name] = False if negated else value
        upd["extra_args"] = out
    elif config.engine == "sglang":
        upd["kv_cache_dtype"] = {"fp16": "auto", "fp8_e4m3": "fp8"}.get(kv, kv)
        upd["weight_quantization"] = None if quant == "none" else quant
        upd["prefix_caching"] = None if config.prefix_caching else config.prefix_caching
        upd["chunked_prefill"] = None if config.chunked_prefill else config.chunked_prefill
        upd["extra_args"] = {k.replace("_", "-"): v for k, v in extra.items()}
    else:
        upd["kv_cache_dtype"] = {"bf16": "auto", "fp16": "auto", "fp8_e4m3": "fp8"}.get(kv, kv)
        upd["weight_quantization"] = None
        upd["extra_args"] = {
            k.replace("-", "_"): _cli_typed(v) for k, v in extra.items() if v is not False
        }
    return config.model_copy(update=upd)


def _cli_typed(value: Any) -> Any:
    if isinstance(value, str):
        for kind in (int, float):
            try:
                if str(kind(value)) == value:
                    return kind(value)
            except ValueError:
                pass
    return value


def _read_back(config: EngineConfig) -> EngineConfig:
    plugin = ENGINES[config.engine]
    text = plugin.config_file(config)[1]
    return plugin.config_from_file(
        config.model, text, plugin.serve_argv_with_config_file(config, PATH)
    )


_names = st.from_regex(r"x[a-z0-9]{0,6}([-_][a-z0-9]{1,4})?", fullmatch=True)
_texts = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=12).filter(
    lambda s: not s.startswith("-")
)
_values = st.one_of(
    st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=False, allow_infinity=False),
    _texts,
)
_spec = st.one_of(
    st.none(),
    st.builds(dict, method=st.sampled_from(["ngram", "mtp"]), num_tokens=st.integers(1, 8)),
    st.builds(dict, method=st.sampled_from(["eagle", "eagle3", "draft_model"]),
              num_tokens=st.integers(1, 8), draft_model=st.sampled_from(["org/draft", "/d"])),
)


@st.composite
def configs(draw: st.DrawFn, kind: str) -> EngineConfig:
    opt = lambda strat: draw(st.one_of(st.none(), strat))  # noqa: E731
    return EngineConfig.model_validate({
        "engine": kind,
        "model": draw(st.sampled_from(["org/model-7b", "/models/llama", "m"])),
        "tp": draw(st.integers(1, 8)),
        "pp": draw(st.integers(1, 4)),
        "max_num_seqs": opt(st.integers(1, 4096)),
        "max_batched_tokens": opt(st.integers(1, 65536)),
        "gpu_memory_fraction": opt(st.floats(0.01, 1.0)),
        "prefix_caching": opt(st.booleans()),
        "chunked_prefill": opt(st.booleans()),
        "kv_cache_dtype": draw(st.sampled_from(
            ["auto", "bf16", "fp16", "fp8", "fp8_e4m3", "fp8_e5m2", "int8", "fp4"])),
        "weight_quantization": opt(st.sampled_from(
            ["none", "fp8", "int8", "int4", "awq", "gptq", "nvfp4", "mxfp4"])),
        "speculative": draw(_spec),
        "max_model_len": opt(st.integers(1, 1 << 20)),
        "extra_args": draw(st.dictionaries(_names, _values, max_size=3)),
        "host": draw(st.sampled_from(["0.0.0.0", "127.0.0.1", "::1", "node-1"])),
        "port": draw(st.integers(1, 65535)),
    })


def _renderable(config: EngineConfig) -> bool:
    plugin = ENGINES[config.engine]
    try:
        plugin.config_file(config)
        plugin.serve_argv_with_config_file(config, PATH)
    except CapabilityError:
        return False
    return True


@pytest.mark.parametrize("kind", KINDS)
def test_round_trip_equals_up_to_normalisation(kind: str) -> None:
    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
    @given(configs(kind))
    def run(config: EngineConfig) -> None:
        assume(_renderable(config))
        # Distinct flags after renaming, or the file would merge two extra args into one.
        names = [k.replace("_", "-") for k in config.extra_args]
        assume(len(set(names)) == len(names))
        assert _read_back(config) == _normalise(config)

    run()


@pytest.mark.parametrize("kind", ["vllm", "sglang"])
def test_argv_is_optional_where_the_file_holds_everything(kind: str) -> None:
    config = EngineConfig(engine=kind, model="m", tp=2, max_num_seqs=64)  # type: ignore[arg-type]
    plugin = ENGINES[kind]
    assert plugin.config_from_file("m", plugin.config_file(config)[1]) == config


@pytest.mark.parametrize(
    ("kind", "given_", "read"),
    [
        ("vllm", {"kv_cache_dtype": "bf16"}, {"kv_cache_dtype": "auto"}),
        ("vllm", {"weight_quantization": "none"}, {"weight_quantization": None}),
        ("vllm", {"extra_args": {"no-foo": True}}, {"extra_args": {"foo": False}}),
        ("vllm", {"extra_args": {"served_model_name": "x"}},
         {"extra_args": {"served-model-name": "x"}}),
        ("sglang", {"kv_cache_dtype": "fp8_e4m3"}, {"kv_cache_dtype": "fp8"}),
        ("sglang", {"kv_cache_dtype": "fp16"}, {"kv_cache_dtype": "auto"}),
        ("sglang", {"prefix_caching": True, "chunked_prefill": True},
         {"prefix_caching": None, "chunked_prefill": None}),
        ("trtllm", {"kv_cache_dtype": "fp8_e4m3"}, {"kv_cache_dtype": "fp8"}),
        ("trtllm", {"weight_quantization": "fp8"}, {"weight_quantization": None}),
        ("trtllm", {"extra_args": {"a-b": "3", "c": False, "d": True}},
         {"extra_args": {"a_b": 3, "d": True}}),
    ],
)
def test_each_normalisation_is_explicit(kind: str, given_: dict[str, Any],
                                        read: dict[str, Any]) -> None:
    config = EngineConfig.model_validate({"engine": kind, "model": "m", **given_})
    assert _read_back(config) == config.model_copy(update=read)


@pytest.mark.parametrize(
    "fields",
    [
        {"tp": 4, "pp": 2, "max_batched_tokens": 8192, "chunked_prefill": False},
        {"speculative": {"method": "eagle3", "num_tokens": 3, "draft_model": "org/d"}},
        {"speculative": {"method": "ngram", "num_tokens": 5}, "gpu_memory_fraction": 0.8,
         "prefix_caching": False, "max_model_len": 4096, "port": 9000},
    ],
)
@pytest.mark.parametrize("kind", KINDS)
def test_literal_configs_round_trip(kind: str, fields: dict[str, Any]) -> None:
    config = EngineConfig.model_validate({"engine": kind, "model": "org/m", **fields})
    assert _read_back(config) == config


@pytest.mark.parametrize(
    ("kind", "extra_line", "key"),
    [
        ("vllm", "tp: 2\n", "tp"),
        ("sglang", "model: other\n", "model"),
        ("trtllm", "enable_attention_dp: true\n", "enable_attention_dp"),
        ("trtllm", "kv_cache_config:\n  tokens_per_block: 32\n",
         "kv_cache_config.tokens_per_block"),
    ],
)
def test_unknown_key_is_refused_by_name(kind: str, extra_line: str, key: str) -> None:
    config = EngineConfig.model_validate({"engine": kind, "model": "m"})
    plugin = ENGINES[kind]
    text = plugin.config_file(config)[1] + extra_line
    argv = plugin.serve_argv_with_config_file(config, PATH)
    with pytest.raises(EngineError, match=f"unknown key '{key}'"):
        plugin.config_from_file("m", text, argv)


@pytest.mark.parametrize("kind", KINDS)
def test_disaggregated_files_are_refused(kind: str) -> None:
    config = EngineConfig.model_validate(
        {"engine": kind, "model": "m",
         "disaggregation": {"prefill_instances": 1, "decode_instances": 1}}
    )
    plugin = ENGINES[kind]
    argv = plugin.serve_argv_with_config_file(config, PATH) if kind != "sglang" else None
    with pytest.raises(EngineError, match="disaggregated"):
        plugin.config_from_file("m", plugin.config_file(config)[1], argv)


def test_trtllm_needs_the_launch_argv() -> None:
    config = EngineConfig(engine="trtllm", model="m")
    plugin = ENGINES["trtllm"]
    with pytest.raises(EngineError, match="argv"):
        plugin.config_from_file("m", plugin.config_file(config)[1])


@pytest.mark.parametrize("kind", KINDS)
def test_a_changed_value_or_argv_is_refused(kind: str) -> None:
    config = EngineConfig.model_validate({"engine": kind, "model": "m", "port": 8001})
    plugin = ENGINES[kind]
    argv = plugin.serve_argv_with_config_file(config, PATH)
    with pytest.raises(EngineError):
        plugin.config_from_file("m", plugin.config_file(config)[1], [*argv, "--zzz"])
