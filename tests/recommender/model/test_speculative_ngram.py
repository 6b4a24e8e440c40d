"""Speculative acceptance: the published defaults' record, and the trace's measured ngram
acceptance reaching the simulation and the explanation."""

from __future__ import annotations

from pathlib import Path

import pytest

from engines.config import SpeculativeConfig
from engines.vllm.spellings import NGRAM_PROMPT_LOOKUP_MAX
from profiler.analysis.ngram_acceptance import NGRAM_K, NGRAM_MAX, NGRAM_MIN
from profiler.analysis.profile import profile_trace
from profiler.ingestion.options import IngestOptions
from profiler.workspace import Workspace
from recommender.catalog.facts import hardware_facts, model_facts
from recommender.catalog.lookup import get_gpu, get_model
from recommender.decision.explanation.reasons import acceptance_text
from recommender.decision.goals import Goals, Target
from recommender.decision.grid import base_grid, max_model_len
from recommender.decision.recommend import measured_acceptance
from recommender.decision.scoring import evaluate
from recommender.decision.variants import SPECULATIVE
from recommender.model.params import load_params
from recommender.model.speculative import ACCEPTANCE_DEFAULTS, DEFAULT_ACCEPTANCE
from recommender.sim.trace_window import head_window, load_workload

SHAREGPT = Path(__file__).resolve().parents[2] / "data" / "traces" / "sharegpt_head1000.json.gz"


def test_the_replay_uses_what_the_engine_is_given():
    # vLLM gets prompt_lookup_max only and then sets prompt_lookup_min to the same value.
    assert NGRAM_MAX == NGRAM_MIN == NGRAM_PROMPT_LOOKUP_MAX
    assert SPECULATIVE.method == "ngram" and SPECULATIVE.num_tokens == NGRAM_K


def test_defaults_carry_a_band_and_sources_and_keep_the_old_name():
    assert set(ACCEPTANCE_DEFAULTS) == {"ngram", "eagle", "eagle3", "draft_model", "mtp"}
    for method, d in ACCEPTANCE_DEFAULTS.items():
        assert d.low <= d.acceptance <= d.high, method
        assert d.sources
        assert DEFAULT_ACCEPTANCE[method] == d.acceptance
    # The band ends reproduce the cited mean acceptance lengths at k = 3 (E = 1 + a + a² + a³):
    # ngram 2.83 (vLLM issue #19254), eagle3 2.92 (llama.cpp PR #24536) and 3.50.
    def e(a):
        return 1 + a + a**2 + a**3

    assert e(ACCEPTANCE_DEFAULTS["ngram"].high) == pytest.approx(2.83, abs=0.01)
    assert e(ACCEPTANCE_DEFAULTS["ngram"].acceptance) == pytest.approx(1 + 3 * 0.112, abs=0.01)
    assert e(ACCEPTANCE_DEFAULTS["eagle3"].low) == pytest.approx(2.92, abs=0.01)
    assert e(ACCEPTANCE_DEFAULTS["eagle3"].high) == pytest.approx(3.50, abs=0.02)


@pytest.fixture(scope="module")
def sharegpt(tmp_path_factory):
    """The real ShareGPT head with Poisson arrivals at 2 req/s, profiled and loaded."""
    ws = Workspace.resolve(tmp_path_factory.mktemp("sg") / "w.duckdb")
    prof = profile_trace(str(SHAREGPT), workspace=ws, lru_capacities=[],
                         options=IngestOptions(synthesize_arrivals_rps=2.0, seed=3))
    return prof, load_workload(ws, max_requests=400)


def test_measured_ngram_acceptance_replaces_the_default_in_the_prediction(sharegpt):
    prof, workload = sharegpt
    measured = measured_acceptance(prof)
    assert measured == {"ngram": prof.format.ngram_acceptance.acceptance}
    assert measured["ngram"] < DEFAULT_ACCEPTANCE["ngram"]
    req = head_window(workload.requests, 400)
    g, m = get_gpu("H100-SXM"), get_model("meta-llama/Llama-3.1-8B-Instruct")
    target = Target(g, m, 1, hardware_facts(g, 1), model_facts(m), load_params())
    plain = next(c for c in base_grid(target, max_model_len(req, m)) if c.engine == "vllm")
    spec = plain.model_copy(update={"speculative": SPECULATIVE})

    def tpot(config, goals):
        return evaluate(config, req, 1, target, goals).predicted.tpot_s.mean

    default = Goals("goodput", None, None)
    trace = Goals("goodput", None, None, measured_acceptance=measured)
    none = Goals("goodput", None, None, measured_acceptance={"ngram": 0.0})
    base = tpot(plain, default)
    assert tpot(plain, trace) == base  # no speculation: the measurement changes nothing
    at_default, at_trace, at_zero = tpot(spec, default), tpot(spec, trace), tpot(spec, none)
    # Fewer tokens per step than the default assumed: slower per token, a smaller gain.
    assert at_default < at_trace
    # Nothing accepted: every step verifies k + 1 positions for one token, no gain at all.
    assert at_zero >= base
    # A method the trace did not measure keeps its default.
    eagle = plain.model_copy(update={"speculative": SpeculativeConfig(
        method="eagle3", num_tokens=3, draft_model="yuhuili/EAGLE3-LLaMA3.1-Instruct-8B")})
    assert tpot(eagle, none) == tpot(eagle, default)


def test_the_explanation_says_where_the_acceptance_comes_from(sharegpt):
    prof, _ = sharegpt
    ng = prof.format.ngram_acceptance
    text = acceptance_text(prof, "ngram")
    assert f"acceptance {ng.acceptance:.2f} per token measured" in text
    assert f"{ng.outputs:,} replies" in text
    no_text = prof.model_copy(update={"format": prof.format.model_copy(
        update={"ngram_acceptance": None})})
    d = ACCEPTANCE_DEFAULTS["ngram"]
    assert (f"{d.acceptance:.2f} per token is the method's published default (band "
            f"{d.low:.2f}-{d.high:.2f})") in acceptance_text(no_text, "ngram")
    assert "published default" in acceptance_text(prof, "eagle3")


def test_a_speculative_pick_explains_its_acceptance_and_warns_when_assumed(sharegpt):
    from recommender.decision.explanation.caveats import warn
    from recommender.decision.explanation.context import Context
    from recommender.decision.explanation.reasons import explain
    from recommender.decision.recommendation import RecommendRequest
    from recommender.decision.search import SearchResult

    prof, workload = sharegpt
    req = head_window(workload.requests, 200)
    g, m = get_gpu("H100-SXM"), get_model("meta-llama/Llama-3.1-8B-Instruct")
    target = Target(g, m, 1, hardware_facts(g, 1), model_facts(m), load_params())
    plain = next(c for c in base_grid(target, max_model_len(req, m)) if c.engine == "vllm")
    spec = plain.model_copy(update={"speculative": SPECULATIVE})
    request = RecommendRequest(source=str(SHAREGPT), gpu=g.name, model=m.name)

    def context(goals):
        pick = evaluate(spec, req, 1, target, goals)
        return Context(request=request, profile=prof, workload=workload, target=target,
                       goals=goals, result=SearchResult([pick], 1, speculative_modelled=True),
                       synthetic=False)

    measured = context(Goals("goodput", None, None, measured_acceptance=measured_acceptance(prof)))
    reason = next(r.text for r in explain(measured) if r.text.startswith("speculative"))
    assert acceptance_text(prof, "ngram") in reason
    assert "speculative_acceptance_assumed" not in {w.code for w in warn(measured)}
    assumed = context(Goals("goodput", None, None))
    assert "speculative_acceptance_assumed" in {w.code for w in warn(assumed)}


def test_acceptance_measured_on_the_users_deployment_wins_and_is_named(sharegpt):
    from recommender.decision.recommendation import RecommendRequest

    prof, _ = sharegpt
    request = RecommendRequest(source=str(SHAREGPT), gpu="H100-SXM", model="llama-3.1-8b",
                               spec_acceptance={"ngram": 0.42})
    text = acceptance_text(prof, "ngram", request)
    assert "acceptance 0.42 per token as measured on your deployment" in text
    assert "replaying" not in text  # the trace's replay is overridden
    assert "published default" in acceptance_text(prof, "eagle3", request)
    with pytest.raises(ValueError, match="less than or equal to 1"):
        RecommendRequest(source="t", gpu="H100-SXM", model="m", spec_acceptance={"ngram": 1.5})
    with pytest.raises(ValueError, match="ngram"):
        RecommendRequest(source="t", gpu="H100-SXM", model="m", spec_acceptance={"nope": 0.5})
