"""`predict --json` carries intervals beside its figures, and says plainly when the question
is outside the calibrated range (a cell with no data, a release never measured, an AMD GPU),
with the pooled wider interval (data/calibration/bands.json, bench/predict_accuracy.py)."""

from __future__ import annotations

import json

import pytest

from app.cli import main

MOE_H100 = ["--engine", "vllm", "--model", "openai/gpt-oss-120b", "--gpu", "H100-SXM",
            "--precision", "mxfp4", "--isl", "1000", "--osl", "200", "--offline",
            "--num-requests", "200"]


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main(["predict", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_calibrated_cell_and_release_gets_its_own_interval(capsys):
    out = _json(capsys, *MOE_H100, "--engine-version", "0.11")
    basis = out["interval_basis"]["throughput"]
    assert basis["basis"] == "vllm/hopper/moe/offline|throughput" and not basis["pooled"]
    assert basis["rows"] >= 20
    low, high = out["interval"]["output_throughput_tok_s"].values()
    assert low == pytest.approx(out["output_throughput_tok_s"] * basis["low"])
    assert high == pytest.approx(out["output_throughput_tok_s"] * basis["high"])
    p95 = out["interval"]["ttft_ms"]["p95"]
    ttft = out["interval_basis"]["ttft"]
    assert p95["low"] == pytest.approx(out["ttft_ms"]["p95"] * ttft["low"])
    assert not any("outside the calibrated range" in w for w in out["warnings"])


def test_a_release_never_measured_says_so_with_a_pooled_interval(capsys):
    known = _json(capsys, *MOE_H100, "--engine-version", "0.11")
    unknown = _json(capsys, *MOE_H100, "--engine-version", "0.4")
    assert any("vllm 0.4 was never measured" in w for w in unknown["warnings"])
    assert unknown["interval_basis"]["throughput"]["pooled"]
    width = {name: out["interval_basis"]["throughput"]["high"]
             / out["interval_basis"]["throughput"]["low"] for name, out in
             (("known", known), ("unknown", unknown))}
    assert unknown["interval_basis"]["throughput"]["rows"] > known["interval_basis"][
        "throughput"]["rows"]
    assert width["unknown"] > 1.0


def test_an_amd_gpu_says_so(capsys):
    out = _json(capsys, "--engine", "vllm", "--model", "meta-llama/Llama-3.1-8B-Instruct",
                "--gpu", "MI300X", "--isl", "500", "--osl", "100", "--concurrency", "4",
                "--engine-version", "0.11")
    assert any("AMD GPU" in w for w in out["warnings"])
    assert all(b["pooled"] for b in out["interval_basis"].values())


def test_a_cell_with_no_data_says_so_and_pools(capsys):
    out = _json(capsys, "--engine", "vllm", "--model", "meta-llama/Llama-3.1-8B-Instruct",
                "--gpu", "B200", "--isl", "500", "--osl", "100", "--offline",
                "--num-requests", "100", "--engine-version", "0.11")
    assert out.get("band") is None
    assert any("outside every calibrated cell" in w for w in out["warnings"])
    assert all(b["pooled"] and not b["basis"].startswith("vllm/blackwell")
               for b in out["interval_basis"].values())
