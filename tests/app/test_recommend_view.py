"""The Recommend view on the sample: a pick, its figures, reasons, chart and config files."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator

import pandas as pd
import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from app.render.formats import plain
from app.session import RECOMMENDATION_KEY, RECOMMENDED_FOR_KEY, TRACE_KEY
from engines.export.bundle import render_bundle
from recommender.decision.export_view import export_view
from tests import reference as ref
from tests.app.conftest import ENTRY, app_on

GPU, MODEL = "H100-SXM", "meta-llama/Llama-3.1-8B-Instruct"
BANDS_JSON = ref.ROOT / "data" / "calibration" / "bands.json"


def recommend_on_sample(max_requests: int = 1_000) -> AppTest:
    """Open Recommend, fill the form (2 s TTFT and 50 ms TPOT SLOs), press Recommend."""
    at = AppTest.from_file(str(ENTRY), default_timeout=300).run()
    at.switch_page("views/recommend.py").run()
    at.selectbox(key="rec.gpu").set_value(GPU)
    at.selectbox(key="rec.model").set_value(MODEL)
    at.number_input(key="rec.slo_ttft_ms").set_value(2000.0)
    at.number_input(key="rec.slo_tpot_ms").set_value(50.0)
    at.number_input(key="rec.max_requests").set_value(max_requests)
    next(b for b in at.button if b.label == "Recommend").click().run()
    assert not at.exception
    assert not at.error, [e.value for e in at.error]
    return at


@pytest.fixture(scope="module")
def recommended(tmp_path_factory) -> Iterator[AppTest]:
    """One press of Recommend on the sample (a search of a few seconds), shared by this module's
    tests: they read what it shows, or start their own app from its recommendation. Its own app
    home and cwd, and empty Streamlit caches, as `app_home` gives a single test."""
    home = tmp_path_factory.mktemp("recommended")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SERVEFIT_APP_HOME", str(home / "app-home"))
        mp.chdir(home)
        st.cache_data.clear()
        st.cache_resource.clear()
        yield recommend_on_sample()
        st.cache_data.clear()
        st.cache_resource.clear()


def _profile_figures() -> dict[str, float]:
    df = pd.read_csv(ref.SAMPLE)
    ts = pd.to_datetime(df["TIMESTAMP"])
    figures = ref.timing((ts - ts.min()).dt.total_seconds().to_numpy())
    for column, prefix in (("ContextTokens", "input_tokens"), ("GeneratedTokens", "output_tokens")):
        figures |= {f"{prefix}.{k}": v for k, v in ref.lengths(df[column]).items()}
    return figures


def test_recommendation_figures_and_files(recommended):
    at = recommended  # read only: nothing here changes its widgets
    rec = at.session_state[RECOMMENDATION_KEY]
    assert (rec.gpu, rec.model, rec.request.slo_ttft_p95_s) == (GPU, MODEL, 2.0)
    p = rec.pick.predicted
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["TTFT p95"] == f"{p.ttft_s.p95 * 1e3:,.0f} ms"
    assert metrics["Output tok/s"] == f"{p.output_throughput_tok_s:,.0f}"
    # reasons quote the trace's own figures: check those against pandas
    expected = _profile_figures()
    quoted = [r for r in rec.reasons if r.figure in expected]
    assert quoted, [r.figure for r in rec.reasons]
    for reason in quoted:
        assert abs(reason.value - expected[reason.figure]) <= 1e-6 * abs(expected[reason.figure])
    # the decision beside the pick: ranked by headroom, the tie and the confidence said
    decision = rec.decision
    (line,) = [m.value for m in at.markdown if m.value.startswith("**Decision**")]
    assert "SLO boundary per GPU" in line
    if decision.confidence is not None:
        assert plain(f"{decision.confidence:.0%} likely to beat") in line
    # the candidate chart marks the pick
    charts = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    (chart,) = [c for c in charts if any(t.get("name") == "pick" for t in c["data"])]
    star = next(t for t in chart["data"] if t["name"] == "pick")
    assert len(star["x"]) == 1  # where: test_the_candidates_chart_is_drawn_on_its_fronts_axes
    # how far the pick holds: the boundary, and its load curve charted from the library's
    # points (ms on screen), with the SLO lines and the mean, peak and boundary marked
    cap = rec.capacity
    assert metrics["SLO boundary"] == f"{cap.pick.rate_rps:,.3g} req/s"
    (curve,) = [c for c in charts
                if c["layout"]["title"]["text"].startswith("Predicted p95 latency against")]
    ttft = next(t for t in curve["data"] if t["name"] == f"the pick: {rec.pick.label}")
    assert ttft["x"] == [q.rate_rps for q in cap.curve.points]
    assert ttft["y"] == [q.ttft_p95_s * 1e3 for q in cap.curve.points]
    # each other engine's best beside it, dashed, from its own search
    assert [c.label for c in cap.alternative_curves] == [b.label for b in cap.alternatives]
    assert cap.alternative_curves
    for other in cap.alternative_curves:
        drawn = next(t for t in curve["data"] if t["name"] == other.label)
        assert drawn["line"]["dash"] == "dash"
        assert drawn["x"] == [q.rate_rps for q in other.points]
    # the TTFT interval shaded around the curve: today's p10-p90 ratios at every load
    interval = p.intervals.get("ttft")
    shaded = [t for t in curve["data"] if t["name"] == "p10-p90 interval"]
    if interval is not None:
        low, high = shaded[0], shaded[1]  # TTFT's panel first
        assert low["y"] == pytest.approx([q.ttft_p95_s * 1e3 * interval.low
                                          for q in cap.curve.points])
        assert high["y"] == pytest.approx([q.ttft_p95_s * 1e3 * interval.high
                                           for q in cap.curve.points])
        assert high["fill"] == "tonexty"
    else:
        assert not shaded
    marks = {a["text"] for a in curve["layout"]["annotations"]}
    assert {"SLO", "mean", "peak", "boundary"} <= marks
    # the SLO label sits on its line: on a log axis an annotation's y is log10 of the value
    # (add_hline's own label put a 2,000 ms SLO at 10^2000)
    (slo,) = [a for a in curve["layout"]["annotations"]
              if a["text"] == "SLO" and a["yref"] == "y"]
    assert slo["y"] == pytest.approx(math.log10(cap.slo_ttft_s * 1e3))
    # the price beside the pick: the catalog's H100 list price and the pick's $/Mtok today
    (price,) = [m.value for m in at.markdown if m.value.startswith("**Price**")]
    assert plain(f"${rec.gpu_price.usd_per_hour:,.2f} per GPU-hour") in price
    assert plain(f"${rec.pick.usd_per_mtok:,.3g} per million output tokens") in price
    # the day plan: its line and its chart (GPUs per window, the library's figures)
    assert any(m.value.startswith("**Over the trace") for m in at.markdown)
    (day,) = [c for c in charts if c["layout"]["title"]["text"].startswith("GPUs the pick")]
    bars = next(t for t in day["data"] if t["type"] == "bar")
    assert bars["y"] == [w.gpus for w in cap.day.windows]
    # the pick's band (its cell's entry of bands.json, read here) next to its figures, and a
    # band column in the candidates tables
    cell = p.calibration_cell
    entry = json.loads(BANDS_JSON.read_text())["cells"].get(cell)
    shown = (f"±{entry['median_ape'] * 100:.0f} % (cell {cell}, {entry['rows']} held-out rows)"
             if entry else f"no calibrated cell ({cell}")
    assert any(m.value.startswith(f"**Error band** {shown}") for m in at.markdown), \
        [m.value for m in at.markdown]
    tables = [d.value for d in at.dataframe if "band" in d.value.columns]
    assert len(tables) == 2  # the best of each engine, and all candidates
    _, everything = tables
    assert list(everything["config"]) == [c.label for c in rec.candidates]
    for candidate, band, rows in zip(rec.candidates, everything["band"],
                                     everything["coverage (rows)"], strict=True):
        found = json.loads(BANDS_JSON.read_text())["cells"].get(
            candidate.predicted.calibration_cell)
        assert band == (f"±{found['median_ape'] * 100:.0f} %" if found
                        else "no calibrated cell")
        assert rows == (found["rows"] if found else 0)
    # one download per bundle file, plus the zip
    files = render_bundle(export_view(rec))
    labels = [d.proto.label for d in at.get("download_button")]
    assert sorted(labels) == sorted([*files, "All files (zip)"])


def _holding(recommended: AppTest) -> AppTest:
    """A fresh app on Recommend holding the shared recommendation, as after pressing
    Recommend: the view shows the recommendation in the session, whichever run made it."""
    return app_on("views/recommend.py", {
        RECOMMENDATION_KEY: recommended.session_state[RECOMMENDATION_KEY],
        RECOMMENDED_FOR_KEY: recommended.session_state[RECOMMENDED_FOR_KEY]})


def test_each_engines_best_can_be_exported(app_home, recommended):
    rec = recommended.session_state[RECOMMENDATION_KEY]
    at = _holding(recommended)
    assert not at.exception and not at.error
    # another engine's best than the pick's: exported through its own view, not the pick's
    other = next(c for c in rec.alternatives if c.config.engine != rec.pick.config.engine)
    engine = other.config.engine
    export = at.selectbox(key="rec.export")
    option = next(o for o in export.options if o.startswith(f"{engine}: "))
    assert option == f"{engine}: {other.label}"
    export.set_value(option).run()
    assert not at.exception and not at.error
    labels = [d.proto.label for d in at.get("download_button")]
    config_file = {"vllm": "vllm-config.yaml", "sglang": "sglang-config.yaml",
                   "trtllm": "trtllm-extra-options.yaml"}[engine]
    assert config_file in labels, labels


def test_the_form_keeps_what_the_pick_was_asked_for_and_another_trace_hides_it(app_home,
                                                                            recommended):
    """Back from another view, the form says what the pick on screen was asked for (Streamlit
    drops the state of widgets a run does not draw: the SLOs read 0 under a 2 s pick); after
    another trace is chosen, the previous trace's pick is not shown under its name."""
    import io

    from app.storage import store_upload

    at = _holding(recommended)
    at.switch_page("views/profile.py").run()
    at.switch_page("views/recommend.py").run()
    assert not at.exception and not at.error
    assert at.number_input(key="rec.slo_ttft_ms").value == 2000.0
    assert at.number_input(key="rec.slo_tpot_ms").value == 50.0
    assert at.number_input(key="rec.max_requests").value == 1_000
    assert at.selectbox(key="rec.model").value == MODEL
    assert any(s.value.startswith("Pick:") for s in at.subheader)
    data = (ref.TRACES / "BurstGPT_1.head400.csv").read_bytes()
    at.session_state[TRACE_KEY] = store_upload(io.BytesIO(data), "burst.csv", len(data))
    at.run()
    assert not at.exception and not at.error
    assert not [s for s in at.subheader if s.value.startswith("Pick:")]
    assert "press Recommend" in at.info[0].value


def test_a_trace_read_with_a_column_map_is_recommended_on_its_own_requests(app_home):
    import io

    from app.session import TRACE_KEY
    from app.storage import TraceChoice, store_upload
    from profiler.ingestion.options import IngestOptions

    df = pd.read_csv(ref.TRACES / "BurstGPT_3.head400.csv").rename(
        columns={"Timestamp": "when", "Request tokens": "q", "Response tokens": "a"})
    data = df.to_csv(index=False).encode()
    stored = store_upload(io.BytesIO(data), "renamed.csv", len(data))
    choice = TraceChoice(**(stored.model_dump() | {"options": IngestOptions(
        column_map={"time": "when", "input": "q", "output": "a"})}))
    at = app_on("views/recommend.py", {TRACE_KEY: choice})
    # 100 of its 400 requests: a sparse trace (0.01 req/s) is simulated step by step, alone
    at.number_input(key="rec.max_requests").set_value(100)
    next(b for b in at.button if b.label == "Recommend").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    rec = at.session_state[RECOMMENDATION_KEY]
    assert rec.request.source.endswith(".parquet")  # the canonical copy, not the raw CSV
    assert "synthetic" not in rec.window  # the trace's own requests were simulated


def test_every_label_part_on_screen_is_explained(recommended):
    """Issue 27: 'budget2048', 'kv-fp8', 'chunked-off' were shown with no word on what they
    are; each part of every candidate's label (past the engine and weight format) now has a
    line in the legend, and the latency table and the candidate columns say their units."""
    at = recommended
    rec = at.session_state[RECOMMENDATION_KEY]
    (legend,) = [e for e in at.expander if e.label == "What the configuration labels mean"]
    text = legend.markdown[0].value.replace("\\", "")
    parts = {p for c in rec.candidates for p in c.label.replace("×", " ×").split()[2:]}
    parts -= {c.config.weight_quantization or "bf16" for c in rec.candidates}
    assert parts
    for part in parts:
        kind = part.rstrip("0123456789").removesuffix("-on").removesuffix("-off")
        assert f"- {kind}" in text, (part, text)
    tables = [t.value for t in at.dataframe]
    latency = next(t for t in tables if "latency (ms)" in t.columns)
    assert list(latency["latency (ms)"]) == ["TTFT", "TPOT", "ITL", "E2E"]
    assert any("TTFT p95 (ms)" in t.columns for t in tables)


def test_the_candidates_chart_is_drawn_on_its_fronts_axes(recommended):
    """Issue 27: the chart plotted output tok/s (the same for every candidate that keeps up)
    against p95 TTFT while its front came from goodput per GPU and latency, so the pick's
    star sat off the line. Now the points are those axes, recomputed here from the figures."""
    at = recommended
    rec = at.session_state[RECOMMENDATION_KEY]
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    (chart,) = [s for s in specs if "Pareto" in s["layout"]["title"]["text"]]
    traces = {t["name"]: t for t in chart["data"]}
    served = [c for c in rec.candidates if c.predicted.request_throughput_rps > 0]
    p = served[0].predicted
    mean_out = p.output_throughput_tok_s / p.request_throughput_rps

    def point(c):
        f = c.predicted
        latency = f.ttft_s.p95 + f.tpot_s.p95 * max(mean_out - 1, 0)
        gpus = c.replicas * c.config.tp * c.config.dp * c.config.pp
        return latency * 1e3, (f.goodput_rps or 0.0) / gpus

    front = sorted(point(c) for c in served if c.pareto)
    drawn = sorted(zip(traces["Pareto front"]["x"], traces["Pareto front"]["y"], strict=True))
    assert len(drawn) == len(front)
    for got, want in zip(drawn, front, strict=True):
        assert got == pytest.approx(want)
    # the front is what no other candidate beats on both axes
    points = [point(c) for c in served]
    for x, y in front:
        assert not any(x2 <= x and y2 >= y and (x2, y2) != (x, y) for x2, y2 in points)
    star = (traces["pick"]["x"][0], traces["pick"]["y"][0])
    assert star == pytest.approx(point(rec.pick))
    if rec.pick.pareto:
        assert any(star == pytest.approx(d) for d in drawn)
    assert chart["layout"]["xaxis"]["type"] == "log"
    assert len({round(x, 6) for x, _ in points}) > 1  # not a vertical strip


def test_a_trace_without_timestamps_asks_for_the_forms_rate_and_takes_it(app_home):
    """Issue 27: the web form said '--arrival-rate RPS', a flag it had no field for."""
    import io

    from app.storage import store_upload

    data = (ref.TRACES / "sharegpt_head1000.json.gz").read_bytes()
    at = app_on("views/recommend.py", {
        TRACE_KEY: store_upload(io.BytesIO(data), "sharegpt.json.gz", len(data))})
    at.number_input(key="rec.max_requests").set_value(100)
    next(b for b in at.button if b.label == "Recommend").click().run()
    assert not at.exception
    (error,) = [e.value.replace("\\", "") for e in at.error]
    assert "no timestamps" in error and "Arrival rate for a trace without timestamps" in error
    assert "--arrival-rate" not in error
    at.number_input(key="rec.arrival_rate").set_value(2.0)
    next(b for b in at.button if b.label == "Recommend").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    rec = at.session_state[RECOMMENDATION_KEY]
    assert rec.request.arrival_rate_rps == 2.0


def test_the_picks_gpu_memory_split_adds_up_to_the_gpu(recommended):
    """Issue 27: the GPU memory split (weights, activations, fixed reserve, KV pool, what is
    left) is drawn, and its parts add up to one GPU's memory."""
    from recommender.catalog.lookup import get_gpu

    at = recommended
    rec = at.session_state[RECOMMENDATION_KEY]
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    (chart,) = [s for s in specs if s["layout"]["title"]["text"].startswith("GPU memory")]
    parts = {t["name"]: t["x"][0] for t in chart["data"]}
    assert list(parts) == ["weights", "activations (peak step)", "CUDA context, graphs, NCCL",
                           "KV cache pool", "left unclaimed"]
    gpu_gb = get_gpu(rec.gpu).memory_gb  # GB of 10^9 bytes, as the chart
    assert sum(parts.values()) == pytest.approx(gpu_gb, rel=1e-6)
    # an 8B bf16 model on one GPU: about 16 GB of weights
    assert 14 < parts["weights"] < 18 or rec.pick.config.weight_quantization
    (caption,) = [c.value.replace("\\", "") for c in at.caption if "KV cache pool" in c.value]
    assert "sequences at once" in caption


def test_the_predicted_latency_distributions_are_drawn(recommended):
    """Issue 27: TTFT and TPOT percentiles of the pick as a chart, with their intervals."""
    at = recommended
    p = at.session_state[RECOMMENDATION_KEY].pick.predicted
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    (chart,) = [s for s in specs
                if s["layout"]["title"]["text"].startswith("Predicted latency distribution")]
    for trace, latency, group in zip(chart["data"], (p.ttft_s, p.tpot_s), ("ttft", "tpot"),
                                     strict=True):
        assert trace["x"] == ["p50", "p90", "p95", "p99"]
        want = [getattr(latency, q) * 1e3 for q in trace["x"]]
        assert trace["y"] == pytest.approx(want)
        interval = p.intervals.get(group)
        if interval is not None:
            assert trace["error_y"]["array"] == pytest.approx(
                [v * (interval.high - 1) for v in want])


def test_the_picks_calibration_cell_is_said_in_words(recommended):
    """Issue 27: 'fixed_concurrency' and the other cell parts were shown bare."""
    at = recommended
    cell = at.session_state[RECOMMENDATION_KEY].pick.predicted.calibration_cell
    engine, family, kind, regime = cell.split("/")
    (caption,) = [c.value.replace("\\", "") for c in at.caption
                  if c.value.startswith("Calibration cell:")]
    assert f"{engine} on {family} GPUs" in caption
    assert {"dense": "dense model", "moe": "mixture-of-experts model"}[kind] in caption
    assert "_" not in caption  # no bare 'fixed_concurrency' or 'low_batch'
    assert regime in {"offline", "low_batch", "fixed_concurrency", "rate"}
