"""The vLLM plug-in: exact argv, config YAML, docker command, capability refusals."""

from __future__ import annotations

import json

import pytest
import yaml

from engines.config import EngineConfig
from engines.containers import docker_argv
from engines.errors import CapabilityError, EngineError
from engines.facts import HardwareFacts, ModelFacts
from engines.vllm.flags import SWITCHES, VALUE_FLAGS
from engines.vllm.plugin import PLUGIN
from tests.engines.conftest import (
    A100,
    B200,
    GPT_OSS,
    H100,
    LLAMA_8B,
    LLAMA_8B_AWQ,
    LLAMA_8B_PREQUANTIZED,
    NASTY_MODEL,
    QWEN3_8B,
    QWEN3_MOE,
    T4,
)


def _config(**overrides: object) -> EngineConfig:
    return EngineConfig.model_validate(
        {"engine": "vllm", "model": "meta-llama/Llama-3.1-8B-Instruct", **overrides}
    )


FULL = _config(
    tp=2,
    max_num_seqs=256,
    max_batched_tokens=8192,
    gpu_memory_fraction=0.9,
    prefix_caching=True,
    chunked_prefill=False,
    kv_cache_dtype="fp8",
    weight_quantization="fp8",
    max_model_len=8192,
    speculative={"method": "eagle3", "num_tokens": 3, "draft_model": "yuhuili/EAGLE3-LLaMA3.1"},
    extra_args={"enforce_eager": True, "block-size": 32},
)


# -- argv ------------------------------------------------------------------------------------


def test_minimal_argv() -> None:
    assert PLUGIN.server_argv(_config()) == [
        "vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct",
        "--tensor-parallel-size", "1",
        "--pipeline-parallel-size", "1",
        "--host", "0.0.0.0",
        "--port", "8000",
    ]  # fmt: skip


def test_full_argv() -> None:
    assert PLUGIN.server_argv(FULL) == [
        "vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct",
        "--tensor-parallel-size", "2",
        "--pipeline-parallel-size", "1",
        "--max-num-seqs", "256",
        "--max-num-batched-tokens", "8192",
        "--gpu-memory-utilization", "0.9",
        "--enable-prefix-caching",
        "--no-enable-chunked-prefill",
        "--kv-cache-dtype", "fp8",
        "--quantization", "fp8",
        "--max-model-len", "8192",
        "--speculative-config",
        '{"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1", "num_speculative_tokens": 3}',
        "--host", "0.0.0.0",
        "--port", "8000",
        "--enforce-eager",
        "--block-size", "32",
    ]  # fmt: skip


def test_disabled_prefix_caching_and_ngram_and_disaggregation() -> None:
    config = _config(
        prefix_caching=False,
        chunked_prefill=True,
        kv_cache_dtype="fp8_e5m2",
        weight_quantization="awq",
        speculative={"method": "ngram", "num_tokens": 5},
        disaggregation={"prefill_instances": 1, "decode_instances": 1},
        port=9000,
        extra_args={"async-scheduling": False},
    )
    assert PLUGIN.server_argv(config) == [
        "vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct",
        "--tensor-parallel-size", "1",
        "--pipeline-parallel-size", "1",
        "--no-enable-prefix-caching",
        "--enable-chunked-prefill",
        "--kv-cache-dtype", "fp8_e5m2",
        "--quantization", "awq_marlin",
        "--speculative-config",
        '{"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4}',
        "--kv-transfer-config", '{"kv_connector": "NixlConnector", "kv_role": "kv_both"}',
        "--host", "0.0.0.0",
        "--port", "9000",
        "--no-async-scheduling",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("speculative", "expected"),
    [
        (
            {"method": "ngram", "num_tokens": 4},
            {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4},
        ),
        (
            {"method": "eagle", "num_tokens": 2, "draft_model": "org/eagle"},
            {"method": "eagle", "model": "org/eagle", "num_speculative_tokens": 2},
        ),
        (
            {"method": "draft_model", "num_tokens": 5, "draft_model": "Qwen/Qwen3-0.6B"},
            {"method": "draft_model", "model": "Qwen/Qwen3-0.6B", "num_speculative_tokens": 5},
        ),
        ({"method": "mtp", "num_tokens": 1}, {"method": "mtp", "num_speculative_tokens": 1}),
    ],
)
def test_speculative_json_parses_back(speculative: dict, expected: dict) -> None:
    argv = PLUGIN.server_argv(_config(speculative=speculative))
    assert json.loads(argv[argv.index("--speculative-config") + 1]) == expected


@pytest.mark.parametrize(
    ("ours", "vllm_value"),
    [("fp8", "fp8"), ("fp8_e4m3", "fp8_e4m3"), ("fp8_e5m2", "fp8_e5m2"), ("bf16", None)],
)
def test_kv_cache_dtype_mapping(ours: str, vllm_value: str | None) -> None:
    argv = PLUGIN.server_argv(_config(kv_cache_dtype=ours))
    if vllm_value is None:  # the model dtype is vLLM's "auto": no flag
        assert "--kv-cache-dtype" not in argv
    else:
        assert argv[argv.index("--kv-cache-dtype") + 1] == vllm_value


@pytest.mark.parametrize(
    ("ours", "vllm_value"),
    [
        ("fp8", "fp8"),
        ("awq", "awq_marlin"),
        ("gptq", "gptq_marlin"),
        ("nvfp4", "modelopt_fp4"),
        ("mxfp4", "mxfp4"),
        ("none", None),
        (None, None),
    ],
)
def test_weight_quantization_mapping(ours: str | None, vllm_value: str | None) -> None:
    argv = PLUGIN.server_argv(_config(weight_quantization=ours))
    if vllm_value is None:
        assert "--quantization" not in argv
    else:
        assert argv[argv.index("--quantization") + 1] == vllm_value


# -- config file -----------------------------------------------------------------------------


def test_config_yaml_parses_back_to_long_flag_names() -> None:
    name, text = PLUGIN.config_file(FULL)
    assert name == "vllm-config.yaml"
    assert yaml.safe_load(text) == {
        "tensor-parallel-size": 2,
        "pipeline-parallel-size": 1,
        "max-num-seqs": 256,
        "max-num-batched-tokens": 8192,
        "gpu-memory-utilization": 0.9,
        "enable-prefix-caching": True,
        "no-enable-chunked-prefill": True,
        "kv-cache-dtype": "fp8",
        "quantization": "fp8",
        "max-model-len": 8192,
        "speculative-config": (
            '{"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1", "num_speculative_tokens": 3}'
        ),
        "host": "0.0.0.0",
        "port": 8000,
        "enforce-eager": True,
        "block-size": 32,
    }


def _yaml_to_argv(text: str) -> list[str]:
    """What vLLM's FlexibleArgumentParser.load_config_file does with the file (true bools
    become bare flags, other values `--key str(value)`)."""
    argv: list[str] = []
    for key, value in yaml.safe_load(text).items():
        if value is True:
            argv.append(f"--{key}")
        else:
            argv += [f"--{key}", str(value)]
    return argv


@pytest.mark.parametrize(
    "config",
    [
        FULL,
        _config(),
        _config(prefix_caching=False, speculative={"method": "ngram", "num_tokens": 2}),
        _config(disaggregation={"prefill_instances": 2, "decode_instances": 1}, pp=2),
        _config(tp=8, ep=8),
        _config(tp=2, dp=4, ep=8),
    ],
)
def test_config_file_and_cli_carry_the_same_settings(config: EngineConfig) -> None:
    _, text = PLUGIN.config_file(config)
    assert _yaml_to_argv(text) == PLUGIN.server_argv(config)[3:]
    path = "/tmp/run/vllm-config.yaml"
    assert PLUGIN.serve_argv_with_config_file(config, path) == [
        "vllm", "serve", config.model, "--config", path,
    ]  # fmt: skip


def test_config_file_path_must_be_yaml() -> None:
    with pytest.raises(EngineError, match=r"only \.yaml/\.yml"):
        PLUGIN.serve_argv_with_config_file(_config(), "/tmp/config.json")


# -- expert and attention data parallelism (TEP, DEP) ---------------------------------------

QWEN3 = "Qwen/Qwen3-235B-A22B"


def test_tep_renders_expert_parallel_over_the_tp_group() -> None:
    config = _config(model=QWEN3, tp=8, ep=8)
    assert PLUGIN.server_argv(config) == [
        "vllm", "serve", QWEN3,
        "--tensor-parallel-size", "8",
        "--pipeline-parallel-size", "1",
        "--enable-expert-parallel",
        "--host", "0.0.0.0",
        "--port", "8000",
    ]  # fmt: skip
    assert PLUGIN.config_file(config)[1] == (
        "tensor-parallel-size: 8\n"
        "pipeline-parallel-size: 1\n"
        "enable-expert-parallel: true\n"
        "host: 0.0.0.0\n"
        "port: 8000\n"
    )
    PLUGIN.check(config, H100, QWEN3_MOE)


def test_dep_renders_data_parallel_ranks_and_expert_parallel() -> None:
    config = _config(model=QWEN3, dp=8, ep=8, max_num_seqs=512)
    assert PLUGIN.server_argv(config) == [
        "vllm", "serve", QWEN3,
        "--tensor-parallel-size", "1",
        "--pipeline-parallel-size", "1",
        "--data-parallel-size", "8",
        "--enable-expert-parallel",
        "--max-num-seqs", "512",
        "--host", "0.0.0.0",
        "--port", "8000",
    ]  # fmt: skip
    assert PLUGIN.config_file(config)[1] == (
        "tensor-parallel-size: 1\n"
        "pipeline-parallel-size: 1\n"
        "data-parallel-size: 8\n"
        "enable-expert-parallel: true\n"
        "max-num-seqs: 512\n"
        "host: 0.0.0.0\n"
        "port: 8000\n"
    )
    PLUGIN.check(config, H100, QWEN3_MOE)


@pytest.mark.parametrize(
    ("fields", "read"),
    [
        ({"tp": 8, "ep": 8}, {"tp": 8, "dp": 1, "ep": 8}),
        ({"dp": 8, "ep": 8}, {"tp": 1, "dp": 8, "ep": 8}),
        ({"tp": 2, "dp": 4, "ep": 8}, {"tp": 2, "dp": 4, "ep": 8}),
    ],
)
def test_parallel_layouts_read_back(fields: dict, read: dict) -> None:
    config = _config(model=QWEN3, **fields)
    back = PLUGIN.config_from_file(QWEN3, PLUGIN.config_file(config)[1])
    assert (back.tp, back.dp, back.ep) == (read["tp"], read["dp"], read["ep"])
    assert back == config


@pytest.mark.parametrize(
    ("text", "match"),
    [
        # Attention DP without expert parallelism is not a layout ServeFit models.
        ("tensor-parallel-size: 1\npipeline-parallel-size: 1\ndata-parallel-size: 8\n"
         "host: 0.0.0.0\nport: 8000\n", "dp=8"),
        ("tensor-parallel-size: 8\npipeline-parallel-size: 1\n"
         "no-enable-expert-parallel: true\nhost: 0.0.0.0\nport: 8000\n",
         "no-enable-expert-parallel"),
        ("tensor-parallel-size: 8\npipeline-parallel-size: 1\nenable-expert-parallel: 1\n"
         "host: 0.0.0.0\nport: 8000\n", "enable-expert-parallel"),
    ],
)
def test_parallel_files_servefit_does_not_write_are_refused(text: str, match: str) -> None:
    with pytest.raises(EngineError, match=match):
        PLUGIN.config_from_file(QWEN3, text)


@pytest.mark.parametrize("fields", [{"tp": 8, "ep": 8}, {"tp": 2, "dp": 4, "ep": 8}])
def test_parallel_flags_are_flags_of_vllm_serve(fields: dict) -> None:
    argv = PLUGIN.server_argv(_config(model=QWEN3, **fields))
    names = [arg.removeprefix("--") for arg in argv if arg.startswith("--")]
    assert {"data-parallel-size", "enable-expert-parallel"} & set(names)
    assert set(names) <= SWITCHES | VALUE_FLAGS


# -- injection -------------------------------------------------------------------------------


def test_hostile_model_name_stays_one_argv_element() -> None:
    config = _config(model=NASTY_MODEL, speculative={
        "method": "draft_model", "num_tokens": 2, "draft_model": "d'; echo \"$(id)\"",
    })  # fmt: skip
    argv = PLUGIN.server_argv(config)
    assert argv[:3] == ["vllm", "serve", NASTY_MODEL]
    assert argv.count(NASTY_MODEL) == 1
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec["model"] == 'd\'; echo "$(id)"'
    docker = docker_argv(
        PLUGIN, config, image=PLUGIN.docker_image(), host_port=8001, model_cache_dir="/cache"
    )
    assert NASTY_MODEL in docker
    assert PLUGIN.serve_argv_with_config_file(config, "c.yaml")[2] == NASTY_MODEL


def test_hostile_values_round_trip_through_yaml() -> None:
    template = "a: b # c {x} [y] 'q' \"dq\" $(id) `id` & | > ; * ~ !"
    extra = {"served-model-name": NASTY_MODEL, "chat-template": template}
    config = _config(model=NASTY_MODEL, extra_args=extra)
    _, text = PLUGIN.config_file(config)
    loaded = yaml.safe_load(text)
    assert loaded == {
        "tensor-parallel-size": 1,
        "pipeline-parallel-size": 1,
        "host": "0.0.0.0",
        "port": 8000,
        "served-model-name": NASTY_MODEL,
        "chat-template": template,
    }


# -- docker, readiness, metrics, disaggregation ----------------------------------------------


def test_docker_run_argv() -> None:
    config = _config(tp=2, host="127.0.0.1", max_num_seqs=64)
    argv = docker_argv(
        PLUGIN, config,
        image="vllm/vllm-openai:v0.33.0",
        host_port=18000,
        model_cache_dir="/home/u/.cache/huggingface",
        gpus=[0, 1],
    )
    assert argv == [
        "docker", "run", "--rm",
        "--name", "servefit-vllm-18000",
        "--gpus", '"device=0,1"',
        "--ipc=host",
        "-p", "18000:8000",
        "-v", "/home/u/.cache/huggingface:/root/.cache/huggingface",
        "--env", "HF_TOKEN",
        "vllm/vllm-openai:v0.33.0",
        "meta-llama/Llama-3.1-8B-Instruct",
        "--tensor-parallel-size", "2",
        "--pipeline-parallel-size", "1",
        "--max-num-seqs", "64",
        "--host", "0.0.0.0",
        "--port", "8000",
    ]  # fmt: skip


def test_metric_names_cover_the_tuner_signals_with_fallbacks() -> None:
    names = PLUGIN.metric_names
    assert names["queue_depth"] == ("vllm:num_requests_waiting",)
    assert names["running"] == ("vllm:num_requests_running",)
    assert names["kv_cache_usage"] == ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
    assert names["prefix_cache_hits_tokens"][0] == "vllm:prefix_cache_hits_total"
    assert names["prefix_cache_queries_tokens"][0] == "vllm:prefix_cache_queries_total"
    assert names["ttft_seconds"] == ("vllm:time_to_first_token_seconds",)
    assert names["itl_seconds"][0] == "vllm:inter_token_latency_seconds"
    assert names["tpot_seconds"][-1] == "vllm:time_per_output_token_seconds"
    assert PLUGIN.metrics_path == "/metrics"


def test_disaggregation_plan() -> None:
    config = _config(tp=2, disaggregation={"prefill_instances": 1, "decode_instances": 2})
    plan = PLUGIN.disaggregation_plan(config, base_port=8100)
    assert plan.gpus_needed == 6
    assert [p.port for p in plan.prefill + plan.decode] == [8100, 8101, 8102]
    assert [p.env["CUDA_VISIBLE_DEVICES"] for p in plan.prefill + plan.decode] == [
        "0,1", "2,3", "4,5",
    ]  # fmt: skip
    ports = {p.env["VLLM_NIXL_SIDE_CHANNEL_PORT"] for p in plan.prefill + plan.decode}
    assert len(ports) == 3
    first = plan.prefill[0].argv
    assert first[first.index("--port") + 1] == "8100"
    assert json.loads(first[first.index("--kv-transfer-config") + 1]) == {
        "kv_connector": "NixlConnector", "kv_role": "kv_both",
    }  # fmt: skip
    assert plan.router.argv == [
        "vllm-router", "--vllm-pd-disaggregation",
        "--prefill", "http://127.0.0.1:8100",
        "--decode", "http://127.0.0.1:8101",
        "--decode", "http://127.0.0.1:8102",
        "--host", "0.0.0.0", "--port", "8000",
    ]  # fmt: skip


# -- capability checks -----------------------------------------------------------------------


def test_supported_configs_pass() -> None:
    PLUGIN.check(FULL, H100, LLAMA_8B)
    PLUGIN.check(_config(weight_quantization="fp8"), A100, LLAMA_8B)  # Marlin W8A16
    PLUGIN.check(_config(tp=8), H100, LLAMA_8B)  # 8 KV heads shard one per GPU
    PLUGIN.check(_config(weight_quantization="mxfp4"), H100, GPT_OSS)
    PLUGIN.check(_config(kv_cache_dtype="bf16"), H100, LLAMA_8B)
    PLUGIN.check(_config(weight_quantization="awq"), A100, LLAMA_8B)  # its AWQ checkpoint
    PLUGIN.check(_config(model="Qwen/Qwen3-8B", weight_quantization="fp8"), H100, QWEN3_8B)
    PLUGIN.check(_config(weight_quantization="nvfp4"), B200, LLAMA_8B_PREQUANTIZED)


@pytest.mark.parametrize(
    ("config", "hardware", "model", "message"),
    [
        (
            _config(max_num_seqs=512, max_batched_tokens=256),
            H100,
            LLAMA_8B,
            "max_batched_tokens=256 must be >= max_num_seqs=512 (vLLM scheduler rule)",
        ),
        (
            _config(chunked_prefill=False, max_batched_tokens=8192, max_model_len=16384),
            H100,
            LLAMA_8B,
            "without chunked prefill, max_batched_tokens=8192 must cover max_model_len=16384, "
            "or a long prompt could never be scheduled",
        ),
        (
            _config(kv_cache_dtype="fp16"),
            H100,
            LLAMA_8B,
            "vLLM stores a fp16 KV cache only as the model dtype (auto), and this model is bf16",
        ),
        (
            _config(kv_cache_dtype="fp8"),
            A100,
            LLAMA_8B,
            "FP8 KV cache needs a GPU with FP8 support (compute capability >= 8.9 or MI300); "
            "A100 80GB SXM has none",
        ),
        (
            _config(kv_cache_dtype="int8"),
            H100,
            LLAMA_8B,
            "kv_cache_dtype=int8: vLLM has no plain int8 KV cache (only int8_per_token_head on "
            "newer main, unverified for 0.33); use fp8",
        ),
        (
            _config(kv_cache_dtype="fp4"),
            H100,
            LLAMA_8B,
            "kv_cache_dtype=fp4: vLLM's nvfp4 KV cache is unverified for 0.33; use fp8",
        ),
        (
            _config(weight_quantization="int8"),
            H100,
            LLAMA_8B,
            "weight_quantization=int8: vLLM has no --quantization value for generic int8 "
            "weights; load a pre-quantized (compressed-tensors W8A8) checkpoint with "
            "weight_quantization unset",
        ),
        (
            _config(weight_quantization="int4"),
            H100,
            LLAMA_8B,
            "weight_quantization=int4: vLLM has no --quantization value for generic int4 "
            "weights; use awq/gptq or a pre-quantized (compressed-tensors W4A16) checkpoint "
            "with weight_quantization unset",
        ),
        (
            _config(weight_quantization="fp8"),
            T4,
            LLAMA_8B,
            "FP8 weights need FP8 hardware or an Ampere+ NVIDIA GPU for vLLM's Marlin "
            "fallback; T4 has neither",
        ),
        (
            _config(weight_quantization="awq"),
            T4,
            LLAMA_8B,
            "awq is rendered as awq_marlin, whose Marlin kernels need an NVIDIA GPU with "
            "compute capability >= 8.0; T4 is not one",
        ),
        (
            _config(weight_quantization="nvfp4"),
            H100,
            LLAMA_8B,
            "NVFP4 weights need a Blackwell GPU (compute capability >= 10.0); H100 SXM has no FP4",
        ),
        (
            _config(weight_quantization="mxfp4"),
            H100,
            LLAMA_8B,
            "vLLM's mxfp4 applies only to MoE experts; model is dense",
        ),
        (
            _config(weight_quantization="mxfp4"),
            T4,
            GPT_OSS,
            "MXFP4 needs compute capability >= 8.0 in vLLM; T4 is older",
        ),
        (
            _config(model="Qwen/Qwen3-8B", weight_quantization="awq"),
            H100,
            QWEN3_8B,
            "weight_quantization=awq: vLLM cannot quantize the bf16 checkpoint Qwen/Qwen3-8B "
            "on load and no pre-quantized awq checkpoint of it is known; name one as the "
            "model, leave weight_quantization unset, or use fp8 (vLLM quantizes it on load)",
        ),
        (
            _config(weight_quantization="gptq"),
            H100,
            LLAMA_8B,
            "weight_quantization=gptq: vLLM cannot quantize the bf16 checkpoint "
            "meta-llama/Llama-3.1-8B-Instruct on load and no pre-quantized gptq checkpoint of "
            "it is known; name one as the model, leave weight_quantization unset, or use fp8 "
            "(vLLM quantizes it on load)",
        ),
        (
            _config(weight_quantization="nvfp4"),
            B200,
            LLAMA_8B,
            "weight_quantization=nvfp4: vLLM cannot quantize the bf16 checkpoint "
            "meta-llama/Llama-3.1-8B-Instruct on load and no pre-quantized nvfp4 checkpoint "
            "of it is known; name one as the model, leave weight_quantization unset, or use "
            "fp8 (vLLM quantizes it on load)",
        ),
        (
            _config(extra_args={"no-enable-prefix-caching": True}),
            H100,
            LLAMA_8B,
            "extra_args['no-enable-prefix-caching'] collides with a setting EngineConfig "
            "renders itself",
        ),
    ],
)
def test_capability_refusals(
    config: EngineConfig, hardware: HardwareFacts, model: ModelFacts, message: str
) -> None:
    with pytest.raises(CapabilityError) as info:
        PLUGIN.check(config, hardware, model)
    assert info.value.reason == message


# -- the checkpoint served -------------------------------------------------------------------


def test_awq_of_an_unquantized_model_serves_its_awq_checkpoint() -> None:
    config = _config(tp=2, weight_quantization="awq")
    served = PLUGIN.served_config(config, LLAMA_8B)
    assert served.model == "hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4"
    assert served.model_copy(update={"model": "meta-llama/Llama-3.1-8B-Instruct"}) == config
    argv = PLUGIN.server_argv(served)
    assert argv[:3] == ["vllm", "serve", "hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4"]
    # The Marlin spelling stays: vLLM resolves an AWQ checkpoint to awq_marlin when asked.
    assert argv[argv.index("--quantization") + 1] == "awq_marlin"
    assert PLUGIN.readiness(served).served_model_name == (
        "hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4")


@pytest.mark.parametrize(
    ("config", "model"),
    [
        (_config(weight_quantization="fp8"), LLAMA_8B),  # quantized on load: the BF16 model
        (_config(model="Qwen/Qwen3-8B", weight_quantization="fp8"), QWEN3_8B),
        (_config(weight_quantization="mxfp4"), GPT_OSS),  # the checkpoint's own format
        (_config(), LLAMA_8B),
        (_config(weight_quantization="awq"), None),  # no facts: the model field is trusted
        (_config(weight_quantization="awq"), LLAMA_8B_PREQUANTIZED),
        (_config(model=LLAMA_8B_AWQ, weight_quantization="awq"), LLAMA_8B),
    ],
)
def test_a_model_served_as_named(config: EngineConfig, model: ModelFacts | None) -> None:
    assert PLUGIN.served_config(config, model) == config


def test_scheduler_defaults_follow_vllm_usage_context():
    # vLLM's EngineArgs: 1024 seqs / 8192 tokens on big GPUs except A100, else 256 / 2048.
    assert PLUGIN.scheduler_defaults("H100-SXM", 80.0) == (1024, 8192)
    assert PLUGIN.scheduler_defaults("A100-SXM-80GB", 80.0) == (256, 2048)
    assert PLUGIN.scheduler_defaults("L4", 24.0) == (256, 2048)


@pytest.mark.parametrize(("release", "max_model_len", "expected"), [
    # V0 (before 0.8): 256 seqs, no prefix caching; a whole prompt per step up to 32,768
    ((0, 5), 16000, {"max_num_seqs": 256, "prefix_caching": False,
                     "chunked_prefill": False, "max_batched_tokens": 16000}),
    ((0, 6), 1000, {"max_num_seqs": 256, "prefix_caching": False,
                    "chunked_prefill": False, "max_batched_tokens": 2048}),
    ((0, 7), 32768, {"max_num_seqs": 256, "prefix_caching": False,
                     "chunked_prefill": False, "max_batched_tokens": 32768}),
    # past 32,768 chunked prefill, 512 tokens a step in 0.5, 2,048 from 0.6
    ((0, 5), 64000, {"max_num_seqs": 256, "prefix_caching": False,
                     "chunked_prefill": True, "max_batched_tokens": 512}),
    ((0, 7), 40000, {"max_num_seqs": 256, "prefix_caching": False,
                     "chunked_prefill": True, "max_batched_tokens": 2048}),
    ((0, 5), None, {"max_num_seqs": 256, "prefix_caching": False}),
    ((0, 8), 16000, {}), ((0, 33), 16000, {}),  # V1: today's choices
])
def test_releases_before_v1_choose_the_v0_engine_batch_defaults(release, max_model_len,
                                                                 expected):
    assert PLUGIN.release_scheduler_defaults(release, max_model_len) == expected


@pytest.mark.parametrize(("release", "serial"), [
    ((0, 5), True), ((0, 7), True),  # V0: host work between steps
    ((0, 8), False), ((0, 11), False), (None, False),  # V1, and the plug-in's own release
])
def test_only_the_v0_engine_runs_its_host_work_between_steps(release, serial: bool) -> None:
    assert PLUGIN.serial_host_loop(release) is serial


@pytest.mark.parametrize(("extra", "fragment"), [
    ({"tokenizr": "t"}, "has no flag --tokenizr (did you mean 'tokenizer'?)"),
    ({"enforce-eager": "yes"}, "--enforce-eager is a switch; give true or false"),
    ({"seed": True}, "--seed takes a value"),
    ({"disable-log-stats": False}, "no --no-disable-log-stats"),
    ({"no-trust-remote-code": False}, "no --no-no-trust-remote-code"),
])
def test_extra_args_are_checked_against_vllms_own_flags(extra: dict, fragment: str) -> None:
    """Issue 16: what `vllm serve`'s parser rejects is refused at export, in one line
    (tests/engines/vllm/test_real_parser.py shows the parser rejecting these)."""
    with pytest.raises(CapabilityError) as info:
        PLUGIN.server_argv(_config(extra_args=extra))
    assert fragment in info.value.reason and "\n" not in info.value.reason


def test_extra_args_vllm_knows_pass() -> None:
    argv = PLUGIN.server_argv(_config(extra_args={
        "tokenizer": "org/tok", "trust_remote_code": True, "no-enforce-eager": True,
        "disable-log-stats": True}))
    assert argv[argv.index("--tokenizer") + 1] == "org/tok"
    assert {"--trust-remote-code", "--no-enforce-eager", "--disable-log-stats"} <= set(argv)
