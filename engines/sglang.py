"""The SGLang plug-in: flags, `--config` YAML, docker command, capability checks and metrics.

Written against SGLang 0.5.23 (`python3 -m sglang.launch_server`); spellings follow
shared/reference/engines.md. It renders and checks only; launching belongs to `runners/`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from engines.base import (
    DisaggregationPlan,
    EngineDefaults,
    GpuSelection,
    ReadinessProbe,
    ServerProcess,
)
from engines.common import (
    Setting,
    build_config,
    check_fp8_kv,
    check_marlin_weights,
    check_model_len,
    check_parallelism,
    docker_gpus,
    docker_target,
    dump_yaml,
    extra_settings,
    image_ref,
    instances,
    load_mapping,
    lookup,
    openai_readiness,
    require_own,
    reverse,
    same_argv,
    same_as_rendered,
    unknown_key,
)
from engines.config import EngineConfig, EngineKind
from engines.errors import CapabilityError, EngineError
from engines.facts import HardwareFacts, ModelFacts

SGLANG_VERSION = "0.5.23"
IMAGE_REPOSITORY = "lmsysorg/sglang"
CONFIG_FILE_NAME = "sglang-config.yaml"
LAUNCH: tuple[str, ...] = ("python3", "-m", "sglang.launch_server")
ROUTER: tuple[str, ...] = ("python3", "-m", "sglang_router.launch_router")
SHM_SIZE = "32g"  # SGLang's docker docs insist on a large /dev/shm (NCCL, CUDA graphs)
# NIXL needs no RDMA device name (Mooncake wants --disaggregation-ib-device) and matches the
# connector the vLLM plug-in uses.
DISAGG_TRANSFER_BACKEND = "nixl"
BOOTSTRAP_BASE_PORT = 8998  # SGLang's default --disaggregation-bootstrap-port

_KV_DTYPE: dict[str, str | None] = {
    "auto": None,
    "fp16": None,  # SGLang has no fp16 option: auto is the model dtype, checked in check()
    "bf16": "bf16",
    "fp8": "fp8_e4m3",  # SGLang's fp8 spelling; e4m3 is what "fp8" means on CUDA
    "fp8_e4m3": "fp8_e4m3",
    "fp8_e5m2": "fp8_e5m2",
    "fp4": "fp4_e2m1",
}
_KV_DTYPE_REFUSED: dict[str, str] = {
    "int8": "SGLang has no int8 KV cache (choices: auto, fp8_e4m3, fp8_e5m2, bf16, fp4_e2m1); "
    "use fp8",
}
_WEIGHT_QUANT: dict[str, str | None] = {
    "none": None,
    "fp8": "fp8",  # online FP8 on a BF16 checkpoint, or an FP8 checkpoint
    "awq": "awq_marlin",
    "gptq": "gptq_marlin",
    "nvfp4": "modelopt_fp4",
    "mxfp4": "mxfp4",
}
_WEIGHT_QUANT_REFUSED: dict[str, str] = {
    "int8": "SGLang's w8a8_int8 loads only pre-quantized W8A8 checkpoints; load one with "
    "weight_quantization unset",
    "int4": "SGLang has no --quantization value for generic int4 weights; use awq/gptq or a "
    "pre-quantized checkpoint with weight_quantization unset",
}
_SPEC_ALGORITHM: dict[str, str] = {
    "eagle": "EAGLE",
    "eagle3": "EAGLE3",
    "draft_model": "STANDALONE",
    "ngram": "NGRAM",
    "mtp": "NEXTN",  # DeepSeek-style MTP layers; SGLang treats NEXTN as EAGLE on own heads
}
_IMAGE_TAG = re.compile(
    r"^(latest|dev|v?\d+\.\d+\.\d+(rc\d+|\.post\d+)?(-[0-9A-Za-z][0-9A-Za-z.]*)*)$"
)
_WHAT = "SGLang config file"
# Flags the file holds that map one to one onto an EngineConfig field.
_FIELD_OF: dict[str, str] = {
    "tp-size": "tp",
    "pp-size": "pp",
    "max-running-requests": "max_num_seqs",
    "mem-fraction-static": "gpu_memory_fraction",
    "context-length": "max_model_len",
    "host": "host",
    "port": "port",
}
# Flags read back through the rendering (checked by re-rendering, not parsed on their own).
_DERIVED = frozenset(
    {"model-path", "max-prefill-tokens", "speculative-draft-model-path", "speculative-num-steps",
     "speculative-eagle-topk", "speculative-num-draft-tokens", "enable-metrics"}
)  # fmt: skip


def _flag_name(key: str) -> str:
    """SGLang's argparse knows only dashed long flags; render `_` as `-`."""
    return key.replace("_", "-")


def _speculative_settings(config: EngineConfig) -> list[Setting]:
    """K = `num_tokens` draft tokens per step, as a chain (top-k 1).

    Drafting methods get `--speculative-num-steps K --speculative-eagle-topk 1
    --speculative-num-draft-tokens K+1`: SGLang counts the verified root token in
    num-draft-tokens and requires K+1 when top-k is 1. SGLang's docs ask for all three or
    none; we set all three so the proposal length is the one the performance model assumed.
    NGRAM builds its own tree, so it gets only `--speculative-num-draft-tokens K+1`.
    """
    spec = config.speculative
    assert spec is not None  # callers check
    out: list[Setting] = [("speculative-algorithm", _SPEC_ALGORITHM[spec.method])]
    if spec.draft_model is not None:  # SpeculativeConfig: eagle, eagle3, draft_model only
        out.append(("speculative-draft-model-path", spec.draft_model))
    if spec.method != "ngram":
        out += [("speculative-num-steps", spec.num_tokens), ("speculative-eagle-topk", 1)]
    out.append(("speculative-num-draft-tokens", spec.num_tokens + 1))
    return out


class SglangEngine:
    """SGLang ≥ 0.5 OpenAI server (`python3 -m sglang.launch_server --model-path MODEL …`)."""

    kind: ClassVar[EngineKind] = "sglang"
    defaults: ClassVar[EngineDefaults] = EngineDefaults(
        engine_version=SGLANG_VERSION,
        max_num_seqs=None,
        max_batched_tokens=None,
        gpu_memory_fraction=None,
        prefix_caching=True,
        chunked_prefill=True,
        kv_cache_dtype="auto",
        memory_fraction_semantics="static_pool",
        port=30000,
        notes="max-running-requests is derived from the KV pool and CUDA-graph batch sizes. "
        "chunked-prefill-size depends on GPU memory (about 2048 on small GPUs, 4096 on A100 "
        "40GB, 8192 on H100/H200, 16384 on B200/MI300); max-prefill-tokens defaults to 16384. "
        "mem-fraction-static (weights + KV pool) is computed from the memory SGLang reserves "
        "(docs quote about 0.9). RadixAttention and chunked prefill are on; host 127.0.0.1.",
    )
    metrics_path: ClassVar[str] = "/metrics"  # only with --enable-metrics (always rendered)
    # Sample names as scraped, newest first. SGLang exports no speculative token counters
    # (only the gauges sglang:spec_accept_length / sglang:spec_accept_rate): empty tuples.
    metric_names: ClassVar[Mapping[str, tuple[str, ...]]] = {
        "queue_depth": ("sglang:num_queue_reqs",),
        "running": ("sglang:num_running_reqs",),
        "kv_cache_usage": ("sglang:token_usage",),
        "prefix_cache_hit_rate": ("sglang:cache_hit_rate",),
        # Hit rate over tokens = rate(cached_tokens) / rate(prompt_tokens).
        "prefix_cache_queries_tokens": ("sglang:prompt_tokens_total",),
        "prefix_cache_hits_tokens": ("sglang:cached_tokens_total",),
        "ttft_seconds": ("sglang:time_to_first_token_seconds",),
        "itl_seconds": (
            "sglang:inter_token_latency_seconds",
            "sglang:time_per_output_token_seconds",
        ),
        "tpot_seconds": (
            "sglang:time_per_output_token_seconds",
            "sglang:inter_token_latency_seconds",
        ),
        "e2e_seconds": ("sglang:e2e_request_latency_seconds",),
        "queue_time_seconds": ("sglang:queue_time_seconds",),
        "prompt_tokens": ("sglang:prompt_tokens_total",),
        "generation_tokens": ("sglang:generation_tokens_total",),
        # SGLang "retracts" (preempts) requests when the KV pool is full.
        "preemptions": ("sglang:num_retracted_requests_total",),
        "spec_draft_tokens": (),
        "spec_accepted_tokens": (),
    }

    # -- rendering -------------------------------------------------------------------------

    def settings(self, config: EngineConfig) -> list[Setting]:
        """The (long flag name, value) pairs for `config`, in render order, model included.

        Both the CLI and the `--config` YAML are made from this one list, so they cannot
        drift. For a disaggregated config these are the settings every instance shares; the
        role flags are added per process by `disaggregation_plan`.

        Raises:
            CapabilityError: a value SGLang cannot express (int8 KV, int8/int4 weights, an
                extra arg that shadows a field or is `false`).
        """
        return self._settings(config, [])

    def server_argv(self, config: EngineConfig) -> list[str]:
        """`python3 -m sglang.launch_server --model-path MODEL --flag value …` as a list.

        Raises:
            EngineError: the config is disaggregated (one command per role: use
                `disaggregation_plan`).
        """
        self._require_single(config)
        return [*LAUNCH, *self._flags(self.settings(config))]

    def config_file(self, config: EngineConfig) -> tuple[str, str]:
        """(`sglang-config.yaml`, YAML of long flag names, `model-path` included).

        Only `true` booleans are ever written (switches SGLang turns on), because SGLang's
        boolean flags are store_true switches and older mergers drop `false`.
        """
        return CONFIG_FILE_NAME, dump_yaml(dict(self.settings(config)))

    def config_from_file(
        self, model: str, text: str, argv: Sequence[str] | None = None
    ) -> EngineConfig:
        """The config whose `config_file` is `text`; its `model-path` must be `model`.

        The file holds every setting, so `argv` is optional; when given it must be
        `serve_argv_with_config_file(config, PATH)`. Normalisations (the file cannot tell
        them apart): kv_cache_dtype fp16 → auto and fp8_e4m3 → fp8, weight_quantization
        "none" → None, prefix_caching and chunked_prefill True → None (SGLang's defaults,
        rendered as nothing), extra_args keys `_` → `-`.

        Raises:
            EngineError: a key or value ServeFit does not write (named), a disaggregated
                instance's file (the instance counts are not in it), or a differing argv.
        """
        data = load_mapping(text, _WHAT)
        fields: dict[str, Any] = {"engine": self.kind, "model": model}
        extra: dict[str, Any] = {}
        for key, value in data.items():
            if key in _FIELD_OF:
                fields[_FIELD_OF[key]] = value
            elif key == "disable-radix-cache":
                fields["prefix_caching"] = False if value is True else value
            elif key == "chunked-prefill-size":
                chunked = value != -1
                fields["chunked_prefill"] = None if chunked else False
                fields["max_batched_tokens"] = value if chunked else data.get("max-prefill-tokens")
            elif key == "kv-cache-dtype":
                fields["kv_cache_dtype"] = _kv_back(value, _WHAT)
            elif key == "quantization":
                fields["weight_quantization"] = _quant_back(value, _WHAT)
            elif key == "speculative-algorithm":
                fields["speculative"] = _speculative_back(data)
            elif key.startswith("disaggregation-"):
                raise EngineError(
                    f"{_WHAT} is one instance of a disaggregated deployment; its instance "
                    "counts are not in the file, so it cannot be read back"
                )
            elif key in _RESERVED_FLAGS and key not in _DERIVED:
                raise unknown_key(key, _WHAT)
            elif key not in _DERIVED:
                extra[key] = value
        config = build_config({**fields, "extra_args": extra}, _WHAT)
        same_as_rendered(data, load_mapping(self.config_file(config)[1], _WHAT), _WHAT)
        if argv is not None:
            path = argv[-1] if argv else ""
            same_argv(argv, self.serve_argv_with_config_file(config, path), "SGLang command")
        return config

    def serve_argv_with_config_file(self, config: EngineConfig, path: str) -> list[str]:
        """`python3 -m sglang.launch_server --model-path MODEL --config PATH`.

        The file holds `model-path` too; repeating it on the command line (CLI wins, same
        value) keeps the launch valid for SGLang releases whose argparse demands the flag
        before merging the file.
        """
        require_own(self.kind, config)
        self._require_single(config)
        # Newer releases also read .json; releases up to ~0.5.7 accept only YAML.
        if not path.endswith((".yaml", ".yml")):
            raise EngineError(f"SGLang reads .yaml/.yml config files, got {path!r}")
        return [*LAUNCH, "--model-path", config.model, "--config", path]

    def docker_image(self, version: str | None = None) -> str:
        """`lmsysorg/sglang:v<version>`; `latest`/`dev` and suffixed tags (`-cu129`) pass."""
        tag = version or SGLANG_VERSION
        refusal = (
            f"not an SGLang image tag: {tag!r} (expected e.g. 0.5.23, v0.5.23-cu129 or latest)"
        )
        return image_ref(IMAGE_REPOSITORY, tag, _IMAGE_TAG, refusal, v_prefix=True)

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
        """`docker run` of the official image with the launch command (it has no entrypoint).

        Inside the container the server binds 0.0.0.0 whatever `config.host` says, or the
        published port would not reach it. The HF cache is mounted so weights download once.
        """
        name = docker_target(self.kind, host_port, model_cache_dir, container_name)
        inside = config.model_copy(update={"host": "0.0.0.0"})
        return [
            "docker", "run", "--rm",
            "--name", name,
            "--gpus", docker_gpus(gpus),
            "--ipc=host",
            "--shm-size", SHM_SIZE,
            "-p", f"{host_port}:{config.port}",
            "-v", f"{model_cache_dir}:/root/.cache/huggingface",
            "--env", "HF_TOKEN",
            image,
            *self.server_argv(inside),
        ]  # fmt: skip

    def readiness(self, config: EngineConfig) -> ReadinessProbe:
        """Poll `/health`, check `/v1/models`, then one 1-token completion.

        SGLang also serves `/health_generate` (a 1-token generation); the launcher's own
        tiny completion proves the same, so the cheap `/health` is the polling path.
        """
        return openai_readiness(str(config.extra_args.get("served-model-name", config.model)))

    def disaggregation_plan(
        self, config: EngineConfig, *, host: str = "127.0.0.1", base_port: int = 8100
    ) -> DisaggregationPlan:
        """Prefill and decode `launch_server` instances behind `sglang_router`.

        Every instance runs the shared settings plus `--disaggregation-mode prefill|decode`;
        prefill instances also get distinct `--disaggregation-bootstrap-port`s (from 8998),
        which the router learns as `--prefill URL BOOTSTRAP_PORT`. Instances get consecutive
        ports from `base_port` and disjoint GPU ranges; the router listens on
        `config.host:config.port`.
        """
        prefill: list[ServerProcess] = []
        decode: list[ServerProcess] = []
        router_argv = [*ROUTER, "--pd-disaggregation"]
        for role, port, devices in instances(config, base_port):
            role_settings: list[Setting] = [("disaggregation-mode", role)]
            if role == "prefill":
                bootstrap = BOOTSTRAP_BASE_PORT + len(prefill)
                role_settings.append(("disaggregation-bootstrap-port", bootstrap))
            instance = config.model_copy(update={"port": port})
            argv = [*LAUNCH, *self._flags(self._settings(instance, role_settings))]
            proc = ServerProcess(
                role=role, argv=argv, env={"CUDA_VISIBLE_DEVICES": devices}, port=port
            )
            if role == "prefill":
                prefill.append(proc)
                router_argv += ["--prefill", f"http://{host}:{port}", str(bootstrap)]
            else:
                decode.append(proc)
        for proc in decode:
            router_argv += ["--decode", f"http://{host}:{proc.port}"]
        router_argv += ["--host", config.host, "--port", str(config.port)]
        return DisaggregationPlan(
            prefill=prefill,
            decode=decode,
            router=ServerProcess(role="router", argv=router_argv, port=config.port),
            gpus_needed=(len(prefill) + len(decode)) * config.tp * config.pp,
        )

    # -- capability checks -----------------------------------------------------------------

    def check(self, config: EngineConfig, hardware: HardwareFacts, model: ModelFacts) -> None:
        """Refuse configs SGLang cannot serve on `hardware` for `model`.

        Raises:
            CapabilityError: one line naming the first problem found.
        """
        self.settings(config)  # what cannot be rendered cannot run either
        # SGLang's QKVParallelLinear shards or replicates KV heads like vLLM.
        check_parallelism(config, hardware, model, kv_heads_must_divide=True)
        self._check_lengths(config, model)
        self._check_kv_cache(config, hardware, model)
        check_marlin_weights(config, hardware, model, engine="SGLang", rendered=_WEIGHT_QUANT,
                             mxfp4_needs_ampere=False)
        self._check_speculative(config, hardware, model)

    def _check_lengths(self, config: EngineConfig, model: ModelFacts) -> None:
        # SGLang itself refuses a longer --context-length unless
        # SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN is set; we never set it.
        check_model_len(config, model)

    def _check_kv_cache(
        self, config: EngineConfig, hardware: HardwareFacts, model: ModelFacts
    ) -> None:
        dtype = config.kv_cache_dtype
        if dtype == "fp16" and model.weights_dtype not in (None, "fp16"):
            raise CapabilityError(
                f"SGLang has no fp16 KV cache option; auto keeps the model dtype, and this "
                f"model is {model.weights_dtype}"
            )
        check_fp8_kv(config, hardware)
        if dtype == "fp4" and "fp4" not in hardware.native_dtypes:
            raise CapabilityError(
                f"FP4 (fp4_e2m1) KV cache needs a Blackwell GPU (compute capability >= 10.0); "
                f"{hardware.gpu_name} has no FP4"
            )

    def _check_speculative(
        self, config: EngineConfig, hardware: HardwareFacts, model: ModelFacts
    ) -> None:
        spec = config.speculative
        if spec is None:
            return
        if spec.method == "mtp" and model.has_mtp_heads is False:
            raise CapabilityError(
                "speculative method mtp (SGLang NEXTN) needs a checkpoint with MTP layers"
            )
        if spec.method == "ngram" and hardware.vendor != "nvidia":
            raise CapabilityError(
                f"SGLang's NGRAM speculative decoding runs only on CUDA; {hardware.gpu_name} "
                "is not an NVIDIA GPU"
            )

    # -- helpers ---------------------------------------------------------------------------

    def _settings(self, config: EngineConfig, role_settings: list[Setting]) -> list[Setting]:
        require_own(self.kind, config)
        out: list[Setting] = [
            ("model-path", config.model),
            ("tp-size", config.tp),
            ("pp-size", config.pp),
        ]
        optional: list[tuple[str, str | int | float | bool | None]] = [
            ("max-running-requests", config.max_num_seqs),
            *self._token_budget(config),
            ("mem-fraction-static", config.gpu_memory_fraction),
            ("disable-radix-cache", True if config.prefix_caching is False else None),
            ("kv-cache-dtype", self._kv_cache_dtype(config)),
            ("quantization", self._quantization(config)),
            ("context-length", config.max_model_len),
        ]
        out += [(name, value) for name, value in optional if value is not None]
        if config.speculative is not None:
            out += _speculative_settings(config)
        out.append(("enable-metrics", True))  # /metrics answers 404 without it
        if config.disaggregation is not None:
            out.append(("disaggregation-transfer-backend", DISAGG_TRANSFER_BACKEND))
        out += role_settings
        out += [("host", config.host), ("port", config.port)]
        out += self._extra_settings(config, {name for name, _ in out})
        return out

    @staticmethod
    def _token_budget(config: EngineConfig) -> list[tuple[str, int | None]]:
        """`max_batched_tokens` → chunk size and prefill budget; chunked prefill off → -1.

        SGLang caps a step's prefill tokens by both --chunked-prefill-size and
        --max-prefill-tokens (default 16384), so both get the budget; without chunking the
        budget is --max-prefill-tokens alone (SGLang still admits one prompt up to the
        context length).
        """
        budget = config.max_batched_tokens
        if config.chunked_prefill is False:
            return [("chunked-prefill-size", -1), ("max-prefill-tokens", budget)]
        return [("chunked-prefill-size", budget), ("max-prefill-tokens", budget)]

    @staticmethod
    def _require_single(config: EngineConfig) -> None:
        if config.disaggregation is not None:
            raise EngineError(
                "a disaggregated SGLang config needs one command per role; use "
                "disaggregation_plan()"
            )

    @staticmethod
    def _flags(settings: list[Setting]) -> list[str]:
        argv: list[str] = []
        for name, value in settings:
            if value is True:
                argv.append(f"--{name}")
            else:
                argv += [f"--{name}", str(value)]
        return argv

    def _kv_cache_dtype(self, config: EngineConfig) -> str | None:
        return lookup("kv_cache_dtype", config.kv_cache_dtype, _KV_DTYPE, _KV_DTYPE_REFUSED)

    def _quantization(self, config: EngineConfig) -> str | None:
        quant = config.weight_quantization
        if quant is None:
            return None
        return lookup("weight_quantization", quant, _WEIGHT_QUANT, _WEIGHT_QUANT_REFUSED)

    def _extra_settings(self, config: EngineConfig, managed: set[str]) -> list[Setting]:
        return extra_settings(config, managed | _RESERVED_FLAGS, _flag_name, _sglang_extra_rules)


def _sglang_extra_rules(key: str, name: str, value: Any, so_far: list[Setting]) -> None:
    if name in {seen for seen, _ in so_far}:
        raise CapabilityError(f"extra_args[{key!r}] repeats flag --{name}")
    if value is False:
        raise CapabilityError(
            f"extra_args[{key!r}] is false; SGLang switches are store_true flags, so "
            "leave the flag out instead"
        )


# Flags that EngineConfig owns even when a field is unset (so extra_args cannot sneak them in).
_RESERVED_FLAGS = frozenset(
    {
        "model-path", "model", "config", "tp-size", "tensor-parallel-size", "pp-size",
        "pipeline-parallel-size", "max-running-requests", "chunked-prefill-size",
        "max-prefill-tokens", "mem-fraction-static", "disable-radix-cache", "kv-cache-dtype",
        "quantization", "context-length", "speculative-algorithm",
        "speculative-draft-model-path", "speculative-num-steps", "speculative-eagle-topk",
        "speculative-num-draft-tokens", "enable-metrics", "disaggregation-mode",
        "disaggregation-transfer-backend", "disaggregation-bootstrap-port", "host", "port",
    }
)  # fmt: skip


_kv_back = reverse(_KV_DTYPE, "kv-cache-dtype")
_quant_back = reverse(_WEIGHT_QUANT, "quantization")
_method_back = reverse(_SPEC_ALGORITHM, "speculative-algorithm")


def _speculative_back(data: dict[str, Any]) -> dict[str, Any]:
    """SpeculativeConfig fields: K = num-draft-tokens − 1 (see `_speculative_settings`)."""
    drafts = data.get("speculative-num-draft-tokens")
    return {
        "method": _method_back(data["speculative-algorithm"], _WHAT),
        "num_tokens": drafts - 1 if isinstance(drafts, int) else drafts,
        "draft_model": data.get("speculative-draft-model-path"),
    }


PLUGIN = SglangEngine()
