"""Run summary and analyses against figures computed independently with numpy from the raw
stamps the results were built from."""

from __future__ import annotations

import numpy as np
import pytest

from runners.benchmark.analyses import SweepLevel, analyze_burst, analyze_soak, find_knee
from runners.benchmark.metrics import summarize, summary_json
from runners.load.schemas import RequestResult

T0 = 1000.0  # perf_counter-like origin


def _ok(sent: float, ttft: float, gaps: list[float], prompt: int = 10,
        out: int | None = None) -> RequestResult:
    times = list(sent + ttft + np.concatenate([[0.0], np.cumsum(gaps)]))
    return RequestResult(success=True, sent_at_s=sent, first_token_at_s=times[0],
                         last_token_at_s=times[-1], end_at_s=times[-1] + 0.001,
                         chunk_times_s=times, prompt_tokens=prompt,
                         output_tokens=len(times) if out is None else out)


def _fail(sent: float, kind: str, dur: float = 0.05) -> RequestResult:
    return RequestResult(success=False, error="x", error_kind=kind, sent_at_s=sent,
                         end_at_s=sent + dur)


@pytest.fixture
def raw():
    rng = np.random.default_rng(7)
    n = 300
    sent = T0 + np.sort(rng.uniform(0, 20, n))
    ttft = rng.exponential(0.2, n)
    n_chunks = rng.integers(1, 30, n)
    gaps = [rng.exponential(0.03, k - 1) for k in n_chunks]
    failed = rng.random(n) < 0.1
    kinds = rng.choice(["http", "timeout"], n)
    results = [_fail(s, k) if f else _ok(s, t, list(g))
               for s, t, g, f, k in zip(sent, ttft, gaps, failed, kinds, strict=True)]
    return dict(results=results, sent=sent, ttft=ttft, n_chunks=n_chunks, gaps=gaps,
                failed=failed, kinds=kinds)


def test_latency_distributions_match_numpy(raw):
    s = summarize(raw["results"], started_at_s=T0)
    ok = ~raw["failed"]
    ttft = raw["ttft"][ok]
    assert s.count == 300 and s.completed == ok.sum()
    assert s.errors == {k: int(((raw["kinds"] == k) & raw["failed"]).sum())
                        for k in ("http", "timeout") if ((raw["kinds"] == k) & raw["failed"]).any()}
    for q, name in ((50, "p50"), (90, "p90"), (95, "p95"), (99, "p99")):
        assert getattr(s.ttft_s, name) == pytest.approx(np.percentile(ttft, q), abs=1e-9)
    assert s.ttft_s.mean == pytest.approx(ttft.mean(), abs=1e-9)
    itl = np.concatenate([g for g, f in zip(raw["gaps"], raw["failed"], strict=True) if not f])
    assert s.itl_s.count == itl.size
    assert s.itl_s.p99 == pytest.approx(np.percentile(itl, 99), abs=1e-9)
    decode = np.array([g.sum() for g in raw["gaps"]])[ok]
    n_out = raw["n_chunks"][ok]
    multi = n_out >= 2
    tpot = decode[multi] / (n_out[multi] - 1)
    assert s.tpot_s.p50 == pytest.approx(np.percentile(tpot, 50), abs=1e-9)
    e2e = raw["ttft"][ok] + decode
    assert s.e2e_s.p95 == pytest.approx(np.percentile(e2e, 95), abs=1e-9)


def test_throughput_goodput_rate_and_peak(raw):
    res, ok = raw["results"], ~raw["failed"]
    slo_ttft, slo_tpot = 0.3, 0.04
    s = summarize(res, started_at_s=T0, slo_ttft_s=slo_ttft, slo_tpot_s=slo_tpot)
    ends = np.array([r.end_at_s for r in res])
    duration = ends.max() - T0
    assert s.duration_s == pytest.approx(duration)
    assert s.request_throughput_rps == pytest.approx(ok.sum() / duration)
    assert s.output_throughput_tok_s == pytest.approx(raw["n_chunks"][ok].sum() / duration)
    assert s.total_throughput_tok_s == pytest.approx((raw["n_chunks"][ok].sum() + 10 * ok.sum())
                                                     / duration)
    decode = np.array([g.sum() for g in raw["gaps"]])
    n = raw["n_chunks"]
    tpot = np.where(n >= 2, decode / np.maximum(n - 1, 1), 0.0)
    good = ok & (raw["ttft"] <= slo_ttft) & (tpot <= slo_tpot)
    assert s.goodput_rps == pytest.approx(good.sum() / duration)
    assert 0 < s.goodput_rps < s.request_throughput_rps
    sent = raw["sent"]
    assert s.achieved_rate_rps == pytest.approx((len(sent) - 1) / (sent[-1] - sent[0]))
    starts = np.array([r.sent_at_s for r in res])
    in_flight_at_sends = [((starts <= t) & (ends > t)).sum() for t in starts]
    assert s.peak_concurrency == max(in_flight_at_sends)


def test_series_counts_and_in_flight(raw):
    res = raw["results"]
    s = summarize(res, started_at_s=T0, window_s=2.0)
    ends = np.array([r.end_at_s for r in res])
    ok = np.array([r.success for r in res])
    edges = T0 + 2.0 * np.arange(len(s.series) + 1)
    counts, _ = np.histogram(ends[ok], bins=edges)
    counts[-1] += (ends[ok] >= edges[-1]).sum()
    assert [p.completions for p in s.series] == counts.tolist()
    sent = np.array([r.sent_at_s for r in res])
    for p in s.series[:5]:  # Riemann check of the time-averaged in-flight count
        grid = T0 + p.t_s + (np.arange(4000) + 0.5) * (2.0 / 4000)
        expect = ((sent[:, None] <= grid) & (ends[:, None] > grid)).sum(axis=0).mean()
        assert p.in_flight == pytest.approx(expect, rel=1e-2, abs=1e-2)
    assert sum(p.output_tokens for p in s.series) == raw["n_chunks"][~raw["failed"]].sum()


def test_empty_run():
    s = summarize([])
    assert s.count == 0 and s.request_throughput_rps == 0 and s.ttft_s.p50 is None
    assert s.series == [] and s.achieved_rate_rps is None


def _level(c: int, tput: float, e2e: float) -> SweepLevel:
    return SweepLevel(concurrency=c, request_throughput_rps=tput / 10,
                      output_throughput_tok_s=tput, e2e_p50_s=e2e, ttft_p95_s=None)


def test_knee():
    levels = [_level(1, 100, 1.0), _level(2, 190, 1.05), _level(4, 300, 1.3),
              _level(8, 320, 2.4), _level(16, 325, 4.8)]
    knee = find_knee(levels)
    assert knee.knee_concurrency == 4 and knee.past_knee
    # Throughput still growing ≥ 10 % at each step: no knee yet.
    assert find_knee(levels[:3]).knee_concurrency is None
    # A flat step whose latency barely grows is not a knee.
    assert find_knee([_level(1, 100, 1.0), _level(2, 101, 1.1)]).past_knee is False


def test_burst_spike_and_recovery():
    # steady 0-10 s TTFT 0.1; burst 10-14 s TTFT 0.8; decays to baseline 3 s after the burst.
    rows = []
    for i in range(400):
        t = i * 0.05
        if t < 10:
            ttft = 0.1
        elif t < 14:
            ttft = 0.8
        elif t < 17:
            ttft = 0.5
        else:
            ttft = 0.11
        rows.append(_ok(T0 + t, ttft, [0.01]))
    queue = [(t, 0.0 if t < 10 or t >= 15 else 6.0) for t in np.arange(0, 20, 0.5)]
    b = analyze_burst(rows, t0=T0, burst_start_s=10, burst_end_s=14, queue_depth=queue)
    assert b.baseline_ttft_p50_s == pytest.approx(0.1)
    assert b.peak_ttft_p50_s == pytest.approx(0.8)
    assert b.ttft_spike_ratio == pytest.approx(8.0)
    assert b.baseline_queue_depth == 0 and b.peak_queue_depth == 6
    assert b.recovery_s == pytest.approx(3.0)


def test_burst_never_recovers():
    rows = [_ok(T0 + t, 0.1 if t < 5 else 1.0, [0.01]) for t in np.arange(0, 10, 0.1)]
    b = analyze_burst(rows, t0=T0, burst_start_s=5, burst_end_s=7)
    assert b.recovery_s is None


def test_soak_drift():
    t = np.arange(0, 100, 0.25)
    ttft = 0.1 + 0.002 * t
    rows = [_ok(T0 + a, b, [0.01]) for a, b in zip(t, ttft, strict=True)]
    s = analyze_soak(rows, t0=T0, t1=T0 + 100, windows=10)
    first, last = ttft[t < 10], ttft[t >= 90]
    assert s.first_ttft_p50_s == pytest.approx(np.median(first))
    assert s.ttft_p95_ratio == pytest.approx(np.percentile(last, 95) / np.percentile(first, 95))
    assert s.ttft_p50_slope_s_per_s == pytest.approx(0.002, rel=0.02)
    assert s.throughput_ratio == pytest.approx(1.0, abs=0.05)


def test_summary_json_names_and_ms(raw):
    s = summarize(raw["results"], started_at_s=T0)
    j = summary_json(s)
    assert {"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "completed", "errors",
            "request_throughput_rps", "output_throughput_tok_s", "achieved_rate_rps",
            "goodput_rps"} <= set(j)
    assert set(j["ttft_ms"]) == {"mean", "p50", "p90", "p95", "p99"}
    ttft = raw["ttft"][~raw["failed"]]
    assert j["ttft_ms"]["p90"] == pytest.approx(np.percentile(ttft, 90) * 1e3)
