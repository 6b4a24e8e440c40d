"""The vLLM plug-in: flags, `--config` YAML, docker command, capability checks and metrics.

How our values are spelled in vLLM's flags is in `engines.vllm.spellings`, what extra args may
add in `engines.vllm.extra_args`, and reading the config file back in `engines.vllm.readback`.
Written against vLLM 0.33 (`vllm serve`); spellings follow shared/reference/engines.md. It
renders and checks only; launching belongs to `runners/`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

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
from engines.readback import build_config, load_mapping, same_argv, same_as_rendered, unknown_key
from engines.rendering import Setting, dump_yaml, extra_settings, lookup, openai_readiness
from engines.vllm.extra_args import RESERVED_FLAGS, flag_name, known_flag_once
from engines.vllm.readback import (
    CONFIG_WHAT,
    FIELD_OF,
    expert_parallel_back,
    kv_back,
    quant_back,
    speculative_back,
)
from engines.vllm.spellings import (
    KV_DTYPE,
    KV_DTYPE_REFUSED,
    WEIGHT_QUANT,
    WEIGHT_QUANT_REFUSED,
    speculative_config,
)

VLLM_VERSION = "0.33.0"
IMAGE_REPOSITORY = "vllm/vllm-openai"
CONFIG_FILE_NAME = "vllm-config.yaml"
# NIXL is the connector vLLM documents first for P/D; kv_both lets the router pick roles.
KV_TRANSFER_CONFIG: dict[str, str] = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
NIXL_SIDE_CHANNEL_BASE_PORT = 5600

# Formats `--quantization` produces from a BF16/FP16 checkpoint at load time (docs: "Online
# Dynamic Quantization" for fp8; "Online Quantization" lists mxfp4 from 0.29). The others
# need a checkpoint already in that format (`served_config`).
_QUANTIZED_ON_LOAD = frozenset({"fp8", "mxfp4"})
# What to change when no checkpoint is known (the tail of `served_config`'s refusal); fp8
# is the on-load alternative offered (`check` says whether the GPU runs it).
_CHECKPOINT_FIXES = ("name one as the model, leave weight_quantization unset, or use fp8 "
                     "(vLLM quantizes it on load)")
# The V0 engine (the default before 0.8, `release_scheduler_defaults`): its batch defaults.
V1_DEFAULT_RELEASE = (0, 8)
V0_MAX_NUM_SEQS = 256
V0_CHUNKED_ABOVE_LEN = 32768  # chunked prefill switched on for longer contexts (CUDA)
V0_MIN_BUDGET = 2048


def runs_v0(release: tuple[int, int] | None) -> bool:
    """Whether the (major, minor) `release` (None: the plug-in's own) runs the V0 engine, the
    default before 0.8: its batch defaults, its prompts-first scheduler and its serial loop."""
    return release is not None and release < V1_DEFAULT_RELEASE
_IMAGE_TAG = re.compile(r"^(latest|nightly|v?\d+\.\d+\.\d+([.+-][0-9A-Za-z.]+)?)$")


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
        memory_fraction_semantics="total",
        port=8000,
        notes="`vllm serve` picks max-num-seqs / max-num-batched-tokens per GPU: 1024 / 8192 "
        "on GPUs with >= 70 GiB that are not A100, else 256 / 2048 (EngineArgs batch "
        "defaults). gpu-memory-utilization is a fraction of total GPU memory (0.92 in "
        "CacheConfig, 0.9 in older releases).",
    )
    def scheduler_defaults(self, gpu_name: str, memory_gb: float) -> tuple[int | None, int]:
        """EngineArgs' usage-context batch defaults: big non-A100 GPUs get 1024 / 8192."""
        if memory_gb >= 70 and not gpu_name.upper().startswith("A100"):
            return 1024, 8192
        return 256, 2048

    def release_memory_fraction(self, release: tuple[int, int]) -> float | None:
        """vLLM ≤ 0.11 (the published measurements' releases): CacheConfig's
        gpu_memory_utilization was 0.9 (0.92 in the releases this plug-in was read from; the
        release of the change is not pinned here, so only ≤ 0.11 is claimed)."""
        return 0.9 if release <= (0, 11) else None

    def release_scheduler_defaults(self, release: tuple[int, int], max_model_len: int | None
                                   ) -> dict[str, int | bool]:
        """The V0 engine's choices, the default before 0.8 (read in the 0.5.4, 0.6.6 and
        0.7.3 sdists: EngineArgs and SchedulerConfig): max_num_seqs 256 on every GPU, prefix
        caching off, chunked prefill only for a max_model_len over 32,768 (then a budget of
        512 tokens in 0.5, 2,048 from 0.6), else a budget of max(max_model_len, 2,048) so a
        whole prompt fits one step. From 0.8 (V1) today's choices apply ({})."""
        if not runs_v0(release):
            return {}
        knobs: dict[str, int | bool] = {"max_num_seqs": V0_MAX_NUM_SEQS, "prefix_caching": False}
        if max_model_len is None:
            return knobs
        chunked = max_model_len > V0_CHUNKED_ABOVE_LEN
        budget = ((512 if release < (0, 6) else 2048) if chunked
                  else max(max_model_len, V0_MIN_BUDGET))
        return {**knobs, "chunked_prefill": chunked, "max_batched_tokens": budget}

    def serial_host_loop(self, release: tuple[int, int] | None) -> bool:
        """The V0 engine (the default before 0.8): LLMEngine.step schedules, builds the
        model inputs, runs the forward and the sampler and then processes and detokenises
        each sequence's output, one after another in one process, every step. V1 (0.8+)
        keeps a persistent batch and detokenises in the front-end process."""
        return runs_v0(release)

    def serves_checkpoint_kv_dtype(self, release: tuple[int, int] | None) -> bool:
        """`--kv-cache-dtype auto` takes a ModelOpt checkpoint's kv_cache_quant_algo (and a
        kv_cache_scheme) since PR #29980 (vllm/utils/torch_utils.py
        resolve_kv_cache_dtype_string, merged December 2025): claimed from 0.13, the first
        release cut after that month (not checked against its tag); 0.12 and earlier cached
        the model dtype unless told fp8."""
        return release is None or release >= (0, 13)

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
        "spec_drafts": ("vllm:spec_decode_num_drafts_total",),
        "spec_accept_length": (),
    }

    # -- rendering -------------------------------------------------------------------------

    def settings(self, config: EngineConfig) -> list[Setting]:
        """The (long flag name, value) pairs for `config`, in render order; model excluded.

        Both the CLI and the `--config` YAML are made from this one list, so they cannot drift.
        dp > 1 adds `data-parallel-size`, ep > 1 `enable-expert-parallel` (vLLM's EP size is
        then tp×dp: TEP with dp = 1, DEP otherwise).

        Raises:
            CapabilityError: a value vLLM cannot express (int8/fp4 KV, int8/int4 weights,
                an extra arg that shadows a field).
        """
        require_own(self.kind, config)
        out: list[Setting] = [
            ("tensor-parallel-size", config.tp),
            ("pipeline-parallel-size", config.pp),
        ]
        optional: list[tuple[str, str | int | float | bool | None]] = [
            ("data-parallel-size", config.dp if config.dp > 1 else None),
            ("enable-expert-parallel", True if config.ep > 1 else None),
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
            out.append(("speculative-config", json.dumps(speculative_config(config))))
        if config.disaggregation is not None:
            out.append(("kv-transfer-config", json.dumps(KV_TRANSFER_CONFIG)))
        out += [("host", config.host), ("port", config.port)]
        out += self._extra_settings(config, {name for name, _ in out})
        return out

    def served_config(self, config: EngineConfig, model: ModelFacts | None) -> EngineConfig:
        """`config`, or for a format vLLM cannot quantize on load the same serving the model's
        pre-quantized checkpoint of it.

        `--quantization fp8` (and, since 0.29, `mxfp4`) quantizes a BF16 checkpoint on load, so
        those stay on the model named. awq, gptq and nvfp4 (`awq_marlin`, `gptq_marlin`,
        `modelopt_fp4`) only read a checkpoint already in that format: when the facts say
        `config.model` is unquantized, the facts' checkpoint of the format is swapped in (the
        Marlin spellings still apply: vLLM picks them for an AWQ/GPTQ checkpoint). vLLM serves
        the model under its own id unless `served-model-name` says otherwise, so clients then
        ask for the checkpoint's id (`readiness` of the result says so).

        Raises:
            CapabilityError: no checkpoint of that format is known (one line saying what to
                change).
        """
        require_own(self.kind, config)
        return prequantized_config(config, model, engine="vLLM", on_load=_QUANTIZED_ON_LOAD,
                                   fixes=_CHECKPOINT_FIXES)

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
        return CONFIG_FILE_NAME, dump_yaml(data)

    def config_from_file(
        self, model: str, text: str, argv: Sequence[str] | None = None
    ) -> EngineConfig:
        """The config whose `config_file` is `text`; `model` is the positional argument.

        The file holds every setting, so `argv` is optional; when given it must be
        `serve_argv_with_config_file(config, PATH)`. Normalisations (the file cannot tell
        them apart): kv_cache_dtype bf16/fp16 → auto, weight_quantization "none" → None,
        extra_args keys `_` → `-`, and an extra `no-X: True` → `X: False`.
        `enable-expert-parallel: true` reads as ep = tp×dp (vLLM's EP spans every GPU).

        Raises:
            EngineError: a key or value ServeFit does not write (named), a disaggregated
                instance's file (the instance counts are not in it), or a differing argv.
        """
        data = load_mapping(text, CONFIG_WHAT)
        fields: dict[str, Any] = {"engine": self.kind, "model": model}
        extra: dict[str, Any] = {}
        for key, raw in data.items():
            negated = key.startswith("no-") and raw is True
            name, value = (key[3:], False) if negated else (key, raw)
            if name in FIELD_OF:
                fields[FIELD_OF[name]] = value
            elif name == "enable-expert-parallel":
                fields["ep"] = value  # a switch: tp×dp once both are read (below)
            elif name == "kv-cache-dtype":
                fields["kv_cache_dtype"] = kv_back(value, CONFIG_WHAT)
            elif name == "quantization":
                fields["weight_quantization"] = quant_back(value, CONFIG_WHAT)
            elif name == "speculative-config":
                fields["speculative"] = speculative_back(value)
            elif name == "kv-transfer-config":
                raise EngineError(
                    f"{CONFIG_WHAT} is one instance of a disaggregated deployment; its instance "
                    "counts are not in the file, so it cannot be read back"
                )
            elif name in RESERVED_FLAGS:
                raise unknown_key(key, CONFIG_WHAT)
            else:
                extra[name] = value
        fields["ep"] = expert_parallel_back(fields)
        config = build_config({**fields, "extra_args": extra}, CONFIG_WHAT)
        same_as_rendered(data, load_mapping(self.config_file(config)[1], CONFIG_WHAT), CONFIG_WHAT)
        if argv is not None:
            path = argv[-1] if argv else ""
            same_argv(argv, self.serve_argv_with_config_file(config, path), "vLLM command")
        return config

    def serve_argv_with_config_file(self, config: EngineConfig, path: str) -> list[str]:
        """`vllm serve MODEL --config PATH` (vLLM requires a .yaml/.yml extension)."""
        require_own(self.kind, config)
        if not path.endswith((".yaml", ".yml")):
            raise EngineError(f"vLLM reads only .yaml/.yml config files, got {path!r}")
        return ["vllm", "serve", config.model, "--config", path]

    def docker_image(self, version: str | None = None) -> str:
        """`vllm/vllm-openai:v<version>`; `latest`/`nightly` pass through."""
        tag = version or VLLM_VERSION
        refusal = f"not a vLLM release tag: {tag!r} (expected e.g. 0.33.0 or latest)"
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
        """The container of the official image; its entrypoint is `vllm serve`.

        Inside the container the server binds 0.0.0.0 whatever `config.host` says, or the
        published port would not reach it. The HF cache is mounted so weights download once.
        """
        name = docker_target(self.kind, host_port, model_cache_dir, container_name)
        inside = config.model_copy(update={"host": "0.0.0.0"})
        return docker_run(name, image, [config.model, *self._flags(inside)], gpus=gpus,
                          host_port=host_port, port=config.port,
                          model_cache_dir=model_cache_dir)

    def readiness(self, config: EngineConfig) -> ReadinessProbe:
        """`/health` answers 200 once weights and KV cache are up; then one 1-token completion."""
        return openai_readiness(str(config.extra_args.get("served-model-name", config.model)))

    def disaggregation_plan(
        self, config: EngineConfig, *, host: str = "127.0.0.1", base_port: int = 8100
    ) -> DisaggregationPlan:
        """NixlConnector instances (one GPU group each) behind `vllm-router`.

        Every instance runs the same `vllm serve … --kv-transfer-config` (kv_both); the router
        sends each request to a prefill instance first, then to a decode instance. Instances
        get consecutive ports from `base_port`, disjoint GPU ranges and distinct NIXL
        side-channel ports; the router listens on `config.host:config.port`.
        """
        procs: list[ServerProcess] = []
        for index, (role, port, devices) in enumerate(instances(config, base_port)):
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
            gpus_needed=len(procs) * config.gpus_per_instance,
        )

    # -- capability checks -----------------------------------------------------------------

    def check(self, config: EngineConfig, hardware: HardwareFacts, model: ModelFacts) -> None:
        """Refuse configs vLLM cannot serve on `hardware` for `model`.

        Raises:
            CapabilityError: one line naming the first problem found.
        """
        self.settings(config)  # what cannot be rendered cannot run either
        check_parallelism(config, hardware, model, kv_heads_must_divide=True)
        self._check_lengths(config, model)
        self._check_kv_cache(config, hardware, model)
        check_marlin_weights(config, hardware, model, engine="vLLM", rendered=WEIGHT_QUANT,
                             mxfp4_needs_ampere=True)
        self.served_config(config, model)  # a format no checkpoint of the model is in
        self._check_speculative(config, model)

    def _check_lengths(self, config: EngineConfig, model: ModelFacts) -> None:
        check_model_len(config, model)
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
        check_fp8_kv(config, hardware)

    def _check_speculative(self, config: EngineConfig, model: ModelFacts) -> None:
        spec = config.speculative
        if spec is not None and spec.method == "mtp" and model.has_mtp_heads is False:
            raise CapabilityError("speculative method mtp needs a checkpoint with MTP layers")

    # -- helpers ---------------------------------------------------------------------------

    def _flags(self, config: EngineConfig) -> list[str]:
        argv: list[str] = []
        for name, value in self.settings(config):
            if isinstance(value, bool):
                argv.append(f"--{name}" if value else f"--no-{name}")
            else:
                argv += [f"--{name}", str(value)]
        return argv

    def _kv_cache_dtype(self, config: EngineConfig) -> str | None:
        rendered = lookup("kv_cache_dtype", config.kv_cache_dtype, KV_DTYPE, KV_DTYPE_REFUSED)
        return None if rendered == "auto" else rendered

    def _quantization(self, config: EngineConfig) -> str | None:
        quant = config.weight_quantization
        if quant is None:
            return None
        return lookup("weight_quantization", quant, WEIGHT_QUANT, WEIGHT_QUANT_REFUSED)

    def _extra_settings(self, config: EngineConfig, managed: set[str]) -> list[Setting]:
        reserved = managed | RESERVED_FLAGS
        # `--no-X` is X's negation, so it collides with X too.
        negated = {f"no-{name}" for name in reserved}
        return extra_settings(config, reserved | negated, flag_name, known_flag_once)


PLUGIN = VllmEngine()
