"""The vLLM plug-in's argv and --config file are accepted by the real vLLM's own parser.

Runs `parser_probe.py` under the vLLM CPU build's interpreter (`.venv-vllm`, made by
scripts/setup_vllm.sh; `$SERVEFIT_VLLM_PYTHON` overrides) and compares what vLLM parsed
with what the EngineConfig asked for, for the direct argv and for the `--config` file form.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from engines.config import EngineConfig
from engines.registry import get_engine
from engines.vllm.flags import SWITCHES, VALUE_FLAGS

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
PROBE = Path(__file__).with_name("parser_probe.py")
VLLM_PYTHON = Path(os.environ.get("SERVEFIT_VLLM_PYTHON", ROOT / ".venv-vllm" / "bin" / "python"))

CONFIGS = {
    "defaults": dict(model="meta-llama/Llama-3.1-8B-Instruct"),
    "all_knobs": dict(
        model="Qwen/Qwen3-8B", tp=2, max_num_seqs=64, max_batched_tokens=4096,
        gpu_memory_fraction=0.88, prefix_caching=False, chunked_prefill=True,
        kv_cache_dtype="fp8", weight_quantization="awq", max_model_len=8192,
        speculative={"method": "eagle3", "num_tokens": 3, "draft_model": "yuhuili/EAGLE3-x"},
    ),
    "ngram_fp8": dict(model="m", weight_quantization="fp8", chunked_prefill=False,
                      max_batched_tokens=8192, max_model_len=8192,
                      speculative={"method": "ngram", "num_tokens": 4}),
    "draft_model": dict(model="m", speculative={"method": "draft_model", "num_tokens": 5,
                                                  "draft_model": "Qwen/Qwen3-0.6B"}),
    "hostile_name": dict(model="x; rm -rf / \"$(id)\" 'q'", prefix_caching=True,
                         extra_args={"enforce-eager": True, "seed": 7}),
    "disaggregated": dict(model="m", disaggregation={"prefill_instances": 1,
                                                      "decode_instances": 1}),
    "tep": dict(model="Qwen/Qwen3-235B-A22B", tp=8, ep=8),
    "dep": dict(model="Qwen/Qwen3-235B-A22B", dp=8, ep=8, max_num_seqs=512),
    "dep_tp2": dict(model="Qwen/Qwen3-235B-A22B", tp=2, dp=4, ep=8),
}

# EngineConfig field -> (vLLM namespace attribute, how vLLM stores our value)
EXPECTED = {
    "tp": ("tensor_parallel_size", lambda v: v),
    "pp": ("pipeline_parallel_size", lambda v: v),
    "dp": ("data_parallel_size", lambda v: v),
    "ep": ("enable_expert_parallel", lambda v: v > 1),  # vLLM's EP size is then tp × dp
    "max_num_seqs": ("max_num_seqs", lambda v: v),
    "max_batched_tokens": ("max_num_batched_tokens", lambda v: v),
    "gpu_memory_fraction": ("gpu_memory_utilization", lambda v: v),
    "prefix_caching": ("enable_prefix_caching", lambda v: v),
    "chunked_prefill": ("enable_chunked_prefill", lambda v: v),
    "max_model_len": ("max_model_len", lambda v: v),
}


def _probe(argvs: list[list[str]], *options: str) -> list[dict]:
    if not VLLM_PYTHON.exists():
        pytest.fail(f"no vLLM interpreter at {VLLM_PYTHON}: run scripts/setup_vllm.sh")
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "VLLM_NO_USAGE_STATS": "1",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run([str(VLLM_PYTHON), str(PROBE), *options], input=json.dumps(argvs),
                          env=env, capture_output=True, text=True, timeout=300, check=True)
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


@pytest.fixture(scope="module")
def parsed(tmp_path_factory):
    plugin = get_engine("vllm")
    argvs, names = [], []
    for name, fields in CONFIGS.items():
        config = EngineConfig(engine="vllm", **fields)
        folder = tmp_path_factory.mktemp(name)
        filename, text = plugin.config_file(config)
        (folder / filename).write_text(text)
        argvs += [plugin.server_argv(config)[1:],
                  plugin.serve_argv_with_config_file(config, str(folder / filename))[1:]]
        names += [(name, "argv"), (name, "config")]
    return dict(zip(names, _probe(argvs), strict=True))


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("form", ["argv", "config"])
def test_vllm_accepts_and_reads_our_settings(parsed, name, form):
    config = EngineConfig(engine="vllm", **CONFIGS[name])
    got = parsed[name, form]
    assert "error" not in got, got.get("error")
    assert got["model_tag"] == config.model
    for field, (attr, convert) in EXPECTED.items():
        value = getattr(config, field)
        if value is not None:
            assert got[attr] == convert(value), (field, got[attr])
    if config.kv_cache_dtype.startswith("fp8"):
        assert got["kv_cache_dtype"] == config.kv_cache_dtype
    if config.speculative is not None:
        spec = got["speculative_config"]
        assert spec["method"] == config.speculative.method
        assert spec["num_speculative_tokens"] == config.speculative.num_tokens
        assert spec.get("model") == config.speculative.draft_model
    if config.disaggregation is not None:
        assert got["kv_transfer_config"]["kv_connector"] == "NixlConnector"
    if config.extra_args:
        assert got["enforce_eager"] is True and got["seed"] == 7


def test_both_forms_parse_to_the_same_namespace(parsed):
    for name in CONFIGS:
        direct, from_file = parsed[name, "argv"], parsed[name, "config"]
        differing = {k for k in direct if k != "config" and direct[k] != from_file.get(k)}
        assert not differing, (name, differing)


def test_the_plugins_flag_list_is_the_real_parsers():
    (real,) = _probe([], "--flags")
    assert set(real["switches"]) == SWITCHES
    assert set(real["values"]) == VALUE_FLAGS


def test_extra_args_the_plugin_refuses_are_the_ones_vllm_rejects():
    """What export now refuses (issue 16) does fail in vLLM's parser; the accepted spelling
    of the same intent parses."""
    rejected = {"tokenizer": "--trust-remote-code", "tokenizr": "x", "enforce-eager": "yes"}
    argvs = [["serve", "m", f"--{name}", value] for name, value in rejected.items()]
    argvs.append(["serve", "m", "--tokenizer", "t", "--trust-remote-code"])
    *bad, good = _probe(argvs)
    assert all("error" in out for out in bad), bad
    assert "error" not in good and good["tokenizer"] == "t" and good["trust_remote_code"]
