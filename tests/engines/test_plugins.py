"""Behaviour every plug-in shares through the shared engine helpers, checked once per plug-in.

Engine-specific expectations (images, messages, default ports) are written literally in the
parametrization; exact argv, YAML and engine-only refusals stay in <engine>/test_plugin.py.
"""

from __future__ import annotations

import pytest

from engines.base import EnginePlugin
from engines.config import EngineConfig
from engines.containers import docker_argv
from engines.errors import CapabilityError, EngineError
from engines.facts import HardwareFacts, ModelFacts
from engines.layout import parallel_layout
from engines.registry import ENGINES
from engines.sglang import plugin as sglang
from engines.trtllm import plugin as trtllm
from engines.vllm import plugin as vllm
from tests.engines.conftest import H100, LLAMA_8B, MODEL, QWEN3_MOE

KINDS = list(ENGINES)
QWEN_HEADS = ModelFacts(num_attention_heads=28, num_kv_heads=4, max_context_tokens=32768)
KV_HEADS_4 = ModelFacts(num_attention_heads=48, num_kv_heads=4, max_context_tokens=8192)
TWO_LAYERS = ModelFacts(num_attention_heads=8, num_kv_heads=8, num_layers=2, max_context_tokens=8)
MQA = ModelFacts(num_attention_heads=48, num_kv_heads=1, max_context_tokens=8192)
NO_MTP = LLAMA_8B.model_copy(update={"has_mtp_heads": False})


def _config(kind: str, **overrides: object) -> EngineConfig:
    return EngineConfig.model_validate({"engine": kind, "model": MODEL, **overrides})


# -- registry --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "plugin", "port"),
    [
        ("vllm", vllm.PLUGIN, 8000),
        ("sglang", sglang.PLUGIN, 30000),
        ("trtllm", trtllm.PLUGIN, 8000),
    ],
)
def test_registered_and_satisfies_the_protocol(kind: str, plugin: object, port: int) -> None:
    assert ENGINES[kind] is plugin
    assert isinstance(plugin, EnginePlugin)
    assert ENGINES[kind].defaults.port == port


# -- docker ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "tag", "image"),
    [
        ("vllm", None, "vllm/vllm-openai:v0.33.0"),
        ("vllm", "0.30.1", "vllm/vllm-openai:v0.30.1"),
        ("vllm", "latest", "vllm/vllm-openai:latest"),
        ("sglang", None, "lmsysorg/sglang:v0.5.23"),
        ("sglang", "0.5.4.post1", "lmsysorg/sglang:v0.5.4.post1"),
        ("sglang", "v0.5.23-cu129", "lmsysorg/sglang:v0.5.23-cu129"),
        ("sglang", "latest", "lmsysorg/sglang:latest"),
        ("trtllm", None, "nvcr.io/nvidia/tensorrt-llm/release:1.2.1"),
        ("trtllm", "1.2.0rc6", "nvcr.io/nvidia/tensorrt-llm/release:1.2.0rc6"),
        ("trtllm", "1.0.0.post1", "nvcr.io/nvidia/tensorrt-llm/release:1.0.0.post1"),
    ],
)
def test_docker_image_tags(kind: str, tag: str | None, image: str) -> None:
    plugin = ENGINES[kind]
    assert (plugin.docker_image() if tag is None else plugin.docker_image(tag)) == image


@pytest.mark.parametrize(
    ("kind", "tag", "message"),
    [
        ("vllm", "0.33; rm -rf /", "not a vLLM release tag"),
        ("sglang", "0.5; rm -rf /", "not an SGLang image tag"),
        ("trtllm", "latest", "not a TensorRT-LLM release tag"),
        ("trtllm", "v1.2.1", "not a TensorRT-LLM release tag"),
        ("trtllm", "1.2; rm -rf /", "not a TensorRT-LLM release tag"),
    ],
)
def test_docker_image_refuses_bad_tags(kind: str, tag: str, message: str) -> None:
    with pytest.raises(EngineError, match=message):
        ENGINES[kind].docker_image(tag)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("gpus", "value"), [("all", "all"), (2, "2"), ([3], '"device=3"')])
def test_docker_gpu_selection(kind: str, gpus: object, value: str) -> None:
    argv = docker_argv(
        ENGINES[kind], _config(kind),
        image="i",
        host_port=8000,
        model_cache_dir="/c",
        gpus=gpus,  # type: ignore[arg-type]
    )
    assert argv[argv.index("--gpus") + 1] == value


# TensorRT-LLM also mounts its extra-options file; its own path checks are in trtllm/test_plugin.py.
_DOCKER_EXTRA = {"vllm": {}, "sglang": {}, "trtllm": {"config_file_path": "/c/x.yaml"}}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"model_cache_dir": "/a:/b"}, "model_cache_dir must be a path without ':'"),
        ({"model_cache_dir": ""}, "model_cache_dir must be a path without ':'"),
        ({"host_port": 0}, "host_port"),
        ({"host_port": 70000}, "host_port"),
        ({"gpus": []}, "gpus must be"),
        ({"gpus": 0}, "gpus must be"),
        ({"container_name": "x y"}, "invalid container name"),
    ],
)
def test_docker_run_argv_refuses_bad_inputs(kind: str, kwargs: dict, fragment: str) -> None:
    args = {"image": "i", "host_port": 8000, "model_cache_dir": "/c", **_DOCKER_EXTRA[kind]}
    with pytest.raises(EngineError, match=fragment):
        docker_argv(ENGINES[kind], _config(kind), **{**args, **kwargs})


# -- readiness -------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_readiness_probe(kind: str) -> None:
    probe = ENGINES[kind].readiness(_config(kind))
    assert (probe.health_path, probe.models_path, probe.completion_path) == (
        "/health", "/v1/models", "/v1/completions",
    )  # fmt: skip
    assert probe.served_model_name == MODEL
    assert probe.completion_body == {"model": MODEL, "prompt": "Hello", "max_tokens": 1}


@pytest.mark.parametrize("kind", ["vllm", "sglang"])
def test_readiness_probe_uses_the_served_model_name(kind: str) -> None:
    named = ENGINES[kind].readiness(_config(kind, extra_args={"served-model-name": "tiny"}))
    assert named.served_model_name == "tiny" and named.completion_body["model"] == "tiny"


# -- disaggregation --------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_disaggregation_plan_needs_the_section(kind: str) -> None:
    with pytest.raises(EngineError, match="no disaggregation"):
        ENGINES[kind].disaggregation_plan(_config(kind))


# -- capability checks -----------------------------------------------------------------------


def _shared_refusals() -> list[object]:
    rows: list[tuple[str, dict, HardwareFacts, ModelFacts, str]] = [
        ("vllm", {"engine": "sglang", "model": "m"}, H100, LLAMA_8B,
         "config is for engine 'sglang', not 'vllm'"),
        ("sglang", {"engine": "vllm", "model": "m"}, H100, LLAMA_8B,
         "config is for engine 'vllm', not 'sglang'"),
        ("trtllm", {"engine": "vllm", "model": "m"}, H100, LLAMA_8B,
         "config is for engine 'vllm', not 'trtllm'"),
        ("vllm", {"speculative": {"method": "mtp", "num_tokens": 1}}, H100, NO_MTP,
         "speculative method mtp needs a checkpoint with MTP layers"),
        ("sglang", {"speculative": {"method": "mtp", "num_tokens": 1}}, H100, NO_MTP,
         "speculative method mtp (SGLang NEXTN) needs a checkpoint with MTP layers"),
        ("trtllm", {"speculative": {"method": "mtp", "num_tokens": 1}}, H100, NO_MTP,
         "speculative method mtp needs a checkpoint with MTP layers"),
        # TensorRT-LLM does not check KV-head sharding
        ("vllm", {"tp": 6}, H100, KV_HEADS_4,
         "tp=6 and the model's 4 KV heads must divide one another"),
        ("sglang", {"tp": 6}, H100, KV_HEADS_4,
         "tp=6 and the model's 4 KV heads must divide one another"),
    ]  # fmt: skip
    for kind in KINDS:
        rows += [
            (kind, {"tp": 4, "pp": 4}, H100, LLAMA_8B,
             "tp×pp×dp×instances = 4×4×1×1 = 16 GPUs, but only 8 available"),
            (kind, {"tp": 2, "disaggregation": {"prefill_instances": 2, "decode_instances": 3}},
             H100, LLAMA_8B, "tp×pp×dp×instances = 2×1×1×5 = 10 GPUs, but only 8 "
             "available"),
            (kind, {"tp": 8}, H100, QWEN_HEADS, "tp=8 must divide the model's 28 attention heads"),
            (kind, {"pp": 4}, H100, TWO_LAYERS, "pp=4 exceeds the model's 2 layers"),
            (kind, {"max_model_len": 200_000}, H100, LLAMA_8B,
             "max_model_len=200000 exceeds the model's context of 131072 tokens"),
            (kind, {"extra_args": {"tensor_parallel_size": 4}}, H100, LLAMA_8B,
             "extra_args['tensor_parallel_size'] collides with a setting EngineConfig renders "
             "itself"),
            (kind, {"extra_args": {"tensor-parallel-size": 4}}, H100, LLAMA_8B,
             "extra_args['tensor-parallel-size'] collides with a setting EngineConfig renders "
             "itself"),
            # Expert parallelism: MoE only, and every GPU of every DP rank counts.
            (kind, {"tp": 8, "ep": 8}, H100, LLAMA_8B,
             "TEP (ep=8, dp=1) splits MoE experts over GPUs; the model is dense (not "
             "mixture-of-experts)"),
            (kind, {"dp": 8, "ep": 8}, H100, LLAMA_8B,
             "DEP (ep=8, dp=8) splits MoE experts over GPUs; the model is dense (not "
             "mixture-of-experts)"),
            (kind, {"dp": 16, "ep": 16}, H100, QWEN3_MOE,
             "tp×pp×dp×instances = 1×1×16×1 = 16 GPUs, but only 8 available"),
            (kind, {"dp": 4, "ep": 4, "pp": 2,
                    "disaggregation": {"prefill_instances": 1, "decode_instances": 1}},
             H100, QWEN3_MOE, "tp×pp×dp×instances = 1×2×4×2 = 16 GPUs, but only 8 available"),
        ]  # fmt: skip
    rows += [
        ("vllm", {"extra_args": {"data-parallel-size": 2}}, H100, LLAMA_8B,
         "extra_args['data-parallel-size'] collides with a setting EngineConfig renders itself"),
        ("vllm", {"extra_args": {"enable_expert_parallel": True}}, H100, LLAMA_8B,
         "extra_args['enable_expert_parallel'] collides with a setting EngineConfig renders "
         "itself"),
        ("sglang", {"extra_args": {"dp-size": 2}}, H100, LLAMA_8B,
         "extra_args['dp-size'] collides with a setting EngineConfig renders itself"),
        ("sglang", {"extra_args": {"enable-dp-attention": True}}, H100, LLAMA_8B,
         "extra_args['enable-dp-attention'] collides with a setting EngineConfig renders itself"),
        ("sglang", {"extra_args": {"expert_parallel_size": 8}}, H100, LLAMA_8B,
         "extra_args['expert_parallel_size'] collides with a setting EngineConfig renders "
         "itself"),
        ("trtllm", {"extra_args": {"ep_size": 8}}, H100, LLAMA_8B,
         "extra_args['ep_size'] collides with a setting EngineConfig renders itself"),
        ("trtllm", {"extra_args": {"moe-expert-parallel-size": 8}}, H100, LLAMA_8B,
         "extra_args['moe-expert-parallel-size'] collides with a setting EngineConfig renders "
         "itself"),
        # TensorRT-LLM's attention DP ranks have attention TP 1.
        ("trtllm", {"tp": 2, "dp": 4, "ep": 8}, H100, QWEN3_MOE,
         "dp=4 with tp=2: TensorRT-LLM's attention DP gives every rank attention TP 1; use "
         "tp=1, dp=8"),
    ]  # fmt: skip
    return [pytest.param(*row, id=f"{row[0]}-{i}") for i, row in enumerate(rows)]


@pytest.mark.parametrize(("kind", "overrides", "hardware", "model", "message"), _shared_refusals())
def test_capability_refusals(
    kind: str, overrides: dict, hardware: HardwareFacts, model: ModelFacts, message: str
) -> None:
    with pytest.raises(CapabilityError) as info:
        ENGINES[kind].check(_config(kind, **overrides), hardware, model)
    assert info.value.reason == message


@pytest.mark.parametrize(
    ("kind", "overrides"),
    [(kind, layout) for kind in KINDS
     for layout in ({"tp": 8, "ep": 8}, {"dp": 8, "ep": 8}, {"tp": 4, "pp": 2, "ep": 4})]
    + [("vllm", {"tp": 2, "dp": 4, "ep": 8}), ("sglang", {"tp": 2, "dp": 4, "ep": 8})],
)
def test_moe_layouts_pass_the_check(kind: str, overrides: dict) -> None:
    ENGINES[kind].check(_config(kind, **overrides), H100, QWEN3_MOE)  # 8 GPUs each


@pytest.mark.parametrize(
    ("overrides", "layout"),
    [({"tp": 8}, "TP"), ({"tp": 8, "ep": 8}, "TEP"), ({"tp": 2, "dp": 4, "ep": 8}, "DEP"),
     ({"dp": 8, "ep": 8}, "DEP")],
)
def test_parallel_layout(overrides: dict, layout: str) -> None:
    assert parallel_layout(_config("vllm", **overrides)) == layout


@pytest.mark.parametrize("kind", KINDS)
def test_disaggregated_dep_instances_take_tp_pp_dp_gpus_each(kind: str) -> None:
    config = _config(kind, dp=4, ep=4,
                     disaggregation={"prefill_instances": 1, "decode_instances": 1})
    ENGINES[kind].check(config, H100, QWEN3_MOE)
    plan = ENGINES[kind].disaggregation_plan(config)
    assert [p.env["CUDA_VISIBLE_DEVICES"] for p in [*plan.prefill, *plan.decode]] == [
        "0,1,2,3", "4,5,6,7"]
    assert plan.gpus_needed == 8


@pytest.mark.parametrize("kind", KINDS)
def test_mqa_replicates_kv_heads(kind: str) -> None:
    ENGINES[kind].check(_config(kind, tp=4), H100, MQA)  # 1 KV head replicated on 4 GPUs


@pytest.mark.parametrize(
    ("kind", "render", "overrides", "match"),
    [
        ("vllm", "server_argv", {"kv_cache_dtype": "int8"}, "int8"),
        ("vllm", "config_file", {"weight_quantization": "int4"}, "int4"),
        ("sglang", "server_argv", {"kv_cache_dtype": "int8"}, "int8"),
        ("sglang", "config_file", {"weight_quantization": "int4"}, "int4"),
        ("sglang", "config_file", {"engine": "vllm", "model": "m"}, "not 'sglang'"),
        ("trtllm", "server_argv", {"kv_cache_dtype": "int8"}, "int8"),
        ("trtllm", "config_file", {"weight_quantization": "gptq"}, "gptq"),
        ("trtllm", "server_argv", {"extra_args": {"max-batch-size": 4}}, "collides"),
    ],
)
def test_unrenderable_values_refuse_rendering_too(
    kind: str, render: str, overrides: dict, match: str
) -> None:
    with pytest.raises(CapabilityError, match=match):
        getattr(ENGINES[kind], render)(_config(kind, **overrides))


@pytest.mark.parametrize("kind", sorted(ENGINES))
def test_scheduler_defaults_are_positive_and_grow_with_memory(kind):
    """Each plug-in states its GPU-dependent batch defaults; a bigger GPU never gets less."""
    plugin = ENGINES[kind]
    small_seqs, small_budget = plugin.scheduler_defaults("L4", 24.0)
    big_seqs, big_budget = plugin.scheduler_defaults("H200-SXM", 141.0)
    assert small_budget >= 1 and big_budget >= small_budget
    assert (small_seqs is None) == (big_seqs is None)
    if small_seqs is not None:
        assert 1 <= small_seqs <= big_seqs


def test_launching_a_container_never_mounts_a_system_folder_as_the_cache():
    from engines.containers import docker_target
    from engines.errors import EngineError

    with pytest.raises(EngineError, match="is a system folder"):
        docker_target("vllm", 8000, "/", None)
    assert docker_target("vllm", 8000, "/data/hf", None) == "servefit-vllm-8000"
