"""`core.figures`: the latency record against numpy, the ms view, and compare()."""

from __future__ import annotations

import math

import numpy as np
import pytest

from core.figures import Band, Latency, ServingFigures, compare, latency_of, meets_slos


def _numpy_latency(values: np.ndarray) -> dict[str, float]:
    return {"mean": float(np.mean(values)), "p50": float(np.percentile(values, 50)),
            "p90": float(np.percentile(values, 90)), "p95": float(np.percentile(values, 95)),
            "p99": float(np.percentile(values, 99))}


def test_latency_of_matches_numpy():
    values = np.random.default_rng(7).lognormal(-3.0, 0.8, 1_001)
    lat = latency_of(values)
    assert lat.count == 1_001
    for q, want in _numpy_latency(values).items():
        assert getattr(lat, q) == pytest.approx(want, rel=1e-12)


def test_latency_of_takes_any_iterable_and_interpolates_linearly():
    lat = latency_of(v for v in (1.0, 2.0, 3.0, 4.0))
    # Linear interpolation by hand: rank q/100 * (n - 1) between sorted neighbours.
    assert (lat.count, lat.mean, lat.p50) == (4, 2.5, 2.5)
    assert lat.p90 == pytest.approx(1.0 + 0.9 * 3)
    assert lat.p99 == pytest.approx(1.0 + 0.99 * 3)


def test_nan_and_inf_are_left_out():
    finite = [0.1, 0.2, 0.4]
    lat = latency_of([math.nan, *finite, math.inf, -math.inf])
    assert lat.count == 3
    assert lat.mean == pytest.approx(np.mean(finite))
    assert lat.p50 == pytest.approx(0.2)


@pytest.mark.parametrize("values", [[], [math.nan], [math.inf, math.nan, -math.inf],
                                    np.array([])])
def test_no_finite_value_is_none_with_count_zero(values):
    lat = latency_of(values)
    assert lat.count == 0
    assert (lat.mean, lat.p50, lat.p90, lat.p95, lat.p99) == (None,) * 5


def test_ms_view_is_milliseconds_and_keeps_none():
    assert Latency(count=2, mean=0.25, p50=0.0125, p90=1.0).ms() == {
        "mean": 250.0, "p50": 12.5, "p90": 1000.0, "p95": None, "p99": None}


def _figures(scale: float, band: Band | None = None, goodput: float | None = 3.0,
             ) -> ServingFigures:
    lat = Latency(count=10, mean=0.2 * scale, p50=0.1 * scale, p90=0.3 * scale,
                  p95=0.4 * scale, p99=0.5 * scale)
    return ServingFigures(ttft_s=lat, tpot_s=lat, itl_s=lat, e2e_s=Latency(count=0),
                          output_throughput_tok_s=100.0 * scale,
                          total_throughput_tok_s=300.0 * scale,
                          request_throughput_rps=2.0 * scale, goodput_rps=goodput, band=band)


def test_json_ms_names_and_units():
    out = _figures(1.0, band=Band(cell="vllm/H100/dense/decode", median_ape=0.1, rows=40)
                   ).json_ms()
    assert set(out) == {"output_throughput_tok_s", "total_throughput_tok_s",
                        "request_throughput_rps", "goodput_rps", "ttft_ms", "tpot_ms",
                        "itl_ms", "e2e_ms", "band"}
    assert out["ttft_ms"] == {"mean": 200.0, "p50": 100.0, "p90": 300.0, "p95": 400.0,
                              "p99": 500.0}
    assert out["e2e_ms"] == {"mean": None, "p50": None, "p90": None, "p95": None, "p99": None}
    assert out["output_throughput_tok_s"] == 100.0  # rates stay in their own units
    assert out["band"] == {"cell": "vllm/H100/dense/decode", "median_ape": 0.1, "rows": 40}
    assert "band" not in _figures(1.0).json_ms()


def test_compare_errors_and_within_band():
    band = Band(cell="c", median_ape=0.15, rows=12)
    predicted = _figures(1.1, band=band)  # every figure 10 % above ...
    measured = _figures(1.0, goodput=0.0)  # ... the measurement, whose goodput is 0
    deltas = {d.figure: d for d in compare(predicted, measured)}
    assert list(deltas)[:3] == ["ttft_s.p50", "ttft_s.p95", "ttft_s.p99"]
    assert len(deltas) == 4 * 3 + 4
    assert deltas["ttft_s.p95"].error == pytest.approx((0.44 - 0.4) / 0.4)
    assert deltas["ttft_s.p95"].within_band is True
    assert deltas["output_throughput_tok_s"].error == pytest.approx(0.1)
    # No measured value (e2e is empty) or a zero measurement: no error, no band verdict.
    assert (deltas["e2e_s.p50"].error, deltas["e2e_s.p50"].within_band) == (None, None)
    assert (deltas["goodput_rps"].measured, deltas["goodput_rps"].error) == (0.0, None)


def test_compare_outside_the_band_and_without_one():
    tight = Band(cell="c", median_ape=0.05, rows=12)
    deltas = {d.figure: d for d in compare(_figures(0.8, band=tight), _figures(1.0))}
    assert deltas["itl_s.p99"].error == pytest.approx(-0.2)
    assert deltas["itl_s.p99"].within_band is False
    unbanded = compare(_figures(0.8), _figures(1.0), latencies=[("tpot_s", ["mean"])])
    assert [d.figure for d in unbanded] == ["tpot_s.mean", "output_throughput_tok_s",
                                            "total_throughput_tok_s", "request_throughput_rps",
                                            "goodput_rps"]
    assert all(d.within_band is None for d in unbanded)
    assert unbanded[0].error == pytest.approx(-0.2)


def test_json_ms_gives_each_figure_its_interval_in_its_units_and_nesting():
    from core.figures import Interval

    intervals = {"throughput": Interval(metric="throughput", low=0.8, high=1.1, basis="x",
                                        rows=30, pooled=False),
                 "ttft": Interval(metric="ttft", low=0.5, high=2.0, basis="*|ttft", rows=83,
                                  pooled=True)}
    out = _figures(1.0).model_copy(update={"intervals": intervals}).json_ms()
    assert out["interval"]["output_throughput_tok_s"] == pytest.approx({"low": 80.0,
                                                                        "high": 110.0})
    assert out["interval"]["request_throughput_rps"] == pytest.approx({"low": 1.6, "high": 2.2})
    assert out["interval"]["ttft_ms"]["p95"] == pytest.approx({"low": 200.0, "high": 800.0})
    assert out["interval"]["ttft_ms"]["mean"] == pytest.approx({"low": 100.0, "high": 400.0})
    assert "tpot_ms" not in out["interval"]  # no interval for that group
    assert out["interval_basis"]["ttft"]["pooled"] is True
    assert "interval" not in _figures(1.0).json_ms()


def test_meets_slos_is_the_one_goodput_rule():
    nan = math.nan
    ttft = [0.1, 0.3, nan, 0.1, 0.2]
    tpot = [0.01, 0.01, 0.01, nan, 0.05]  # the fourth had one output token: no TPOT
    assert meets_slos(ttft, tpot, None, None).tolist() == [True] * 5
    assert meets_slos(ttft, tpot, 0.25, None).tolist() == [True, False, False, True, True]
    assert meets_slos(ttft, tpot, None, 0.02).tolist() == [True, True, True, True, False]
    assert meets_slos(ttft, tpot, 0.25, 0.02).tolist() == [True, False, False, True, False]
