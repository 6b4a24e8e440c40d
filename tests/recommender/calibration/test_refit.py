"""Tests for recommender/calibration/refit.py: refitting to the user's own measured runs."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from core.errors import UsageError
from core.load import fixed
from engines.config import EngineConfig
from recommender.calibration import calibrate
from recommender.calibration.refit import read_measured
from recommender.model.params import load_params
from recommender.sim.predict import PredictRequest, predict

WORKLOADS = [  # (isl, osl, concurrency, num_requests)
    (500, 200, 1, None), (500, 200, 16, None), (2000, 300, 64, None), (1000, 1000, None, 2000),
    (200, 100, 8, None), (4000, 200, 4, None),
]


def _measured(tmp_path, truth, suffix=".csv"):
    """The user's 'hardware' is the model with `truth` parameters (what `predict` answers,
    the simulator; latencies: the means): runs measured on it."""
    recs = []
    for isl, osl, conc, n in WORKLOADS:
        load = fixed(isl, osl, concurrency=conc, offline=conc is None, num_requests=n)
        config = EngineConfig(engine="vllm", model="Qwen/Qwen3-8B", weight_quantization="none")
        pred = predict(PredictRequest(config=config, gpu="H100-SXM", model="Qwen/Qwen3-8B",
                                      load=load, step_time=truth.step_time), params=truth)
        for metric, value in (("output_throughput_tok_s", pred.output_throughput_tok_s),
                              ("ttft_ms", pred.ttft_s.mean * 1e3),
                              ("tpot_ms", pred.tpot_s.mean * 1e3)):
            recs.append({"engine": "vllm", "model": "Qwen/Qwen3-8B", "gpu": "H100-SXM",
                         "tp": 1, "isl": isl, "osl": osl, "concurrency": conc,
                         "num_requests": n, "metric": metric, "value": value})
    path = tmp_path / f"runs{suffix}"
    if suffix == ".csv":
        pd.DataFrame(recs).to_csv(path, index=False)
    else:
        path.write_text("\n".join(json.dumps({k: v for k, v in r.items() if v is not None})
                                  for r in recs), encoding="utf-8")
    return path


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_refit_moves_towards_the_user_hardware_and_cuts_error(tmp_path, suffix, capsys):
    base = load_params()
    v = base.engines["vllm"]
    # Parameters every step-time provider uses (the measured tables ignore the roofline's
    # efficiencies): the user's API server is slower per request, and its engine spends
    # 1.5 ms more per step (the fitted step overhead is a fraction of a ms: x3 of it hides
    # under the other terms' spread).
    truth_vllm = v.model_copy(update={"request_overhead_s": v.request_overhead_s * 2.0,
                                      "step_overhead_s": v.step_overhead_s + 1.5e-3})
    truth = base.model_copy(update={"engines": {**base.engines, "vllm": truth_vllm}})
    out = tmp_path / "fit_measured.json"
    rc = calibrate.main(["--measured", str(_measured(tmp_path, truth, suffix)),
                         "--out", str(out)])
    assert rc == 0
    record = json.loads(out.read_text(encoding="utf-8"))
    before, after = (record["errors"][k]["median_ape_pct"] for k in ("before", "after"))
    # 18 rows against the fitted parameters per engine and the prior: most of the way, not
    # all. Scored as `predict` answers (the simulator, which made the rows), about half the
    # error remains (13.1 % → 6.2 %, where the steady-state model scored against its own rows
    # went below /2.5): the prior holds the 6x step overhead back, and the refit's objective
    # (rows + prior) at its answer is below that at the truth itself, so the bound is /2.
    assert before > 5 and after < before / 2
    moved = record["moved"]
    # at least half the way to the truth, in log (the base step overhead is the fit's, so
    # +1.5 ms is a ratio that moves with it)
    for name in ("request_overhead_s", "step_overhead_s"):
        true_ratio = getattr(truth_vllm, name) / getattr(v, name)
        assert moved[f"vllm.{name}"]["ratio"] > true_ratio ** 0.5 > 1.2, name
    assert not any(k.startswith(("trtllm.", "sglang.")) for k in moved)  # no rows, no move
    printed = capsys.readouterr().out
    assert "median APE" in printed and "vllm.step_overhead_s" in printed


def test_bad_measured_rows_are_one_clear_error(tmp_path):
    path = tmp_path / "bad.csv"
    pd.DataFrame([{"engine": "vllm", "model": "Qwen/Qwen3-8B", "gpu": "H100-SXM", "tp": 1,
                   "isl": 100, "osl": 10, "concurrency": 1, "metric": "ttft_hours",
                   "value": 1.0}]).to_csv(path, index=False)
    with pytest.raises(UsageError, match=r"row 1.*metric"):
        read_measured(path)
    pd.DataFrame([{"engine": "vllm", "model": "Qwen/Qwen3-8B", "gpu": "H100-SXM", "tp": 0,
                   "isl": 100, "osl": 10, "concurrency": 1, "metric": "ttft_ms",
                   "value": 1.0}]).to_csv(path, index=False)
    with pytest.raises(UsageError, match="row 1, tp"):
        read_measured(path)
    assert calibrate.main(["--measured", str(tmp_path / "missing.csv"),
                           "--out", str(tmp_path / "o.json")]) == 2
    assert not (tmp_path / "o.json").exists()
