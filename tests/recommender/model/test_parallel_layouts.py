"""Expert parallelism and attention data parallelism in the model: memory, step time,
the measured tables' cell, the search's layouts, and `predict --dp/--ep`.

Expected values are computed here from the catalog's published shapes (a few lines of
arithmetic), not by calling the code under test.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from app.cli.main import main
from engines.config import EngineConfig
from recommender.catalog.lookup import get_gpu, get_model
from recommender.decision.grid import layouts
from recommender.model.aic_cells import cell_key
from recommender.model.footprint import EMBEDDING_BYTES_PER_PARAM, WEIGHT_BYTES_PER_PARAM
from recommender.model.memory import plan_memory
from recommender.model.params import EngineParams
from recommender.model.perf import Batch, deployment, step_coefficients, step_seconds
from recommender.model.steptime import StepCell

MOE = "Qwen/Qwen3-235B-A22B"


def _expected_weights_per_gpu(model, fmt: str, tp: int, dp: int) -> tuple[float, float]:
    """(all weights, routed experts) on one GPU: dense body over tp, experts over tp·dp,
    embedding + lm_head vocab-parallel over tp."""
    vocab = model.vocab_size * model.hidden_size
    heads = 1 if model.tie_word_embeddings else 2
    body = (model.total_params_b * 1e9 - heads * vocab) * WEIGHT_BYTES_PER_PARAM[fmt]
    k, e = model.experts_per_token, model.num_experts
    active = model.active_params_b / model.total_params_b
    dense_share = (active - k / e) / (1 - k / e)
    experts = body * (1 - dense_share) / (tp * dp)
    dense = body * dense_share / tp
    return dense + experts + heads * vocab * EMBEDDING_BYTES_PER_PARAM / tp, experts


@pytest.mark.parametrize(("tp", "dp", "ep"), [(8, 1, 1), (8, 1, 8), (1, 8, 8), (2, 4, 8)])
def test_moe_weights_shard_experts_over_every_gpu_and_the_dense_part_over_tp(tp, dp, ep):
    model, gpu = get_model(MOE), get_gpu("H200")
    config = EngineConfig(engine="vllm", model=model.name, tp=tp, dp=dp, ep=ep,
                          weight_quantization="fp8", max_model_len=8192)
    plan = plan_memory(config, gpu, model)
    weights, experts = _expected_weights_per_gpu(model, "fp8", tp, dp)
    assert plan.weights_bytes_per_gpu == pytest.approx(weights, rel=1e-9)
    assert plan.expert_weights_bytes_per_gpu == pytest.approx(experts, rel=1e-9)
    assert plan.gpus == tp * dp


def test_dep_holds_each_ranks_kv_pool_and_more_of_it_than_tp():
    model, gpu = get_model(MOE), get_gpu("H200")
    tp8 = plan_memory(EngineConfig(engine="vllm", model=model.name, tp=8,
                                   max_model_len=8192), gpu, model)
    dep8 = plan_memory(EngineConfig(engine="vllm", model=model.name, tp=1, dp=8, ep=8,
                                    max_model_len=8192), gpu, model)
    # A DP rank keeps every KV head of its own sequences (4 of Qwen3's heads shard over TP 8
    # as one head per GPU, replicated): per token 4x the bytes on one GPU.
    assert dep8.kv_bytes_per_token_per_gpu == pytest.approx(
        4 * tp8.kv_bytes_per_token_per_gpu)
    assert dep8.kv_cache_bytes_per_gpu < tp8.kv_cache_bytes_per_gpu  # the dense part x 8


def _roofline_decode_s(dep_kw: dict, decodes: int, context: int) -> float:
    model, gpu = get_model(MOE), get_gpu("H200")
    config = EngineConfig(engine="vllm", model=model.name, max_model_len=8192, **dep_kw)
    dep = deployment(config, gpu, model, step_time="roofline")
    params = EngineParams(step_overhead_s=0.0, per_seq_overhead_s=0.0,
                          allreduce_latency_s=0.0)
    coef = step_coefficients(dep, params)
    return step_seconds(coef, np.zeros(0), Batch(0.0, decodes, context)), dep


def test_dep_decode_reads_only_the_experts_its_ranks_tokens_touch():
    # One decode per rank at short context: the step is weight-read bound; under DEP8 each
    # GPU reads its 1/8 of the experts touched by the 8 ranks' tokens plus the dense part,
    # under TP8 its 1/8 of every expert touched by 1 token plus 1/8 of the dense part.
    model = get_model(MOE)
    dep_s, dep = _roofline_decode_s({"tp": 1, "dp": 8, "ep": 8}, 1, 16)
    k, e = model.experts_per_token, model.num_experts
    touched = 1 - (1 - k / e) ** 8
    bytes_read = (dep.weights_bytes_per_gpu - dep.expert_bytes_per_gpu
                  + dep.expert_bytes_per_gpu * touched)
    bandwidth = dep.bandwidth_bytes_s * EngineParams().bandwidth_efficiency
    memory_s = bytes_read / bandwidth
    assert dep_s >= memory_s
    assert dep_s == pytest.approx(memory_s, rel=0.25)  # + all-to-all and the roofline blend


def test_expert_parallel_adds_all_to_all_traffic_per_token():
    tep_small, _ = _roofline_decode_s({"tp": 8, "ep": 8}, 1, 16)
    tp_small, _ = _roofline_decode_s({"tp": 8}, 1, 16)
    assert tep_small > tp_small  # same bytes and FLOPs, plus dispatch/combine


def test_measured_tables_key_each_layout_apart():
    model, gpu = get_model(MOE), get_gpu("H200")
    keys = {cell_key(StepCell("vllm", gpu, model, tp, "fp8", "fp8", dp=dp, ep=ep))
            for tp, dp, ep in [(8, 1, 1), (8, 1, 8), (1, 8, 8)]}
    assert len(keys) == 3 and None not in keys


def test_search_offers_tep_and_dep_for_moe_and_only_tp_for_dense():
    assert (1, 8, 8) in layouts(8, get_model(MOE)) and (8, 1, 8) in layouts(8, get_model(MOE))
    dense = layouts(8, get_model("meta-llama/Llama-3.1-8B-Instruct"))
    assert all(dp == 1 and ep == 1 for _, dp, ep in dense)


def _predict(capsys, *extra: str) -> dict:
    argv = ["predict", "--engine", "trtllm", "--model", MOE, "--gpu", "H200", "--precision",
            "fp8", "--kv-cache-dtype", "fp8", "--isl", "1024", "--osl", "256",
            "--concurrency", "256", "--num-requests", "512", "--json", *extra]
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_predict_serves_dep_with_one_scheduler_per_rank(capsys):
    dep = _predict(capsys, "--tp", "1", "--dp", "8", "--ep", "8")
    assert dep["replicas"] == 8 and dep["output_throughput_tok_s"] > 0


def test_predict_refuses_dp_without_ep_in_one_line(capsys):
    assert main(["predict", "--engine", "vllm", "--model", MOE, "--gpu", "H200",
                 "--isl", "10", "--osl", "10", "--concurrency", "1", "--dp", "2"]) == 2
    err = capsys.readouterr().err
    assert "ep" in err and "Traceback" not in err


def test_moe_search_grid_keeps_dep_and_tp_candidates_of_every_engine_on_8_h200():
    from recommender.catalog.facts import hardware_facts, model_facts
    from recommender.decision.goals import Target
    from recommender.decision.grid import base_grid, prune
    from recommender.model.params import load_params

    gpu, model = get_gpu("H200"), get_model(MOE)
    target = Target(gpu, model, 8, hardware_facts(gpu, 8), model_facts(model), load_params())
    kept = [c for c in base_grid(target, 8192) if prune(c, target) is None]
    for engine in ("vllm", "sglang", "trtllm"):
        mine = [c for c in kept if c.engine == engine]
        assert any(c.dp == 8 and c.ep == 8 and c.tp == 1 for c in mine), engine
        assert any(c.dp == 1 and c.ep == 1 and c.tp == 8 for c in mine), engine


@pytest.mark.parametrize("layout", [("--tp", "2", "--ep", "2"), ("--dp", "8", "--ep", "8")])
def test_predict_refuses_expert_parallelism_of_a_dense_model_in_one_line(capsys, layout):
    assert main(["predict", "--engine", "vllm", "--model", "meta-llama/Llama-3.1-8B-Instruct",
                 "--gpu", "H200", "--isl", "100", "--osl", "10", "--concurrency", "1",
                 *layout]) == 2
    err = capsys.readouterr().err
    assert "the model is dense" in err and err.count("\n") == 1 and "Traceback" not in err


def test_predict_refuses_more_expert_ranks_than_the_model_has_experts(capsys):
    # Mixtral-8x7B has 8 routed experts: 16 expert-parallel ranks would leave 8 holding none.
    assert main(["predict", "--engine", "vllm", "--model", "Mixtral-8x7B", "--gpu", "H100-SXM",
                 "--gpus", "16", "--tp", "16", "--ep", "16", "--isl", "100", "--osl", "10",
                 "--concurrency", "1"]) == 2
    err = capsys.readouterr().err
    assert "ep=16 exceeds the model's 8 experts" in err and err.count("\n") == 1
