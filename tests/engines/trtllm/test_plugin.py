"""The TensorRT-LLM plug-in: exact argv, extra-options YAML, docker command, refusals."""

from __future__ import annotations

import pytest
import yaml
from pydantic import ValidationError

from engines.config import EngineConfig
from engines.containers import docker_argv
from engines.errors import CapabilityError, EngineError
from engines.facts import HardwareFacts, ModelFacts
from engines.registry import ENGINES
from engines.trtllm.plugin import PLUGIN
from tests.engines.conftest import (
    A100,
    B200,
    H100,
    LLAMA_8B,
    LLAMA_8B_FP8,
    LLAMA_8B_PREQUANTIZED,
    MI300X,
    MODEL,
    NASTY_MODEL,
    QWEN3_MOE,
)

DEEPSEEK = ModelFacts(
    num_attention_heads=128,
    num_kv_heads=128,
    num_layers=61,
    max_context_tokens=163840,
    is_moe=True,
    has_mtp_heads=True,
)
# Qwen3-8B's config.json shapes; the catalog knows no pre-quantized checkpoint of it.
QWEN3_8B = ModelFacts(num_attention_heads=32, num_kv_heads=8, num_layers=36,
                      max_context_tokens=40960, weights_dtype="bf16")
EAGLE = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
METRICS = {"return_perf_metrics": True, "enable_iter_perf_stats": True}

# CLI flag → the LlmArgs key it sets (serve.py get_llm_args); host/port/backend set none that
# the YAML could also hold except backend, which we never write to the YAML.
_CLI_TO_LLM_ARG = {
    "--backend": "backend",
    "--tp_size": "tensor_parallel_size",
    "--pp_size": "pipeline_parallel_size",
    "--ep_size": "moe_expert_parallel_size",
    "--max_batch_size": "max_batch_size",
    "--max_num_tokens": "max_num_tokens",
    "--max_seq_len": "max_seq_len",
    "--kv_cache_free_gpu_memory_fraction": "kv_cache_config",
    "--free_gpu_memory_fraction": "kv_cache_config",
    "--enable_chunked_prefill": "enable_chunked_prefill",
    "--trust_remote_code": "trust_remote_code",
}


def _config(**overrides: object) -> EngineConfig:
    return EngineConfig.model_validate({"engine": "trtllm", "model": MODEL, **overrides})


FULL = _config(
    tp=2,
    max_num_seqs=256,
    max_batched_tokens=8192,
    gpu_memory_fraction=0.85,
    prefix_caching=True,
    chunked_prefill=True,
    kv_cache_dtype="fp8",
    weight_quantization="fp8",
    max_model_len=16384,
    speculative={"method": "eagle3", "num_tokens": 3, "draft_model": EAGLE},
    extra_args={"trust-remote-code": True, "reasoning_parser": "deepseek-r1"},
)


def _yaml(config: EngineConfig) -> dict:
    name, text = PLUGIN.config_file(config)
    assert name == "trtllm-extra-options.yaml"
    return yaml.safe_load(text)


# -- argv ------------------------------------------------------------------------------------


def test_minimal_argv_and_yaml() -> None:
    assert PLUGIN.server_argv(_config()) == [
        "trtllm-serve", MODEL,
        "--backend", "pytorch",
        "--host", "0.0.0.0",
        "--port", "8000",
        "--tp_size", "1",
        "--pp_size", "1",
        "--extra_llm_api_options", "trtllm-extra-options.yaml",
    ]  # fmt: skip
    # chunked prefill unset stays the engine default (off): no key at all
    assert _yaml(_config()) == METRICS


def test_full_argv() -> None:
    assert PLUGIN.server_argv(FULL) == [
        "trtllm-serve", MODEL,
        "--backend", "pytorch",
        "--host", "0.0.0.0",
        "--port", "8000",
        "--tp_size", "2",
        "--pp_size", "1",
        "--max_batch_size", "256",
        "--max_num_tokens", "8192",
        "--max_seq_len", "16384",
        "--trust_remote_code",
        "--reasoning_parser", "deepseek-r1",
        "--extra_llm_api_options", "trtllm-extra-options.yaml",
    ]  # fmt: skip


def test_full_yaml_parses_back() -> None:
    assert _yaml(FULL) == {
        "kv_cache_config": {
            "free_gpu_memory_fraction": 0.85,
            "enable_block_reuse": True,
            "dtype": "fp8",
        },
        "enable_chunked_prefill": True,
        "speculative_config": {
            "decoding_type": "Eagle3",
            "max_draft_len": 3,
            "speculative_model_dir": EAGLE,
        },
        **METRICS,
    }


def test_disabled_features_are_written_false_in_the_yaml() -> None:
    config = _config(prefix_caching=False, chunked_prefill=False, pp=2, port=9000)
    argv = PLUGIN.server_argv(config)
    assert "--enable_chunked_prefill" not in argv
    assert argv[argv.index("--pp_size") + 1] == "2"
    assert argv[argv.index("--port") + 1] == "9000"
    assert _yaml(config) == {
        "kv_cache_config": {"enable_block_reuse": False},
        "enable_chunked_prefill": False,
        **METRICS,
    }


def test_false_extra_flag_is_left_off() -> None:
    argv = PLUGIN.server_argv(_config(extra_args={"trust_remote_code": False}))
    assert "--trust_remote_code" not in argv


@pytest.mark.parametrize(
    "config",
    [
        FULL,
        _config(),
        _config(gpu_memory_fraction=0.9, chunked_prefill=False),
        _config(speculative={"method": "ngram", "num_tokens": 2}, max_num_seqs=8),
        _config(disaggregation={"prefill_instances": 1, "decode_instances": 1}, tp=2),
        _config(tp=8, ep=8),
        _config(dp=8, ep=8, gpu_memory_fraction=0.8),
    ],
)
def test_each_setting_is_written_once(config: EngineConfig) -> None:
    """The YAML overrides the CLI, so no LlmArgs key may come from both."""
    argv = PLUGIN.server_argv(config)
    flags = [a for a in argv if a.startswith("--")]
    assert len(flags) == len(set(flags))
    cli_keys = {_CLI_TO_LLM_ARG[f] for f in flags if f in _CLI_TO_LLM_ARG}
    assert cli_keys & set(_yaml(config)) == set()
    assert not {"--kv_cache_free_gpu_memory_fraction", "--free_gpu_memory_fraction"} & set(argv)


def test_serve_argv_with_config_file() -> None:
    argv = PLUGIN.serve_argv_with_config_file(FULL, "/run/x/extra.yml")
    assert argv[-2:] == ["--extra_llm_api_options", "/run/x/extra.yml"]
    assert argv[:-2] == PLUGIN.server_argv(FULL)[:-2]
    with pytest.raises(EngineError, match="invalid extra options path"):
        PLUGIN.serve_argv_with_config_file(FULL, "")


@pytest.mark.parametrize(
    ("speculative", "expected"),
    [
        (
            {"method": "eagle3", "num_tokens": 4, "draft_model": EAGLE},
            {
                "speculative_config": {
                    "decoding_type": "Eagle3",
                    "max_draft_len": 4,
                    "speculative_model_dir": EAGLE,
                },
            },
        ),
        (
            {"method": "draft_model", "num_tokens": 5, "draft_model": "meta-llama/Llama-3.2-1B"},
            {
                "speculative_config": {
                    "decoding_type": "DraftTarget",
                    "max_draft_len": 5,
                    "speculative_model_dir": "meta-llama/Llama-3.2-1B",
                },
                "disable_overlap_scheduler": True,
            },
        ),
        (
            {"method": "ngram", "num_tokens": 3},
            {
                "speculative_config": {
                    "decoding_type": "NGram",
                    "max_draft_len": 3,
                    "max_matching_ngram_size": 4,
                    "is_keep_all": True,
                    "is_use_oldest": True,
                    "is_public_pool": True,
                },
                "disable_overlap_scheduler": True,
            },
        ),
        (
            {"method": "mtp", "num_tokens": 2},
            {
                "speculative_config": {
                    "decoding_type": "MTP",
                    "max_draft_len": 2,
                    "num_nextn_predict_layers": 2,
                },
            },
        ),
    ],
)
def test_speculative_yaml_per_method(speculative: dict, expected: dict) -> None:
    config = _config(speculative=speculative)
    assert _yaml(config) == {**expected, **METRICS}
    assert "--speculative_config" not in PLUGIN.server_argv(config)


@pytest.mark.parametrize(
    ("ours", "kv_config"),
    [
        ("auto", None),
        ("bf16", None),  # the model dtype is TRT-LLM's "auto"
        ("fp8", {"dtype": "fp8"}),
        ("fp8_e4m3", {"dtype": "fp8"}),
        ("fp4", {"dtype": "nvfp4"}),
    ],
)
def test_kv_cache_dtype_mapping(ours: str, kv_config: dict | None) -> None:
    assert _yaml(_config(kv_cache_dtype=ours)).get("kv_cache_config") == kv_config


@pytest.mark.parametrize("quant", [None, "none", "fp8", "nvfp4", "awq"])
def test_checkpoint_quantization_renders_nothing(quant: str | None) -> None:
    """The PyTorch backend reads it from the checkpoint; there is no flag to force it."""
    config = _config(weight_quantization=quant)
    assert PLUGIN.server_argv(config) == PLUGIN.server_argv(_config())
    assert _yaml(config) == METRICS


# -- expert and attention data parallelism (TEP, DEP) ---------------------------------------

QWEN3 = "Qwen/Qwen3-235B-A22B"


def test_tep_renders_ep_size_over_the_tp_group() -> None:
    config = _config(model=QWEN3, tp=8, ep=8)
    assert PLUGIN.server_argv(config) == [
        "trtllm-serve", QWEN3,
        "--backend", "pytorch",
        "--host", "0.0.0.0",
        "--port", "8000",
        "--tp_size", "8",
        "--pp_size", "1",
        "--ep_size", "8",
        "--extra_llm_api_options", "trtllm-extra-options.yaml",
    ]  # fmt: skip
    assert PLUGIN.config_file(config)[1] == (
        "return_perf_metrics: true\nenable_iter_perf_stats: true\n"
    )
    PLUGIN.check(config, H100, QWEN3_MOE)


def test_dep_renders_attention_dp_ranks_as_tp_ranks() -> None:
    config = _config(model=QWEN3, dp=8, ep=8)
    assert PLUGIN.server_argv(config) == [
        "trtllm-serve", QWEN3,
        "--backend", "pytorch",
        "--host", "0.0.0.0",
        "--port", "8000",
        "--tp_size", "8",
        "--pp_size", "1",
        "--ep_size", "8",
        "--extra_llm_api_options", "trtllm-extra-options.yaml",
    ]  # fmt: skip
    assert PLUGIN.config_file(config)[1] == (
        "enable_attention_dp: true\n"
        "return_perf_metrics: true\n"
        "enable_iter_perf_stats: true\n"
    )
    PLUGIN.check(config, H100, QWEN3_MOE)


@pytest.mark.parametrize("render", ["server_argv", "config_file", "cli_settings",
                                    "extra_options"])
def test_dep_with_attention_tp_cannot_be_rendered(render: str) -> None:
    with pytest.raises(CapabilityError, match=r"^dp=4 with tp=2: .*use tp=1, dp=8$"):
        getattr(PLUGIN, render)(_config(model=QWEN3, tp=2, dp=4, ep=8))


@pytest.mark.parametrize(
    ("fields", "read"),
    [({"tp": 8, "ep": 8}, (8, 1, 8)), ({"dp": 8, "ep": 8}, (1, 8, 8)),
     ({"dp": 4, "ep": 4, "pp": 2}, (1, 4, 4))],
)
def test_parallel_layouts_read_back(fields: dict, read: tuple[int, int, int]) -> None:
    config = _config(model=QWEN3, **fields)
    argv = PLUGIN.serve_argv_with_config_file(config, "/c/x.yaml")
    back = PLUGIN.config_from_file(QWEN3, PLUGIN.config_file(config)[1], argv)
    assert (back.tp, back.dp, back.ep) == read
    assert back == config


def test_attention_dp_switched_off_in_the_file_is_refused() -> None:
    config = _config(model=QWEN3, tp=8, ep=8)
    argv = PLUGIN.serve_argv_with_config_file(config, "/c/x.yaml")
    text = PLUGIN.config_file(config)[1] + "enable_attention_dp: false\n"
    with pytest.raises(EngineError, match="key 'enable_attention_dp'"):
        PLUGIN.config_from_file(QWEN3, text, argv)


# -- injection -------------------------------------------------------------------------------


def test_hostile_model_name_stays_one_argv_element() -> None:
    draft = 'd\'; echo "$(id)" # {x: [y]}'
    config = _config(
        model=NASTY_MODEL,
        speculative={"method": "draft_model", "num_tokens": 2, "draft_model": draft},
        extra_args={"chat_template": "a: b # c {x} [y] 'q' \"dq\" $(id) `id` & | > ; * ~ !"},
    )
    argv = PLUGIN.server_argv(config)
    assert argv[:2] == ["trtllm-serve", NASTY_MODEL]
    assert argv.count(NASTY_MODEL) == 1
    template = argv[argv.index("--chat_template") + 1]
    assert template == "a: b # c {x} [y] 'q' \"dq\" $(id) `id` & | > ; * ~ !"
    assert _yaml(config)["speculative_config"]["speculative_model_dir"] == draft
    docker = docker_argv(
        PLUGIN, config,
        image=PLUGIN.docker_image(),
        host_port=8001,
        model_cache_dir="/cache",
        config_file_path="/tmp/x.yaml",
    )
    assert docker.count(NASTY_MODEL) == 1
    disagg = {"prefill_instances": 1, "decode_instances": 1}
    plan = PLUGIN.disaggregation_plan(
        EngineConfig.model_validate({**config.model_dump(), "disaggregation": disagg})
    )
    assert plan.prefill[0].argv[1] == NASTY_MODEL


# -- docker, readiness, metrics --------------------------------------------------------------


def test_docker_run_argv() -> None:
    config = _config(tp=2, host="127.0.0.1", max_num_seqs=64, prefix_caching=False)
    argv = docker_argv(
        PLUGIN, config,
        image="nvcr.io/nvidia/tensorrt-llm/release:1.2.1",
        host_port=18000,
        model_cache_dir="/home/u/.cache/huggingface",
        gpus=[0, 1],
        config_file_path="/home/u/run/trtllm-extra-options.yaml",
    )
    assert argv == [
        "docker", "run", "--rm",
        "--name", "servefit-trtllm-18000",
        "--gpus", '"device=0,1"',
        "--ipc=host",
        "--ulimit", "memlock=-1",
        "--ulimit", "stack=67108864",
        "-p", "18000:8000",
        "-v", "/home/u/.cache/huggingface:/root/.cache/huggingface",
        "-v", "/home/u/run/trtllm-extra-options.yaml:/servefit/trtllm-extra-options.yaml:ro",
        "--env", "HF_TOKEN",
        "nvcr.io/nvidia/tensorrt-llm/release:1.2.1",
        "trtllm-serve", MODEL,
        "--backend", "pytorch",
        "--host", "0.0.0.0",
        "--port", "8000",
        "--tp_size", "2",
        "--pp_size", "1",
        "--max_batch_size", "64",
        "--extra_llm_api_options", "/servefit/trtllm-extra-options.yaml",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"config_file_path": ""}, "config_file_path must be a file path"),
        ({"config_file_path": "x.yaml"}, "starting with '/' or '.'"),
        ({"config_file_path": "/a:/b"}, "config_file_path must be a file path"),
    ],
)
def test_docker_run_argv_refuses_bad_config_file_paths(kwargs: dict, fragment: str) -> None:
    args = {
        "image": "i",
        "host_port": 8000,
        "model_cache_dir": "/c",
        "config_file_path": "/c/x.yaml",
        **kwargs,
    }
    with pytest.raises(EngineError, match=fragment):
        docker_argv(PLUGIN, _config(), **args)


def test_docker_run_argv_defaults_to_the_config_file_in_the_working_directory() -> None:
    argv = docker_argv(
        PLUGIN, _config(), image="i", host_port=8000, model_cache_dir="servefit-hf-cache"
    )
    assert "servefit-hf-cache:/root/.cache/huggingface" in argv  # a named volume is fine
    mount = argv[argv.index("servefit-hf-cache:/root/.cache/huggingface") + 2]
    assert mount == "./trtllm-extra-options.yaml:/servefit/trtllm-extra-options.yaml:ro"
    assert argv[-2:] == ["--extra_llm_api_options", "/servefit/trtllm-extra-options.yaml"]


def test_metric_names() -> None:
    names = PLUGIN.metric_names
    assert PLUGIN.metrics_path == "/prometheus/metrics"
    assert set(names) == set(ENGINES["vllm"].metric_names) | {"prefix_cache_hit_rate"}
    assert all(isinstance(v, tuple) for v in names.values())
    assert all(n.startswith("trtllm_") for v in names.values() for n in v)
    assert names["queue_depth"] == ("trtllm_num_requests_waiting",)
    assert names["kv_cache_usage"] == ("trtllm_kv_cache_utilization",)
    assert names["prefix_cache_hit_rate"] == ("trtllm_kv_cache_hit_rate",)
    assert names["ttft_seconds"] == ("trtllm_time_to_first_token_seconds",)
    assert names["tpot_seconds"] == ("trtllm_time_per_output_token_seconds",)
    assert names["itl_seconds"] == () and names["preemptions"] == ()


def test_defaults_record_the_engine_differences() -> None:
    assert PLUGIN.defaults.chunked_prefill is False
    assert PLUGIN.defaults.prefix_caching is True
    assert PLUGIN.defaults.gpu_memory_fraction == 0.9


# -- disaggregation --------------------------------------------------------------------------


def test_disaggregation_plan_and_files() -> None:
    config = _config(
        tp=2, kv_cache_dtype="fp8",
        disaggregation={"prefill_instances": 1, "decode_instances": 2},
    )  # fmt: skip
    plan = PLUGIN.disaggregation_plan(config, base_port=8100, config_dir="/run/d")
    assert plan.gpus_needed == 6
    assert [p.port for p in plan.prefill + plan.decode] == [8100, 8101, 8102]
    assert [p.env["CUDA_VISIBLE_DEVICES"] for p in plan.prefill + plan.decode] == [
        "0,1", "2,3", "4,5",
    ]  # fmt: skip
    ctx = plan.prefill[0].argv
    assert ctx[ctx.index("--port") + 1] == "8100"
    assert ctx[-2:] == ["--extra_llm_api_options", "/run/d/trtllm-ctx-extra-options.yaml"]
    assert plan.decode[1].argv[-1] == "/run/d/trtllm-gen-extra-options.yaml"
    assert plan.router.argv == [
        "trtllm-serve", "disaggregated", "-c", "/run/d/trtllm-disagg-config.yaml",
    ]  # fmt: skip
    assert plan.router.port == 8000

    files = {k: yaml.safe_load(v) for k, v in PLUGIN.disaggregation_files(config).items()}
    gen = {
        "kv_cache_config": {"dtype": "fp8"},
        "cache_transceiver_config": {"backend": "UCX"},
        **METRICS,
    }
    assert files == {
        "trtllm-ctx-extra-options.yaml": {**gen, "disable_overlap_scheduler": True},
        "trtllm-gen-extra-options.yaml": gen,
        "trtllm-disagg-config.yaml": {
            "hostname": "0.0.0.0",
            "port": 8000,
            "backend": "pytorch",
            "context_servers": {"num_instances": 1, "urls": ["127.0.0.1:8100"]},
            "generation_servers": {
                "num_instances": 2,
                "urls": ["127.0.0.1:8101", "127.0.0.1:8102"],
            },
        },
    }


def test_disaggregation_files_need_the_section() -> None:
    with pytest.raises(EngineError, match="no disaggregation"):
        PLUGIN.disaggregation_files(_config())


# -- capability checks -----------------------------------------------------------------------


def test_supported_configs_pass() -> None:
    PLUGIN.check(FULL, H100, LLAMA_8B)
    PLUGIN.check(_config(weight_quantization="nvfp4", kv_cache_dtype="fp4"), B200,
                 LLAMA_8B_PREQUANTIZED)
    PLUGIN.check(
        _config(weight_quantization="awq", max_batched_tokens=2048, chunked_prefill=True),
        A100,
        LLAMA_8B_PREQUANTIZED,
    )
    PLUGIN.check(_config(speculative={"method": "mtp", "num_tokens": 1}, tp=8), H100, DEEPSEEK)
    PLUGIN.check(_config(kv_cache_dtype="bf16"), A100, LLAMA_8B)


def _refusals() -> list[tuple[EngineConfig, HardwareFacts, ModelFacts, str]]:
    return [
        (_config(), MI300X, LLAMA_8B, "TensorRT-LLM runs only on NVIDIA GPUs; MI300X is amd"),
        (
            _config(max_batched_tokens=8192, max_model_len=16384),
            H100,
            LLAMA_8B,
            "without chunked prefill (off by default in trtllm-serve), max_batched_tokens=8192 "
            "must cover max_model_len=16384, or a long prompt could never be scheduled",
        ),
        (
            _config(kv_cache_dtype="fp16"),
            H100,
            LLAMA_8B,
            "TensorRT-LLM stores a fp16 KV cache only as the model dtype (auto), and this model "
            "is bf16",
        ),
        (
            _config(weight_quantization="fp8"),
            A100,
            LLAMA_8B,
            "TensorRT-LLM FP8 weights need compute capability >= 8.9 (Ada/Hopper or newer); "
            "A100 80GB SXM has no FP8",
        ),
        (
            _config(kv_cache_dtype="fp8"),
            A100,
            LLAMA_8B,
            "TensorRT-LLM FP8 KV cache need compute capability >= 8.9 (Ada/Hopper or newer); "
            "A100 80GB SXM has no FP8",
        ),
        (
            _config(weight_quantization="nvfp4"),
            H100,
            LLAMA_8B,
            "TensorRT-LLM NVFP4 weights need a Blackwell GPU (compute capability >= 10.0); "
            "H100 SXM has no FP4",
        ),
        (
            _config(weight_quantization="nvfp4"),
            B200,
            LLAMA_8B,
            "weight_quantization=nvfp4: TensorRT-LLM cannot quantize the bf16 checkpoint "
            "meta-llama/Llama-3.1-8B-Instruct on load and no pre-quantized nvfp4 checkpoint of "
            "it is known; name one as the model or leave weight_quantization unset",
        ),
        (
            # The catalog's awq checkpoint is AutoAWQ; the PyTorch backend reads ModelOpt AWQ.
            _config(weight_quantization="awq"),
            A100,
            LLAMA_8B,
            "weight_quantization=awq: TensorRT-LLM cannot quantize the bf16 checkpoint "
            "meta-llama/Llama-3.1-8B-Instruct on load and no pre-quantized awq checkpoint of "
            "it is known; name one as the model or leave weight_quantization unset",
        ),
        (
            _config(model="Qwen/Qwen3-8B", weight_quantization="fp8"),
            H100,
            QWEN3_8B,
            "weight_quantization=fp8: TensorRT-LLM cannot quantize the bf16 checkpoint "
            "Qwen/Qwen3-8B on load and no pre-quantized fp8 checkpoint of it is known; name one "
            "as the model, leave weight_quantization unset, or serve it with vLLM or SGLang "
            "(they quantize FP8 on load)",
        ),
        (
            _config(kv_cache_dtype="fp4"),
            H100,
            LLAMA_8B,
            "TensorRT-LLM NVFP4 KV cache need a Blackwell GPU (compute capability >= 10.0); "
            "H100 SXM has no FP4",
        ),
        (
            _config(kv_cache_dtype="int8"),
            H100,
            LLAMA_8B,
            "kv_cache_dtype=int8: INT8 KV cache exists only on the TensorRT backend "
            "(quant_config.kv_cache_quant_algo), not on the PyTorch backend this plug-in "
            "renders; use fp8",
        ),
        (
            _config(kv_cache_dtype="fp8_e5m2"),
            H100,
            LLAMA_8B,
            "kv_cache_dtype=fp8_e5m2: TensorRT-LLM's FP8 KV cache is E4M3 only; use fp8",
        ),
        *[
            (
                _config(weight_quantization=quant),
                H100,
                LLAMA_8B,
                f"weight_quantization={quant}: the PyTorch backend cannot quantize on load and "
                "this plug-in validates only pre-quantized ModelOpt FP8/NVFP4/W4A16-AWQ or HF "
                "FP8 checkpoints; use one of those (fp8, nvfp4, awq) or leave "
                "weight_quantization unset",
            )
            for quant in ("int8", "int4", "gptq", "mxfp4")
        ],
        (
            _config(speculative={"method": "eagle", "num_tokens": 2, "draft_model": "org/e"}),
            H100,
            LLAMA_8B,
            "speculative method eagle: the PyTorch backend supports only EAGLE-3 drafts "
            "(EAGLE v1/v2 checkpoints are incompatible); use eagle3",
        ),
        *[
            (
                _config(extra_args={key: value}),
                H100,
                LLAMA_8B,
                f"extra_args[{key!r}] collides with a setting EngineConfig renders itself",
            )
            for key, value in (
                ("kv_cache_free_gpu_memory_fraction", 0.5),
                ("free_gpu_memory_fraction", 0.5),
                ("enable_chunked_prefill", True),
                ("extra_llm_api_options", "/x.yaml"),
                ("config", "/x.yaml"),
                ("backend", "tensorrt"),
            )
        ],
    ]


@pytest.mark.parametrize(("config", "hardware", "model", "message"), _refusals())
def test_capability_refusals(
    config: EngineConfig, hardware: HardwareFacts, model: ModelFacts, message: str
) -> None:
    with pytest.raises(CapabilityError) as info:
        PLUGIN.check(config, hardware, model)
    assert info.value.reason == message


# -- the checkpoint served -------------------------------------------------------------------


def test_fp8_of_an_unquantized_model_serves_its_fp8_checkpoint() -> None:
    config = _config(tp=2, weight_quantization="fp8", kv_cache_dtype="fp8")
    served = PLUGIN.served_config(config, LLAMA_8B)
    assert served.model == "nvidia/Llama-3.1-8B-Instruct-FP8"
    assert served.model_copy(update={"model": MODEL}) == config  # nothing else changes
    assert PLUGIN.server_argv(served)[:2] == ["trtllm-serve", "nvidia/Llama-3.1-8B-Instruct-FP8"]
    # trtllm-serve lists the model under its MODEL argument: clients ask for the checkpoint.
    probe = PLUGIN.readiness(served)
    assert probe.served_model_name == "nvidia/Llama-3.1-8B-Instruct-FP8"
    assert probe.completion_body["model"] == "nvidia/Llama-3.1-8B-Instruct-FP8"


@pytest.mark.parametrize(
    ("config", "model"),
    [
        (_config(), LLAMA_8B),
        (_config(weight_quantization="none"), LLAMA_8B),
        (_config(weight_quantization="fp8"), None),  # no facts: the model field is trusted
        (_config(weight_quantization="nvfp4"), LLAMA_8B_PREQUANTIZED),
        (_config(model=LLAMA_8B_FP8, weight_quantization="fp8"), LLAMA_8B),
    ],
)
def test_a_checkpoint_in_the_format_asked_is_served_as_named(
    config: EngineConfig, model: ModelFacts | None
) -> None:
    assert PLUGIN.served_config(config, model) == config


@pytest.mark.parametrize("checkpoints", [{"fp8": "-rf"}, {"fp8": ""}, {"fp8": "a\nb"},
                                         {"none": "org/model"}])
def test_checkpoint_names_must_be_models(checkpoints: dict[str, str]) -> None:
    with pytest.raises(ValidationError, match="quantized_checkpoints"):
        ModelFacts.model_validate({**LLAMA_8B.model_dump(), "quantized_checkpoints": checkpoints})


def test_unknown_mtp_support_is_not_refused() -> None:
    PLUGIN.check(_config(speculative={"method": "mtp", "num_tokens": 1}), H100, LLAMA_8B)


def test_chunked_prefill_lifts_the_budget_rule() -> None:
    config = _config(max_batched_tokens=8192, max_model_len=16384, chunked_prefill=True)
    PLUGIN.check(config, H100, LLAMA_8B)
