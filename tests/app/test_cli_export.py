"""`python -m app export`: files printed, exit codes, no writes on bad input.

The bundle and the missing file go through a real `python -m app` subprocess (start-up, the
process's exit status and streams); the others call the CLI in this process (the `cli`
fixture): the same command logic without a new interpreter each time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONFIG = {"engine": "vllm", "model": "meta-llama/Llama-3.1-8B-Instruct", "tp": 1}


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "app", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def test_export_writes_the_bundle_and_prints_the_files(tmp_path: Path) -> None:
    (tmp_path / "rec.json").write_text(json.dumps(
        {"config": CONFIG, "gpu": "H100-SXM", "gpu_count": 1, "reasons": ["short prompts"]}))
    out = run_cli("export", "rec.json", "--out", "bundle", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    printed = out.stdout.split()
    assert len(printed) == 7
    assert {Path(p).name for p in printed} == {p.name for p in (tmp_path / "bundle").iterdir()}
    assert all((tmp_path / p).is_file() for p in printed)
    assert "short prompts" in (tmp_path / "bundle" / "REPORT.md").read_text()


def test_export_json_lists_the_files(cli, tmp_path: Path) -> None:
    (tmp_path / "rec.json").write_text(json.dumps(CONFIG))
    out = cli("export", "rec.json", "--out", "b", "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    printed = json.loads(out.stdout)
    assert printed["out"] == "b" and "b/launch.sh" in printed["files"]


@pytest.mark.parametrize(("content", "needle"), [
    ("{not json", "not JSON"),
    (json.dumps({**CONFIG, "engine": "tgi"}), "config.engine"),
    (json.dumps({"config": CONFIG, "extra": 1}), "extra: Extra inputs"),
    (json.dumps({"config": {**CONFIG, "tp": 3, "kv_cache_dtype": "int8"}}), "int8"),
    (json.dumps({"config": {**CONFIG, "tp": 3},
                 "hardware": {"gpu_name": "H100", "native_dtypes": ["bf16"], "gpu_count": 4,
                              "memory_per_gpu_gib": 80},
                 "model_facts": {"num_attention_heads": 32, "num_kv_heads": 8,
                                 "max_context_tokens": 8192}}), "tp=3 must divide"),
])
def test_bad_rec_json_is_one_line_exit_2_and_nothing_written(cli, tmp_path, content, needle):
    (tmp_path / "rec.json").write_text(content)
    out = cli("export", "rec.json", "--out", "bundle", cwd=tmp_path)
    assert out.returncode == 2
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rec.json"]


def test_missing_rec_json_is_one_line_exit_2(tmp_path: Path) -> None:
    out = run_cli("export", "nope.json", "--out", "bundle", cwd=tmp_path)
    assert out.returncode == 2 and "nope.json" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def _users_files(folder: Path) -> dict[str, str]:
    files = {"docker-compose.yaml": "services: {mine: {image: busybox}}\n",
             "REPORT.md": "# my notes\n"}
    for name, text in files.items():
        (folder / name).write_text(text)
    return files


def test_empty_out_is_refused_and_nothing_is_written(cli, tmp_path: Path) -> None:
    """Issue 16 F9: `--out ""` wrote into the current folder over the user's files."""
    (tmp_path / "rec.json").write_text(json.dumps(CONFIG))
    mine = _users_files(tmp_path)
    out = cli("export", "rec.json", "--out", "", cwd=tmp_path)
    assert out.returncode == 2 and out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].endswith("the output folder is empty: name a folder for "
                                                 "the bundle")
    assert {p.name: p.read_text() for p in tmp_path.iterdir() if p.name != "rec.json"} == mine


def test_existing_bundle_files_need_force(cli, tmp_path: Path) -> None:
    (tmp_path / "rec.json").write_text(json.dumps(CONFIG))
    mine = _users_files(tmp_path)
    out = cli("export", "rec.json", "--out", ".", cwd=tmp_path)
    assert out.returncode == 2 and out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "already exist" in lines[0] and "--force" in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["rec.json", *mine])
    assert {name: (tmp_path / name).read_text() for name in mine} == mine

    out = cli("export", "rec.json", "--out", ".", "--force", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "meta-llama/Llama-3.1-8B-Instruct" in (tmp_path / "docker-compose.yaml").read_text()
    assert (tmp_path / "REPORT.md").read_text() != mine["REPORT.md"]


@pytest.mark.parametrize(("config", "needle"), [
    ({**CONFIG, "model": "org/m\u0085x"}, "U+0085"),
    ({**CONFIG, "model": "org/" + "m" * 10_000_000}, "at most 4,096"),
    ({**CONFIG, "extra_args": {"tokenizer": "--trust-remote-code"}}, "starts with '-'"),
    ({**CONFIG, "extra_args": {"tokenizr": "org/t"}}, "did you mean 'tokenizer'"),
])
def test_names_the_engine_would_not_take_are_one_line(cli, tmp_path, config, needle) -> None:
    """Issue 16: these exported, then failed in `launch.sh` or vLLM's parser (or named
    another model in the YAML than in launch.sh)."""
    (tmp_path / "rec.json").write_text(json.dumps(config))
    out = cli("export", "rec.json", "--out", "bundle", cwd=tmp_path)
    assert out.returncode == 2 and out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and len(lines[0]) < 400, lines[0][:400]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rec.json"]
