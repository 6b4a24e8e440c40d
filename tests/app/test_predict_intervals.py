"""`predict --json` carries intervals beside its figures, and says plainly when the question
is outside the calibrated range (a cell with no data, a release never measured, an AMD GPU),
with the pooled wider interval (data/calibration/bands.json, bench/predict_accuracy.py)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from app.cli.main import main

BANDS = Path(__file__).resolve().parents[2] / "data" / "calibration" / "bands.json"
MOE_H100 = ["--engine", "vllm", "--model", "openai/gpt-oss-120b", "--gpu", "H100-SXM",
            "--precision", "mxfp4", "--isl", "1000", "--osl", "200", "--offline",
            "--num-requests", "200"]


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main(["predict", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_calibrated_release_gets_the_narrowest_interval_its_data_allow(capsys):
    out = _json(capsys, *MOE_H100, "--engine-version", "0.11")
    # the first group, narrowest first, with 20 held-out rows from 3 publisher families
    # (read here from the shipped bands.json)
    shipped = json.loads(BANDS.read_text())["providers"]["measured"]["intervals"]
    keys = ["vllm/hopper/moe/offline|throughput", "vllm/moe/offline|throughput",
            "offline|throughput", "*|throughput"]
    want = next(k for k in keys if k in shipped and shipped[k]["rows"] >= 20
                and shipped[k]["families"] >= 3)
    basis = out["interval_basis"]["throughput"]
    assert basis["basis"] == want and basis["pooled"] == (want != keys[0])
    assert basis["low"] == pytest.approx(math.exp(shipped[want]["p10"]))
    assert basis["high"] == pytest.approx(math.exp(shipped[want]["p90"]))
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
    [said] = [w for w in unknown["warnings"] if "vllm 0.4 was never measured" in w]
    # the releases it was calibrated on, in release order (0.9 before 0.10)
    listed = re.search(r"calibrated on ([0-9., ]+)\)", said).group(1).split(", ")
    numbers = [tuple(int(x) for x in r.split(".")) for r in listed]
    assert numbers == sorted(numbers) and len(numbers) > 1
    assert unknown["interval_basis"]["throughput"]["pooled"]
    width = {name: out["interval_basis"]["throughput"]["high"]
             / out["interval_basis"]["throughput"]["low"] for name, out in
             (("known", known), ("unknown", unknown))}
    # never narrower than what the release's own rows allow: the same or a wider group
    assert unknown["interval_basis"]["throughput"]["rows"] >= known["interval_basis"][
        "throughput"]["rows"]
    assert width["unknown"] >= width["known"] > 1.0


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
