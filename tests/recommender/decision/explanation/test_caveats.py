"""recommender/decision/explanation/caveats.py: the calibrated-range warnings, read from the fit
file's recorded coverage (what the fitted rows measured), not from the published CSV.

The context is the one `recommend` builds for a seeded trace (real profiler, real search, the
roofline parameters of tests/data/routing_params.json: quick, and no warning here
depends on the step-time provider). What the shipped fit covers is its file's `coverage`, which
tests/recommender/calibration/test_calibrate.py checks against the CSV rows the file lists as used.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from recommender.catalog.facts import hardware_facts, model_facts
from recommender.catalog.lookup import get_gpu, get_model
from recommender.decision.explanation import caveats
from recommender.decision.explanation.context import Context
from recommender.decision.goals import Goals, Target
from recommender.model import params as params_module
from recommender.model.params import FIT_FILE, PerfParams
from tests.recommender.decision.seeded import seeded_context

N = 60
PARAMS = PerfParams.model_validate_json(
    (Path(__file__).resolve().parents[3] / "data" / "routing_params.json").read_text())


@pytest.fixture(scope="module")
def shipped() -> dict:
    """What the shipped fit's rows measured: catalog model and GPU names, ISL range."""
    coverage = json.loads(FIT_FILE.read_text())["provenance"]["coverage"]
    return {"models": set(coverage["models"]), "gpus": set(coverage["gpus"]),
            "isl": (coverage["isl_min_tokens"], coverage["isl_max_tokens"])}


@pytest.fixture(scope="module")
def ctx(tmp_path_factory) -> Context:
    """Llama-3.1-8B on one H100-SXM, 60 requests of 100-2,999 input tokens at 4 req/s."""
    rng = np.random.default_rng(0)
    requests = pd.DataFrame({"arrival_s": np.cumsum(rng.exponential(0.25, N)),
                             "input_tokens": rng.integers(100, 3_000, N),
                             "output_tokens": rng.integers(20, 200, N)})
    gpu, model = get_gpu("H100-SXM"), get_model("llama-3.1-8b")
    target = Target(gpu, model, 1, hardware_facts(gpu, 1), model_facts(model), PARAMS)
    return seeded_context(tmp_path_factory.mktemp("caveats"), requests, target,
                          Goals("goodput", 0.3, 0.05))


@pytest.fixture
def fit_file(tmp_path, monkeypatch):
    """Point the caveats at a copy of the shipped fit file, edited by the test."""
    def write(edit) -> None:
        record = json.loads(FIT_FILE.read_text())
        edit(record)
        path = tmp_path / "fit.json"
        path.write_text(json.dumps(record))
        monkeypatch.setattr(params_module, "FIT_FILE", path)
        caveats._coverage.cache_clear()
    yield write
    caveats._coverage.cache_clear()


def texts(ctx: Context) -> list[str]:
    return [w.text for w in caveats._calibration_warnings(ctx)]


def test_a_covered_model_gpu_and_length_range_has_no_warning(ctx, shipped):
    assert "meta-llama/Llama-3.1-8B-Instruct" in shipped["models"]
    assert "H100-SXM" in shipped["gpus"]
    lo, hi = shipped["isl"]
    assert lo <= ctx.profile.input_tokens.p50 and ctx.profile.input_tokens.p99 <= hi
    assert texts(ctx) == []


def test_a_gpu_and_a_model_the_fit_never_saw_are_named(ctx, shipped):
    gpu, model = get_gpu("L4"), get_model("Qwen/Qwen3-32B")
    assert gpu.name not in shipped["gpus"] and model.name not in shipped["models"]
    other = dataclasses.replace(ctx, target=dataclasses.replace(ctx.target, gpu=gpu, model=model))
    assert texts(other) == [
        "model Qwen/Qwen3-32B is not in the calibration data: predictions come from shapes "
        "and other models' efficiencies",
        "GPU L4 is not in the calibration data"]


def test_input_lengths_past_the_calibrated_range_are_named(ctx, shipped):
    lo, hi = shipped["isl"]
    quantiles = ctx.profile.input_tokens.model_copy(update={"p99": hi + 1.0})
    longer = dataclasses.replace(
        ctx, profile=ctx.profile.model_copy(update={"input_tokens": quantiles}))
    [text] = texts(longer)
    assert text.endswith(f"reach outside the calibrated {lo:,}-{hi:,} tokens")
    assert f"p99 {hi + 1:,}" in text


def test_coverage_comes_from_the_fit_file(ctx, fit_file):
    def narrow(record: dict) -> None:
        record["provenance"]["coverage"]["gpus"] = ["B200"]
        record["provenance"]["coverage"]["isl_max_tokens"] = 1_000
    fit_file(narrow)
    assert texts(ctx)[0] == "GPU H100-SXM is not in the calibration data"
    assert texts(ctx)[1].endswith("reach outside the calibrated 32-1,000 tokens")


def test_a_large_held_out_error_of_the_picks_engine_says_rough(ctx, fit_file):
    engine = ctx.best.config.engine
    fit_file(lambda r: r["errors"][f"test/{engine}"].update(median_ape_pct=40.0))
    assert texts(ctx) == [f"{engine}'s calibration misses held-out measurements by 40% "
                          "(median): treat its figures as rough"]


def test_a_fit_file_without_coverage_says_it_is_unknown(ctx, fit_file):
    fit_file(lambda r: r["provenance"].pop("coverage"))
    [warning] = caveats._calibration_warnings(ctx)
    assert warning.code == "calibration_unknown"
