"""Deployment bundle for one EngineConfig, generic over the registered plug-ins.

Renders the engine's config file, local and docker launch scripts, docker-compose and
Kubernetes manifests, a benchmark command and a short report, then writes them atomically.
It only calls the `EnginePlugin` protocol, never branches on an engine's name, and launches
nothing.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path, PurePath
from typing import Self

from pydantic import Field, ValidationError, field_validator, model_validator

from core.capacity import LIMIT_TEXT, Capacity, boundary_text, day_text, growth_table
from core.figures import Band
from core.records import Record
from engines.base import EnginePlugin
from engines.common import docker_argv, parallel_layout, system_path_reason
from engines.config import EngineConfig
from engines.errors import ExportError
from engines.facts import HardwareFacts, ModelFacts
from engines.manifests import (
    BUNDLE_DIR,
    HF_CACHE,
    KUBERNETES_FILE,
    compose_yaml,
    kubernetes_yaml,
    parse_docker_run,
    substitute,
)
from engines.registry import get_engine

LAUNCH_SCRIPT = "launch.sh"
DOCKER_SCRIPT = "launch-docker.sh"
COMPOSE_FILE = "docker-compose.yaml"
BENCH_SCRIPT = "bench.sh"
REPORT_FILE = "REPORT.md"
FIXED_FILES = (LAUNCH_SCRIPT, DOCKER_SCRIPT, COMPOSE_FILE, KUBERNETES_FILE, BENCH_SCRIPT,
               REPORT_FILE)
# The shell scripts' resolution of the path placeholders (see engines.manifests).
_SHELL_PATHS = {BUNDLE_DIR: '"$HERE"', HF_CACHE: '"${HF_HOME:-$HOME/.cache/huggingface}"'}
_HERE = 'HERE="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)"'
_FILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_VOLUME_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_HTTP_PATH = re.compile(r"^/[A-Za-z0-9._~/-]*$")
_FIGURE_NAME = re.compile(r"^[A-Za-z0-9_.]+$")


def _one_line(value: str, what: str) -> str:
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise ValueError(f"{what} must be one line without control characters")
    return value


class ExportRequest(Record):
    """What `export` packages: the chosen config plus optional context for the report.

    `rec.json` is either this object or a bare EngineConfig (then every other field is unset).
    Capability checks run only when both `hardware` and `model_facts` are given.
    """

    config: EngineConfig = Field(description="The serving configuration to package.")
    gpu: str | None = Field(default=None, max_length=100,
                            description="GPU name for the report, e.g. 'H100-SXM'.")
    gpu_count: int | None = Field(default=None, ge=1,
                                  description="GPUs on the deployment target.")
    hardware: HardwareFacts | None = Field(
        default=None, description="GPU facts for the engine's capability check.")
    model_facts: ModelFacts | None = Field(
        default=None, description="Model facts for the engine's capability check.")
    profile: str | None = Field(
        default=None, max_length=4096,
        description="Trace (or profile.json) the benchmark replays; written into bench.sh.")
    predicted: dict[str, float] | None = Field(
        default=None, description="Predicted figures by name (units in the name, e.g. ttft_ms).")
    predicted_range: dict[str, tuple[float, float]] = Field(
        default_factory=dict, description="The interval (low, high) of predicted figures by "
        "the same names: p10-p90 of the errors seen on publisher families the fit never saw.")
    band: Band | None = Field(
        default=None, description="The predictions' error band: their calibration cell's "
        "cross-validated error and coverage (held-out rows behind it).")
    calibration_cell: str | None = Field(
        default=None, max_length=200, description="The predictions' calibration cell, "
        "calibrated or not (with `band` None: no published measurement covers it).")
    capacity: Capacity | None = Field(
        default=None, description="How far the config holds (the SLO boundary, growth table "
        "and load curve), for the report.")
    reasons: list[str] = Field(default_factory=list, description="Why this config, one line each.")
    warnings: list[str] = Field(default_factory=list, description="Caveats, one line each.")
    not_deployable: str | None = Field(
        default=None, description="Why this config cannot serve the user's load as it is "
        "(requests it can never serve, a load it falls behind) and what would: REPORT.md "
        "leads with it.")
    engine_version: str | None = Field(
        default=None, description="Engine release of the docker image (None = plug-in's pin).")
    host_port: int | None = Field(default=None, ge=1, le=65535,
                                  description="Published host port (None = config.port).")
    model_cache_dir: str | None = Field(
        default=None,
        description="HF cache for containers: an absolute host path or a docker volume name; "
        "None = $HF_HOME or ~/.cache/huggingface where the bundle runs.")

    @field_validator("gpu", "profile", "engine_version", "calibration_cell", "not_deployable")
    @classmethod
    def _plain_text(cls, value: str | None) -> str | None:
        return None if value is None else _one_line(value, "value")

    @field_validator("reasons", "warnings")
    @classmethod
    def _lines(cls, value: list[str]) -> list[str]:
        return [_one_line(item, "each reason/warning") for item in value]

    @field_validator("predicted")
    @classmethod
    def _figures(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        for name, number in (value or {}).items():
            if not _FIGURE_NAME.fullmatch(name):
                raise ValueError(f"predicted figure name {name!r} must match [A-Za-z0-9_.]+")
            if not math.isfinite(number):
                raise ValueError(f"predicted[{name!r}] must be finite")
        return value

    @field_validator("model_cache_dir")
    @classmethod
    def _cache_dir(cls, value: str | None) -> str | None:
        if value is None:
            return None
        _one_line(value, "model_cache_dir")
        is_path = value.startswith("/") and ":" not in value and "," not in value
        if not (is_path or _VOLUME_NAME.fullmatch(value)):
            raise ValueError("model_cache_dir must be an absolute path (no ':' or ',') "
                             "or a docker volume name")
        if is_path and (why := system_path_reason(value)):
            raise ValueError(why)
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if (self.hardware is None) != (self.model_facts is None):
            raise ValueError("give both hardware and model_facts (for the capability check), "
                             "or neither")
        if self.config.disaggregation is not None:
            raise ValueError("export of prefill/decode disaggregated configs is not supported yet")
        count = self.gpu_count
        if self.hardware is not None:
            if count is not None and count != self.hardware.gpu_count:
                raise ValueError(f"gpu_count={count} but hardware.gpu_count="
                                 f"{self.hardware.gpu_count}")
            count = self.hardware.gpu_count
        needed = self.config.gpus_per_instance
        if count is not None and needed > count:
            raise ValueError(f"tp×pp×dp = {needed} GPUs, but gpu_count is {count}")
        return self


def load_request(path: str | os.PathLike[str]) -> ExportRequest:
    """Read `rec.json`: an ExportRequest object, a bare EngineConfig, or a saved
    Recommendation (its "export" key holds the ExportRequest).

    Raises:
        ExportError: unreadable file, bad JSON, or an invalid field (path and field named).
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ExportError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ExportError(f"{path}: not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
                          ) from None
    if not isinstance(data, dict):
        raise ExportError(f"{path}: expected a JSON object (EngineConfig or {{\"config\": …}})")
    # A saved Recommendation carries its ExportRequest under "export" (error paths say so).
    prefix = "export." if "export" in data else ""
    data = data["export"] if prefix else data
    if not isinstance(data, dict):
        raise ExportError(f"{path}: export: expected a JSON object")
    try:
        return ExportRequest.model_validate(data if "config" in data else {"config": data})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "(top level)"
        raise ExportError(f"{path}: {prefix}{where}: {first['msg']}") from None


def export_file(
    request_path: str | os.PathLike[str], out_dir: str | os.PathLike[str]
) -> list[Path]:
    """`load_request` then `export_bundle`; returns the paths written (see there)."""
    return export_bundle(load_request(request_path), out_dir)


def export_bundle(request: ExportRequest, out_dir: str | os.PathLike[str], *,
                  replace: bool = False) -> list[Path]:
    """Render every bundle file, then write them into `out_dir` all or nothing.

    Files of `out_dir` that are not part of the bundle are left alone. Bundle files already
    there are refused (nothing is written) unless `replace`; then they are replaced, and
    restored if installing the new ones fails.

    Returns:
        The written paths, the engine's config file first.

    Raises:
        UnknownEngineError: no plug-in registered for `request.config.engine`.
        CapabilityError: the plug-in's check refused the config on the given hardware/model.
        ExportError: an empty `out_dir`, a bundle file already there (without `replace`), a
            plug-in output export cannot package, or a file cannot be written.
    """
    if not str(out_dir).strip():
        raise ExportError("the output folder is empty: name a folder for the bundle")
    files = render_bundle(request)
    out = Path(out_dir)
    if not replace:
        _refuse_existing(out, list(files))
    return _install(files, out)


def _refuse_existing(out: Path, names: list[str]) -> None:
    present = [name for name in names if (out / name).exists() or (out / name).is_symlink()]
    if present:
        more = f" and {len(present) - 1} more bundle files" if len(present) > 1 else ""
        raise ExportError(f"{out / present[0]}{more} already exist; choose an empty folder, "
                          "or pass --force to replace them")


def served_config(request: ExportRequest) -> EngineConfig:
    """The config the bundle launches: `request.config` as its plug-in deploys it, with the
    model's pre-quantized checkpoint where the engine cannot quantize on load.

    Raises:
        CapabilityError: the engine cannot deploy the weight quantization asked for.
    """
    config = request.config
    return get_engine(config.engine).served_config(config, request.model_facts)


def render_bundle(request: ExportRequest) -> dict[str, str]:
    """File name → text of every bundle file (nothing written)."""
    plugin = get_engine(request.config.engine)
    if request.hardware is not None and request.model_facts is not None:
        plugin.check(request.config, request.hardware, request.model_facts)
    config = served_config(request)
    config_name, config_text = plugin.config_file(config)
    if not _FILE_NAME.fullmatch(config_name) or config_name in FIXED_FILES:
        raise ExportError(f"the {config.engine} plug-in's config file name {config_name!r} "
                          "cannot be used in the bundle")
    for arg in [*plugin.server_argv(config), request.model_cache_dir or ""]:
        if BUNDLE_DIR in arg or HF_CACHE in arg:
            raise ExportError(f"the request contains reserved text ({BUNDLE_DIR}, {HF_CACHE})")
    host_port = request.host_port or config.port
    image = plugin.docker_image(request.engine_version)
    gpus = config.gpus_per_instance
    run_argv = docker_command(request, bundle_dir=BUNDLE_DIR, hf_cache_dir=HF_CACHE)
    container = parse_docker_run(run_argv, image, config.engine)
    probe = plugin.readiness(config)
    if not _HTTP_PATH.fullmatch(probe.health_path):
        raise ExportError(f"readiness path {probe.health_path!r} is not a plain URL path")
    local_script = _local_script(plugin, config, config_name)
    files = {
        config_name: config_text,
        LAUNCH_SCRIPT: local_script,
        DOCKER_SCRIPT: _script(f"start {config.engine} in its official image.", _HERE,
                               "exec " + _shell_line(run_argv)),
        COMPOSE_FILE: compose_yaml(container, config.engine, probe.health_path, gpus),
        KUBERNETES_FILE: kubernetes_yaml(container, config.engine, probe.health_path, gpus,
                                     {config_name: config_text}),
        BENCH_SCRIPT: _bench_script(request.profile, host_port),
    }
    files[REPORT_FILE] = _report(request, config, plugin, files, local_script=local_script,
                                  image=image, host_port=host_port)
    return files


# -- scripts -----------------------------------------------------------------------------------


def _script(purpose: str, *lines: str) -> str:
    head = ["#!/usr/bin/env bash", f"# Generated by ServeFit: {purpose}", "set -euo pipefail"]
    return "\n".join([*head, *lines]) + "\n"


def docker_command(request: ExportRequest, *, bundle_dir: str, hf_cache_dir: str) -> list[str]:
    """The plug-in's `docker run` for the request, with the bundle at `bundle_dir`.

    `hf_cache_dir` is used when the request names no `model_cache_dir`.
    """
    config = served_config(request)
    plugin = get_engine(config.engine)
    config_name = plugin.config_file(config)[0]
    return docker_argv(
        plugin, config, image=plugin.docker_image(request.engine_version),
        host_port=request.host_port or config.port,
        model_cache_dir=request.model_cache_dir or hf_cache_dir,
        gpus=config.gpus_per_instance, config_file_path=f"{bundle_dir}/{config_name}")


def _shell_line(argv: Sequence[str]) -> str:
    # Every element is quoted; only the placeholders, resolved when the script runs, are not.
    return " ".join(substitute(arg, _SHELL_PATHS, shlex.quote) for arg in argv)


def _local_script(plugin: EnginePlugin, config: EngineConfig, config_name: str) -> str:
    argv = plugin.serve_argv_with_config_file(config, f"{BUNDLE_DIR}/{config_name}")
    return _script(f"start {config.engine} locally with the settings in {config_name}.",
                   _HERE, "exec " + _shell_line(argv))


def _bench_script(profile: str | None, host_port: int) -> str:
    # The trace by its name next to the script, not the path it had where the bundle was
    # made (an upload folder or a checkout that the GPU host does not have).
    trace = ([_HERE, "# the profiled trace, by name: copy it next to this script or pass "
              "its path", "DEFAULT_TRACE=\"$HERE\"/" + shlex.quote(PurePath(profile).name),
              'TRACE="${1:-$DEFAULT_TRACE}"']
             if profile else ['TRACE="${1:?usage: bench.sh TRACE_FILE (the trace to replay)}"'])
    return _script(
        "replay the profiled trace against the served endpoint "
        "(needs `python -m app bench`: a ServeFit checkout or image on the client machine).",
        *trace,
        "DEFAULT_ENDPOINT=" + shlex.quote(f"http://localhost:{host_port}"),
        'ENDPOINT="${ENDPOINT:-$DEFAULT_ENDPOINT}"',
        'exec python -m app bench --endpoint "$ENDPOINT" --workload trace --trace "$TRACE" '
        '--json "${@:2}"',
    )


# -- report ------------------------------------------------------------------------------------


def _code(text: str) -> str:
    """`text` as one Markdown code span, whatever backticks it holds."""
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _block(text: str) -> str:
    fence = "`" * max(3, max((len(r) for r in re.findall(r"`+", text)), default=0) + 1)
    return f"{fence}sh\n{text}\n{fence}"


def _knobs(config: EngineConfig) -> list[str]:
    data = config.model_dump(mode="json", exclude_defaults=True,
                             exclude={"engine", "model", "host", "port"})
    return [f"{_code(f'{k}={json.dumps(v) if isinstance(v, dict) else v}')}"
            for k, v in data.items()]


def _parallelism(config: EngineConfig) -> str:
    """`tp=…, pp=… → N GPU(s) per replica`, with dp/ep and the layout when experts split."""
    text = f"tp={config.tp}, pp={config.pp}"
    if config.ep > 1:
        text += f", dp={config.dp}, ep={config.ep} ({parallel_layout(config)})"
    return f"{text} → {config.gpus_per_instance} GPU(s) per replica"


def _served_model(request: ExportRequest, config: EngineConfig, plugin: EnginePlugin) -> str:
    """The model line's text: the checkpoint served, and when it replaces the one asked for,
    which one it replaces and the name clients request."""
    text = _code(config.model)
    if config.model != request.config.model:
        text += (f" (the pre-quantized {config.weight_quantization} checkpoint of "
                 f"{_code(request.config.model)}: {config.engine} does not quantize it on load;"
                 f" clients request {_code(plugin.readiness(config).served_model_name)})")
    return text


def _report(request: ExportRequest, config: EngineConfig, plugin: EnginePlugin,
            files: dict[str, str], *, local_script: str, image: str, host_port: int) -> str:
    """REPORT.md of `request`, whose bundle launches `config` (see `served_config`)."""
    hardware = request.hardware
    gpu = request.gpu or (hardware.gpu_name if hardware else None)
    count = request.gpu_count or (hardware.gpu_count if hardware else None)
    target = (gpu or "GPU not given") + (f" × {count}" if count else "")
    lines = [
        f"# ServeFit export: {config.engine} serving {_code(config.model)}", "",
        *([f"> **Not deployable as it is.** {request.not_deployable}", ""]
          if request.not_deployable else []),
        f"- Engine: {config.engine} (image {_code(image)})",
        f"- Model: {_served_model(request, config, plugin)}",
        f"- GPU: {target}; {_parallelism(config)}",
        f"- Key knobs: {', '.join(_knobs(config)) or 'engine defaults'}",
        f"- Endpoint: http://localhost:{host_port} (readiness: GET "
        f"{plugin.readiness(config).health_path})",
        "", "## Launch", "",
        f"Locally (`./{LAUNCH_SCRIPT}`) runs:", "",
        _block(local_script.rstrip("\n").splitlines()[-1].removeprefix("exec ")), "",
        f"In docker: `./{DOCKER_SCRIPT}`, `docker compose up -d`, or "
        f"`kubectl apply -f {KUBERNETES_FILE}`. Then `./{BENCH_SCRIPT} [TRACE]` replays the "
        "trace against it with `python -m app bench` (a ServeFit checkout or image on the "
        "client machine)" + (f"; TRACE defaults to {_code(PurePath(request.profile).name)} "
                             "next to the script" if request.profile else "") + ".",
        "", "## Capability check", "",
    ]
    if request.hardware is not None:
        lines.append(f"Passed: {config.engine} accepts this config on "
                     f"{request.hardware.gpu_count} × {request.hardware.gpu_name}.")
    else:
        lines.append("Skipped: the request gave no hardware/model facts.")
    lines += ["", "## Predicted", ""]
    if request.predicted:
        lines += [f"- {name}: {value:g}" + (
            f" ({request.predicted_range[name][0]:g}-{request.predicted_range[name][1]:g})"
            if name in request.predicted_range else "")
            for name, value in request.predicted.items()]
        lines += ["", _band_line(request)]
    else:
        lines.append("None were given in the request.")
    if request.capacity is not None:
        lines += ["", *_capacity_lines(request.capacity)]
    lines += ["", "## Reasons", ""]
    lines += [f"- {r}" for r in request.reasons] or ["None were given in the request."]
    if request.warnings:
        lines += ["", "## Warnings", "", *[f"- {w}" for w in request.warnings]]
    lines += ["", "## Files", "", *[f"- `{name}`" for name in [*files, REPORT_FILE]]]
    return "\n".join(lines) + "\n"


def _capacity_lines(capacity: Capacity) -> list[str]:
    """The SLO boundary, the growth table and the load curve (a table and a Mermaid chart)."""
    limits = [f"p95 {name} {value * 1e3:,.4g} ms" for name, value in
              (("TTFT", capacity.slo_ttft_s), ("TPOT", capacity.slo_tpot_s)) if value is not None]
    lines = ["## How far it holds", "",
             f"SLO boundary ({' and '.join(limits) or 'no limit'}): "
             f"{boundary_text(capacity.pick)}. Today's load: {capacity.today_rps:,.3g} req/s "
             f"(trace mean {capacity.mean_rps:,.3g} req/s"
             + (f", peak {capacity.peak_rps:,.3g} req/s over {capacity.peak_window_s:g} s"
                if capacity.peak_rps is not None and capacity.peak_window_s else "") + ").",
             "", f"Found with {capacity.method}.", ""]
    lines += [f"- {b.label}: {boundary_text(b)}" for b in capacity.alternatives]
    rows = growth_table(capacity)
    if rows:
        heads = list(rows[0])
        lines += ["", "| " + " | ".join(heads) + " |", "|" + "---|" * len(heads),
                  *("| " + " | ".join(r[h] for h in heads) + " |" for r in rows)]
    if capacity.day is not None:
        lines += ["", f"Over the trace's span: {day_text(capacity.day)}; sized from "
                  f"{capacity.day.method}.", "",
                  "| window start (s) | req/s | replicas | GPUs | headroom |",
                  "|---|---|---|---|---|",
                  *(f"| {w.t_s:,.0f} | {w.rate_rps:,.3g} | {w.replicas} | {w.gpus} | "
                    + ("n/a" if w.headroom is None else f"{w.headroom:,.2g}×") + " |"
                    for w in capacity.day.windows)]
    lines += ["", "Predicted p95 latency against load (the boundary's search):", "",
              "| req/s | p95 TTFT ms | p95 TPOT ms | holds |", "|---|---|---|---|"]
    for p in capacity.curve.points:
        lines.append(f"| {p.rate_rps:,.3g} | {_ms(p.ttft_p95_s)} | {_ms(p.tpot_p95_s)} | "
                     f"{'yes' if p.holds else 'no'} |")
    return [*lines, "", *_mermaid(capacity)]


def _ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds * 1e3:,.4g}"


def _mermaid(capacity: Capacity) -> list[str]:
    """A Mermaid xychart of p95 TTFT against load with the SLO line (rendered by GitHub,
    GitLab and most Markdown viewers; plain text elsewhere)."""
    points = [p for p in capacity.curve.points if p.ttft_p95_s is not None]
    if len(points) < 2:
        return []
    xs = ", ".join(f'"{p.rate_rps:.3g}"' for p in points)
    ttft = ", ".join(f"{min(p.ttft_p95_s or 0.0, 1e6) * 1e3:.4g}" for p in points)
    lines = ["```mermaid", "xychart-beta",
             '    title "Predicted p95 TTFT (ms) against load (req/s)"',
             f"    x-axis [{xs}]", f"    line [{ttft}]"]
    if capacity.slo_ttft_s is not None:
        slo = ", ".join(f"{capacity.slo_ttft_s * 1e3:.4g}" for _ in points)
        lines.append(f"    line [{slo}]")
    return [*lines, "```", "", "Lines: the predicted p95 TTFT"
            + (", the p95 TTFT SLO" if capacity.slo_ttft_s is not None else "")
            + f". Binding limit past the boundary: {LIMIT_TEXT[capacity.pick.binding]}."]


def _band_line(request: ExportRequest) -> str:
    """How far the predicted figures can be trusted: their band, cell and coverage, or
    plainly that no published measurement covers them."""
    band = request.band
    if band is not None:
        return (f"Error band: ±{band.median_ape * 100:.0f} % (median error on sources left "
                f"out of the fit) for cell {_code(band.cell)}, covered by {band.rows} "
                "held-out measurements.")
    if request.calibration_cell is not None:
        return (f"Uncalibrated: no published measurement covers cell "
                f"{_code(request.calibration_cell)}; the figures are the model's alone "
                "(no error band).")
    return "Uncalibrated: no error band was given; how far these figures can be trusted is unknown."


# -- writing -----------------------------------------------------------------------------------


def _write_file(path: Path, text: str) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    if path.suffix == ".sh":
        path.chmod(0o755)


def _install(files: dict[str, str], out: Path) -> list[Path]:
    """Write `files` into a staging folder next to `out`, then move them in, all or nothing."""
    if out.exists() and not out.is_dir():
        raise ExportError(f"{out}: exists and is not a folder")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.export-"))
    except OSError as exc:
        raise ExportError(f"{out}: cannot write: {exc.strerror or exc}") from None
    try:
        staging.chmod(0o755)  # mkdtemp makes it private; the bundle is an ordinary folder
        for name, text in files.items():
            _write_file(staging / name, text)
        if not out.exists():
            os.rename(staging, out)  # the whole bundle appears at once
        else:
            _move_in(staging, out, list(files))
    except OSError as exc:
        raise ExportError(f"{out}: cannot write: {exc.strerror or exc}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return [out / name for name in files]


def _move_in(staging: Path, out: Path, names: list[str]) -> None:
    """Replace bundle files in an existing folder; restore the old ones if a move fails."""
    backup = staging / ".previous"
    backup.mkdir()
    saved: list[str] = []
    placed: list[str] = []
    try:
        for name in names:
            target = out / name
            if target.exists() or target.is_symlink():
                os.replace(target, backup / name)
                saved.append(name)
            os.replace(staging / name, target)
            placed.append(name)
    except BaseException:
        for name in placed:
            (out / name).unlink(missing_ok=True)
        for name in saved:
            os.replace(backup / name, out / name)
        raise
