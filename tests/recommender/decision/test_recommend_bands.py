"""How far a recommendation can be trusted: the regime of a trace replay (open loop, counted
as the closed loop at its mean occupancy) and a recommendation outside every calibrated cell
(an MoE model: no published measurement covers one), which says so plainly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engines.export.bundle import export_bundle
from recommender.calibration.cells import replay_regime
from recommender.decision.export_view import export_view
from recommender.decision.recommend import recommend_trace
from recommender.decision.recommendation import RecommendRequest

ROOT = Path(__file__).resolve().parents[3]
SAMPLE = ROOT / "data" / "samples" / "AzureLLMInferenceTrace_conv.csv"
BANDS_JSON = ROOT / "data" / "calibration" / "bands.json"
MOE = "openai/gpt-oss-20b"


@pytest.mark.parametrize(("rps", "e2e_s", "regime"), [
    (2.0, 1.5, "low_batch"),            # 3 requests in the system on average
    (2.0, 2.2, "low_batch"),            # 4.4 → 4: still at most 4 users
    (8.0, 1.0, "fixed_concurrency"),    # 8 in the system
    (0.001, 10.0, "low_batch"),         # an almost idle replica still holds one request
    (5.0, None, "rate"),                # nothing completed: no closed-loop equivalent
    (0.0, 1.0, "rate"),
])
def test_a_replay_is_the_closed_loop_at_its_mean_occupancy(rps, e2e_s, regime) -> None:
    assert replay_regime(rps, e2e_s) == regime


def test_an_moe_model_has_no_calibrated_cell_and_says_so(tmp_path: Path) -> None:
    # The published rows measure MoE on Ada only offline (trtllm-bench), and a trace replay
    # is never offline: an MoE model on an L40S has no calibrated cell for any engine.
    cells = json.loads(BANDS_JSON.read_text())["cells"]
    assert [c for c in cells if "/ada/moe/" in c] == ["trtllm/ada/moe/offline"]
    rec = recommend_trace(RecommendRequest(source=str(SAMPLE), gpu="L40S", model=MOE,
                                           max_requests=300))
    pick = rec.pick.predicted
    assert pick.band is None
    assert pick.calibration_cell is not None
    assert pick.calibration_cell.startswith(f"{rec.pick.config.engine}/ada/moe/")
    assert all(c.predicted.band is None
               and "/ada/moe/" in (c.predicted.calibration_cell or "")
               for c in rec.candidates)
    [warning] = [w for w in rec.warnings if w.code == "uncalibrated_cell"]
    assert (f"no published measurement covers {pick.calibration_cell}: the figures are the "
            "model's alone") in warning.text
    export_bundle(export_view(rec), tmp_path / "bundle")
    report = (tmp_path / "bundle" / "REPORT.md").read_text()
    assert (f"Uncalibrated: no published measurement covers cell `{pick.calibration_cell}`"
            in report)
