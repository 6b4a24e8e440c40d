"""max_model_len sized to the workload (issue 12): `defaults.workload_max_model_len`, shared by
`predict` and `recommend`, and per-request refusal of what can never be served."""

from __future__ import annotations

import numpy as np
import pytest

from core.errors import UsageError
from core.load import fixed
from engines.config import EngineConfig
from recommender.catalog.lookup import get_gpu, get_model
from recommender.decision.grid import max_model_len
from recommender.model.defaults import size_max_model_len, workload_max_model_len
from recommender.model.params import load_params
from recommender.model.resolve import resolve
from recommender.sim.predict import simulate_load
from recommender.sim.refusals import refusal_reason
from recommender.sim.simulator import SimOptions, SimRequests, simulate
from tests.recommender.deploy import steady

H100 = get_gpu("H100-SXM")
QWEN32 = get_model("Qwen3-32B")
LLAMA8 = get_model("llama-3.1-8b")


@pytest.mark.parametrize(("longest", "expected"), [
    (1, 1024), (930, 1024), (931, 2048), (2000, 3072), (8000, 9216),
    (39000, 40960),  # 42,900 wanted, capped at Qwen3-32B's 40,960-token context
])
def test_longest_request_plus_ten_percent_in_1024s_capped_at_the_context(longest, expected):
    assert workload_max_model_len(longest, QWEN32) == expected


def test_recommend_sizes_its_window_with_the_same_function():
    inp, out = np.array([100, 1500, 700]), np.array([50, 500, 20])
    reqs = SimRequests(np.zeros(3), inp, out)
    assert max_model_len(reqs, QWEN32) == 3072  # longest 2000 → 2200 → 3 × 1024


def test_a_max_model_len_past_the_context_is_refused_by_the_library():
    cfg = EngineConfig(engine="vllm", model=QWEN32.name, max_model_len=40_961)
    with pytest.raises(UsageError, match="exceeds Qwen/Qwen3-32B's context of 40960 tokens"):
        simulate_load(cfg, QWEN32, H100, fixed(1000, 100, concurrency=1))
    at_context = cfg.model_copy(update={"max_model_len": 40_960})
    assert size_max_model_len(at_context, QWEN32, 2000) == (at_context, None)


def test_a_given_max_model_len_is_kept():
    cfg = EngineConfig(engine="vllm", model=QWEN32.name, max_model_len=5000)
    same, warning = size_max_model_len(cfg, QWEN32, 2000)
    assert same.max_model_len == 5000 and warning is None


def test_qwen3_32b_bf16_on_one_h100_is_served_at_1000_1000():
    cfg = EngineConfig(engine="vllm", model=QWEN32.name, weight_quantization="none")
    load = fixed(1000, 1000, concurrency=4, num_requests=20)
    sim = simulate_load(cfg, QWEN32, H100, load)
    assert sim.max_model_len == 3072 and sim.refused == 0 and sim.completed == 20
    assert steady(cfg, QWEN32, H100, load).output_throughput_tok_s > 0
    # resolve sizes it for the load's longest request as the simulated path does
    assert resolve(cfg, H100, QWEN32, load_params(), longest_tokens=2000).config \
        .max_model_len == 3072
    # At the model's full context the engine would not start (the pool holds < 40,960).
    full = cfg.model_copy(update={"max_model_len": QWEN32.max_context_tokens})
    with pytest.raises(UsageError, match="max_model_len"):
        simulate_load(full, QWEN32, H100, load)


def test_too_long_request_is_refused_per_request_with_its_reason():
    cfg = EngineConfig(engine="vllm", model=LLAMA8.name, max_model_len=2048)
    inp, out = np.array([500, 3000, 800]), np.array([100, 100, 100])
    res = simulate(SimRequests(np.zeros(3), inp, out), cfg, H100, LLAMA8,
                   options=SimOptions(arrival="offline"))
    assert res.summary.rejected == 1 and res.summary.completed == 2
    assert np.isnan(res.e2e_s[1]) and np.isfinite(res.e2e_s[[0, 2]]).all()
    assert refusal_reason(cfg, H100, LLAMA8, 3000, 100) == (
        "a 3000+100-token request exceeds max_model_len 2048; raise --max-model-len or "
        "shorten the request")
    assert refusal_reason(cfg, H100, LLAMA8, 500, 100) is None


def test_every_request_refused_is_one_clear_error():
    cfg = EngineConfig(engine="vllm", model=LLAMA8.name, max_model_len=1024)
    with pytest.raises(UsageError, match="every request refused: a 1000\\+100-token request "
                                         "exceeds max_model_len 1024"):
        simulate_load(cfg, LLAMA8, H100, fixed(1000, 100, concurrency=2))
