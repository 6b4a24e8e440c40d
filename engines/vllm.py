"""The vLLM plug-in: flags, `--config` YAML, docker command, capability checks and metrics.

Written against vLLM 0.33 (`vllm serve`); spellings follow shared/reference/engines.md. It
renders and checks only; launching belongs to `runners/`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import ClassVar

import yaml

from engines.base import (
    DisaggregationPlan,
    EngineDefaults,
    GpuSelection,
    ReadinessProbe,
    ServerProcess,
)
from engines.config import EngineConfig, EngineKind
from engines.errors import CapabilityError, EngineError
from engines.facts import HardwareFacts, ModelFacts

VLLM_VERSION = "0.33.0"
IMAGE_REPOSITORY = "vllm/vllm-openai"
CONFIG_FILE_NAME = "vllm-config.yaml"
# NIXL is the connector vLLM documents first for P/D; kv_both lets the router pick roles.
KV_TRANSFER_CONFIG: dict[str, str] = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
NGRAM_PROMPT_LOOKUP_MAX = 4
NIXL_SIDE_CHANNEL_BASE_PORT = 5600

_KV_DTYPE: dict[str, str] = {
    # vLLM's explicit "bfloat16"/"float16" are only valid for models whose KV default is fp8
    # (CacheConfig docstring); for the rest, "auto" is the model dtype, checked in check().
    "auto": "auto",
    "bf16": "auto",
    "fp16": "auto",
    "fp8": "fp8",
    "fp8_e4m3": "fp8_e4m3",
    "fp8_e5m2": "fp8_e5m2",
}
_KV_DTYPE_REFUSED: dict[str, str] = {
    "int8": "vLLM has no plain int8 KV cache (only int8_per_token_head on newer main, "
    "unverified for 0.33); use fp8",
    "fp4": "vLLM's nvfp4 KV cache is unverified for 0.33; use fp8",
}
_WEIGHT_QUANT: dict[str, str | None] = {
    "none": None,
    "fp8": "fp8",  # dynamic FP8 on a BF16 checkpoint, or vLLM's own FP8 checkpoints
    # Pre-quantized formats: name the Marlin variant, which vLLM picks itself only when
    # --quantization is unset; a bare "awq"/"gptq" pins the slow kernels.
    "awq": "awq_marlin",
    "gptq": "gptq_marlin",
    "nvfp4": "modelopt_fp4",
    "mxfp4": "mxfp4",
}
_WEIGHT_QUANT_REFUSED: dict[str, str] = {
    "int8": "vLLM has no --quantization value for generic int8 weights; load a pre-quantized "
    "(compressed-tensors W8A8) checkpoint with weight_quantization unset",
    "int4": "vLLM has no --quantization value for generic int4 weights; use awq/gptq or a "
    "pre-quantized (compressed-tensors W4A16) checkpoint with weight_quantization unset",
}
_SPEC_WITH_MODEL = frozenset({"eagle", "eagle3", "draft_model"})
_IMAGE_TAG = re.compile(r"^(latest|nightly|v?\d+\.\d+\.\d+([.+-][0-9A-Za-z.]+)?)$")
_CONTAINER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")

Setting = tuple[str, str | int | float | bool]


def _flag_name(key: str) -> str:
    """vLLM accepts `_` and `-` in flag names; compare and render the dashed form."""
    return key.replace("_", "-")


def _speculative_config(config: EngineConfig) -> dict[str, str | int]:
    spec = config.speculative
    assert spec is not None  # callers check
    out: dict[str, str | int] = {"method": spec.method}
    if spec.method in _SPEC_WITH_MODEL:
        assert spec.draft_model is not None  # SpeculativeConfig validates this
        out["model"] = spec.draft_model
    out["num_speculative_tokens"] = spec.num_tokens
    if spec.method == "ngram":
        out["prompt_lookup_max"] = NGRAM_PROMPT_LOOKUP_MAX
    return out


class VllmEngine:
    """vLLM ≥ 0.30 OpenAI server (`vllm serve MODEL …`)."""

    kind: ClassVar[EngineKind] = "vllm"
    defaults: ClassVar[EngineDefaults] = EngineDefaults(
        engine_version=VLLM_VERSION,
        max_num_seqs=None,
        max_batched_tokens=None,
        gpu_memory_fraction=0.92,
        prefix_caching=True,
        chunked_prefill=True,
        kv_cache_dtype="auto",
        port=8000,
        notes="`vllm serve` picks max-num-seqs / max-num-batched-tokens per GPU: 1024 / 8192 "
        "on GPUs with >= 70 GiB that are not A100, else 256 / 2048 (EngineArgs batch "
        "defaults). gpu-memory-utilization is a fraction of total GPU memory (0.92 in "
        "CacheConfig, 0.9 in older releases).",
    )
    metrics_path: ClassVar[str] = "/metrics"
    # Sample names as scraped (counters carry `_total`; histograms add _bucket/_sum/_count).
    # Newest name first, then the names older releases used.
    metric_names: ClassVar[Mapping[str, tuple[str, ...]]] = {
        "queue_depth": ("vllm:num_requests_waiting",),
        "running": ("vllm:num_requests_running",),
        "kv_cache_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
        "prefix_cache_queries_tokens": (
            "vllm:prefix_cache_queries_total",
            "vllm:gpu_prefix_cache_queries_total",
        ),
        "prefix_cache_hits_tokens": (
            "vllm:prefix_cache_hits_total",
            "vllm:gpu_prefix_cache_hits_total",
        ),
        "ttft_seconds": ("vllm:time_to_first_token_seconds",),
        "itl_seconds": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
        "tpot_seconds": (
            "vllm:request_time_per_output_token_seconds",
            "vllm:time_per_output_token_seconds",
        ),
        "e2e_seconds": ("vllm:e2e_request_latency_seconds",),
        "queue_time_seconds": ("vllm:request_queue_time_seconds",),
        "prompt_tokens": ("vllm:prompt_tokens_total",),
        "generation_tokens": ("vllm:generation_tokens_total",),
        "preemptions": ("vllm:num_preemptions_total",),
        "spec_draft_tokens": ("vllm:spec_decode_num_draft_tokens_total",),
        "spec_accepted_tokens": ("vllm:spec_decode_num_accepted_tokens_total",),
    }

    # -- rendering -------------------------------------------------------------------------

    def settings(self, config: EngineConfig) -> list[Setting]:
        """The (long flag name, value) pairs for `config`, in render order; model excluded.

        Both the CLI and the `--config` YAML are made from this one list, so they cannot drift.

        Raises:
            CapabilityError: a value vLLM cannot express (int8/fp4 KV, int8/int4 weights,
                an extra arg that shadows a field).
        """
        self._require_own(config)
        out: list[Setting] = [
            ("tensor-parallel-size", config.tp),
            ("pipeline-parallel-size", config.pp),
        ]
        optional: list[tuple[str, str | int | float | bool | None]] = [
            ("max-num-seqs", config.max_num_seqs),
            ("max-num-batched-tokens", config.max_batched_tokens),
            ("gpu-memory-utilization", config.gpu_memory_fraction),
            ("enable-prefix-caching", config.prefix_caching),
            ("enable-chunked-prefill", config.chunked_prefill),
            ("kv-cache-dtype", self._kv_cache_dtype(config)),
            ("quantization", self._quantization(config)),
            ("max-model-len", config.max_model_len),
        ]
        out += [(name, value) for name, value in optional if value is not None]
        if config.speculative is not None:
            out.append(("speculative-config", json.dumps(_speculative_config(config))))
        if config.disaggregation is not None:
            out.append(("kv-transfer-config", json.dumps(KV_TRANSFER_CONFIG)))
        out += [("host", config.host), ("port", config.port)]
        out += self._extra_settings(config, {name for name, _ in out})
        return out

    def server_argv(self, config: EngineConfig) -> list[str]:
        """`vllm serve MODEL --flag value …` as an argument list."""
        return ["vllm", "serve", config.model, *self._flags(config)]

    def config_file(self, config: EngineConfig) -> tuple[str, str]:
        """(`vllm-config.yaml`, YAML of long flag names) for `vllm serve MODEL --config FILE`.

        The model stays on the command line (positional). A `false` boolean is written as
        `no-<flag>: true`, because releases before ~0.30 silently drop `<flag>: false`.
        """
        data: dict[str, str | int | float | bool] = {}
        for name, value in self.settings(config):
            if value is False:
                data[f"no-{name}"] = True
            else:
                data[name] = value
        # A huge width keeps each JSON value on one line, readable and diffable.
        text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=10**6)
        return CONFIG_FILE_NAME, text

    def serve_argv_with_config_file(self, config: EngineConfig, path: str) -> list[str]:
        """`vllm serve MODEL --config PATH` (vLLM requires a .yaml/.yml extension)."""
        self._require_own(config)
        if not path.endswith((".yaml", ".yml")):
            raise EngineError(f"vLLM reads only .yaml/.yml config files, got {path!r}")
        return ["vllm", "serve", config.model, "--config", path]

    def docker_image(self, version: str | None = None) -> str:
        """`vllm/vllm-openai:v<version>`; `latest`/`nightly` pass through."""
        tag = version or VLLM_VERSION
        if not _IMAGE_TAG.fullmatch(tag):
            raise EngineError(f"not a vLLM release tag: {tag!r} (expected e.g. 0.33.0 or latest)")
        if tag[0].isdigit():
            tag = f"v{tag}"
        return f"{IMAGE_REPOSITORY}:{tag}"

    def docker_run_argv(
        self,
        config: EngineConfig,
        *,
        image: str,
        host_port: int,
        model_cache_dir: str,
        gpus: GpuSelection = "all",
        container_name: str | None = None,
        config_file_path: str | None = None,  # unused: the settings travel as flags here
    ) -> list[str]:
        """`docker run` of the official image; its entrypoint is `vllm serve`.

        Inside the container the server binds 0.0.0.0 whatever `config.host` says, or the
        published port would not reach it. The HF cache is mounted so weights download once.
        """
        if not 1 <= host_port <= 65535:
            raise EngineError(f"host_port must be 1-65535, got {host_port}")
        if ":" in model_cache_dir or not model_cache_dir:
            raise EngineError(
                f"model_cache_dir must be a path without ':', got {model_cache_dir!r}"
            )
        name = container_name or f"servefit-vllm-{host_port}"
        if not _CONTAINER_NAME.fullmatch(name):
            raise EngineError(f"invalid container name {name!r}")
        inside = config.model_copy(update={"host": "0.0.0.0"})
        return [
            "docker", "run", "--rm",
            "--name", name,
            "--gpus", _docker_gpus(gpus),
            "--ipc=host",
            "-p", f"{host_port}:{config.port}",
            "-v", f"{model_cache_dir}:/root/.cache/huggingface",
            "--env", "HF_TOKEN",
            image,
            config.model,
            *self._flags(inside),
        ]  # fmt: skip

    def readiness(self, config: EngineConfig) -> ReadinessProbe:
        """`/health` answers 200 once weights and KV cache are up; then one 1-token completion."""
        name = config.extra_args.get("served-model-name", config.model)
        return ReadinessProbe(
            health_path="/health",
            models_path="/v1/models",
            served_model_name=str(name),
            completion_path="/v1/completions",
            completion_body={"model": str(name), "prompt": "Hello", "max_tokens": 1},
        )

    def disaggregation_plan(
        self, config: EngineConfig, *, host: str = "127.0.0.1", base_port: int = 8100
    ) -> DisaggregationPlan:
        """NixlConnector instances (one GPU group each) behind `vllm-router`.

        Every instance runs the same `vllm serve … --kv-transfer-config` (kv_both); the router
        sends each request to a prefill instance first, then to a decode instance. Instances
        get consecutive ports from `base_port`, disjoint GPU ranges and distinct NIXL
        side-channel ports; the router listens on `config.host:config.port`.
        """
        disagg = config.disaggregation
        if disagg is None:
            raise EngineError("config has no disaggregation section")
        gpus_per_instance = config.tp * config.pp
        roles = ["prefill"] * disagg.prefill_instances + ["decode"] * disagg.decode_instances
        procs: list[ServerProcess] = []
        for index, role in enumerate(roles):
            port = base_port + index
            first_gpu = index * gpus_per_instance
            devices = ",".join(str(g) for g in range(first_gpu, first_gpu + gpus_per_instance))
            instance = config.model_copy(update={"port": port})
            env = {
                "CUDA_VISIBLE_DEVICES": devices,
                "VLLM_NIXL_SIDE_CHANNEL_PORT": str(NIXL_SIDE_CHANNEL_BASE_PORT + index),
            }
            procs.append(
                ServerProcess(role=role, argv=self.server_argv(instance), env=env, port=port)
            )
        prefill = [p for p in procs if p.role == "prefill"]
        decode = [p for p in procs if p.role == "decode"]
        router_argv = ["vllm-router", "--vllm-pd-disaggregation"]
        for flag, group in (("--prefill", prefill), ("--decode", decode)):
            for proc in group:
                router_argv += [flag, f"http://{host}:{proc.port}"]
        router_argv += ["--host", config.host, "--port", str(config.port)]
        return DisaggregationPlan(
            prefill=prefill,
            decode=decode,
            router=ServerProcess(role="router", argv=router_argv, port=config.port),
            gpus_needed=len(roles) * gpus_per_instance,
        )

    # -- capability checks -----------------------------------------------------------------

    def check(self, config: EngineConfig, hardware: HardwareFacts, model: ModelFacts) -> None:
        """Refuse configs vLLM cannot serve on `hardware` for `model`.

        Raises:
            CapabilityError: one line naming the first problem found.
        """
        self.settings(config)  # what cannot be rendered cannot run either
        self._check_parallelism(config, hardware, model)
        self._check_lengths(config, model)
        self._check_kv_cache(config, hardware, model)
        self._check_weights(config, hardware, model)
        self._check_speculative(config, model)

    def _check_parallelism(
        self, config: EngineConfig, hardware: HardwareFacts, model: ModelFacts
    ) -> None:
        disagg = config.disaggregation
        instances = 1 if disagg is None else disagg.prefill_instances + disagg.decode_instances
        needed = config.tp * config.pp * instances
        if needed > hardware.gpu_count:
            raise CapabilityError(
                f"tp×pp×instances = {config.tp}×{config.pp}×{instances} = {needed} GPUs, "
                f"but only {hardware.gpu_count} available"
            )
        if model.num_attention_heads % config.tp:
            raise CapabilityError(
                f"tp={config.tp} must divide the model's {model.num_attention_heads} "
                "attention heads"
            )
        # vLLM shards KV heads when tp divides them and replicates them when they divide tp
        # (QKVParallelLinear); any other ratio cannot be split.
        kv = model.num_kv_heads
        if kv % config.tp and config.tp % kv:
            raise CapabilityError(
                f"tp={config.tp} and the model's {kv} KV heads must divide one another"
            )
        if model.num_layers is not None and config.pp > model.num_layers:
            raise CapabilityError(f"pp={config.pp} exceeds the model's {model.num_layers} layers")

    def _check_lengths(self, config: EngineConfig, model: ModelFacts) -> None:
        if config.max_model_len is not None and config.max_model_len > model.max_context_tokens:
            raise CapabilityError(
                f"max_model_len={config.max_model_len} exceeds the model's context of "
                f"{model.max_context_tokens} tokens"
            )
        budget = config.max_batched_tokens
        if budget is None:
            return
        if config.max_num_seqs is not None and budget < config.max_num_seqs:
            raise CapabilityError(
                f"max_batched_tokens={budget} must be >= max_num_seqs={config.max_num_seqs} "
                "(vLLM scheduler rule)"
            )
        model_len = config.max_model_len or model.max_context_tokens
        if config.chunked_prefill is False and budget < model_len:
            raise CapabilityError(
                f"without chunked prefill, max_batched_tokens={budget} must cover "
                f"max_model_len={model_len}, or a long prompt could never be scheduled"
            )

    def _check_kv_cache(
        self, config: EngineConfig, hardware: HardwareFacts, model: ModelFacts
    ) -> None:
        dtype = config.kv_cache_dtype
        if dtype in ("bf16", "fp16") and model.weights_dtype not in (None, dtype):
            raise CapabilityError(
                f"vLLM stores a {dtype} KV cache only as the model dtype (auto), and this "
                f"model is {model.weights_dtype}"
            )
        # Policy, not a vLLM error: without FP8 hardware an FP8 KV cache only saves memory and
        # pays conversions on every step, which our performance model does not represent.
        if dtype.startswith("fp8") and "fp8" not in hardware.native_dtypes:
            raise CapabilityError(
                f"FP8 KV cache needs a GPU with FP8 support (compute capability >= 8.9 or "
                f"MI300); {hardware.gpu_name} has none"
            )

    def _check_weights(
        self, config: EngineConfig, hardware: HardwareFacts, model: ModelFacts
    ) -> None:
        quant = config.weight_quantization
        if quant is None or quant == "none":
            return
        cc = hardware.compute_capability
        ampere_or_newer = hardware.vendor == "nvidia" and cc is not None and cc >= (8, 0)
        if quant == "fp8" and "fp8" not in hardware.native_dtypes and not ampere_or_newer:
            # On sm_80/86 vLLM runs FP8 checkpoints weight-only through Marlin (W8A16): allowed.
            raise CapabilityError(
                f"FP8 weights need FP8 hardware or an Ampere+ NVIDIA GPU for vLLM's Marlin "
                f"fallback; {hardware.gpu_name} has neither"
            )
        if quant in ("awq", "gptq") and not ampere_or_newer:
            raise CapabilityError(
                f"{quant} is rendered as {_WEIGHT_QUANT[quant]}, whose Marlin kernels need an "
                f"NVIDIA GPU with compute capability >= 8.0; {hardware.gpu_name} is not one"
            )
        if quant == "nvfp4" and "fp4" not in hardware.native_dtypes:
            raise CapabilityError(
                f"NVFP4 weights need a Blackwell GPU (compute capability >= 10.0); "
                f"{hardware.gpu_name} has no FP4"
            )
        if quant == "mxfp4":
            if not model.is_moe:
                # vLLM's mxfp4 method quantizes only fused-MoE experts (gpt-oss checkpoints).
                raise CapabilityError("vLLM's mxfp4 applies only to MoE experts; model is dense")
            if hardware.vendor == "nvidia" and not ampere_or_newer:
                raise CapabilityError(
                    f"MXFP4 needs compute capability >= 8.0 in vLLM; {hardware.gpu_name} is older"
                )

    def _check_speculative(self, config: EngineConfig, model: ModelFacts) -> None:
        spec = config.speculative
        if spec is not None and spec.method == "mtp" and model.has_mtp_heads is False:
            raise CapabilityError("speculative method mtp needs a checkpoint with MTP layers")

    # -- helpers ---------------------------------------------------------------------------

    def _require_own(self, config: EngineConfig) -> None:
        if config.engine != self.kind:
            raise CapabilityError(f"config is for engine {config.engine!r}, not {self.kind!r}")

    def _flags(self, config: EngineConfig) -> list[str]:
        argv: list[str] = []
        for name, value in self.settings(config):
            if isinstance(value, bool):
                argv.append(f"--{name}" if value else f"--no-{name}")
            else:
                argv += [f"--{name}", str(value)]
        return argv

    def _kv_cache_dtype(self, config: EngineConfig) -> str | None:
        dtype = config.kv_cache_dtype
        if dtype in _KV_DTYPE_REFUSED:
            raise CapabilityError(f"kv_cache_dtype={dtype}: {_KV_DTYPE_REFUSED[dtype]}")
        rendered = _KV_DTYPE[dtype]
        return None if rendered == "auto" else rendered

    def _quantization(self, config: EngineConfig) -> str | None:
        quant = config.weight_quantization
        if quant is None:
            return None
        if quant in _WEIGHT_QUANT_REFUSED:
            raise CapabilityError(f"weight_quantization={quant}: {_WEIGHT_QUANT_REFUSED[quant]}")
        return _WEIGHT_QUANT[quant]

    def _extra_settings(self, config: EngineConfig, managed: set[str]) -> list[Setting]:
        reserved = managed | _RESERVED_FLAGS
        out: list[Setting] = []
        for key, value in config.extra_args.items():
            name = _flag_name(key)
            if name in reserved or name.removeprefix("no-") in reserved:
                raise CapabilityError(
                    f"extra_args[{key!r}] collides with a setting EngineConfig renders itself"
                )
            out.append((name, value))
        return out


# Flags that EngineConfig owns even when a field is unset (so extra_args cannot sneak them in).
_RESERVED_FLAGS = frozenset(
    {
        "model", "config", "tensor-parallel-size", "tp", "pipeline-parallel-size", "pp",
        "max-num-seqs", "max-num-batched-tokens", "gpu-memory-utilization",
        "enable-prefix-caching", "enable-chunked-prefill", "kv-cache-dtype", "quantization",
        "speculative-config", "max-model-len", "kv-transfer-config", "host", "port",
    }
)  # fmt: skip


def _docker_gpus(gpus: GpuSelection) -> str:
    """The `--gpus` value: `all`, a count, or `"device=0,1"` (quotes are part of the value,
    because docker parses it as CSV and would split the bare list at the comma)."""
    if gpus == "all":
        return "all"
    if isinstance(gpus, int):
        if gpus < 1:
            raise EngineError(f"gpus must be >= 1, got {gpus}")
        return str(gpus)
    if isinstance(gpus, str) or not gpus or any(not isinstance(g, int) or g < 0 for g in gpus):
        raise EngineError(f"gpus must be 'all', a count or GPU indices, got {gpus!r}")
    return '"device=' + ",".join(str(g) for g in gpus) + '"'


PLUGIN = VllmEngine()
