"""Error bands per calibration cell (issue 12 §4): the cell of a deployment and load, and the
band `predict` carries, or a plain warning outside every calibrated cell."""

from __future__ import annotations

import json

import pytest

from core.figures import Band
from core.load import ClosedLoop, Offline, Rate, fixed
from engines.config import EngineConfig
from recommender.bands import band_for, cell_of, load_bands, regime_of
from recommender.catalog import get_gpu, get_model
from recommender.predict_sim import simulate_load

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
