"""`python -m app profile` and `synth`: JSON keys, files written, exit codes.

A real `python -m app` subprocess runs profile's text summary and one of its usage errors, and
synth's refusal of a broken profile (start-up, the process's exit status and streams); the rest
call the CLI in this process (the `cli` fixture), which tests the same command logic without
paying the interpreter's start-up and imports again for every test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from profiler.formats.registry import TABLE_FORMATS, TEXT_FORMATS
from tests import reference as ref

ROOT = Path(__file__).resolve().parents[2]
PROFILE_KEYS = {"n_requests", "duration_s", "mean_qps", "peak_qps_1s", "peak_qps_60s",
                "peak_to_mean_1s", "peak_to_mean_60s", "interarrival_cv", "input_tokens",
                "output_tokens", "multi_turn_share", "prefix_reuse_infinite",
                "prefix_reuse_lru", "segments", "rate_series", "format", "warnings"}


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("SERVEFIT_WORKSPACE", None)
    return subprocess.run([sys.executable, "-m", "app", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300, check=False)


def test_trace_option_help_names_the_profilers_formats_and_units(cli, tmp_path):
    out = cli("profile", "--help", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())  # argparse wraps help lines
    listed = text.split("force the trace format: ")[1].split(" (default: detect)")[0]
    assert sorted(listed.split(", ")) == sorted([*TABLE_FORMATS, *TEXT_FORMATS])
    assert "override the timestamp rule: s, ms, us, ns, datetime" in text


def test_profile_json_has_exactly_the_design_keys(cli, tmp_path):
    trace = ref.TRACES / "mooncake_conversation_trace.jsonl.gz"
    out = cli("profile", str(trace), "--json", "--lru-capacity-blocks", "500", "10000",
                  "-o", "p.json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    printed = json.loads(out.stdout)
    assert set(printed) == PROFILE_KEYS
    assert set(printed["input_tokens"]) == {"p50", "p90", "p99", "mean", "max", "min"}
    assert set(printed["prefix_reuse_lru"]) == {"500", "10000"}
    assert json.loads((tmp_path / "p.json").read_text()) == printed
    assert (tmp_path / ".servefit" / "workspace.duckdb").is_file()
    raw = pd.read_json(trace, lines=True)
    assert printed["n_requests"] == len(raw)
    assert printed["output_tokens"]["max"] == raw["output_length"].max()


def test_profile_text_summary(tmp_path):
    out = run_cli("profile", str(ref.TRACES / "BurstGPT_1.head400.csv"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "BurstGPT" in out.stdout and "400" in out.stdout
    assert "ngram acceptance" not in out.stdout  # no reply text in a table trace


def test_profile_text_names_the_ngram_acceptance_a_text_trace_measured(cli, tmp_path):
    trace = ref.TRACES / "sharegpt_head1000.json.gz"
    got = json.loads(cli("profile", str(trace), "--json", cwd=tmp_path).stdout)
    ngram = got["format"]["ngram_acceptance"]
    text = cli("profile", str(trace), cwd=tmp_path).stdout
    assert (f"ngram acceptance {ngram['acceptance']:.2f} per token" in text
            and f"{ngram['outputs']:,} replies" in text)


@pytest.mark.parametrize(("content", "needle"), [
    ("", "empty"),
    ("a,b\n1,2\n", "--map"),
    ("input_tokens,output_tokens\n5,7\n-3,2\n", "row 2"),
])
def test_bad_input_is_one_line_exit_2_and_no_workspace(cli, tmp_path, content, needle):
    bad = tmp_path / "bad.csv"
    bad.write_text(content)
    out = cli("profile", str(bad), "-o", "p.json", cwd=tmp_path)
    assert out.returncode == 2
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "bad.csv" in lines[0]
    assert not (tmp_path / ".servefit").exists()
    assert not (tmp_path / "p.json").exists()


def test_usage_errors_exit_2(cli, tmp_path):
    trace = str(ref.TRACES / "BurstGPT_1.head400.csv")
    # The first through a real process (its exit status), the others in this process.
    for run, args in ((run_cli, ["--map", "nonsense"]), (cli, ["--map", "colour=x"]),
                      (cli, ["--time-unit", "weeks"]), (cli, ["--format", "nope"]),
                      (cli, ["--lru-capacity-blocks", "0"])):
        out = run("profile", trace, *args, cwd=tmp_path)
        assert out.returncode == 2, args
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr


# --max-decompressed-mb 0 was falsy: the CLI passed no cap and the default applied in silence.
@pytest.mark.parametrize(("flag", "value"), [("--synthesize-arrivals", "-3"),
                                             ("--max-decompressed-mb", "0")])
def test_a_bad_option_value_is_named_as_the_flag_typed(cli, tmp_path, flag, value):
    trace = str(ref.TRACES / "BurstGPT_1.head400.csv")
    out = cli("profile", trace, flag, value, cwd=tmp_path)
    assert out.returncode == 2
    assert out.stderr.strip().endswith(f"error: {flag}: Input should be greater than 0"), \
        out.stderr


def test_profile_then_synth_from_the_saved_profile(cli, tmp_path):
    trace = ref.TRACES / "BurstGPT_3.head400.csv"
    assert cli("profile", str(trace), "-o", "p.json", cwd=tmp_path).returncode == 0
    out = cli("synth", "p.json", "--requests", "2000", "-o", "s.parquet", "--seed", "3",
                  cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    synth = pd.read_parquet(tmp_path / "s.parquet")
    assert len(synth) == 2000 and synth["arrival_s"].is_monotonic_increasing
    again = cli("profile", "s.parquet", "--json", cwd=tmp_path)
    assert json.loads(again.stdout)["format"]["kind"] == "servefit"


def test_synth_refuses_a_broken_profile(tmp_path):
    (tmp_path / "p.json").write_text('{"n_requests": "many", "format": {}}')
    out = run_cli("synth", "p.json", "--requests", "10", "-o", "s.parquet", cwd=tmp_path)
    assert out.returncode == 2 and "not a valid profile.json" in out.stderr
    assert not (tmp_path / "s.parquet").exists()
