"""Helpers the engine plug-ins share: docker arguments, image tags, checks every engine makes
alike (GPU count, head divisibility, expert parallelism only for MoE), the pre-quantized
checkpoint a config serves, extra-arg collisions, instance layout, and reading a config file
back.

Engine-neutral by construction: callers pass their own tables, patterns and wording. It must not
branch on an engine's name.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Any, Literal, TypeVar

import yaml
from pydantic import ValidationError

from engines.base import Bind, ContainerSpec, EnginePlugin, GpuSelection, ReadinessProbe
from engines.config import EngineConfig
from engines.errors import CapabilityError, EngineError
from engines.facts import HardwareFacts, ModelFacts

CONTAINER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")

Setting = tuple[str, str | int | float | bool]
Role = Literal["prefill", "decode"]
_T = TypeVar("_T")


def docker_gpus(gpus: GpuSelection) -> str | None:
    """The `--gpus` value: `all`, a count, or `"device=0,1"` (quotes are part of the value,
    because docker parses it as CSV and would split the bare list at the comma); None for
    "none" (no flag)."""
    if gpus in ("all", "none"):
        return None if gpus == "none" else "all"
    if isinstance(gpus, int):
        if gpus < 1:
            raise EngineError(f"gpus must be >= 1, got {gpus}")
        return str(gpus)
    if isinstance(gpus, str) or not gpus or any(not isinstance(g, int) or g < 0 for g in gpus):
        raise EngineError(f"gpus must be 'all', 'none', a count or GPU indices, got {gpus!r}")
    return '"device=' + ",".join(str(g) for g in gpus) + '"'


def image_ref(repository: str, tag: str, pattern: re.Pattern[str], refusal: str, *,
              v_prefix: bool) -> str:
    """`repository:tag` once `tag` matches `pattern`; `v_prefix` adds `v` to numeric tags.

    Raises:
        EngineError: `refusal` (a one-line message) when the tag does not match.
    """
    if not pattern.fullmatch(tag):
        raise EngineError(refusal)
    if v_prefix and tag[0].isdigit():
        tag = f"v{tag}"
    return f"{repository}:{tag}"


# Host folders a model cache must never be: mounted read-write into an engine container,
# "/" handed the container the whole host. Under these nothing is a cache; these exact
# folders hold other people's data.
_SYSTEM_TREES = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/proc", "/sbin",
                 "/sys", "/usr")
_SYSTEM_FOLDERS = frozenset({"/", "/home", "/root", "/var", "/run", "/tmp", "/opt", "/srv",
                             "/mnt", "/media"})


def system_path_reason(path: str) -> str | None:
    """Why `path` (an absolute host path) must not be mounted as a model cache, None when it
    may: "/" and the system's own folders, however written ("//", "/data/..")."""
    normal = posixpath.normpath(re.sub("/+", "/", path))
    if normal in _SYSTEM_FOLDERS or any(
            normal == tree or normal.startswith(tree + "/") for tree in _SYSTEM_TREES):
        return (f"model_cache_dir {path!r} is a system folder ({normal}): the engine "
                "container would mount it read-write; give the Hugging Face cache folder")
    return None


def docker_target(kind: str, host_port: int, model_cache_dir: str,
                  container_name: str | None) -> str:
    """Validate the `docker run` target and return the container name (default per port).

    Raises:
        EngineError: a port outside 1-65535, a cache dir with ':' or empty, a bad name.
    """
    if not 1 <= host_port <= 65535:
        raise EngineError(f"host_port must be 1-65535, got {host_port}")
    if not model_cache_dir or ":" in model_cache_dir:
        raise EngineError(f"model_cache_dir must be a path without ':', got {model_cache_dir!r}")
    if model_cache_dir.startswith("/") and (why := system_path_reason(model_cache_dir)):
        raise EngineError(why)
    name = container_name or f"servefit-{kind}-{host_port}"
    if not CONTAINER_NAME.fullmatch(name):
        raise EngineError(f"invalid container name {name!r}")
    return name


def docker_run(name: str, image: str, command: Sequence[str], *, gpus: GpuSelection,
               host_port: int, port: int, model_cache_dir: str, shm_size: str | None = None,
               ulimits: Mapping[str, int] | None = None, binds: Sequence[Bind] = ()
               ) -> ContainerSpec:
    """The container of an official image: the named container (from `docker_target`),
    GPUs, host IPC, the server port published, the HF cache mounted (weights download once)
    plus `binds`, HF_TOKEN passed through, then the image and `command`."""
    docker_gpus(gpus)  # refuses a bad selection here, whoever starts the container
    return ContainerSpec(
        name=name, image=image, command=list(command),
        gpus=gpus if isinstance(gpus, (int, str)) else list(gpus),
        shm_size=shm_size, ulimits=dict(ulimits or {}), container_port=port,
        host_port=host_port,
        binds=[Bind(source=model_cache_dir, target="/root/.cache/huggingface"), *binds],
        env_passthrough=["HF_TOKEN"])


def docker_run_argv(spec: ContainerSpec) -> list[str]:
    """`docker run --rm …` that starts the container `spec` describes."""
    gpus = docker_gpus(spec.gpus)
    network = (["--network", "host"] if spec.network == "host"
               else ["-p", f"{spec.host_port}:{spec.container_port}"])
    return [
        "docker", "run", "--rm",
        "--name", spec.name,
        *(["--gpus", gpus] if gpus else []),
        *(["--ipc=host"] if spec.ipc_host else []),
        *(["--shm-size", spec.shm_size] if spec.shm_size else []),
        *(arg for name, limit in spec.ulimits.items() for arg in ("--ulimit", f"{name}={limit}")),
        *network,
        *(arg for b in spec.binds
          for arg in ("-v", f"{b.source}:{b.target}" + (":ro" if b.read_only else ""))),
        *(arg for var in spec.env_passthrough for arg in ("--env", var)),
        spec.image,
        *spec.command,
    ]  # fmt: skip


def docker_argv(plugin: EnginePlugin, config: EngineConfig, **container: Any) -> list[str]:
    """`docker run` of `plugin`'s container for `config` (keywords: `container_spec`'s)."""
    return docker_run_argv(plugin.container_spec(config, **container))


def require_own(kind: str, config: EngineConfig) -> None:
    """Raises CapabilityError when `config` is for another engine."""
    if config.engine != kind:
        raise CapabilityError(f"config is for engine {config.engine!r}, not {kind!r}")


def lookup(field: str, value: str, table: Mapping[str, _T], refused: Mapping[str, str]) -> _T:
    """`table[value]`, or CapabilityError with the engine's reason from `refused`."""
    if value in refused:
        raise CapabilityError(f"{field}={value}: {refused[value]}")
    return table[value]


def openai_readiness(name: str) -> ReadinessProbe:
    """`/health`, `/v1/models`, then a one-token `/v1/completions` for served name `name`."""
    return ReadinessProbe(
        health_path="/health",
        models_path="/v1/models",
        served_model_name=name,
        completion_path="/v1/completions",
        completion_body={"model": name, "prompt": "Hello", "max_tokens": 1},
    )


def instances(config: EngineConfig, base_port: int) -> Iterator[tuple[Role, int, str]]:
    """(role, port, CUDA_VISIBLE_DEVICES) per instance of a disaggregated config: prefill
    first, consecutive ports from `base_port`, disjoint ranges of `gpus_per_instance` GPUs.

    Raises:
        EngineError: the config has no disaggregation section.
    """
    disagg = config.disaggregation
    if disagg is None:
        raise EngineError("config has no disaggregation section")
    per = config.gpus_per_instance
    roles: list[Role] = ["prefill"] * disagg.prefill_instances
    roles += ["decode"] * disagg.decode_instances
    for index, role in enumerate(roles):
        devices = ",".join(str(g) for g in range(index * per, (index + 1) * per))
        yield role, base_port + index, devices


def parallel_layout(config: EngineConfig) -> Literal["TP", "TEP", "DEP"]:
    """How one instance splits a model: TP (experts, if any, tensor-sharded), TEP (TP
    attention, experts whole across the TP group) or DEP (attention data-parallel ranks,
    experts across all of them)."""
    if config.dp > 1:
        return "DEP"
    return "TEP" if config.ep > 1 else "TP"


def check_moe_layout(config: EngineConfig, *, is_moe: bool) -> None:
    """Expert and attention data parallelism only for MoE models (the rule every engine and
    the performance model share).

    Raises:
        CapabilityError: TEP or DEP asked of a dense model.
    """
    if (config.ep > 1 or config.dp > 1) and not is_moe:
        raise CapabilityError(
            f"{parallel_layout(config)} (ep={config.ep}, dp={config.dp}) splits MoE experts "
            "over GPUs; the model is dense (not mixture-of-experts)"
        )


def check_parallelism(config: EngineConfig, hardware: HardwareFacts, model: ModelFacts, *,
                      kv_heads_must_divide: bool) -> None:
    """GPU count (`gpus_per_instance` per instance), expert/attention data parallelism only
    for MoE models, attention-head and layer divisibility (and KV heads when the engine shards
    them: shard when tp divides them, replicate when they divide tp).

    Raises:
        CapabilityError: the first problem found.
    """
    _check_gpu_count(config, hardware)
    check_moe_layout(config, is_moe=model.is_moe)
    if model.num_attention_heads % config.tp:
        raise CapabilityError(
            f"tp={config.tp} must divide the model's {model.num_attention_heads} attention heads"
        )
    kv = model.num_kv_heads
    if kv_heads_must_divide and kv % config.tp and config.tp % kv:
        raise CapabilityError(
            f"tp={config.tp} and the model's {kv} KV heads must divide one another"
        )
    if model.num_layers is not None and config.pp > model.num_layers:
        raise CapabilityError(f"pp={config.pp} exceeds the model's {model.num_layers} layers")


def _check_gpu_count(config: EngineConfig, hardware: HardwareFacts) -> None:
    disagg = config.disaggregation
    count = 1 if disagg is None else disagg.prefill_instances + disagg.decode_instances
    needed = config.gpus_per_instance * count
    if needed > hardware.gpu_count:
        raise CapabilityError(
            f"tp×pp×dp×instances = {config.tp}×{config.pp}×{config.dp}×{count} = {needed} "
            f"GPUs, but only {hardware.gpu_count} available"
        )


def check_model_len(config: EngineConfig, model: ModelFacts) -> None:
    """Raises CapabilityError when max_model_len exceeds the model's context."""
    if config.max_model_len is not None and config.max_model_len > model.max_context_tokens:
        raise CapabilityError(
            f"max_model_len={config.max_model_len} exceeds the model's context of "
            f"{model.max_context_tokens} tokens"
        )


def check_fp8_kv(config: EngineConfig, hardware: HardwareFacts) -> None:
    """Policy, not an engine error: without FP8 hardware an FP8 KV cache only saves memory and
    pays conversions on every step, which our performance model does not represent.

    Raises:
        CapabilityError: an fp8* KV cache on a GPU without FP8.
    """
    if config.kv_cache_dtype.startswith("fp8") and "fp8" not in hardware.native_dtypes:
        raise CapabilityError(
            f"FP8 KV cache needs a GPU with FP8 support (compute capability >= 8.9 or "
            f"MI300); {hardware.gpu_name} has none"
        )


def check_marlin_weights(config: EngineConfig, hardware: HardwareFacts, model: ModelFacts, *,
                         engine: str, rendered: Mapping[str, str | None],
                         mxfp4_needs_ampere: bool) -> None:
    """Weight-quantization checks of engines that fall back to Marlin kernels on Ampere (FP8
    weight-only W8A16) and render awq/gptq as their Marlin variants (`rendered`).

    Raises:
        CapabilityError: the first quantization the GPU or model cannot run.
    """
    quant = config.weight_quantization
    if quant is None or quant == "none":
        return
    cc = hardware.compute_capability
    ampere_or_newer = hardware.vendor == "nvidia" and cc is not None and cc >= (8, 0)
    if quant == "fp8" and "fp8" not in hardware.native_dtypes and not ampere_or_newer:
        raise CapabilityError(
            f"FP8 weights need FP8 hardware or an Ampere+ NVIDIA GPU for {engine}'s Marlin "
            f"fallback; {hardware.gpu_name} has neither"
        )
    if quant in ("awq", "gptq") and not ampere_or_newer:
        raise CapabilityError(
            f"{quant} is rendered as {rendered[quant]}, whose Marlin kernels need an "
            f"NVIDIA GPU with compute capability >= 8.0; {hardware.gpu_name} is not one"
        )
    if quant == "nvfp4" and "fp4" not in hardware.native_dtypes:
        raise CapabilityError(
            f"NVFP4 weights need a Blackwell GPU (compute capability >= 10.0); "
            f"{hardware.gpu_name} has no FP4"
        )
    if quant == "mxfp4":
        # The mxfp4 methods quantize only fused-MoE experts (gpt-oss checkpoints).
        if not model.is_moe:
            raise CapabilityError(f"{engine}'s mxfp4 applies only to MoE experts; model is dense")
        if mxfp4_needs_ampere and hardware.vendor == "nvidia" and not ampere_or_newer:
            raise CapabilityError(
                f"MXFP4 needs compute capability >= 8.0 in {engine}; {hardware.gpu_name} is older"
            )


def prequantized_config(config: EngineConfig, model: ModelFacts | None, *, engine: str,
                        on_load: Collection[str], readable: Collection[str] | None = None,
                        fixes: str | Callable[[str], str]) -> EngineConfig:
    """`config` serving the model's pre-quantized checkpoint of its weight quantization, for an
    engine that quantizes a checkpoint on load only into the formats `on_load`.

    `config` is returned as it is when it asks for no quantization or a format in `on_load`,
    or when there are no facts or they say `config.model` is not unquantized
    (`weights_dtype` None: it is then taken to be in that format already). Otherwise the
    facts' checkpoint of that format is swapped in; `readable` limits that to the formats
    whose published checkpoints (`ModelFacts.quantized_checkpoints`) the engine reads (None:
    all of them). `fixes` is the refusal's tail, what to change (or a function of the format
    giving it).

    Raises:
        CapabilityError: no checkpoint in that format is known: one line, "weight_quantization=Q:
            `engine` cannot quantize the bf16 checkpoint M on load and no pre-quantized Q
            checkpoint of it is known; FIXES".
    """
    quant = config.weight_quantization
    if (quant is None or quant == "none" or quant in on_load or model is None
            or model.weights_dtype is None):
        return config
    checkpoint = model.quantized_checkpoints.get(quant)
    if checkpoint is None or (readable is not None and quant not in readable):
        raise CapabilityError(
            f"weight_quantization={quant}: {engine} cannot quantize the {model.weights_dtype} "
            f"checkpoint {config.model} on load and no pre-quantized {quant} checkpoint of it "
            f"is known; {fixes if isinstance(fixes, str) else fixes(quant)}"
        )
    if checkpoint == config.model:
        return config
    # Validated again: the name becomes the model argument of every launch command.
    return EngineConfig.model_validate({**config.model_dump(), "model": checkpoint})


def extra_settings(
    config: EngineConfig,
    reserved: set[str] | frozenset[str],
    rename: Callable[[str], str],
    also_check: Callable[[str, str, Any, list[Setting]], None] | None = None,
) -> list[Setting]:
    """`config.extra_args` as (flag name, value), renamed to the engine's spelling.

    `also_check(key, name, value, so_far)` adds an engine's own refusals per item.

    Raises:
        CapabilityError: an extra arg naming a flag in `reserved`, two extra args renamed to
            one flag (`a_b` and `a-b`: the config file would keep only one of them), or what
            `also_check` refuses.
    """
    out: list[Setting] = []
    for key, value in config.extra_args.items():
        name = rename(key)
        if name in reserved:
            raise CapabilityError(
                f"extra_args[{key!r}] collides with a setting EngineConfig renders itself"
            )
        if any(seen == name for seen, _ in out):
            raise CapabilityError(f"extra_args[{key!r}] repeats flag --{name}")
        if also_check is not None:
            also_check(key, name, value, out)
        out.append((name, value))
    return out


def dump_yaml(data: Mapping[str, Any]) -> str:
    """Block YAML in insertion order; a huge width keeps each value on one line."""
    # Without a stream safe_dump returns the text; str() says so to the type checker, which
    # sees PyYAML as untyped.
    return str(yaml.safe_dump(dict(data), sort_keys=False, allow_unicode=True, width=10**6))


# -- reading a config file back --------------------------------------------------------------


def load_mapping(text: str, what: str) -> dict[str, Any]:
    """The top-level YAML mapping of `text` (string keys).

    Raises:
        EngineError: not YAML, or not a mapping with string keys.
    """
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise EngineError(f"{what} is not valid YAML: {str(exc).splitlines()[0]}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        raise EngineError(f"{what} must be a mapping of setting names to values")
    return data


def unknown_key(key: str, what: str) -> EngineError:
    """The one-line error for a key ServeFit never writes into `what`."""
    return EngineError(f"unknown key {key!r} in {what}; not a file ServeFit wrote")


def reverse(table: Mapping[str, str | None], field: str) -> Callable[[Any, str], str]:
    """Map an engine spelling back to ours (the first key of `table` that renders to it)."""
    back: dict[str, str] = {}
    for ours, theirs in table.items():
        if theirs is not None:
            back.setdefault(theirs, ours)

    def find(value: Any, what: str) -> str:
        if not isinstance(value, str) or value not in back:
            raise EngineError(f"{field}: {value!r} in {what} is not a value ServeFit writes")
        return back[value]

    return find


def build_config(fields: dict[str, Any], what: str) -> EngineConfig:
    """EngineConfig from parsed fields.

    Raises:
        EngineError: one line naming the first field pydantic refuses.
    """
    try:
        return EngineConfig.model_validate(fields)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(part) for part in err["loc"][:2]) or "config"
        raise EngineError(f"{what}: {where}: {err['msg']}") from None


def same_as_rendered(got: Mapping[str, Any], rendered: Mapping[str, Any], what: str) -> None:
    """Refuse a file whose keys or values differ from what `config_file` writes for the config
    read from it (so a file that is not ours is never half-read).

    Raises:
        EngineError: naming the first key that differs.
    """
    for key in [*got, *rendered]:
        if key not in rendered:
            raise EngineError(f"key {key!r} in {what} is not one ServeFit writes for its settings")
        if key not in got or got[key] != rendered[key] or type(got[key]) is not type(
            rendered[key]
        ):
            raise EngineError(
                f"key {key!r} in {what} is {got.get(key)!r}; ServeFit writes "
                f"{rendered[key]!r} for the settings read"
            )


def same_argv(argv: Sequence[str], expected: Sequence[str], what: str) -> None:
    """Refuse a launch command that differs from the one rendered for the config read.

    Raises:
        EngineError: naming the first argument that differs.
    """
    for index, (got, want) in enumerate(zip(argv, expected, strict=False)):
        if got != want:
            raise EngineError(f"{what} argument {index} is {got!r}; expected {want!r}")
    if len(argv) != len(expected):
        raise EngineError(f"{what} has {len(argv)} arguments; expected {len(expected)}")
