"""Catalog entries become the engines' capability facts, and export checks with them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engines.errors import CapabilityError
from engines.export.bundle import render_bundle
from engines.export.request import ExportRequest
from recommender.catalog.facts import hardware_facts, model_facts, with_catalog_facts
from recommender.catalog.lookup import get_gpu, get_model

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(("gpu", "capability", "fp8", "fp4"), [
    ("H100-SXM", (9, 0), True, False),
    ("A100-80GB", (8, 0), False, False),
    ("L4", (8, 9), True, False),
    ("B200", (10, 0), True, True),
    ("MI300X", None, True, False),
])
def test_hardware_facts(gpu, capability, fp8, fp4):
    facts = hardware_facts(get_gpu(gpu), 4)
    assert facts.compute_capability == capability
    assert ("fp8" in facts.native_dtypes, "fp4" in facts.native_dtypes) == (fp8, fp4)
    assert {"bf16", "fp16"} <= facts.native_dtypes and facts.gpu_count == 4
    assert facts.memory_per_gpu_gib == pytest.approx(get_gpu(gpu).memory_gb * 1e9 / 2**30)


def test_model_facts():
    llama = model_facts(get_model("meta-llama/Llama-3.1-70B-Instruct"))
    assert (llama.num_attention_heads, llama.num_kv_heads, llama.num_layers,
            llama.max_context_tokens, llama.is_moe) == (64, 8, 80, 131072, False)
    assert model_facts(get_model("mistralai/Mixtral-8x7B-Instruct-v0.1")).is_moe


def test_model_facts_carry_the_published_quantized_checkpoints():
    assert model_facts(get_model("meta-llama/Llama-3.3-70B-Instruct")).quantized_checkpoints == {
        "fp8": "nvidia/Llama-3.3-70B-Instruct-FP8", "nvfp4": "nvidia/Llama-3.3-70B-Instruct-FP4"}
    assert model_facts(get_model("Qwen/Qwen3-8B")).quantized_checkpoints == {}


def _request(gpu: str | None, **config) -> ExportRequest:
    return ExportRequest.model_validate({"config": {"engine": "vllm", "model": "Qwen/Qwen3-8B",
                                                    **config}, "gpu": gpu})


def test_with_catalog_facts_fills_known_and_skips_unknown():
    filled = with_catalog_facts(_request("A100-80GB", tp=2))
    assert filled.hardware.gpu_count == 2 and filled.model_facts.num_layers == 36
    assert with_catalog_facts(_request("TPU-v5")).hardware is None
    assert with_catalog_facts(_request(None)).hardware is None


def test_export_refuses_fp8_kv_on_a100_from_the_catalog(tmp_path):
    rec = tmp_path / "rec.json"
    rec.write_text(json.dumps({"config": {"engine": "vllm", "model": "Qwen/Qwen3-8B",
                                          "kv_cache_dtype": "fp8"}, "gpu": "A100-80GB"}))
    done = subprocess.run([sys.executable, "-m", "app", "export", str(rec), "--out",
                           str(tmp_path / "out")], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and "fp8" in done.stderr.lower()
    assert not (tmp_path / "out").exists()


def _trtllm_fp8(model: str) -> ExportRequest:
    return with_catalog_facts(ExportRequest.model_validate(
        {"config": {"engine": "trtllm", "model": model, "weight_quantization": "fp8"},
         "gpu": "H100-SXM"}))


def test_trtllm_fp8_export_from_the_catalog_serves_the_fp8_checkpoint():
    files = render_bundle(_trtllm_fp8("llama-3.1-8b"))  # an alias names the catalog model
    assert "exec trtllm-serve nvidia/Llama-3.1-8B-Instruct-FP8 --backend pytorch" in files[
        "launch.sh"]


def test_trtllm_fp8_export_of_a_model_without_a_checkpoint_is_refused():
    with pytest.raises(CapabilityError, match=r"^weight_quantization=fp8: TensorRT-LLM cannot "
                       r"quantize the bf16 checkpoint Qwen/Qwen3-8B on load"):
        render_bundle(_trtllm_fp8("Qwen/Qwen3-8B"))


def _awq(engine: str, model: str) -> ExportRequest:
    return with_catalog_facts(ExportRequest.model_validate(
        {"config": {"engine": engine, "model": model, "weight_quantization": "awq"},
         "gpu": "H100-SXM"}))


@pytest.mark.parametrize(("engine", "serve"), [
    ("vllm", "exec vllm serve hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4 --config"),
    ("sglang", "--model-path hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4 --config"),
])
def test_awq_export_from_the_catalog_serves_the_awq_checkpoint(engine, serve):
    assert model_facts(get_model("llama-3.1-8b")).quantized_checkpoints["awq"] == (
        "hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4")
    assert serve in render_bundle(_awq(engine, "llama-3.1-8b"))["launch.sh"]


@pytest.mark.parametrize(("engine", "name"), [("vllm", "vLLM"), ("sglang", "SGLang"),
                                              ("trtllm", "TensorRT-LLM")])
def test_awq_export_of_a_model_without_a_checkpoint_is_refused(engine, name):
    with pytest.raises(CapabilityError, match=rf"^weight_quantization=awq: {name} cannot "
                       r"quantize the bf16 checkpoint Qwen/Qwen3-8B on load"):
        render_bundle(_awq(engine, "Qwen/Qwen3-8B"))
