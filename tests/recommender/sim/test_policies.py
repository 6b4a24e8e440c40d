"""Each engine's scheduler policy as the simulator runs it (recommender/sim/policies.py and the
kernel's admit phase): SGLang's new-token-ratio admission, its longest-prefix-match ordering,
TensorRT-LLM's no-evict admission, and the per-instance running cap under attention DP."""

from __future__ import annotations

import numpy as np

from engines.config import EngineConfig
from recommender.catalog.lookup import get_gpu, get_model
from recommender.model.defaults import scheduler_caps
from recommender.model.params import EngineParams, PerfParams
from recommender.sim.policies import policy_for
from recommender.sim.simulator import SimOptions, SimRequests, simulate

GPU = get_gpu("H100-SXM")
MODEL = get_model("llama-3.1-8b")
# No serial host loop: a V0 release here differs from V1 by its scheduling policy alone (the
# loop's per-sequence time is tests/recommender/model/test_release_knobs.py's).
PARAMS = EngineParams(compute_efficiency=0.5, bandwidth_efficiency=0.8, step_overhead_s=0.001,
                      per_seq_overhead_s=2e-5, serial_loop_seq_s=0.0)
ROOFLINE = PerfParams(engines={"vllm": PARAMS, "sglang": PARAMS, "trtllm": PARAMS},
                      step_time="roofline")


def _sim(engine: str, req: SimRequests, **kw) -> object:
    config = EngineConfig(engine=engine, model=MODEL.name, max_model_len=8192,  # type: ignore[arg-type]
                          **kw)
    return simulate(req, config, GPU, MODEL, params=ROOFLINE,
                    options=SimOptions(arrival="offline"))


def _tight_pool() -> dict:
    # A small KV pool: 2,000 requests of 512 + 512 tokens cannot all grow at once.
    return {"gpu_memory_fraction": 0.3, "max_num_seqs": 512, "max_batched_tokens": 8192}


def test_sglang_new_token_ratio_is_sglangs_published_schedule():
    policy = policy_for(EngineConfig(engine="sglang", model=MODEL.name))
    assert policy.reserve_init == 0.7
    assert abs(policy.reserve_min - 0.7 * 0.14) < 1e-12
    assert abs(policy.reserve_decay - (0.7 - 0.098) / 600) < 1e-12
    assert policy.reserve_clip_tokens == 4096 and policy.lpm_max_queue == 0


def test_sglang_holds_back_admissions_so_it_seldom_retracts_where_vllm_preempts():
    n = 2000
    req = SimRequests(np.zeros(n), np.full(n, 512), np.full(n, 512))
    vllm = _sim("vllm", req, **_tight_pool()).summary
    sglang = _sim("sglang", req, **_tight_pool()).summary
    assert vllm.preemptions > 100
    assert sglang.preemptions < vllm.preemptions / 3
    assert sglang.completed == vllm.completed == n


def test_trtllm_guaranteed_no_evict_never_preempts():
    n = 2000
    req = SimRequests(np.zeros(n), np.full(n, 512), np.full(n, 512))
    assert _sim("trtllm", req, **_tight_pool()).summary.preemptions == 0


def _prefix_requests() -> SimRequests:
    """Request 0 (prefix A, 8 blocks of 16 tokens) first; then, while it runs, request 1
    (its own prefix B) and request 2 (prefix A again) wait for the one running slot."""
    block = 16
    a = np.arange(1, 9, dtype=np.uint64)
    b = np.arange(101, 109, dtype=np.uint64)
    hashes = np.concatenate([a, b, a])
    offsets = np.array([0, 8, 16, 24])
    arrival = np.array([0.0, 0.001, 0.002])
    return SimRequests(arrival, np.full(3, 8 * block + 1), np.full(3, 64), hashes, offsets,
                       block)


def _first_token_order(extra: dict) -> list[int]:
    config = EngineConfig(engine="sglang", model=MODEL.name, max_model_len=2048,
                          max_num_seqs=1, prefix_caching=True, extra_args=extra)
    res = simulate(_prefix_requests(), config, GPU, MODEL, params=ROOFLINE,
                   options=SimOptions(kv_block_tokens=16))
    first = res.ttft_s + np.array([0.0, 0.001, 0.002])
    return [int(i) for i in np.argsort(first)]


def test_sglang_lpm_serves_the_waiting_request_with_the_cached_prefix_first():
    assert _first_token_order({}) == [0, 1, 2]  # FCFS, SGLang's default since 0.5
    assert _first_token_order({"schedule-policy": "lpm"}) == [0, 2, 1]


def test_sglang_running_cap_is_the_instances_split_over_dp_ranks():
    moe = get_model("Qwen/Qwen3-235B-A22B")
    h200 = get_gpu("H200")
    sglang = EngineConfig(engine="sglang", model=moe.name, tp=1, dp=8, ep=8, max_num_seqs=256)
    vllm = sglang.model_copy(update={"engine": "vllm"})
    assert scheduler_caps(sglang, h200).max_running == 32
    assert scheduler_caps(vllm, h200).max_running == 256


def _v0_or_v1(version: str, *, chunked: bool) -> object:
    # prompts of 1,000 tokens arriving every 50 ms while earlier ones decode 200 tokens
    n = 20
    req = SimRequests(np.arange(n) * 0.05, np.full(n, 1000), np.full(n, 200))
    config = EngineConfig(engine="vllm", model=MODEL.name, max_model_len=8192,
                          chunked_prefill=chunked, max_batched_tokens=8192, max_num_seqs=256)
    return simulate(req, config, GPU, MODEL, params=ROOFLINE,
                    options=SimOptions(arrival="trace", engine_version=version)).summary


def test_vllm_v0_without_chunked_prefill_starts_prompts_in_steps_of_their_own():
    # V0's scheduler (before 0.8) schedules waiting prompts first and decodes only in steps
    # without any; V1, and V0 with chunked prefill, decode first and add prompts beside.
    v0 = policy_for(EngineConfig(engine="vllm", model=MODEL.name, chunked_prefill=False),
                    (0, 5))
    assert v0.prefill_first and v0.name == "vllm-v0-prefill-first"
    for release, chunked in (((0, 8), False), ((0, 5), True), (None, False)):
        config = EngineConfig(engine="vllm", model=MODEL.name, chunked_prefill=chunked)
        assert not policy_for(config, release).prefill_first
    old, new = _v0_or_v1("0.5.4", chunked=False), _v0_or_v1("0.10.0", chunked=False)
    assert old.completed == new.completed == 20
    # a prompt's step decodes nothing: the running requests wait a prompt step + a decode
    # step for their next token, where V1's mixed step gives them one
    assert old.itl_max_s > 1.2 * new.itl_max_s
    assert old.tpot_s.mean > new.tpot_s.mean
    chunked_old, chunked_new = _v0_or_v1("0.5.4", chunked=True), _v0_or_v1("0.10.0", chunked=True)
    assert (chunked_old.steps, chunked_old.itl_max_s) == (chunked_new.steps, chunked_new.itl_max_s)
