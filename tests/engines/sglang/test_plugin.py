"""The SGLang plug-in: exact argv, config YAML, docker command, capability refusals."""

from __future__ import annotations

import pytest
import yaml

from engines.config import EngineConfig
from engines.containers import docker_argv
from engines.errors import CapabilityError, EngineError
from engines.facts import HardwareFacts, ModelFacts
from engines.registry import ENGINES
from engines.sglang.plugin import PLUGIN
from engines.vllm.plugin import PLUGIN as VLLM
from tests.engines.conftest import (
    A100,
    B200,
    GPT_OSS,
    H100,
    LLAMA_8B,
    LLAMA_8B_AWQ,
    LLAMA_8B_PREQUANTIZED,
    MI300X,
    MODEL,
    NASTY_MODEL,
    QWEN3_8B,
    QWEN3_MOE,
    T4,
)

DEEPSEEK = ModelFacts(
    num_attention_heads=128, num_kv_heads=128, max_context_tokens=163840, has_mtp_heads=True
)
LAUNCH = ["python3", "-m", "sglang.launch_server"]


def _config(**overrides: object) -> EngineConfig:
    return EngineConfig.model_validate({"engine": "sglang", "model": MODEL, **overrides})


FULL = _config(
    tp=2,
    max_num_seqs=256,
    max_batched_tokens=8192,
    gpu_memory_fraction=0.85,
    prefix_caching=False,
    chunked_prefill=True,
    kv_cache_dtype="fp8",
    weight_quantization="fp8",
    max_model_len=16384,
    speculative={"method": "eagle3", "num_tokens": 3, "draft_model": "yuhuili/EAGLE3-LLaMA3.1"},
    extra_args={"schedule_policy": "lpm", "enable-mixed-chunk": True, "cuda-graph-max-bs": 64},
)


# -- argv ------------------------------------------------------------------------------------


def test_minimal_argv() -> None:
    assert PLUGIN.server_argv(_config()) == [
        "python3", "-m", "sglang.launch_server",
        "--model-path", MODEL,
        "--tp-size", "1",
        "--pp-size", "1",
        "--enable-metrics",
        "--host", "0.0.0.0",
        "--port", "8000",
    ]  # fmt: skip


def test_full_argv() -> None:
    assert PLUGIN.server_argv(FULL) == [
        "python3", "-m", "sglang.launch_server",
        "--model-path", MODEL,
        "--tp-size", "2",
        "--pp-size", "1",
        "--max-running-requests", "256",
        "--chunked-prefill-size", "8192",
        "--max-prefill-tokens", "8192",
        "--mem-fraction-static", "0.85",
        "--disable-radix-cache",
        "--kv-cache-dtype", "fp8_e4m3",
        "--quantization", "fp8",
        "--context-length", "16384",
        "--speculative-algorithm", "EAGLE3",
        "--speculative-draft-model-path", "yuhuili/EAGLE3-LLaMA3.1",
        "--speculative-num-steps", "3",
        "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", "4",
        "--enable-metrics",
        "--host", "0.0.0.0",
        "--port", "8000",
        "--schedule-policy", "lpm",
        "--enable-mixed-chunk",
        "--cuda-graph-max-bs", "64",
    ]  # fmt: skip


def test_chunked_prefill_off_and_ngram_and_awq() -> None:
    config = _config(
        prefix_caching=True,
        chunked_prefill=False,
        max_batched_tokens=32768,
        kv_cache_dtype="fp8_e5m2",
        weight_quantization="awq",
        speculative={"method": "ngram", "num_tokens": 5},
        host="127.0.0.1",
        port=30000,
    )
    assert PLUGIN.server_argv(config) == [
        "python3", "-m", "sglang.launch_server",
        "--model-path", MODEL,
        "--tp-size", "1",
        "--pp-size", "1",
        "--chunked-prefill-size", "-1",
        "--max-prefill-tokens", "32768",
        "--kv-cache-dtype", "fp8_e5m2",
        "--quantization", "awq_marlin",
        "--speculative-algorithm", "NGRAM",
        "--speculative-num-draft-tokens", "6",
        "--enable-metrics",
        "--host", "127.0.0.1",
        "--port", "30000",
    ]  # fmt: skip


def test_chunked_prefill_off_without_budget_only_disables_chunking() -> None:
    argv = PLUGIN.server_argv(_config(chunked_prefill=False, pp=2))
    assert argv[3:] == [
        "--model-path", MODEL,
        "--tp-size", "1",
        "--pp-size", "2",
        "--chunked-prefill-size", "-1",
        "--enable-metrics",
        "--host", "0.0.0.0",
        "--port", "8000",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("speculative", "expected"),
    [
        (
            {"method": "eagle", "num_tokens": 2, "draft_model": "org/eagle"},
            [
                "--speculative-algorithm", "EAGLE",
                "--speculative-draft-model-path", "org/eagle",
                "--speculative-num-steps", "2",
                "--speculative-eagle-topk", "1",
                "--speculative-num-draft-tokens", "3",
            ],
        ),
        (
            {"method": "eagle3", "num_tokens": 5, "draft_model": "org/eagle3"},
            [
                "--speculative-algorithm", "EAGLE3",
                "--speculative-draft-model-path", "org/eagle3",
                "--speculative-num-steps", "5",
                "--speculative-eagle-topk", "1",
                "--speculative-num-draft-tokens", "6",
            ],
        ),
        (
            {"method": "draft_model", "num_tokens": 4, "draft_model": "Qwen/Qwen3-0.6B"},
            [
                "--speculative-algorithm", "STANDALONE",
                "--speculative-draft-model-path", "Qwen/Qwen3-0.6B",
                "--speculative-num-steps", "4",
                "--speculative-eagle-topk", "1",
                "--speculative-num-draft-tokens", "5",
            ],
        ),
        (
            {"method": "mtp", "num_tokens": 1},
            [
                "--speculative-algorithm", "NEXTN",
                "--speculative-num-steps", "1",
                "--speculative-eagle-topk", "1",
                "--speculative-num-draft-tokens", "2",
            ],
        ),
        (
            {"method": "ngram", "num_tokens": 7},
            ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "8"],
        ),
    ],
)  # fmt: skip
def test_speculative_mapping_per_method(speculative: dict, expected: list[str]) -> None:
    argv = PLUGIN.server_argv(_config(speculative=speculative))
    start = argv.index("--speculative-algorithm")
    assert argv[start : argv.index("--enable-metrics")] == expected


@pytest.mark.parametrize(
    ("ours", "sglang_value"),
    [
        ("auto", None),
        ("fp16", None),
        ("bf16", "bf16"),
        ("fp8", "fp8_e4m3"),
        ("fp8_e4m3", "fp8_e4m3"),
        ("fp8_e5m2", "fp8_e5m2"),
        ("fp4", "fp4_e2m1"),
    ],
)
def test_kv_cache_dtype_mapping(ours: str, sglang_value: str | None) -> None:
    argv = PLUGIN.server_argv(_config(kv_cache_dtype=ours))
    if sglang_value is None:
        assert "--kv-cache-dtype" not in argv
    else:
        assert argv[argv.index("--kv-cache-dtype") + 1] == sglang_value


@pytest.mark.parametrize(
    ("ours", "sglang_value"),
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
def test_weight_quantization_mapping(ours: str | None, sglang_value: str | None) -> None:
    argv = PLUGIN.server_argv(_config(weight_quantization=ours))
    if sglang_value is None:
        assert "--quantization" not in argv
    else:
        assert argv[argv.index("--quantization") + 1] == sglang_value


# -- config file -----------------------------------------------------------------------------


def test_config_yaml_parses_back_to_long_flag_names() -> None:
    name, text = PLUGIN.config_file(FULL)
    assert name == "sglang-config.yaml"
    assert yaml.safe_load(text) == {
        "model-path": MODEL,
        "tp-size": 2,
        "pp-size": 1,
        "max-running-requests": 256,
        "chunked-prefill-size": 8192,
        "max-prefill-tokens": 8192,
        "mem-fraction-static": 0.85,
        "disable-radix-cache": True,
        "kv-cache-dtype": "fp8_e4m3",
        "quantization": "fp8",
        "context-length": 16384,
        "speculative-algorithm": "EAGLE3",
        "speculative-draft-model-path": "yuhuili/EAGLE3-LLaMA3.1",
        "speculative-num-steps": 3,
        "speculative-eagle-topk": 1,
        "speculative-num-draft-tokens": 4,
        "enable-metrics": True,
        "host": "0.0.0.0",
        "port": 8000,
        "schedule-policy": "lpm",
        "enable-mixed-chunk": True,
        "cuda-graph-max-bs": 64,
    }


def _yaml_to_argv(text: str) -> list[str]:
    """What SGLang's ConfigArgumentMerger does with the file: `true` becomes a bare switch,
    other values `--key str(value)`."""
    argv: list[str] = []
    for key, value in yaml.safe_load(text).items():
        assert value is not False  # never written: older mergers drop it
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
        _config(chunked_prefill=False, max_batched_tokens=4096),
        _config(speculative={"method": "ngram", "num_tokens": 2}, kv_cache_dtype="fp4"),
        _config(speculative={"method": "mtp", "num_tokens": 3}, weight_quantization="nvfp4"),
        _config(tp=8, ep=8),
        _config(tp=2, dp=4, ep=8),
    ],
)
def test_config_file_and_cli_carry_the_same_settings(config: EngineConfig) -> None:
    _, text = PLUGIN.config_file(config)
    assert _yaml_to_argv(text) == PLUGIN.server_argv(config)[3:]
    path = "/tmp/run/sglang-config.yaml"
    assert PLUGIN.serve_argv_with_config_file(config, path) == [
        *LAUNCH, "--model-path", config.model, "--config", path,
    ]  # fmt: skip


def test_config_file_path_must_be_yaml() -> None:
    assert PLUGIN.serve_argv_with_config_file(_config(), "c.yml")[-1] == "c.yml"
    for path in ("/tmp/config.toml", "c.json"):
        with pytest.raises(EngineError, match=r"reads \.yaml/\.yml config files"):
            PLUGIN.serve_argv_with_config_file(_config(), path)


# -- expert and attention data parallelism (TEP, DEP) ---------------------------------------

QWEN3 = "Qwen/Qwen3-235B-A22B"


def test_tep_renders_ep_size_over_the_tp_group() -> None:
    config = _config(model=QWEN3, tp=8, ep=8)
    assert PLUGIN.server_argv(config) == [
        *LAUNCH,
        "--model-path", QWEN3,
        "--tp-size", "8",
        "--pp-size", "1",
        "--ep-size", "8",
        "--enable-metrics",
        "--host", "0.0.0.0",
        "--port", "8000",
    ]  # fmt: skip
    assert PLUGIN.config_file(config)[1] == (
        "model-path: Qwen/Qwen3-235B-A22B\n"
        "tp-size: 8\n"
        "pp-size: 1\n"
        "ep-size: 8\n"
        "enable-metrics: true\n"
        "host: 0.0.0.0\n"
        "port: 8000\n"
    )
    PLUGIN.check(config, H100, QWEN3_MOE)


def test_dep_renders_tp_size_as_all_gpus_with_dp_attention() -> None:
    # SGLang's --tp-size is the GPU count; each of the --dp-size ranks gets tp-size/dp of it.
    config = _config(model=QWEN3, dp=8, ep=8)
    assert PLUGIN.server_argv(config) == [
        *LAUNCH,
        "--model-path", QWEN3,
        "--tp-size", "8",
        "--pp-size", "1",
        "--dp-size", "8",
        "--enable-dp-attention",
        "--ep-size", "8",
        "--enable-metrics",
        "--host", "0.0.0.0",
        "--port", "8000",
    ]  # fmt: skip
    assert PLUGIN.config_file(config)[1] == (
        "model-path: Qwen/Qwen3-235B-A22B\n"
        "tp-size: 8\n"
        "pp-size: 1\n"
        "dp-size: 8\n"
        "enable-dp-attention: true\n"
        "ep-size: 8\n"
        "enable-metrics: true\n"
        "host: 0.0.0.0\n"
        "port: 8000\n"
    )
    PLUGIN.check(config, H100, QWEN3_MOE)


def test_dep_with_attention_tp_multiplies_into_tp_size() -> None:
    argv = PLUGIN.server_argv(_config(model=QWEN3, tp=2, dp=4, ep=8))
    assert argv[5:15] == ["--tp-size", "8", "--pp-size", "1", "--dp-size", "4",
                          "--enable-dp-attention", "--ep-size", "8", "--enable-metrics"]


@pytest.mark.parametrize(
    ("fields", "read"),
    [
        ({"tp": 8, "ep": 8}, (8, 1, 8)),
        ({"dp": 8, "ep": 8}, (1, 8, 8)),
        ({"tp": 2, "dp": 4, "ep": 8}, (2, 4, 8)),
    ],
)
def test_parallel_layouts_read_back(fields: dict, read: tuple[int, int, int]) -> None:
    config = _config(model=QWEN3, **fields)
    back = PLUGIN.config_from_file(QWEN3, PLUGIN.config_file(config)[1])
    assert (back.tp, back.dp, back.ep) == read
    assert back == config


@pytest.mark.parametrize(
    ("lines", "match"),
    [
        # Plain DP replicas (no DP attention) are not what ServeFit writes.
        ("tp-size: 8\ndp-size: 8\nep-size: 8\n", "enable-dp-attention"),
        ("tp-size: 6\ndp-size: 4\nep-size: 24\nenable-dp-attention: true\n", "tp-size"),
        ("tp-size: 8\nep-size: 4\n", "ep=4 must be 1 or tp x dp = 8"),
    ],
)
def test_parallel_files_servefit_does_not_write_are_refused(lines: str, match: str) -> None:
    text = f"model-path: {QWEN3}\n{lines}pp-size: 1\nenable-metrics: true\nhost: 0.0.0.0\n" \
           "port: 8000\n"
    with pytest.raises(EngineError, match=match):
        PLUGIN.config_from_file(QWEN3, text)


# -- injection -------------------------------------------------------------------------------


def test_hostile_model_name_stays_one_argv_element() -> None:
    config = _config(model=NASTY_MODEL, speculative={
        "method": "draft_model", "num_tokens": 2, "draft_model": "d'; echo \"$(id)\"",
    })  # fmt: skip
    argv = PLUGIN.server_argv(config)
    assert argv[3:5] == ["--model-path", NASTY_MODEL]
    assert argv.count(NASTY_MODEL) == 1
    assert argv[argv.index("--speculative-draft-model-path") + 1] == 'd\'; echo "$(id)"'
    docker = docker_argv(
        PLUGIN, config, image=PLUGIN.docker_image(), host_port=8001, model_cache_dir="/cache"
    )
    assert docker.count(NASTY_MODEL) == 1
    assert PLUGIN.serve_argv_with_config_file(config, "c.yaml")[4] == NASTY_MODEL


def test_hostile_values_round_trip_through_yaml() -> None:
    template = "a: b # c {x} [y] 'q' \"dq\" $(id) `id` & | > ; * ~ !"
    extra = {"served-model-name": NASTY_MODEL, "chat-template": template}
    config = _config(model=NASTY_MODEL, extra_args=extra)
    _, text = PLUGIN.config_file(config)
    assert yaml.safe_load(text) == {
        "model-path": NASTY_MODEL,
        "tp-size": 1,
        "pp-size": 1,
        "enable-metrics": True,
        "host": "0.0.0.0",
        "port": 8000,
        "served-model-name": NASTY_MODEL,
        "chat-template": template,
    }
    assert _yaml_to_argv(text) == PLUGIN.server_argv(config)[3:]


# -- docker, readiness, metrics, disaggregation ----------------------------------------------


def test_docker_run_argv() -> None:
    config = _config(tp=2, host="127.0.0.1", max_num_seqs=64, port=30000)
    argv = docker_argv(
        PLUGIN, config,
        image="lmsysorg/sglang:v0.5.23",
        host_port=18000,
        model_cache_dir="/home/u/.cache/huggingface",
        gpus=[0, 1],
    )
    assert argv == [
        "docker", "run", "--rm",
        "--name", "servefit-sglang-18000",
        "--gpus", '"device=0,1"',
        "--ipc=host",
        "--shm-size", "32g",
        "-p", "18000:30000",
        "-v", "/home/u/.cache/huggingface:/root/.cache/huggingface",
        "--env", "HF_TOKEN",
        "lmsysorg/sglang:v0.5.23",
        "python3", "-m", "sglang.launch_server",
        "--model-path", MODEL,
        "--tp-size", "2",
        "--pp-size", "1",
        "--max-running-requests", "64",
        "--enable-metrics",
        "--host", "0.0.0.0",
        "--port", "30000",
    ]  # fmt: skip


def test_metric_names_cover_every_key_vllm_maps() -> None:
    names = PLUGIN.metric_names
    assert set(VLLM.metric_names) <= set(names)
    assert names["queue_depth"] == ("sglang:num_queue_reqs",)
    assert names["running"] == ("sglang:num_running_reqs",)
    assert names["kv_cache_usage"] == ("sglang:token_usage",)
    assert names["prefix_cache_hit_rate"] == ("sglang:cache_hit_rate",)
    assert names["prefix_cache_hits_tokens"] == ("sglang:cached_tokens_total",)
    assert names["prefix_cache_queries_tokens"] == ("sglang:prompt_tokens_total",)
    assert names["ttft_seconds"] == ("sglang:time_to_first_token_seconds",)
    assert names["itl_seconds"] == (
        "sglang:inter_token_latency_seconds",
        "sglang:time_per_output_token_seconds",
    )
    assert names["e2e_seconds"] == ("sglang:e2e_request_latency_seconds",)
    assert names["queue_time_seconds"] == ("sglang:queue_time_seconds",)
    assert names["preemptions"] == ("sglang:num_retracted_requests_total",)
    assert names["spec_draft_tokens"] == () and names["spec_accepted_tokens"] == ()
    for key, samples in names.items():
        assert all(s.startswith("sglang:") for s in samples), key
    assert PLUGIN.metrics_path == "/metrics"
    assert "--enable-metrics" in PLUGIN.server_argv(_config())


def test_registered_and_defaults() -> None:
    assert ENGINES["sglang"] is PLUGIN
    assert PLUGIN.defaults.engine_version == "0.5.23"
    assert PLUGIN.defaults.port == 30000
    assert PLUGIN.defaults.prefix_caching and PLUGIN.defaults.chunked_prefill


def test_disaggregation_plan() -> None:
    config = _config(
        tp=2, max_num_seqs=128, disaggregation={"prefill_instances": 2, "decode_instances": 1}
    )
    plan = PLUGIN.disaggregation_plan(config, base_port=8100)
    assert plan.gpus_needed == 6
    assert [p.role for p in plan.prefill + plan.decode] == ["prefill", "prefill", "decode"]
    assert [p.port for p in plan.prefill + plan.decode] == [8100, 8101, 8102]
    assert [p.env["CUDA_VISIBLE_DEVICES"] for p in plan.prefill + plan.decode] == [
        "0,1", "2,3", "4,5",
    ]  # fmt: skip
    shared = [
        "--model-path", MODEL,
        "--tp-size", "2",
        "--pp-size", "1",
        "--max-running-requests", "128",
        "--enable-metrics",
        "--disaggregation-transfer-backend", "nixl",
    ]  # fmt: skip
    assert plan.prefill[0].argv == [
        *LAUNCH, *shared,
        "--disaggregation-mode", "prefill",
        "--disaggregation-bootstrap-port", "8998",
        "--host", "0.0.0.0", "--port", "8100",
    ]  # fmt: skip
    assert plan.prefill[1].argv[-6:] == [
        "--disaggregation-bootstrap-port", "8999", "--host", "0.0.0.0", "--port", "8101",
    ]  # fmt: skip
    assert plan.decode[0].argv == [
        *LAUNCH, *shared,
        "--disaggregation-mode", "decode",
        "--host", "0.0.0.0", "--port", "8102",
    ]  # fmt: skip
    assert plan.router.argv == [
        "python3", "-m", "sglang_router.launch_router", "--pd-disaggregation",
        "--prefill", "http://127.0.0.1:8100", "8998",
        "--prefill", "http://127.0.0.1:8101", "8999",
        "--decode", "http://127.0.0.1:8102",
        "--host", "0.0.0.0", "--port", "8000",
    ]  # fmt: skip
    assert plan.router.port == 8000


def test_disaggregated_config_file_holds_the_shared_settings() -> None:
    config = _config(disaggregation={"prefill_instances": 1, "decode_instances": 1})
    _, text = PLUGIN.config_file(config)
    plan = PLUGIN.disaggregation_plan(config)
    role_flags = {"--disaggregation-mode", "--disaggregation-bootstrap-port"}
    for proc in plan.prefill + plan.decode:
        argv = proc.argv[3:]
        kept = [a for i, a in enumerate(argv) if role_flags.isdisjoint({a, argv[i - 1]})]
        instance = config.model_copy(update={"port": proc.port})
        assert kept == _yaml_to_argv(PLUGIN.config_file(instance)[1])
    assert yaml.safe_load(text)["disaggregation-transfer-backend"] == "nixl"


def test_disaggregated_config_has_no_single_command() -> None:
    config = _config(disaggregation={"prefill_instances": 1, "decode_instances": 1})
    with pytest.raises(EngineError, match="one command per role"):
        PLUGIN.server_argv(config)
    with pytest.raises(EngineError, match="one command per role"):
        PLUGIN.serve_argv_with_config_file(config, "c.yaml")


# -- capability checks -----------------------------------------------------------------------


def test_supported_configs_pass() -> None:
    PLUGIN.check(FULL, H100, LLAMA_8B)
    PLUGIN.check(_config(weight_quantization="fp8"), A100, LLAMA_8B)  # Marlin W8A16
    PLUGIN.check(_config(tp=8), H100, LLAMA_8B)  # 8 KV heads shard one per GPU
    PLUGIN.check(_config(weight_quantization="mxfp4"), H100, GPT_OSS)
    PLUGIN.check(_config(kv_cache_dtype="bf16"), A100, LLAMA_8B)
    # NVFP4 only from a checkpoint in it: the model named is one (facts say not unquantized).
    PLUGIN.check(_config(kv_cache_dtype="fp4", weight_quantization="nvfp4"), B200,
                 LLAMA_8B_PREQUANTIZED)
    PLUGIN.check(_config(weight_quantization="awq"), A100, LLAMA_8B)  # its AWQ checkpoint
    PLUGIN.check(_config(model="Qwen/Qwen3-8B", weight_quantization="fp8"), H100, QWEN3_8B)
    PLUGIN.check(_config(tp=8, speculative={"method": "mtp", "num_tokens": 3}), H100, DEEPSEEK)
    PLUGIN.check(_config(kv_cache_dtype="fp8"), MI300X, LLAMA_8B)
    PLUGIN.check(
        _config(tp=2, disaggregation={"prefill_instances": 1, "decode_instances": 3}),
        H100,
        LLAMA_8B,
    )


@pytest.mark.parametrize(
    ("config", "hardware", "model", "message"),
    [
        (
            _config(kv_cache_dtype="int8"),
            H100,
            LLAMA_8B,
            "kv_cache_dtype=int8: SGLang has no int8 KV cache (choices: auto, fp8_e4m3, "
            "fp8_e5m2, bf16, fp4_e2m1); use fp8",
        ),
        (
            _config(kv_cache_dtype="fp16"),
            H100,
            LLAMA_8B,
            "SGLang has no fp16 KV cache option; auto keeps the model dtype, and this model "
            "is bf16",
        ),
        (
            _config(kv_cache_dtype="fp8_e4m3"),
            A100,
            LLAMA_8B,
            "FP8 KV cache needs a GPU with FP8 support (compute capability >= 8.9 or MI300); "
            "A100 80GB SXM has none",
        ),
        (
            _config(kv_cache_dtype="fp4"),
            H100,
            LLAMA_8B,
            "FP4 (fp4_e2m1) KV cache needs a Blackwell GPU (compute capability >= 10.0); "
            "H100 SXM has no FP4",
        ),
        (
            _config(weight_quantization="int8"),
            H100,
            LLAMA_8B,
            "weight_quantization=int8: SGLang's w8a8_int8 loads only pre-quantized W8A8 "
            "checkpoints; load one with weight_quantization unset",
        ),
        (
            _config(weight_quantization="int4"),
            H100,
            LLAMA_8B,
            "weight_quantization=int4: SGLang has no --quantization value for generic int4 "
            "weights; use awq/gptq or a pre-quantized checkpoint with weight_quantization unset",
        ),
        (
            _config(weight_quantization="fp8"),
            T4,
            LLAMA_8B,
            "FP8 weights need FP8 hardware or an Ampere+ NVIDIA GPU for SGLang's Marlin "
            "fallback; T4 has neither",
        ),
        (
            _config(weight_quantization="gptq"),
            T4,
            LLAMA_8B,
            "gptq is rendered as gptq_marlin, whose Marlin kernels need an NVIDIA GPU with "
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
            "SGLang's mxfp4 applies only to MoE experts; model is dense",
        ),
        (
            _config(model="Qwen/Qwen3-8B", weight_quantization="awq"),
            H100,
            QWEN3_8B,
            "weight_quantization=awq: SGLang cannot quantize the bf16 checkpoint Qwen/Qwen3-8B "
            "on load and no pre-quantized awq checkpoint of it is known; name one as the "
            "model, leave weight_quantization unset, or use fp8 (SGLang quantizes it on load)",
        ),
        (
            _config(weight_quantization="nvfp4"),
            B200,
            LLAMA_8B,
            "weight_quantization=nvfp4: SGLang cannot quantize the bf16 checkpoint "
            "meta-llama/Llama-3.1-8B-Instruct on load and no pre-quantized nvfp4 checkpoint "
            "of it is known; name one as the model, leave weight_quantization unset, or use "
            "fp8 (SGLang quantizes it on load)",
        ),
        (
            _config(model="Qwen/Qwen3-235B-A22B", tp=8, weight_quantization="mxfp4"),
            H100,
            QWEN3_MOE,
            "weight_quantization=mxfp4: SGLang cannot quantize the bf16 checkpoint "
            "Qwen/Qwen3-235B-A22B on load and no pre-quantized mxfp4 checkpoint of it is "
            "known; name one as the model, leave weight_quantization unset, or use fp8 "
            "(SGLang quantizes it on load)",
        ),
        (
            _config(speculative={"method": "ngram", "num_tokens": 4}),
            MI300X,
            LLAMA_8B,
            "SGLang's NGRAM speculative decoding runs only on CUDA; MI300X is not an NVIDIA GPU",
        ),
        (
            _config(extra_args={"disable-radix-cache": True}),
            H100,
            LLAMA_8B,
            "extra_args['disable-radix-cache'] collides with a setting EngineConfig renders itself",
        ),
        (
            _config(extra_args={"enable-torch-compile": False}),
            H100,
            LLAMA_8B,
            "extra_args['enable-torch-compile'] is false; SGLang switches are store_true "
            "flags, so leave the flag out instead",
        ),
        (
            _config(extra_args={"page_size": 16, "page-size": 32}),
            H100,
            LLAMA_8B,
            "extra_args['page-size'] repeats flag --page-size",
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
    assert served.model_copy(update={"model": MODEL}) == config
    argv = PLUGIN.server_argv(served)
    assert argv[argv.index("--model-path") + 1] == (
        "hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4")
    # The Marlin spelling stays: SGLang resolves an AWQ checkpoint to awq_marlin when asked.
    assert argv[argv.index("--quantization") + 1] == "awq_marlin"
    data = yaml.safe_load(PLUGIN.config_file(served)[1])
    assert data["model-path"] == "hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4"
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
