"""The SGLang plug-in: launch commands, `--config` YAML, docker command, disaggregation plan,
capability checks and metrics. The settings behind the flags and the YAML live in
`engines.sglang.settings` (rendered) and `engines.sglang.readback` (read back).

Written against SGLang 0.5.23 (`python3 -m sglang.launch_server`); spellings follow
shared/reference/engines.md. It renders and checks only; launching belongs to `runners/`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import ClassVar

from engines.base import (
    ContainerSpec,
    DisaggregationPlan,
    EngineDefaults,
    GpuSelection,
    ReadinessProbe,
    ServerProcess,
)
from engines.capability import (
    check_fp8_kv,
    check_marlin_weights,
    check_model_len,
    check_parallelism,
    prequantized_config,
    require_own,
)
from engines.config import EngineConfig, EngineKind
from engines.containers import docker_run, docker_target, image_ref
from engines.errors import CapabilityError, EngineError
from engines.facts import HardwareFacts, ModelFacts
from engines.layout import instances
from engines.readback import build_config, load_mapping, same_argv, same_as_rendered
from engines.rendering import Setting, dump_yaml, openai_readiness
from engines.sglang.readback import CONFIG_WHAT, config_fields
from engines.sglang.settings import WEIGHT_QUANT, flags, settings

# This module's own names (the settings' names are imported from engines.sglang.settings).
__all__ = [
    "BOOTSTRAP_BASE_PORT", "CONFIG_FILE_NAME", "IMAGE_REPOSITORY",
    "LAUNCH", "PLUGIN", "ROUTER", "SGLANG_VERSION", "SHM_SIZE", "SglangEngine",
]  # fmt: skip

SGLANG_VERSION = "0.5.23"
IMAGE_REPOSITORY = "lmsysorg/sglang"
CONFIG_FILE_NAME = "sglang-config.yaml"
LAUNCH: tuple[str, ...] = ("python3", "-m", "sglang.launch_server")
ROUTER: tuple[str, ...] = ("python3", "-m", "sglang_router.launch_router")
SHM_SIZE = "32g"  # SGLang's docker docs insist on a large /dev/shm (NCCL, CUDA graphs)
BOOTSTRAP_BASE_PORT = 8998  # SGLang's default --disaggregation-bootstrap-port

_IMAGE_TAG = re.compile(
    r"^(latest|dev|v?\d+\.\d+\.\d+(rc\d+|\.post\d+)?(-[0-9A-Za-z][0-9A-Za-z.]*)*)$"
)

# Formats `--quantization` produces from a BF16/FP16 checkpoint at load time: the docs'
# "Online Quantization" names fp8 (awq/gptq/marlin online are announced, not there).
_QUANTIZED_ON_LOAD = frozenset({"fp8"})
# What to change when no checkpoint is known (the tail of `served_config`'s refusal); fp8
# is the on-load alternative offered (`check` says whether the GPU runs it).
_CHECKPOINT_FIXES = ("name one as the model, leave weight_quantization unset, or use fp8 "
                     "(SGLang quantizes it on load)")


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
    def scheduler_defaults(self, gpu_name: str, memory_gb: float) -> tuple[int | None, int]:
        """No fixed running cap (derived from the KV pool); the chunk size grows with memory."""
        return None, 16384 if memory_gb >= 160 else 8192 if memory_gb >= 70 else 4096

    def release_memory_fraction(self, release: tuple[int, int]) -> float | None:
        """mem-fraction-static is derived per GPU at start-up (None): no release differs."""
        del release
        return None

    def release_scheduler_defaults(self, release: tuple[int, int], max_model_len: int | None
                                   ) -> dict[str, int | bool]:
        """No release measured is known to choose other scheduler knobs ({})."""
        del release, max_model_len
        return {}

    def serial_host_loop(self, release: tuple[int, int] | None) -> bool:
        """No: detokenisation runs in its own process, and the overlap scheduler (default
        since 0.4, older than any release measured) prepares the next batch while the GPU
        runs this one."""
        del release
        return False

    def serves_checkpoint_kv_dtype(self, release: tuple[int, int] | None) -> bool:
        """ModelRunner.configure_kv_cache_dtype: under auto, a quant config whose
        kv_cache_quant_algo is FP8 gets an fp8_e4m3 cache (read in the 0.5 releases)."""
        del release
        return True

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
        "spec_drafts": (),
        "spec_accept_length": ("sglang:spec_accept_length",),
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
        return settings(config, [])

    def served_config(self, config: EngineConfig, model: ModelFacts | None) -> EngineConfig:
        """`config`, or for a format SGLang cannot quantize on load the same serving the
        model's pre-quantized checkpoint of it.

        `--quantization fp8` quantizes a BF16 checkpoint on load (SGLang's only online
        `--quantization` method), so it stays on the model named. awq, gptq, nvfp4 and mxfp4
        only read a checkpoint already in that format: when the facts say `config.model` is
        unquantized, the facts' checkpoint of the format is swapped in (`--model-path` and the
        config file's `model-path`). `awq_marlin`/`gptq_marlin` still apply to it: SGLang
        resolves an AWQ/GPTQ checkpoint to them itself. SGLang serves the model under its path
        unless `served-model-name` says otherwise, so clients then ask for the checkpoint's id.

        Raises:
            CapabilityError: no checkpoint of that format is known (one line saying what to
                change).
        """
        require_own(self.kind, config)
        return prequantized_config(config, model, engine="SGLang", on_load=_QUANTIZED_ON_LOAD,
                                   fixes=_CHECKPOINT_FIXES)

    def server_argv(self, config: EngineConfig) -> list[str]:
        """`python3 -m sglang.launch_server --model-path MODEL --flag value …` as a list.

        Raises:
            EngineError: the config is disaggregated (one command per role: use
                `disaggregation_plan`).
        """
        self._require_single(config)
        return [*LAUNCH, *flags(self.settings(config))]

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
        data = load_mapping(text, CONFIG_WHAT)
        config = build_config(config_fields(model, data), CONFIG_WHAT)
        rendered = load_mapping(self.config_file(config)[1], CONFIG_WHAT)
        same_as_rendered(data, rendered, CONFIG_WHAT)
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

    def container_spec(
        self,
        config: EngineConfig,
        *,
        image: str,
        host_port: int,
        model_cache_dir: str,
        gpus: GpuSelection = "all",
        container_name: str | None = None,
        config_file_path: str | None = None,  # unused: the settings travel as flags here
    ) -> ContainerSpec:
        """The container of the official image with the launch command (it has no entrypoint).

        Inside the container the server binds 0.0.0.0 whatever `config.host` says, or the
        published port would not reach it. The HF cache is mounted so weights download once.
        """
        name = docker_target(self.kind, host_port, model_cache_dir, container_name)
        inside = config.model_copy(update={"host": "0.0.0.0"})
        return docker_run(name, image, self.server_argv(inside), gpus=gpus, host_port=host_port,
                          port=config.port, model_cache_dir=model_cache_dir,
                          shm_size=SHM_SIZE)

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
            argv = [*LAUNCH, *flags(settings(instance, role_settings))]
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
            gpus_needed=(len(prefill) + len(decode)) * config.gpus_per_instance,
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
        check_marlin_weights(config, hardware, model, engine="SGLang", rendered=WEIGHT_QUANT,
                             mxfp4_needs_ampere=False)
        self.served_config(config, model)  # a format no checkpoint of the model is in
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

    @staticmethod
    def _require_single(config: EngineConfig) -> None:
        if config.disaggregation is not None:
            raise EngineError(
                "a disaggregated SGLang config needs one command per role; use "
                "disaggregation_plan()"
            )


PLUGIN = SglangEngine()
