"""The one record of serving figures, predicted and measured alike.

`Latency` is the distribution of one latency (seconds; `None` where there is no value, with
the count behind it). `ServingFigures` holds the four latencies, the throughputs and goodput,
and, for a prediction, its error band; the simulator's summary, the recommender's predicted
metrics, `predict`'s load prediction and a measured run's summary all extend it.
`ServingFigures.json_ms()` is the single millisecond view the CLI prints (DESIGN §2.4 names),
and `compare` is the one predicted-against-measured function.

Percentiles interpolate linearly (numpy's default, as the profile does).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any, Literal

from pydantic import Field

from core.records import Record

PERCENTILES = (50, 90, 95, 99)
Quantile = Literal["mean", "p50", "p90", "p95", "p99"]
QUANTILES: tuple[Quantile, ...] = ("mean", "p50", "p90", "p95", "p99")
LatencyName = Literal["ttft_s", "tpot_s", "itl_s", "e2e_s"]
LATENCIES: tuple[LatencyName, ...] = ("ttft_s", "tpot_s", "itl_s", "e2e_s")
RateName = Literal["output_throughput_tok_s", "total_throughput_tok_s",
                   "request_throughput_rps", "goodput_rps"]
RATES: tuple[RateName, ...] = ("output_throughput_tok_s", "total_throughput_tok_s",
                               "request_throughput_rps", "goodput_rps")


class Latency(Record):
    """Mean and percentiles of one latency, seconds (`None` without any value)."""

    count: int = Field(ge=0, description="Values the figures are computed from.")
    mean: float | None = Field(default=None, description="Mean, seconds.")
    p50: float | None = Field(default=None, description="Median, seconds.")
    p90: float | None = Field(default=None, description="90th percentile, seconds.")
    p95: float | None = Field(default=None, description="95th percentile, seconds.")
    p99: float | None = Field(default=None, description="99th percentile, seconds.")

    def ms(self) -> dict[str, float | None]:
        """{mean, p50, p90, p95, p99} in milliseconds (None stays None)."""
        return {q: None if (v := getattr(self, q)) is None else v * 1e3 for q in QUANTILES}


EMPTY = Latency(count=0)


def meets_slos(ttft_s: Iterable[float], tpot_s: Iterable[float], slo_ttft_s: float | None,
               slo_tpot_s: float | None) -> Any:
    """The one goodput rule (DESIGN: completed requests meeting every SLO), for served
    requests' TTFT and TPOT (seconds; NaN where there is none): a boolean array, True where
    the TTFT is within `slo_ttft_s` (a missing TTFT is not) and the TPOT within `slo_tpot_s`
    (a request of under two output tokens has no TPOT and meets any TPOT bound). A bound
    of None holds for every request, so with no SLO every served request counts. The
    simulator's goodput and a measured run's both count with it."""
    import numpy as np

    ttft, tpot = np.asarray(ttft_s, dtype=float), np.asarray(tpot_s, dtype=float)
    meets = np.ones(ttft.shape, dtype=bool)
    if slo_ttft_s is not None:
        meets &= ttft <= slo_ttft_s  # NaN compares False: no first token, no goodput
    if slo_tpot_s is not None:
        meets &= np.isnan(tpot) | (tpot <= slo_tpot_s)
    return meets


def latency_of(values: Iterable[float]) -> Latency:
    """The `Latency` of the finite entries of `values` (an array, a list or any iterable of
    floats); NaN and infinite entries are left out, as values that do not exist."""
    import numpy as np

    arr = np.asarray(values if hasattr(values, "__len__") else list(values), dtype=float)
    arr = arr.ravel()
    arr = arr[np.isfinite(arr)]
    if arr.size == 0:
        return EMPTY
    p50, p90, p95, p99 = (float(v) for v in np.percentile(arr, PERCENTILES))
    return Latency(count=int(arr.size), mean=float(arr.mean()), p50=p50, p90=p90, p95=p95,
                   p99=p99)


class Band(Record):
    """How far a predicted figure can be trusted: the cross-validated error of its cell
    (engine × GPU family × dense/MoE × regime), measured leaving whole sources out."""

    cell: str = Field(description="The calibration cell the prediction falls in.")
    median_ape: float = Field(ge=0, description="Median absolute relative error of the cell "
                              "on held-out sources (0.15 = 15 %).")
    rows: int = Field(ge=0, description="Held-out measurements behind `median_ape`.")


class Interval(Record):
    """Where a predicted figure's measurement is expected: the prediction × [low, high], the
    p10-p90 of measured / predicted that a publisher family never seen should expect, from
    the cross-validated errors of the figure's cell and metric measured leaving whole
    families out (the families' shifts and the scatter within them); pooled with wider cells
    (`basis`) where the cell has too few rows or families or the question is outside the
    calibrated range."""

    metric: str = Field(description="Metric group: throughput, ttft, tpot, e2e.")
    low: float = Field(gt=0, description="Lower factor on the prediction (p10 of measured / "
                       "predicted).")
    high: float = Field(gt=0, description="Upper factor on the prediction (p90).")
    basis: str = Field(description="The cell (or pooled wider cell) the errors come from.")
    rows: int = Field(ge=0, description="Held-out measurements behind it.")
    pooled: bool = Field(description="True when the errors are a wider cell's.")


# Which interval each figure takes (`Interval.metric`).
INTERVAL_METRIC = {"ttft_s": "ttft", "tpot_s": "tpot", "itl_s": "tpot", "e2e_s": "e2e",
                   "output_throughput_tok_s": "throughput", "total_throughput_tok_s": "throughput",
                   "request_throughput_rps": "throughput", "goodput_rps": "throughput"}


class ServingFigures(Record):
    """Latency distributions, throughputs and goodput of one serving run, predicted or
    measured; throughputs over every GPU of the deployment."""

    ttft_s: Latency = Field(description="Time to first token, per request.")
    tpot_s: Latency = Field(description="(E2E − TTFT)/(output tokens − 1), per request.")
    itl_s: Latency = Field(description="Gaps between a request's consecutive token "
                           "emissions, pooled over all requests.")
    e2e_s: Latency = Field(description="Send (arrival) to last token, per request.")
    output_throughput_tok_s: float = Field(ge=0, description="Output tokens/s.")
    total_throughput_tok_s: float = Field(ge=0, description="Input + output tokens/s.")
    request_throughput_rps: float = Field(ge=0, description="Completed requests/s.")
    goodput_rps: float | None = Field(default=None, description="Completed requests/s "
                                      "meeting every SLO (None: no SLO was given).")
    band: Band | None = Field(default=None, description="A prediction's error band; None for "
                              "a measurement, or a prediction outside every calibrated cell.")
    intervals: dict[str, Interval] = Field(default_factory=dict, description="A "
                                           "prediction's intervals by metric group; empty "
                                           "for a measurement.")

    def json_ms(self) -> dict[str, object]:
        """The JSON view (DESIGN §2.4 names): throughputs, goodput, latencies in ms; for a
        prediction with intervals, `interval` beside them in the same units and nesting."""
        out: dict[str, object] = {name: getattr(self, name) for name in RATES}
        out.update({f"{name[:-2]}_ms": getattr(self, name).ms() for name in LATENCIES})
        if self.band is not None:
            out["band"] = self.band.model_dump()
        if self.intervals:
            out["interval"] = self._interval_view(out)
            out["interval_basis"] = {k: v.model_dump() for k, v in self.intervals.items()}
        return out

    def interval_range(self, figure: str, quantile: str = "mean") -> tuple[float, float] | None:
        """(low, high) of a predicted figure (a rate, or a latency's `quantile`, seconds),
        None without an interval or a value."""
        found = self.intervals.get(INTERVAL_METRIC.get(figure, ""))
        value = getattr(self, figure, None)
        if isinstance(value, Latency):
            value = getattr(value, quantile)
        if found is None or not isinstance(value, float | int):
            return None
        return value * found.low, value * found.high

    def _interval_view(self, figures: dict[str, object]) -> dict[str, object]:
        view: dict[str, object] = {}
        for name, group in INTERVAL_METRIC.items():
            found = self.intervals.get(group)
            key = name if name in RATES else f"{name[:-2]}_ms"
            value = figures.get(key)
            if found is None or value is None:
                continue
            if isinstance(value, dict):
                view[key] = {k: None if v is None else {"low": v * found.low,
                                                         "high": v * found.high}
                             for k, v in value.items() if k != "count"}
            elif isinstance(value, float | int):
                view[key] = {"low": value * found.low, "high": value * found.high}
        return view


class FigureDelta(Record):
    """One figure predicted and measured (seconds, or its rate unit)."""

    figure: str = Field(description="'ttft_s.p95', 'output_throughput_tok_s', ...")
    predicted: float | None
    measured: float | None
    error: float | None = Field(description="(predicted − measured) / measured; None when "
                                "either side has no value or the measurement is 0.")
    within_band: bool | None = Field(description="|error| within the prediction's band; "
                                     "None without a band or an error.")


DEFAULT_COMPARE: tuple[tuple[LatencyName, tuple[Quantile, ...]], ...] = (
    ("ttft_s", ("p50", "p95", "p99")), ("tpot_s", ("p50", "p95", "p99")),
    ("itl_s", ("p50", "p95", "p99")), ("e2e_s", ("p50", "p95", "p99")),
)


def compare(predicted: ServingFigures, measured: ServingFigures,
            latencies: Sequence[tuple[LatencyName, Sequence[Quantile]]] = DEFAULT_COMPARE,
            ) -> list[FigureDelta]:
    """Predicted against measured, figure by figure: the chosen latency quantiles, then the
    throughputs and goodput."""
    pairs: list[tuple[str, float | None, float | None]] = [
        (f"{name}.{q}", getattr(getattr(predicted, name), q), getattr(getattr(measured, name), q))
        for name, quantiles in latencies for q in quantiles
    ]
    pairs += [(name, getattr(predicted, name), getattr(measured, name)) for name in RATES]
    return [_delta(figure, p, m, predicted.band) for figure, p, m in pairs]


def _delta(figure: str, p: float | None, m: float | None, band: Band | None) -> FigureDelta:
    error = None if p is None or m is None or m == 0 or not math.isfinite(p) else (p - m) / m
    within = None if band is None or error is None else abs(error) <= band.median_ape
    return FigureDelta(figure=figure, predicted=p, measured=m, error=error, within_band=within)
