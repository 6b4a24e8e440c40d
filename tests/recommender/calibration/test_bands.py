"""Error bands per calibration cell (issue 12 §4): the cell of a deployment and load, and the
band `predict` carries, or a plain warning outside every calibrated cell."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from core.errors import CatalogError, UsageError
from core.figures import Band
from core.load import ClosedLoop, Offline, Rate, fixed
from engines.config import EngineConfig
from recommender.calibration.bands import interval_for, predictive_interval
from recommender.calibration.bands_file import (
    BANDS_FILE,
    SignedErrors,
    band_for,
    band_of_prediction,
    cell_band,
    load_bands,
)
from recommender.calibration.cells import cell_of, regime_of
from recommender.calibration.fitting import PROCEDURE
from recommender.catalog.lookup import get_gpu, get_model
from recommender.model.params import load_params
from recommender.sim.predict import simulate_load

ROOT = Path(__file__).resolve().parents[3]
H100 = get_gpu("H100-SXM")
LLAMA8 = get_model("llama-3.1-8b")
CFG = EngineConfig(engine="vllm", model=LLAMA8.name)


@pytest.mark.parametrize(("arrival", "concurrency", "regime"), [
    (Offline(), None, "offline"),
    (ClosedLoop(concurrency=4), None, "low_batch"),
    (ClosedLoop(concurrency=5), None, "fixed_concurrency"),
    (Rate(rate_rps=2.0), None, "rate"),
    (None, 1, "low_batch"),  # a calibration row: closed loop at its concurrency
    (None, 64, "fixed_concurrency"),
    (None, None, "offline"),
])
def test_regimes(arrival, concurrency, regime):
    assert regime_of(arrival, concurrency) == regime


def test_cell_names_engine_family_moe_and_regime():
    assert cell_of("vllm", H100, LLAMA8, "low_batch") == "vllm/hopper/dense/low_batch"
    moe = get_model("Qwen3-235B-A22B")
    assert cell_of("sglang", get_gpu("MI300X"), moe, "offline") == "sglang/cdna3/moe/offline"


@pytest.fixture
def bands_file(tmp_path):
    path = tmp_path / "bands.json"
    path.write_text(json.dumps({
        "schema_version": 1, "method": "test", "csv_sha256": "0" * 64,
        "overall": {"median_ape": 0.2, "rows": 12},
        "cells": {"vllm/hopper/dense/low_batch": {"median_ape": 0.12, "rows": 7}},
    }))
    return path


def test_a_calibrated_cell_carries_its_band(bands_file):
    pred = simulate_load(CFG, LLAMA8, H100, fixed(500, 100, concurrency=2, num_requests=20),
                         bands_file=bands_file)
    assert pred.band == Band(cell="vllm/hopper/dense/low_batch", median_ape=0.12, rows=7)
    assert pred.json_ms()["band"] == {"cell": "vllm/hopper/dense/low_batch",
                                      "median_ape": 0.12, "rows": 7}
    assert not any("calibrated cell" in w for w in pred.warnings)


def test_a_cell_with_no_data_says_so(bands_file):
    # Concurrency 32 is fixed_concurrency: no row of the file backs it.
    pred = simulate_load(CFG, LLAMA8, H100, fixed(500, 100, concurrency=32, num_requests=64),
                         bands_file=bands_file)
    assert pred.band is None and "band" not in pred.json_ms()
    said = [w for w in pred.warnings if "outside every calibrated cell" in w]
    assert len(said) == 1 and "vllm/hopper/dense/fixed_concurrency" in said[0]
    assert band_for("trtllm/ampere/moe/rate", load_bands(bands_file)) is None


def test_no_bands_file_is_a_warning_not_an_error(tmp_path):
    pred = simulate_load(CFG, LLAMA8, H100, fixed(500, 100, concurrency=2, num_requests=20),
                         bands_file=tmp_path / "missing.json")
    assert pred.band is None and any("missing" in w for w in pred.warnings)


@pytest.fixture
def two_provider_bands(tmp_path):
    """A schema-2 file: the measured provider's errors (the default's, also at the top
    level, as the bench writes them) and different ones for the roofline."""
    roof = {"overall": {"median_ape": 0.2, "rows": 12},
            "cells": {"vllm/hopper/dense/low_batch": {"median_ape": 0.12, "rows": 7}}}
    measured = {"overall": {"median_ape": 0.3, "rows": 9},
                "cells": {"vllm/hopper/dense/low_batch": {"median_ape": 0.05, "rows": 6}}}
    path = tmp_path / "bands.json"
    path.write_text(json.dumps({
        "schema_version": 2, "method": "test", "csv_sha256": "0" * 64,
        "fit_procedure": "all", **measured,
        "providers": {"roofline": roof, "measured": measured},
    }))
    return path


def test_the_band_is_the_step_time_providers_own(two_provider_bands):
    bands = load_bands(two_provider_bands)
    cell = "vllm/hopper/dense/low_batch"
    assert band_for(cell, bands, "roofline") == Band(cell=cell, median_ape=0.12, rows=7)
    assert band_for(cell, bands, "measured") == Band(cell=cell, median_ape=0.05, rows=6)
    assert band_for(cell, bands) == Band(cell=cell, median_ape=0.05, rows=6)  # default kind
    # The provider asked about picks the band: an argument, here and in predict (there, the
    # provider the parameters were fitted for).
    assert cell_band(cell, two_provider_bands, "roofline") == Band(cell=cell, median_ape=0.12,
                                                                   rows=7)
    assert cell_band(cell, two_provider_bands) == Band(cell=cell, median_ape=0.05, rows=6)
    load = fixed(500, 100, concurrency=2, num_requests=20)
    for kind, ape, rows in (("roofline", 0.12, 7), ("measured", 0.05, 6)):
        pred = simulate_load(CFG, LLAMA8, H100, load, params=load_params(step_time=kind),
                             bands_file=two_provider_bands)
        assert pred.band == Band(cell=cell, median_ape=ape, rows=rows), kind


def test_a_provider_without_bands_says_so(bands_file):
    # A schema-1 file holds the default provider's errors only.
    cell = "vllm/hopper/dense/low_batch"
    assert band_of_prediction(cell, bands_file, "measured")[0] == Band(
        cell=cell, median_ape=0.12, rows=7)
    band, warning = band_of_prediction(cell, bands_file, "roofline")
    assert band is None
    assert warning is not None and "no error bands for step-time provider 'roofline'" in warning
    assert cell_band(cell, bands_file, "roofline") is None


def test_shipped_bands_match_the_calibration_csv():
    """bands.json is the cross-validation of this CSV: a CSV change without --write-bands
    fails here."""
    csv = ROOT / "data" / "calibration" / "published_calibration.csv.gz"
    bands = load_bands(BANDS_FILE)
    assert bands.csv_sha256 == hashlib.sha256(csv.read_bytes()).hexdigest()
    # the default provider's errors always; the roofline's when its cross-validation was
    # run on this CSV too (predict --step-time roofline says when it has none)
    assert "measured" in bands.providers
    measured = bands.for_provider("measured")
    assert measured is not None
    assert (measured.overall, measured.cells) == (bands.overall, bands.cells)
    assert measured.intervals and measured.releases  # the intervals predict reports
    assert "leave-one-family-out" in bands.method
    fit = json.loads((ROOT / "data" / "calibration" / "fit.json").read_text())
    assert fit["provenance"]["csv_sha256"] == bands.csv_sha256
    assert fit["provenance"]["fit_procedure"] == bands.fit_procedure
    # ... and of today's procedure, which names the fitted parameters: a model that fits
    # other parameters fails here until both files are written again.
    assert bands.fit_procedure == PROCEDURE


# ---------------------------------------------------------------------------------------------
# Intervals for a publisher family never seen


def test_families_that_only_shift_give_the_t_prediction_interval_of_one_more_family():
    # Each family measures every row at the same ratio (no scatter within a family): a new
    # family's error is one more draw of the shift, mean ± t(F-1, 0.9) · sd · sqrt(1 + 1/F).
    shifts = [-0.3, 0.1, 0.2, 0.6]
    got = predictive_interval({f"f{i}": [s] * (5 + i) for i, s in enumerate(shifts)})
    half = stats.t.ppf(0.9, df=3) * np.std(shifts, ddof=1) * np.sqrt(1 + 1 / 4)
    assert got.p10 == pytest.approx(np.mean(shifts) - half, rel=0.02)
    assert got.p90 == pytest.approx(np.mean(shifts) + half, rel=0.02)
    assert (got.rows, got.families) == (26, 4)


def test_every_family_counts_once_and_one_family_is_its_own_percentiles():
    rng = np.random.default_rng(7)
    small, big = rng.normal(0.0, 0.1, 10), rng.normal(0.0, 0.1, 1000)
    alone = predictive_interval({"big": big})
    assert (alone.p10, alone.p90) == pytest.approx(
        tuple(np.percentile(big, [10, 90], method="hazen")))
    # two families of equal shift: the big one's 1,000 rows do not drown the small one's
    shifted = predictive_interval({"small": small + 1.0, "big": big})
    assert (shifted.p10 + shifted.p90) / 2 == pytest.approx(
        (np.median(small + 1.0) + np.median(big)) / 2, abs=0.05)
    assert shifted.p90 - shifted.p10 > 2.0  # a shift of 1 between two families: wide


def test_a_group_needs_rows_from_three_families_or_the_wider_one_is_used():
    narrow = SignedErrors(p10=-0.1, p90=0.1, rows=40, families=2)
    wide = SignedErrors(p10=-0.5, p90=0.5, rows=60, families=4)
    assert interval_for(["cell|ttft", "*|ttft"], {"cell|ttft": narrow, "*|ttft": wide}) == (
        "*|ttft", wide)
    enough = narrow.model_copy(update={"families": 3})
    assert interval_for(["cell|ttft", "*|ttft"], {"cell|ttft": enough, "*|ttft": wide}) == (
        "cell|ttft", enough)
    # nothing qualifies: no interval, never the widest thin one of one family
    thin = SignedErrors(p10=0.09, p90=0.23, rows=3, families=1)
    assert interval_for(["cell|e2e", "*|e2e"], {"*|e2e": thin}) is None
    # the widest group with rows from three families serves, however few rows it has
    few = SignedErrors(p10=-1.5, p90=2.5, rows=17, families=3)
    assert interval_for(["cell|ttft", "*|ttft"], {"cell|ttft": narrow, "*|ttft": few}) == (
        "*|ttft", few)


def test_a_broken_bands_file_is_one_line_that_no_search_takes_for_a_candidate(tmp_path):
    broken = tmp_path / "bands.json"
    broken.write_text(json.dumps({"method": "m", "csv_sha256": "x", "overall": {},
                                  "cells": {}}))
    with pytest.raises(CatalogError, match=r"cannot load error bands \(2 errors, first "
                       r"overall.median_ape: Field required\)") as info:
        load_bands(broken)
    assert "\n" not in str(info.value) and not isinstance(info.value, UsageError)
