"""load_params on hostile fit files (`predict --fit`): one line naming the file and the first
problem, never a traceback or pydantic's many-line dump (issue 28's round of new flags)."""

from __future__ import annotations

import json

import pytest

from app.cli.main import main
from core.errors import UsageError
from recommender.model.params import load_params


@pytest.mark.parametrize(("text", "reason"), [
    ("[1, 2]", "expected a JSON object"),
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ('{"params_by_step_time": [1]}', "cannot load"),
    ("{}", "'params'"),
])
def test_a_malformed_fit_file_is_one_usage_error(tmp_path, text, reason):
    fit = tmp_path / "fit.json"
    fit.write_text(text)
    with pytest.raises(UsageError, match=reason) as caught:
        load_params(fit)
    assert "\n" not in str(caught.value)


def test_an_out_of_range_parameter_names_its_field_on_one_line(tmp_path):
    engine = {"compute_efficiency": 1e308}  # a share of peak FLOP/s: at most 1
    fit = tmp_path / "fit.json"
    fit.write_text(json.dumps({"params": {"engines": {"vllm": engine}}}))
    with pytest.raises(UsageError) as caught:
        load_params(fit, step_time="roofline")
    message = str(caught.value)
    assert "engines.vllm.compute_efficiency" in message and "\n" not in message


def test_predict_with_a_hostile_fit_file_exits_2_in_one_line(tmp_path, capsys):
    fit = tmp_path / "fit.json"
    fit.write_text("[" * 100_000 + "]" * 100_000)
    assert main(["predict", "--engine", "vllm", "--model", "Llama-3.1-8B", "--gpu", "H100-SXM",
                 "--isl", "100", "--osl", "10", "--concurrency", "1", "--fit", str(fit)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nested too deeply" in err and "Traceback" not in err
