"""EngineConfig → config file + launch argv → parsed back, for every registered plug-in.

No test here branches on an engine's name: each runs over `engines.registry.ENGINES`, and what
differs
between engines is a fact in `FACTS` (written from shared/reference/engines.md, not from the
plug-ins' code), which the generic assertions read.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from engines.base import EnginePlugin
from engines.config import EngineConfig
from engines.errors import CapabilityError, EngineError
from engines.registry import ENGINES

KINDS = sorted(ENGINES)
PATH = "/cfg/file.yaml"


@dataclass(frozen=True)
class Facts:
    """What one engine can express and how its spellings read back."""

    # field (or "speculative.method") → our values the engine has no spelling for.
    refused: dict[str, frozenset[Any]] = field(default_factory=dict)
    # field → {value given: value read back}: our spellings the engine cannot tell apart.
    same_as: dict[str, dict[Any, Any]] = field(default_factory=dict)
    # Fields that only declare what the checkpoint is: never rendered, read back as None.
    declared_only: frozenset[str] = frozenset()
    flag_sep: str = "-"  # the engine's one separator inside long-flag names
    negation: str | None = None  # prefix of a switch's off form (`--no-X`)
    # A `false` extra arg: kept (it has an off form), refused, or the default (switches are
    # off unless given), so it renders nothing.
    false_switch: Literal["kept", "refused", "default"] = "kept"
    extras_from_cli_text: bool = False  # extra args read back from argv text, not YAML
    argv_required: bool = False  # the file holds only part of the settings
    # "flags": server_argv carries the file's settings as flags; "file": it reads the file.
    server_argv_form: Literal["flags", "file"] = "flags"
    # Extra args checked against the engine's own flags: a sample of them (name → "switch"
    # with an off form, "on-switch" without one, or "value"); any other name is refused.
    # None: the plug-in does not know the engine's flags and passes any name on.
    known_flags: dict[str, str] | None = None
    # The attention TP size the engine gives every attention-DP rank, where it fixes one:
    # DEP (dp > 1) with another tp has no spelling. None: any tp per DP rank.
    attention_dp_tp: int | None = None


# Real flags the strategy below draws, with their kind in `vllm serve --help` (vLLM 0.32).
VLLM_SAMPLE_FLAGS = {"seed": "value", "served-model-name": "value",
                     "enforce-eager": "switch", "disable-log-stats": "on-switch"}


FACTS: dict[str, Facts] = {
    "vllm": Facts(
        refused={"kv_cache_dtype": frozenset({"int8", "fp4"}),
                 "weight_quantization": frozenset({"int8", "int4"})},
        same_as={"kv_cache_dtype": {"bf16": "auto", "fp16": "auto"},
                 "weight_quantization": {"none": None}},
        negation="no-",
        known_flags=VLLM_SAMPLE_FLAGS,
    ),
    "sglang": Facts(
        refused={"kv_cache_dtype": frozenset({"int8"}),
                 "weight_quantization": frozenset({"int8", "int4"})},
        same_as={"kv_cache_dtype": {"fp16": "auto", "fp8_e4m3": "fp8"},
                 "weight_quantization": {"none": None},
                 # On by default and switched off only: True renders nothing.
                 "prefix_caching": {True: None}, "chunked_prefill": {True: None}},
        false_switch="refused",
    ),
    "trtllm": Facts(
        refused={"kv_cache_dtype": frozenset({"fp8_e5m2", "int8"}),
                 "weight_quantization": frozenset({"int8", "int4", "gptq", "mxfp4"}),
                 "speculative.method": frozenset({"eagle"})},
        same_as={"kv_cache_dtype": {"bf16": "auto", "fp16": "auto", "fp8_e4m3": "fp8"}},
        declared_only=frozenset({"weight_quantization"}),
        flag_sep="_",
        false_switch="default",
        extras_from_cli_text=True,
        argv_required=True,
        server_argv_form="file",
        attention_dp_tp=1,  # enable_attention_dp: every rank runs attention alone
    ),
}


def test_every_registered_engine_has_facts() -> None:
    assert sorted(FACTS) == KINDS


# -- what a config means, per the facts ---------------------------------------------------


def _value_of(config: EngineConfig, name: str) -> Any:
    if name == "speculative.method":
        return None if config.speculative is None else config.speculative.method
    return getattr(config, name)


def _extra_meaning(extra: dict[str, Any], facts: Facts) -> tuple[dict[str, Any], bool]:
    """(flag → value as the engine sees it, whether two extra args set one flag)."""
    out: dict[str, Any] = {}
    clash = False
    for key, raw in extra.items():
        name, value = re.sub("[-_]", facts.flag_sep, key), raw
        if facts.negation and value is True and name.startswith(facts.negation):
            name, value = name[len(facts.negation):], False
        clash = clash or name in out
        if isinstance(value, bool):
            out[name] = value
        elif facts.extras_from_cli_text:
            out[name] = str(value)
        else:
            out[name] = (type(value), value)
    if facts.false_switch == "default":
        out = {name: value for name, value in out.items() if value is not False}
    return out, clash


def _should_refuse(config: EngineConfig, facts: Facts) -> bool:
    if any(_value_of(config, name) in values for name, values in facts.refused.items()):
        return True
    if facts.attention_dp_tp is not None and config.dp > 1 and \
            config.tp != facts.attention_dp_tp:
        return True
    if facts.false_switch == "refused" and any(v is False for v in config.extra_args.values()):
        return True
    if facts.known_flags is not None and any(
            not _flag_accepts(facts, key, value) for key, value in config.extra_args.items()):
        return True
    return _extra_meaning(config.extra_args, facts)[1]


def _flag_accepts(facts: Facts, key: str, value: Any) -> bool:
    """Whether the engine's parser takes `--key value` (`--[no-]key` for a bool)."""
    known = facts.known_flags or {}
    name = re.sub("[-_]", facts.flag_sep, key)
    if facts.negation and name.startswith(facts.negation) and \
            known.get(name[len(facts.negation):]) == "switch":
        return value is True  # `no-X: true` is `--no-X`; `no-X: false` would be `--no-no-X`
    kind = known.get(name)
    if kind == "value":
        return not isinstance(value, bool)
    if kind == "switch":
        return isinstance(value, bool)
    return kind == "on-switch" and value is True


def _expected_field(config: EngineConfig, name: str, facts: Facts) -> Any:
    if name in facts.declared_only:
        return None
    given = getattr(config, name)
    same = facts.same_as.get(name, {})
    return same.get(given, given) if isinstance(given, (str, bool)) else given


def _flag_map(argv: Sequence[str]) -> tuple[list[str], dict[str, Any]]:
    """(positional head, {flag: value text or True for a bare switch}) of a launch command."""
    first = next((i for i, arg in enumerate(argv) if arg.startswith("--")), len(argv))
    flags: dict[str, Any] = {}
    index = first
    while index < len(argv):
        name = argv[index].removeprefix("--")
        if index + 1 < len(argv) and not argv[index + 1].startswith("--"):
            flags[name] = argv[index + 1]
            index += 2
        else:
            flags[name] = True
            index += 1
    return list(argv[:first]), flags


def _as_flag_value(value: Any) -> Any:
    return True if value is True else str(value)


# -- the round-trip property ------------------------------------------------------------------


_names = st.one_of(
    st.from_regex(r"(no-)?x[a-z0-9]{0,3}([-_][a-z0-9]{1,2})?", fullmatch=True),
    st.sampled_from(["seed", "served_model_name", "enforce-eager", "no-enforce-eager",
                     "disable_log_stats"]),
)
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
def _parallelism(draw: st.DrawFn) -> dict[str, int]:
    """tp/pp/dp/ep of one of the layouts EngineConfig accepts: TP, TEP or DEP."""
    tp, pp = draw(st.integers(1, 8)), draw(st.integers(1, 4))
    layout = draw(st.sampled_from(["TP", "TEP", "DEP"]))
    dp = draw(st.integers(2, 8)) if layout == "DEP" else 1
    ep = 1 if layout == "TP" else tp * dp
    return {"tp": tp, "pp": pp, "dp": dp, "ep": ep}


@st.composite
def configs(draw: st.DrawFn, kind: str) -> EngineConfig:
    opt = lambda strat: draw(st.one_of(st.none(), strat))  # noqa: E731
    return EngineConfig.model_validate({
        "engine": kind,
        "model": draw(st.sampled_from(["org/model-7b", "/models/llama", "m"])),
        **draw(_parallelism()),
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


def _render(plugin: EnginePlugin, config: EngineConfig) -> tuple[tuple[str, str], list[str],
                                                                   list[str]]:
    """(config file, launch argv with the file at PATH, flags-only launch argv)."""
    return (plugin.config_file(config), plugin.serve_argv_with_config_file(config, PATH),
            plugin.server_argv(config))


def _check_round_trip(plugin: EnginePlugin, config: EngineConfig) -> None:
    facts = FACTS[plugin.kind]
    try:
        (name, text), argv, flags_argv = _render(plugin, config)
    except CapabilityError as exc:
        # Refused exactly when the config uses what the engine cannot express, with a reason.
        assert _should_refuse(config, facts), f"refused an expressible config: {exc.reason}"
        assert exc.reason and "\n" not in exc.reason
        return
    assert not _should_refuse(config, facts), "rendered a config the engine cannot express"

    # Deterministic: an equal config built afresh renders the same bytes.
    twin = EngineConfig.model_validate(config.model_dump())
    assert _render(plugin, twin) == ((name, text), argv, flags_argv)

    # The file is plain YAML: a mapping of setting names.
    data = yaml.safe_load(text) or {}
    assert isinstance(data, dict) and all(isinstance(k, str) for k in data)

    read = plugin.config_from_file(config.model, text, argv)
    # Every field the engine can express comes back; the rest as the facts say.
    for field_name in EngineConfig.model_fields:
        if field_name != "extra_args":
            assert getattr(read, field_name) == _expected_field(config, field_name, facts), (
                field_name
            )
    assert _extra_meaning(read.extra_args, facts)[0] == _extra_meaning(config.extra_args,
                                                                       facts)[0]
    # What was read renders back to the very same file and commands (nothing lost either way).
    assert _render(plugin, read) == ((name, text), argv, flags_argv)
    if not facts.argv_required:
        assert plugin.config_from_file(config.model, text) == read

    # The flags-only launch carries the same settings as the file launch.
    if facts.server_argv_form == "flags":
        head, file_flags = _flag_map(argv[:-1])
        head_flags, flags = _flag_map(flags_argv)
        assert head_flags == head
        path_flag = [flag for flag, value in file_flags.items() if value == True]  # noqa: E712
        assert path_flag == [argv[-2].removeprefix("--")]  # the file's flag, bare at the end
        del file_flags[path_flag[0]]
        assert flags == {**file_flags, **{k: _as_flag_value(v) for k, v in data.items()}}
    else:
        assert flags_argv == plugin.serve_argv_with_config_file(config, name)


@pytest.mark.parametrize("kind", KINDS)
def test_round_trip_keeps_every_expressible_field(kind: str) -> None:
    plugin = ENGINES[kind]

    @settings(max_examples=150, deadline=None)
    @given(configs(kind))
    def run(config: EngineConfig) -> None:
        _check_round_trip(plugin, config)

    run()


# -- examples ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_argv_is_optional_exactly_where_the_file_holds_everything(kind: str) -> None:
    config = EngineConfig.model_validate({"engine": kind, "model": "m", "tp": 2,
                                          "max_num_seqs": 64})
    plugin = ENGINES[kind]
    text = plugin.config_file(config)[1]
    if FACTS[kind].argv_required:
        with pytest.raises(EngineError, match="argv"):
            plugin.config_from_file("m", text)
    else:
        assert plugin.config_from_file("m", text) == config


@pytest.mark.parametrize(
    ("kind", "given_", "read"),
    [
        ("vllm", {"kv_cache_dtype": "bf16"}, {"kv_cache_dtype": "auto"}),
        ("vllm", {"weight_quantization": "none"}, {"weight_quantization": None}),
        ("vllm", {"extra_args": {"no-enforce-eager": True}},
         {"extra_args": {"enforce-eager": False}}),
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
    plugin = ENGINES[kind]
    text = plugin.config_file(config)[1]
    back = plugin.config_from_file("m", text, plugin.serve_argv_with_config_file(config, PATH))
    assert back == config.model_copy(update=read)


@pytest.mark.parametrize("extra", [{"x_a": 1, "x-a": 2}, {"no-x": True, "x": True}])
@pytest.mark.parametrize("kind", KINDS)
def test_two_extra_args_for_one_flag_are_refused_not_merged(kind: str,
                                                            extra: dict[str, Any]) -> None:
    config = EngineConfig.model_validate({"engine": kind, "model": "m", "extra_args": extra})
    plugin = ENGINES[kind]
    if not _extra_meaning(extra, FACTS[kind])[1]:
        # Two flags to this engine: both must come back.
        _check_round_trip(plugin, config)
        return
    with pytest.raises(CapabilityError, match=r"flag --"):
        _render(plugin, config)


@pytest.mark.parametrize(
    "fields",
    [
        {"tp": 4, "pp": 2, "max_batched_tokens": 8192, "chunked_prefill": False},
        {"speculative": {"method": "eagle3", "num_tokens": 3, "draft_model": "org/d"}},
        {"speculative": {"method": "ngram", "num_tokens": 5}, "gpu_memory_fraction": 0.8,
         "prefix_caching": False, "max_model_len": 4096, "port": 9000},
        {"tp": 8, "ep": 8},  # TEP
        {"dp": 8, "ep": 8, "max_num_seqs": 256},  # DEP, one GPU per attention rank
        {"tp": 4, "pp": 2, "ep": 4, "max_model_len": 8192},
    ],
)
@pytest.mark.parametrize("kind", KINDS)
def test_literal_configs_round_trip(kind: str, fields: dict[str, Any]) -> None:
    config = EngineConfig.model_validate({"engine": kind, "model": "org/m", **fields})
    plugin = ENGINES[kind]
    text = plugin.config_file(config)[1]
    argv = plugin.serve_argv_with_config_file(config, PATH)
    assert plugin.config_from_file("org/m", text, argv) == config


@pytest.mark.parametrize(
    ("kind", "extra_line", "key"),
    [
        ("vllm", "tp: 2\n", "tp"),
        ("sglang", "model: other\n", "model"),
        # (`enable_attention_dp` is one ServeFit writes now: DEP, see trtllm/test_plugin.py.)
        ("trtllm", "moe_config:\n  backend: CUTLASS\n", "moe_config"),
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
    text = plugin.config_file(config)[1]
    # Where the file alone is readable, it alone must be refused; else with its argv.
    argv = plugin.serve_argv_with_config_file(config, PATH) if FACTS[kind].argv_required else None
    with pytest.raises(EngineError, match="disaggregated"):
        plugin.config_from_file("m", text, argv)


@pytest.mark.parametrize("kind", KINDS)
def test_a_changed_argv_is_refused(kind: str) -> None:
    config = EngineConfig.model_validate({"engine": kind, "model": "m", "port": 8001})
    plugin = ENGINES[kind]
    text = plugin.config_file(config)[1]
    argv = plugin.serve_argv_with_config_file(config, PATH)
    assert plugin.config_from_file("m", text, argv) == config  # the unchanged one reads
    with pytest.raises(EngineError):
        plugin.config_from_file("m", text, [*argv, "--zzz"])
    with pytest.raises(EngineError):
        plugin.config_from_file("m", text, ["other" if arg == "m" else arg for arg in argv])
