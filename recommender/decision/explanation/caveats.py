"""What to watch: warnings about the pick, the prediction's footing, and what was not
simulated.

Owns the list (`warn`, an unservable window and unattainable SLOs first, from `shortfall`)
and the caveats themselves: OOM risk (`memory.plan_memory`) and a full KV pool, the
calibrated range (data/calibration: which models, GPUs, engines and lengths the fit saw, its
held-out error, and a pick whose calibration cell no published measurement covers),
quality-affecting weight formats, the workload's own footing, long context that
disaggregation would serve, and the features not simulated.
"""

from __future__ import annotations

import functools
import json

from recommender.calibration.bands_file import BANDS_FILE, band_of_prediction, load_bands
from recommender.calibration.coverage import Coverage
from recommender.decision.explanation.context import Context
from recommender.decision.explanation.shortfall import slo_warning, unservable_warning
from recommender.decision.recommendation import RecWarning
from recommender.model.memory import plan_memory
from recommender.model.speculative import ACCEPTANCE_DEFAULTS

HELD_OUT_ERROR_WARN_PCT = 25.0
LONG_CONTEXT_TOKENS = 32_000  # DESIGN §4.6: disaggregation pays off above ~32K at volume
QUALITY_FORMATS = {"awq": "4-bit AWQ", "gptq": "4-bit GPTQ", "int4": "4-bit",
                   "nvfp4": "NVFP4", "mxfp4": "MXFP4"}


def warn(ctx: Context) -> list[RecWarning]:
    """Caveats about the pick, the prediction's footing, and what was not simulated; an
    unservable window first."""
    out: list[RecWarning] = []
    for make in (unservable_warning, slo_warning, _oom_warnings, _band_warning,
                 _calibration_warnings, _quality_warning, _workload_warnings,
                 _disaggregation_warning, _feature_warnings):
        out += make(ctx)
    return out


def _oom_warnings(ctx: Context) -> list[RecWarning]:
    plan = plan_memory(ctx.best.config, ctx.target.gpu, ctx.target.model)
    out = [RecWarning(code=f"oom_{r.code}", text=r.reason) for r in plan.risks]
    if ctx.best.predicted.kv_headroom_fraction < 0.05:
        out.append(RecWarning(code="kv_full", text="the KV cache fills at the busiest moment "
                              "of the window: admission stalls until it drains (burst risk)"))
    if ctx.best.predicted.preemptions:
        out.append(RecWarning(code="preemptions", text=f"{ctx.best.predicted.preemptions} "
                              "recompute preemptions predicted: the KV pool is tight"))
    return out


@functools.cache
def _coverage() -> tuple[Coverage, dict] | None:
    """What the fit saw (fit.json's `provenance.coverage`, written by `calibrate`) and its
    held-out error per engine; None when the file holds no coverage."""
    from recommender.model.params import FIT_FILE

    try:
        fit = json.loads(FIT_FILE.read_text(encoding="utf-8"))
        return Coverage.model_validate(fit["provenance"]["coverage"]), fit.get("errors", {})
    except (OSError, ValueError, KeyError, TypeError, RecursionError):  # pydantic's is a ValueError
        return None


def _band_warning(ctx: Context) -> list[RecWarning]:
    """Plainly, when no published measurement covers the pick's calibration cell (or the
    bands file is missing, or has no errors for the parameters' step-time provider): its figures
    then have no error band."""
    cell = ctx.best.predicted.calibration_cell
    if ctx.best.predicted.band is not None or cell is None:
        return []
    if not BANDS_FILE.exists() or load_bands().for_provider(ctx.target.params.step_time) is None:
        return [RecWarning(code="no_error_band", text=band_of_prediction(
            cell, kind=ctx.target.params.step_time)[1] or "")]
    return [RecWarning(code="uncalibrated_cell", text=(
        f"no published measurement covers {cell}: the figures are the model's alone "
        "(no error band; how far they can be trusted is unknown)"))]


def _calibration_warnings(ctx: Context) -> list[RecWarning]:
    known = _coverage()
    if known is None:
        return [RecWarning(code="calibration_unknown",
                           text="calibration coverage could not be read (data/calibration)")]
    cov, errors = known
    out = []
    t, engine = ctx.target, ctx.best.config.engine
    if t.model.name not in cov.models:
        out.append(f"model {t.model.name} is not in the calibration data: predictions come "
                   "from shapes and other models' efficiencies")
    if t.gpu.name not in cov.gpus:
        out.append(f"GPU {t.gpu.name} is not in the calibration data")
    lo, hi = cov.isl_min_tokens, cov.isl_max_tokens
    p99 = ctx.profile.input_tokens.p99
    if p99 > hi or ctx.profile.input_tokens.p50 < lo:
        out.append(f"input lengths (p50 {ctx.profile.input_tokens.p50:,.0f}, p99 {p99:,.0f}) "
                   f"reach outside the calibrated {lo:,}-{hi:,} tokens")
    err = errors.get(f"test/{engine}", {}).get("median_ape_pct")
    if err is not None and err > HELD_OUT_ERROR_WARN_PCT:
        out.append(f"{engine}'s calibration misses held-out measurements by {err:.0f}% "
                   "(median): treat its figures as rough")
    return [RecWarning(code="outside_calibration", text=t) for t in out]


def _quality_warning(ctx: Context) -> list[RecWarning]:
    quant = ctx.best.config.weight_quantization
    out = []
    if quant in QUALITY_FORMATS:
        out.append(RecWarning(code="quality", text=f"{QUALITY_FORMATS[quant]} weights can "
                              "lower output quality: evaluate accuracy on your task first, and "
                              "serve a pre-quantized checkpoint"))
    elif quant == "fp8":
        out.append(RecWarning(code="quality", text="fp8 weights: usually within noise of bf16, "
                              "but check accuracy on your task"))
    return out


def _workload_warnings(ctx: Context) -> list[RecWarning]:
    out = []
    if ctx.synthetic:
        out.append(RecWarning(code="synthetic_workload", text="simulated a synthetic trace "
                              "with the profile's shape: pass the trace itself for its own "
                              "requests"))
    if ctx.profile.format.tokens_estimated:
        out.append(RecWarning(code="tokens_estimated", text="token counts were estimated from "
                              "text: lengths (and so latencies) are approximate"))
    if ctx.workload.too_long:
        out.append(RecWarning(code="longer_than_context", text=f"{ctx.workload.too_long:,} "
                              "requests exceed the model's context and were not simulated: "
                              "truncate them or pick a longer-context model"))
    if ctx.workload.dropped:
        out.append(RecWarning(code="rows_dropped", text=f"{ctx.workload.dropped:,} failed or "
                              "zero-token rows were not simulated"))
    return out


def _disaggregation_warning(ctx: Context) -> list[RecWarning]:
    p50 = ctx.profile.input_tokens.p50
    if p50 <= LONG_CONTEXT_TOKENS:
        return []
    return [RecWarning(code="disaggregation", text=(
        f"input_tokens.p50 {p50:,.0f} > {LONG_CONTEXT_TOKENS:,}: prefill/decode "
        "disaggregation usually pays off for long context at volume (it costs KV transfer); "
        "the simulator does not model it and export cannot package it yet, so it was not "
        "scored: benchmark it live"))]


def _feature_warnings(ctx: Context) -> list[RecWarning]:
    out = []
    spec = ctx.best.config.speculative
    if spec is not None and spec.method not in ctx.goals.measured_acceptance:
        d = ACCEPTANCE_DEFAULTS[spec.method]
        out.append(RecWarning(code="speculative_acceptance_assumed", text=(
            f"the pick's speculative decoding ({spec.method}) is predicted at the method's "
            f"published acceptance {d.acceptance:.2f} per token (band {d.low:.2f}-"
            f"{d.high:.2f}), not measured on this trace: its gain depends on the workload, "
            "benchmark it live")))
    if not ctx.result.speculative_modelled:
        out.append(RecWarning(code="speculative_not_modelled", text="speculative decoding was "
                              "not considered: the simulator does not model it yet"))
    if not ctx.workload.has_hashes:
        out.append(RecWarning(code="no_prefix_info", text="the trace has no prompt block "
                              "hashes: prefix caching's effect was not simulated (the engine "
                              "default is kept)"))
    return out
