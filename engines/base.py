"""The contract every engine plug-in implements, and the small records it returns.

A plug-in is a module-level object keyed by `kind`; generic code looks it up in
`engines.registry.ENGINES` and never branches on the engine's name. Plug-ins render and check; they
do
not predict or launch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import Field

from core.records import Record
from engines.config import EngineConfig, EngineKind
from engines.facts import HardwareFacts, ModelFacts

# Our metric keys; each plug-in maps them to its Prometheus sample names (newest first).
MetricKey = Literal[
    "queue_depth",
    "running",
    "kv_cache_usage",
    "prefix_cache_hit_rate",
    "prefix_cache_queries_tokens",
    "prefix_cache_hits_tokens",
    "ttft_seconds",
    "itl_seconds",
    "tpot_seconds",
    "e2e_seconds",
    "queue_time_seconds",
    "prompt_tokens",
    "generation_tokens",
    "preemptions",
    "spec_draft_tokens",
    "spec_accepted_tokens",
    "spec_drafts",  # drafting steps (counter): with the two above, tokens per step and k
    "spec_accept_length",  # gauge: mean tokens a verify step emits (SGLang, newer TRT-LLM)
]

# "none": no GPU request at all (a CPU build, or a stand-in image in tests).
GpuSelection = int | Sequence[int] | Literal["all", "none"]


class EngineDefaults(Record):
    """What the engine does when a knob is left unset, for the release it was read from."""

    engine_version: str = Field(description="Engine release these defaults describe.")
    max_num_seqs: int | None = Field(description="Default concurrency cap; None = GPU-dependent.")
    max_batched_tokens: int | None = Field(description="Default step budget; None = GPU-dependent.")
    gpu_memory_fraction: float | None = Field(description="Default memory fraction knob.")
    memory_fraction_semantics: Literal["total", "static_pool", "free_after_weights"] = Field(
        description="What the engine's memory fraction is a fraction of: all GPU memory for "
        "the whole instance (vLLM), the static weights + KV pool (SGLang), or the memory still "
        "free after weights and buffers, given to the KV cache (TensorRT-LLM).",
    )
    prefix_caching: bool = Field(description="Prefix caching on by default.")
    chunked_prefill: bool = Field(description="Chunked prefill on by default.")
    kv_cache_dtype: str = Field(description="Default KV-cache dtype (engine spelling).")
    port: int = Field(description="Default HTTP port.")
    notes: str = Field(default="", description="How GPU-dependent defaults are chosen.")


class Bind(Record):
    """A host path mounted into a container."""

    source: str = Field(description="Host path (absolute, or relative to where docker runs).")
    target: str = Field(description="Path inside the container.")
    read_only: bool = False


class ContainerSpec(Record):
    """One engine container, whatever starts it: rendered as a `docker run` command for the
    export bundle, or handed to the Docker Engine API by the launcher. One record, so the two
    cannot drift apart."""

    name: str = Field(description="Container name.")
    image: str = Field(description="Image reference.")
    command: list[str] = Field(description="Arguments after the image (entrypoint's or all).")
    gpus: int | list[int] | Literal["all", "none"] = Field(
        description="GPUs requested: all, a count, device indices, or none.")
    ipc_host: bool = Field(default=True, description="Share the host's IPC namespace.")
    shm_size: str | None = Field(default=None, description="Size of /dev/shm, e.g. 32g.")
    ulimits: dict[str, int] = Field(default_factory=dict,
                                    description="Soft = hard limit per name; -1 = unlimited.")
    network: Literal["bridge", "host"] = Field(
        default="bridge", description="bridge publishes the port; host shares the host's "
        "network (the server then listens on `host_port` itself).")
    container_port: int = Field(ge=1, le=65535, description="Port the server listens on.")
    host_port: int = Field(ge=1, le=65535, description="Port on the host.")
    binds: list[Bind] = Field(default_factory=list, description="Host paths mounted.")
    env_passthrough: list[str] = Field(
        default_factory=list, description="Variables passed from the caller's environment "
        "by name (their values never appear in the command).")


class ReadinessProbe(Record):
    """How to tell the server is up and can generate."""

    health_path: str = Field(description="GET path that answers 200 once the engine is alive.")
    models_path: str = Field(description="GET path listing the served model names.")
    served_model_name: str = Field(description="Name the server lists and expects in requests.")
    completion_path: str = Field(description="POST path of the tiny completion.")
    completion_body: dict[str, Any] = Field(description="JSON body of a one-token completion.")


class ServerProcess(Record):
    """One process of a deployment: argv (never a shell string), env and port."""

    role: Literal["server", "prefill", "decode", "router"] = Field(description="Its job.")
    argv: list[str] = Field(description="Argument vector, argv[0] the program.")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment.")
    port: int = Field(ge=1, le=65535, description="HTTP port it serves.")


class DisaggregationPlan(Record):
    """Prefill and decode instances plus the router clients talk to."""

    prefill: list[ServerProcess] = Field(description="Prefill instances.")
    decode: list[ServerProcess] = Field(description="Decode instances.")
    router: ServerProcess = Field(description="The proxy clients send requests to.")
    gpus_needed: int = Field(ge=1, description="GPUs all instances take together.")


@runtime_checkable
class EnginePlugin(Protocol):
    """What `engines/<kind>.py` provides (one instance per engine, registered by `kind`)."""

    # Read-only properties, so a plug-in may provide them as class constants (ClassVar) or
    # instance attributes alike; a bare annotation would demand instance variables.
    @property
    def kind(self) -> EngineKind:
        """The registry key (`engines.registry.ENGINES[kind]`)."""
        ...

    @property
    def defaults(self) -> EngineDefaults:
        """What the engine does with knobs left unset."""
        ...

    @property
    def metric_names(self) -> Mapping[str, tuple[str, ...]]:
        """Our metric key → the engine's Prometheus sample names, newest first."""
        ...

    @property
    def metrics_path(self) -> str:
        """GET path of the Prometheus text."""
        ...

    def check(self, config: EngineConfig, hardware: HardwareFacts, model: ModelFacts) -> None:
        """Refuse what the engine cannot do here.

        Raises:
            CapabilityError: with a one-line reason, for the first problem found.
        """
        ...

    def served_config(self, config: EngineConfig, model: ModelFacts | None) -> EngineConfig:
        """The config a deployment of `config` launches: `config` itself, or, where the engine
        cannot quantize a checkpoint into `config.weight_quantization` on load (TensorRT-LLM:
        any format; vLLM and SGLang: awq, gptq, nvfp4...), the same with `model` set to the
        model's pre-quantized checkpoint of that format (from `model`; None = no facts, so
        `config.model` is taken to be in that format already). `check` calls it, so a format
        with no such checkpoint is refused there too.

        Raises:
            CapabilityError: one line: no checkpoint in that format is known, and what to
                change.
        """
        ...

    def server_argv(self, config: EngineConfig) -> list[str]:
        """The full launch command as an argument list (program first)."""
        ...

    def config_file(self, config: EngineConfig) -> tuple[str, str]:
        """(file name, text) of the engine's config file holding the same settings."""
        ...

    def config_from_file(
        self, model: str, text: str, argv: Sequence[str] | None = None
    ) -> EngineConfig:
        """The config that `config_file` rendered as `text` (the inverse of rendering).

        Contract: for every config `c` that renders and has no `disaggregation`,
        `config_from_file(c.model, config_file(c)[1], serve_argv_with_config_file(c, p))`
        equals `c` up to the plug-in's documented normalisations (spellings the engine
        cannot tell apart). `argv` is that launch command: optional where the file holds
        every setting (vLLM, SGLang; checked when given), required where the plug-in puts
        part of the settings on the command line (TRT-LLM). The file read back must be
        exactly what `config_file` writes for the result.

        Raises:
            EngineError: one line naming the first key ServeFit does not write (unknown key,
                other value or spelling), a disaggregated instance's file (its instance counts
                are not in it), or an argv that differs from the rendered one.
        """
        ...

    def serve_argv_with_config_file(self, config: EngineConfig, path: str) -> list[str]:
        """The launch command that reads its settings from the file at `path`."""
        ...

    def docker_image(self, version: str | None = None) -> str:
        """The official image reference for `version` (None = the pinned default)."""
        ...

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
        """The engine container for this config (`engines.containers.docker_argv` renders it as
        a `docker run` command; the launcher hands it to the Docker Engine API).

        `config_file_path` is the host path of the file `config_file(config)` wrote; a plug-in
        whose container must read that file mounts it (the others take their settings as
        flags and ignore it).
        """
        ...

    def readiness(self, config: EngineConfig) -> ReadinessProbe:
        """How a launcher knows the server is ready."""
        ...

    def scheduler_defaults(self, gpu_name: str, memory_gb: float) -> tuple[int | None, int]:
        """(max_num_seqs, max_batched_tokens) the engine picks on this GPU when both are unset;
        max_num_seqs None = no fixed cap (the KV pool decides)."""
        ...

    def release_memory_fraction(self, release: tuple[int, int]) -> float | None:
        """The memory-fraction default of an older (major, minor) release where it differs
        from `defaults.gpu_memory_fraction` (what a measurement taken on that release ran
        with); None: the same as today's."""
        ...

    def release_scheduler_defaults(self, release: tuple[int, int], max_model_len: int | None
                                   ) -> dict[str, int | bool]:
        """The scheduler knobs an older (major, minor) release chose itself where they differ
        from today's (`scheduler_defaults`, `defaults`), as `EngineConfig` fields
        (max_num_seqs, max_batched_tokens, chunked_prefill, prefix_caching); {}: today's.
        `max_model_len` is the served one where a release's choice depends on it."""
        ...

    def serial_host_loop(self, release: tuple[int, int] | None) -> bool:
        """Whether this (major, minor) release (None: the plug-in's) runs its engine loop's
        host work (scheduling, input preparation, output processing) between GPU steps, per
        running sequence and on the critical path, so a step's wall time adds that host
        time to the kernels' (`EngineParams.serial_loop_seq_s` prices it)."""
        ...

    def serves_checkpoint_kv_dtype(self, release: tuple[int, int] | None) -> bool:
        """Whether this (major, minor) release (None: the one the plug-in was read from)
        serves the KV-cache format a checkpoint declares (`ModelSpec.checkpoint_kv_dtype`,
        e.g. ModelOpt's kv_cache_quant_algo FP8) when the KV-cache dtype is left at auto."""
        ...

    def disaggregation_plan(
        self, config: EngineConfig, *, host: str = "127.0.0.1", base_port: int = 8100
    ) -> DisaggregationPlan:
        """Processes for a prefill/decode deployment of `config` (needs `disaggregation`)."""
        ...
