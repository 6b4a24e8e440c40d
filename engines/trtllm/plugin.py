"""The TensorRT-LLM plug-in: `trtllm-serve` commands and files, docker command, disaggregation
plan, capability checks and metrics. The settings themselves (CLI flags and the
`--extra_llm_api_options` mapping) live in `engines.trtllm.settings` (rendered) and
`engines.trtllm.readback` (read back).

Written against TensorRT-LLM 1.2.1 with the PyTorch backend; spellings follow
shared/reference/engines.md and `tensorrt_llm/commands/serve.py`. It renders and checks only.

One source of truth per setting: trtllm-serve merges the YAML over its CLI at the top level
(`llm_args | yaml_dict`), so a YAML `kv_cache_config` replaces the whole KvCacheConfig the CLI
built, `--kv_cache_free_gpu_memory_fraction` included. Hence the split, tested to be disjoint:
- CLI: scalar knobs with a valued click option (backend, host, port, tp/pp/ep, max_batch_size,
  max_num_tokens, max_seq_len) plus `extra_args`;
- YAML: everything nested or boolean (`enable_attention_dp`; `kv_cache_config` with the memory
  fraction, block reuse and dtype; `enable_chunked_prefill`, whose CLI flag cannot say false;
  `speculative_config`; `disable_overlap_scheduler`; `cache_transceiver_config`; the
  Prometheus switches).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from engines.base import (
    Bind,
    ContainerSpec,
    DisaggregationPlan,
    EngineDefaults,
    GpuSelection,
    ReadinessProbe,
    ServerProcess,
)
from engines.capability import (
    check_model_len,
    check_parallelism,
    prequantized_config,
    require_own,
)
from engines.config import DisaggregationConfig, EngineConfig, EngineKind
from engines.containers import docker_run, docker_target, image_ref
from engines.errors import CapabilityError, EngineError
from engines.facts import HardwareFacts, ModelFacts
from engines.readback import build_config, load_mapping, same_argv, same_as_rendered
from engines.rendering import dump_yaml as _dump
from engines.trtllm.readback import OPTIONS_WHAT, config_fields
from engines.trtllm.settings import BACKEND, Role, Setting, cli_settings, extra_options

# This module's own names (the settings' names are imported from engines.trtllm.settings).
__all__ = [
    "CONFIG_FILE_NAME", "CONTAINER_CONFIG_PATH",
    "CTX_CONFIG_FILE_NAME", "DISAGG_CONFIG_FILE_NAME", "GEN_CONFIG_FILE_NAME",
    "IMAGE_REPOSITORY", "PLUGIN", "TRTLLM_VERSION",
    "TrtllmEngine",
]  # fmt: skip

TRTLLM_VERSION = "1.2.1"
IMAGE_REPOSITORY = "nvcr.io/nvidia/tensorrt-llm/release"
CONFIG_FILE_NAME = "trtllm-extra-options.yaml"
CONTAINER_CONFIG_PATH = f"/servefit/{CONFIG_FILE_NAME}"
CTX_CONFIG_FILE_NAME = "trtllm-ctx-extra-options.yaml"
GEN_CONFIG_FILE_NAME = "trtllm-gen-extra-options.yaml"
DISAGG_CONFIG_FILE_NAME = "trtllm-disagg-config.yaml"
_IMAGE_TAG = re.compile(r"^\d+\.\d+\.\d+((rc|a|b)\d+)?(\.post\d+)?$")
# Formats of the catalog's published checkpoints the PyTorch backend reads: ModelOpt FP8 /
# NVFP4 and HF FP8 ones. The catalog's awq checkpoints are AutoAWQ (GEMM) ones, which it does
# not read (its AWQ is ModelOpt W4A16-AWQ), so an awq pick is never swapped to them.
_CHECKPOINT_FORMATS = frozenset({"fp8", "nvfp4"})


def _checkpoint_fixes(quant: str) -> str:
    """What to change when no checkpoint of `quant` is known (the tail of the refusal)."""
    if quant == "fp8":
        return ("name one as the model, leave weight_quantization unset, or serve it with vLLM "
                "or SGLang (they quantize FP8 on load)")
    return "name one as the model or leave weight_quantization unset"


class TrtllmEngine:
    """TensorRT-LLM ≥ 1.0 OpenAI server (`trtllm-serve MODEL --backend pytorch …`)."""

    kind: ClassVar[EngineKind] = "trtllm"
    defaults: ClassVar[EngineDefaults] = EngineDefaults(
        engine_version=TRTLLM_VERSION,
        max_num_seqs=2048,
        max_batched_tokens=8192,
        gpu_memory_fraction=0.9,
        prefix_caching=True,
        chunked_prefill=False,
        kv_cache_dtype="auto",
        memory_fraction_semantics="free_after_weights",
        port=8000,
        notes="max_batch_size / max_num_tokens default to BuildConfig's 2048 / 8192 (some "
        "docs say 256 batch; set it explicitly). The memory fraction is "
        "kv_cache_config.free_gpu_memory_fraction: the share of memory still FREE after "
        "weights and buffers that goes to the KV cache, not vLLM's share of total memory. "
        "Chunked prefill is off in trtllm-serve; KV block reuse is on.",
    )
    def scheduler_defaults(self, gpu_name: str, memory_gb: float) -> tuple[int | None, int]:
        """BuildConfig's fixed 2048 / 8192, whatever the GPU."""
        return self.defaults.max_num_seqs, self.defaults.max_batched_tokens or 8192

    def release_memory_fraction(self, release: tuple[int, int]) -> float | None:
        """free_gpu_memory_fraction 0.9 in the releases measured and today."""
        del release
        return None

    def release_scheduler_defaults(self, release: tuple[int, int], max_model_len: int | None
                                   ) -> dict[str, int | bool]:
        """No release measured is known to choose other scheduler knobs ({})."""
        del release, max_model_len
        return {}

    def serial_host_loop(self, release: tuple[int, int] | None) -> bool:
        """No release measured is priced with one: the C++ batch manager (the TensorRT
        backend) schedules in C++ per step; the per-step framework time is
        EngineParams.step_overhead_s and per_seq_overhead_s for every release alike."""
        del release
        return False

    def serves_checkpoint_kv_dtype(self, release: tuple[int, int] | None) -> bool:
        """kv_cache_config.dtype auto keeps the checkpoint's quant_config.kv_cache_quant_algo
        (the PyTorch backend reads hf_quant_config.json; `engines.trtllm.settings` renders
        auto as no dtype for that reason)."""
        del release
        return True

    metrics_path: ClassVar[str] = "/prometheus/metrics"
    # Prometheus text exists only with `return_perf_metrics: true` (always rendered); `/metrics`
    # is JSON iteration stats. Newest name first. Empty = TRT-LLM exports no such series.
    metric_names: ClassVar[Mapping[str, tuple[str, ...]]] = {
        "queue_depth": ("trtllm_num_requests_waiting",),
        "running": ("trtllm_num_requests_running",),
        "kv_cache_usage": ("trtllm_kv_cache_utilization",),
        "prefix_cache_hit_rate": ("trtllm_kv_cache_hit_rate",),
        # Every prompt token is looked up in the block-reuse cache, so prompt tokens are the
        # query count and cached prompt tokens the hits.
        "prefix_cache_queries_tokens": ("trtllm_prompt_tokens_total",),
        "prefix_cache_hits_tokens": ("trtllm_prompt_cached_tokens_total",),
        "ttft_seconds": ("trtllm_time_to_first_token_seconds",),
        "itl_seconds": (),  # no per-token inter-token histogram
        "tpot_seconds": ("trtllm_time_per_output_token_seconds",),
        "e2e_seconds": ("trtllm_e2e_request_latency_seconds",),
        "queue_time_seconds": ("trtllm_request_queue_time_seconds",),
        "prompt_tokens": ("trtllm_prompt_tokens_total",),
        "generation_tokens": ("trtllm_generation_tokens_total",),
        "preemptions": (),
        "spec_draft_tokens": (
            "trtllm_spec_decode_num_draft_tokens_total",
            "trtllm_spec_decode_drafted_tokens_total",
        ),
        "spec_accepted_tokens": (
            "trtllm_spec_decode_num_accepted_tokens_total",
            "trtllm_spec_decode_accepted_tokens_total",
        ),
        "spec_drafts": (),
        "spec_accept_length": ("trtllm_spec_decode_acceptance_length",),
    }

    # -- rendering -------------------------------------------------------------------------

    def cli_settings(self, config: EngineConfig) -> list[Setting]:
        """The (flag name, value) pairs of the command line, model and YAML path excluded.

        `--tp_size` is tp×dp (TensorRT-LLM's attention DP ranks are its TP ranks) and
        `--ep_size` is given when ep > 1.

        Raises:
            CapabilityError: DEP with tp > 1 (attention DP ranks have attention TP 1 here), or
                an extra arg that shadows a setting EngineConfig renders.
        """
        return cli_settings(config)

    def extra_options(self, config: EngineConfig, role: Role = "server") -> dict[str, Any]:
        """The `--extra_llm_api_options` mapping (LlmArgs keys) for one process of `config`.

        `gpu_memory_fraction` is passed through as `kv_cache_config.free_gpu_memory_fraction`,
        TRT-LLM's own knob: the share of memory still free after weights and buffers that the
        KV cache takes (vLLM's is of total memory; the numbers are not interchangeable).
        `role` "prefill" adds `disable_overlap_scheduler: true` (context servers do not support
        the overlap scheduler); any disaggregated config adds `cache_transceiver_config`; DEP
        (dp > 1) adds `enable_attention_dp: true`.

        Raises:
            CapabilityError: a value the PyTorch backend cannot express (DEP with tp > 1,
                int8/e5m2 KV, EAGLE v1/v2, weight quantization it cannot load).
        """
        return extra_options(config, role)

    def served_config(self, config: EngineConfig, model: ModelFacts | None) -> EngineConfig:
        """`config` serving the model's pre-quantized checkpoint of its weight quantization.

        The PyTorch backend reads the format from the checkpoint and cannot quantize on load,
        so `trtllm-serve meta-llama/Llama-3.1-8B-Instruct` with weight_quantization=fp8 would
        run BF16. The checkpoint is swapped in when the facts say `config.model` is
        unquantized (`weights_dtype` bf16/fp16); `config` is returned as it is when it asks
        for no quantization, or when there are no facts or they say the checkpoint is already
        quantized (then `config.model` is taken to be in that format). trtllm-serve 1.2.1
        serves the model under its MODEL argument, so clients then ask for the checkpoint's id
        (`readiness` of the result says so).

        Raises:
            CapabilityError: the facts name no checkpoint in that format that the backend
                reads (none for awq: `_CHECKPOINT_FORMATS`), in one line saying what to change.
        """
        require_own(self.kind, config)
        return prequantized_config(config, model, engine="TensorRT-LLM", on_load=(),
                                   readable=_CHECKPOINT_FORMATS, fixes=_checkpoint_fixes)

    def server_argv(self, config: EngineConfig) -> list[str]:
        """`trtllm-serve MODEL … --extra_llm_api_options trtllm-extra-options.yaml`.

        trtllm-serve always needs the YAML (Prometheus is switched on there), so this refers to
        `config_file(config)` written as `trtllm-extra-options.yaml` in the working directory;
        use `serve_argv_with_config_file` to put it elsewhere.
        """
        return self.serve_argv_with_config_file(config, CONFIG_FILE_NAME)

    def config_file(self, config: EngineConfig) -> tuple[str, str]:
        """(`trtllm-extra-options.yaml`, YAML of LlmArgs keys) holding the non-CLI settings."""
        return CONFIG_FILE_NAME, _dump(self.extra_options(config))

    def config_from_file(
        self, model: str, text: str, argv: Sequence[str] | None = None
    ) -> EngineConfig:
        """The config launched by `argv` with `text` as its extra options file.

        The file holds only the non-CLI half (module docstring), so `argv`, the command from
        `serve_argv_with_config_file(config, PATH)`, is required. Normalisations (what neither
        half can tell apart): kv_cache_dtype bf16/fp16 → auto and fp8_e4m3 → fp8;
        weight_quantization → None (it renders nothing: the checkpoint says it); extra_args
        keys `-` → `_`, False values dropped (never rendered), values retyped from their CLI
        text (an int or float spelling comes back as that number).

        Raises:
            EngineError: no argv, a key or value ServeFit does not write (named), a
                disaggregated worker's file, or an argv that differs from the rendered one.
        """
        if argv is None:
            raise EngineError(
                f"{OPTIONS_WHAT} holds only half the settings; pass the launch argv too"
            )
        data = load_mapping(text, OPTIONS_WHAT)
        fields = config_fields(model, data, argv)
        config = build_config(fields, OPTIONS_WHAT)
        rendered = load_mapping(self.config_file(config)[1], OPTIONS_WHAT)
        same_as_rendered(data, rendered, OPTIONS_WHAT)
        path = argv[-1] if argv else ""
        same_argv(argv, self.serve_argv_with_config_file(config, path), "trtllm-serve command")
        return config

    def serve_argv_with_config_file(self, config: EngineConfig, path: str) -> list[str]:
        """`trtllm-serve MODEL <CLI settings> --extra_llm_api_options PATH`.

        The YAML overrides the CLI in TRT-LLM, so the file must be this config's
        `config_file`: the two halves are disjoint and both are needed.
        """
        self.extra_options(config)  # refuse what the YAML half cannot express
        if not path or any(ord(ch) < 32 for ch in path):
            raise EngineError(f"invalid extra options path {path!r}")
        return [
            "trtllm-serve", config.model,
            *self._flags(config),
            "--extra_llm_api_options", path,
        ]  # fmt: skip

    def docker_image(self, version: str | None = None) -> str:
        """`nvcr.io/nvidia/tensorrt-llm/release:<version>` (e.g. 1.2.1, 1.2.0rc6)."""
        tag = version or TRTLLM_VERSION
        refusal = f"not a TensorRT-LLM release tag: {tag!r} (expected e.g. 1.2.1 or 1.2.0rc6)"
        return image_ref(IMAGE_REPOSITORY, tag, _IMAGE_TAG, refusal, v_prefix=False)

    def container_spec(
        self,
        config: EngineConfig,
        *,
        image: str,
        host_port: int,
        model_cache_dir: str,
        gpus: GpuSelection = "all",
        container_name: str | None = None,
        config_file_path: str | None = None,
    ) -> ContainerSpec:
        """The container of the NGC release image running `trtllm-serve`.

        Args:
            config_file_path: host path of the file `config_file(config)` wrote, mounted
                read-only at `/servefit/trtllm-extra-options.yaml`. Default
                `./trtllm-extra-options.yaml`: the file next to where docker runs (relative
                bind-mount sources need Docker >= 23; compose resolves them from its file).

        The NGC image has no trtllm-serve entrypoint, so the command follows the image. Inside
        the container the server binds 0.0.0.0 whatever `config.host` says.
        """
        name = docker_target(self.kind, host_port, model_cache_dir, container_name)
        options = f"./{CONFIG_FILE_NAME}" if config_file_path is None else config_file_path
        # A source not starting with / or . would be read by docker as a named volume.
        bad = not options.startswith(("/", ".")) or any(ord(ch) < 32 for ch in options)
        if bad or ":" in options:
            raise EngineError(
                f"config_file_path must be a file path starting with '/' or '.' and without "
                f"':', got {options!r}"
            )
        inside = config.model_copy(update={"host": "0.0.0.0"})
        return docker_run(
            name, image, self.serve_argv_with_config_file(inside, CONTAINER_CONFIG_PATH),
            gpus=gpus, host_port=host_port, port=config.port, model_cache_dir=model_cache_dir,
            ulimits={"memlock": -1, "stack": 67108864},
            binds=[Bind(source=options, target=CONTAINER_CONFIG_PATH, read_only=True)])

    def readiness(self, config: EngineConfig) -> ReadinessProbe:
        """`/health` (200 once the executor is up), `/v1/models`, then a 1-token completion.

        trtllm-serve lists the model under the MODEL argument as given.
        """
        return ReadinessProbe(
            health_path="/health",
            models_path="/v1/models",
            served_model_name=config.model,
            completion_path="/v1/completions",
            completion_body={"model": config.model, "prompt": "Hello", "max_tokens": 1},
        )

    def disaggregation_plan(
        self,
        config: EngineConfig,
        *,
        host: str = "127.0.0.1",
        base_port: int = 8100,
        config_dir: str = ".",
    ) -> DisaggregationPlan:
        """Context and generation `trtllm-serve` workers behind `trtllm-serve disaggregated`.

        Workers get consecutive ports from `base_port` and disjoint GPU ranges. They and the
        router read files that the plan cannot carry: write `disaggregation_files(...)` (same
        arguments) into `config_dir` first. The router listens on `config.host:config.port`.
        """
        disagg = self._require_disaggregation(config)
        gpus_per_instance = config.gpus_per_instance
        roles: list[Role] = ["prefill"] * disagg.prefill_instances
        roles += ["decode"] * disagg.decode_instances
        paths = {
            "prefill": f"{config_dir}/{CTX_CONFIG_FILE_NAME}",
            "decode": f"{config_dir}/{GEN_CONFIG_FILE_NAME}",
        }
        procs: list[ServerProcess] = []
        for index, role in enumerate(roles):
            port = base_port + index
            first_gpu = index * gpus_per_instance
            devices = ",".join(str(g) for g in range(first_gpu, first_gpu + gpus_per_instance))
            instance = config.model_copy(update={"port": port})
            argv = self.serve_argv_with_config_file(instance, paths[role])
            self.extra_options(config, role)  # the file it reads must render too
            env = {"CUDA_VISIBLE_DEVICES": devices}
            procs.append(ServerProcess(role=role, argv=argv, env=env, port=port))
        router_argv = [
            "trtllm-serve",
            "disaggregated",
            "-c",
            f"{config_dir}/{DISAGG_CONFIG_FILE_NAME}",
        ]
        return DisaggregationPlan(
            prefill=[p for p in procs if p.role == "prefill"],
            decode=[p for p in procs if p.role == "decode"],
            router=ServerProcess(role="router", argv=router_argv, port=config.port),
            gpus_needed=len(roles) * gpus_per_instance,
        )

    def disaggregation_files(
        self, config: EngineConfig, *, host: str = "127.0.0.1", base_port: int = 8100
    ) -> dict[str, str]:
        """{file name: text} of the files `disaggregation_plan` refers to.

        The context-server YAML, the generation-server YAML, and the router's
        `disagg_config.yaml` (hostname/port it serves, `context_servers`/`generation_servers`
        with `host:port` URLs in the plan's port order).
        """
        disagg = self._require_disaggregation(config)
        n_ctx, n_gen = disagg.prefill_instances, disagg.decode_instances
        ctx_urls = [f"{host}:{base_port + i}" for i in range(n_ctx)]
        gen_urls = [f"{host}:{base_port + n_ctx + i}" for i in range(n_gen)]
        router = {
            "hostname": config.host,
            "port": config.port,
            "backend": BACKEND,
            "context_servers": {"num_instances": n_ctx, "urls": ctx_urls},
            "generation_servers": {"num_instances": n_gen, "urls": gen_urls},
        }
        return {
            CTX_CONFIG_FILE_NAME: _dump(self.extra_options(config, "prefill")),
            GEN_CONFIG_FILE_NAME: _dump(self.extra_options(config, "decode")),
            DISAGG_CONFIG_FILE_NAME: _dump(router),
        }

    # -- capability checks -----------------------------------------------------------------

    def check(self, config: EngineConfig, hardware: HardwareFacts, model: ModelFacts) -> None:
        """Refuse configs TensorRT-LLM (PyTorch backend) cannot serve on `hardware`.

        Raises:
            CapabilityError: one line naming the first problem found.
        """
        require_own(self.kind, config)
        if hardware.vendor != "nvidia":
            raise CapabilityError(
                f"TensorRT-LLM runs only on NVIDIA GPUs; {hardware.gpu_name} is {hardware.vendor}"
            )
        self.cli_settings(config)  # what cannot be rendered cannot run either
        self.extra_options(config)
        check_parallelism(config, hardware, model, kv_heads_must_divide=False)
        self._check_lengths(config, model)
        self._check_precision(config, hardware, model)
        self.served_config(config, model)  # a format no checkpoint of the model is in
        spec = config.speculative
        if spec is not None and spec.method == "mtp" and model.has_mtp_heads is False:
            raise CapabilityError("speculative method mtp needs a checkpoint with MTP layers")

    def _check_lengths(self, config: EngineConfig, model: ModelFacts) -> None:
        check_model_len(config, model)
        budget = config.max_batched_tokens
        model_len = config.max_model_len or model.max_context_tokens
        if budget is not None and config.chunked_prefill is not True and budget < model_len:
            raise CapabilityError(
                f"without chunked prefill (off by default in trtllm-serve), "
                f"max_batched_tokens={budget} must cover max_model_len={model_len}, or a long "
                "prompt could never be scheduled"
            )

    def _check_precision(
        self, config: EngineConfig, hardware: HardwareFacts, model: ModelFacts
    ) -> None:
        kv, quant = config.kv_cache_dtype, config.weight_quantization
        if kv in ("bf16", "fp16") and model.weights_dtype not in (None, kv):
            raise CapabilityError(
                f"TensorRT-LLM stores a {kv} KV cache only as the model dtype (auto), and this "
                f"model is {model.weights_dtype}"
            )
        cc = hardware.compute_capability
        has_fp8 = "fp8" in hardware.native_dtypes and cc is not None and cc >= (8, 9)
        has_fp4 = "fp4" in hardware.native_dtypes and cc is not None and cc >= (10, 0)
        needs = [
            ("FP8 weights", quant == "fp8", has_fp8),
            ("FP8 KV cache", kv.startswith("fp8"), has_fp8),
            ("NVFP4 weights", quant == "nvfp4", has_fp4),
            ("NVFP4 KV cache", kv == "fp4", has_fp4),
        ]
        for what, wanted, available in needs:
            if not wanted or available:
                continue
            if what.startswith("FP8"):
                raise CapabilityError(
                    f"TensorRT-LLM {what} need compute capability >= 8.9 (Ada/Hopper or "
                    f"newer); {hardware.gpu_name} has no FP8"
                )
            raise CapabilityError(
                f"TensorRT-LLM {what} need a Blackwell GPU (compute capability >= 10.0); "
                f"{hardware.gpu_name} has no FP4"
            )

    # -- helpers ---------------------------------------------------------------------------

    def _require_disaggregation(self, config: EngineConfig) -> DisaggregationConfig:
        require_own(self.kind, config)
        if config.disaggregation is None:
            raise EngineError("config has no disaggregation section")
        return config.disaggregation

    def _flags(self, config: EngineConfig) -> list[str]:
        argv: list[str] = []
        for name, value in self.cli_settings(config):
            if value is True:
                argv.append(f"--{name}")
            elif value is not False:  # trtllm-serve's flags default off and have no --no- form
                argv += [f"--{name}", str(value)]
        return argv


PLUGIN = TrtllmEngine()
