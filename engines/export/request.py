"""What `export` packages: the ExportRequest (the chosen config plus optional context for the
report) and the checks of its free text, which ends up in shell scripts, YAML and Markdown.
Reading it from `rec.json` is `engines.export.loading`.
"""

from __future__ import annotations

import math
import re
from typing import Self

from pydantic import Field, field_validator, model_validator

from core.capacity import Capacity
from core.figures import LATENCIES, QUANTILES, RATES, ServingFigures
from core.records import Record
from engines.config import EngineConfig
from engines.containers import system_path_reason
from engines.facts import HardwareFacts, ModelFacts

_VOLUME_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def _one_line(value: str, what: str) -> str:
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise ValueError(f"{what} must be one line without control characters")
    return value


class ExportRequest(Record):
    """What `export` packages: the chosen config plus optional context for the report.

    `rec.json` is this object, a bare EngineConfig (then every other field is unset), or a
    saved Recommendation (`engines.export.loading`). Capability checks run only when both
    `hardware` and `model_facts` are given. The figures are kept in seconds; REPORT.md states
    them in ms.
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
    predicted: ServingFigures | None = Field(
        default=None, description="The config's predicted serving figures (seconds; their error "
        "band in `band`, their intervals in `intervals`).")
    kv_headroom_fraction: float | None = Field(
        default=None, description="Predicted share of the KV pool still free at the busiest "
        "moment.")
    usd_per_mtok_today: float | None = Field(
        default=None, ge=0, description="Predicted USD per million output tokens at today's "
        "load.")
    calibration_cell: str | None = Field(
        default=None, max_length=200, description="The predictions' calibration cell, "
        "calibrated or not (with `predicted.band` None: no published measurement covers it).")
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

    @model_validator(mode="after")
    def _finite_figures(self) -> Self:
        p = self.predicted
        figures = [] if p is None else [
            *(getattr(getattr(p, name), q) for name in LATENCIES for q in QUANTILES),
            *(getattr(p, name) for name in RATES)]
        figures += [self.kv_headroom_fraction, self.usd_per_mtok_today]
        if any(v is not None and not math.isfinite(v) for v in figures):
            raise ValueError("predicted figures must be finite")
        return self

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
