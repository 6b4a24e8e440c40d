"""What a workload is asked for: `WorkloadSpec`, one record for every kind, and which of its
fields each kind needs (checked when the spec is made). Turning it into a schedule of requests
is `workloads`'s.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from core.records import Record

WorkloadKind = Literal["trace", "poisson", "gamma", "concurrency", "burst", "soak", "boundary"]


class WorkloadSpec(Record):
    """A workload, for every kind; which fields a kind needs is checked by its builder."""

    kind: WorkloadKind
    rate_rps: float | None = Field(default=None,
                                   gt=0, description="Mean arrival rate (poisson, gamma…).")
    gamma_cv: float | None = Field(default=None,
                                   gt=0, description="Gamma inter-arrival CV (1 = Poisson).")
    concurrency: int | None = Field(default=None,
                                    ge=1, description="Requests in flight (closed loop).")
    duration_s: float | None = Field(default=None,
                                     gt=0, description="Run length; trace: window length.")
    num_requests: int | None = Field(default=None,
                                     ge=1, description="Request count; trace: window cap.")
    prompt_tokens: int | None = Field(default=None,
                                      ge=1, description="Prompt length (trace: override).")
    output_tokens: int | None = Field(default=None,
                                      ge=1, description="Output length (trace: override).")
    max_prompt_tokens: int | None = Field(default=None,
                                          ge=1, description="Trace: cap on prompt lengths.")
    max_output_tokens: int | None = Field(default=None,
                                          ge=1, description="Trace: cap on output lengths.")
    trace_path: str | None = Field(default=None, description="Trace file to ingest and replay.")
    workspace: str | None = Field(default=None,
                                  description="Workspace whose `requests` table to replay.")
    time_scale: float = Field(default=1.0,
                              gt=0, description="Multiplies trace gaps (0.5 = twice as fast).")
    start_s: float = Field(default=0.0, ge=0, description="Trace: window start, in trace seconds.")
    base_rate_rps: float | None = Field(default=None, gt=0, description="Burst: steady rate.")
    peak_rate_rps: float | None = Field(default=None,
                                        gt=0, description="Burst: rate during the burst.")
    steady_s: float | None = Field(default=None,
                                   gt=0, description="Burst: steady time before and after.")
    burst_s: float | None = Field(default=None, gt=0, description="Burst: length of the step up.")
    window_s: float | None = Field(default=None,
                                   gt=0, description="Soak: length of each drift phase.")
    step_factor: float | None = Field(default=None, gt=1, description="Boundary: load "
                                      "multiplier from one step to the next (default 1.5).")
    max_steps: int | None = Field(default=None, ge=1, description="Boundary: most steps run "
                                  "(default 8).")
    seed: int = 0

    @model_validator(mode="after")
    def _check(self) -> WorkloadSpec:
        missing = [f for f in _REQUIRED[self.kind] if getattr(self, f) is None]
        if missing:
            raise ValueError(f"workload {self.kind!r} needs {', '.join(missing)}")
        if self.kind in ("poisson", "gamma", "concurrency") and (
            self.duration_s is None and self.num_requests is None
        ):
            raise ValueError(f"workload {self.kind!r} needs duration_s or num_requests")
        if self.kind == "soak" and (self.rate_rps is None) == (self.concurrency is None):
            raise ValueError("workload 'soak' needs exactly one of rate_rps or concurrency")
        if self.kind == "trace" and self.trace_path is None and self.workspace is None:
            raise ValueError("workload 'trace' needs trace_path or workspace")
        if self.kind == "boundary":
            _check_boundary(self)
        return self


_SYNTH = ("prompt_tokens", "output_tokens")
_REQUIRED: dict[str, tuple[str, ...]] = {
    "trace": (),
    "poisson": ("rate_rps", *_SYNTH),
    "gamma": ("rate_rps", "gamma_cv", *_SYNTH),
    "concurrency": ("concurrency", *_SYNTH),
    "burst": ("base_rate_rps", "peak_rate_rps", "steady_s", "burst_s", *_SYNTH),
    "soak": ("duration_s", "window_s", *_SYNTH),
    "boundary": (),
}
DEFAULT_STEP_FACTOR = 1.5
DEFAULT_MAX_STEPS = 8


def _check_boundary(spec: WorkloadSpec) -> None:
    """A boundary replays a trace, or Poisson at rate_rps with fixed lengths; each step is
    bounded by num_requests or duration_s."""
    replay = spec.trace_path is not None or spec.workspace is not None
    if not replay and (spec.rate_rps is None or spec.prompt_tokens is None
                       or spec.output_tokens is None):
        raise ValueError("workload 'boundary' needs trace_path or workspace, or rate_rps, "
                         "prompt_tokens and output_tokens (Poisson)")
    if spec.num_requests is None and spec.duration_s is None:
        raise ValueError("workload 'boundary' needs num_requests or duration_s (each step's "
                         "bound)")
