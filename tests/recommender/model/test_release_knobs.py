"""An engine release's own scheduler choices (`defaults.release_knobs`, through `fill` and
`predict`): a measurement taken on vLLM 0.5.4 ran the V0 engine's batch defaults, not
today's."""

from __future__ import annotations

import pytest

from core.load import fixed
from engines.config import EngineConfig
from recommender.catalog.lookup import get_gpu, get_model
from recommender.model.defaults import fill
from recommender.model.params import load_params
from recommender.model.resolve import resolve
from recommender.sim.predict import PredictRequest, predict

H100 = get_gpu("H100-SXM")
LLAMA8 = get_model("llama-3.1-8b")


def _vllm(**knobs) -> EngineConfig:
    return EngineConfig(engine="vllm", model=LLAMA8.name, **knobs)


def test_vllm_0_5_fills_the_v0_defaults_and_today_the_v1_ones():
    old = fill(_vllm(max_model_len=16000), H100, LLAMA8, longest_tokens=2000,
               engine_version="0.5.4")
    assert (old.caps.max_running, old.caps.budget_tokens) == (256, 16000)
    assert not old.caps.chunked_prefill and not old.caps.prefix_caching
    assert old.config.max_num_seqs == 256 and old.config.max_batched_tokens == 16000
    assert old.warnings[-1] == ("vllm 0.5.4 runs its own defaults where they differ from "
                                "today's: chunked_prefill False, max_batched_tokens 16000, "
                                "max_num_seqs 256, prefix_caching False")
    for version in (None, "0.10.1"):
        new = fill(_vllm(max_model_len=16000), H100, LLAMA8, longest_tokens=2000,
                   engine_version=version)
        assert (new.caps.max_running, new.caps.budget_tokens) == (1024, 8192)
        assert new.caps.chunked_prefill and new.caps.prefix_caching
        assert not any("own defaults" in w for w in new.warnings)


def test_a_long_context_on_v0_is_chunked_in_512_token_steps():
    filled = fill(_vllm(max_model_len=64000), H100, LLAMA8, longest_tokens=2000,
                  engine_version="0.5.4")
    assert filled.caps.chunked_prefill and filled.caps.budget_tokens == 512


def test_the_budget_follows_the_max_model_len_sized_to_the_workload():
    # longest request 2,000 tokens: max_model_len sized to 3,072, the V0 budget with it
    filled = fill(_vllm(), H100, LLAMA8, longest_tokens=2000, engine_version="0.6.6")
    assert filled.config.max_model_len == 3072 and filled.caps.budget_tokens == 3072


def test_knobs_the_config_sets_are_kept():
    filled = fill(_vllm(max_model_len=16000, max_num_seqs=64, chunked_prefill=True,
                        max_batched_tokens=4096), H100, LLAMA8, longest_tokens=2000,
                  engine_version="0.5.4")
    assert (filled.caps.max_running, filled.caps.budget_tokens) == (64, 4096)
    assert filled.caps.chunked_prefill


def test_predict_of_a_v0_release_runs_at_most_256_sequences():
    # 600 requests sent at once, each fits: today's vLLM runs them all in one batch, 0.5.4
    # runs 256 and the rest wait, so its first tokens come later and its batch is smaller.
    def answer(version: str | None):
        request = PredictRequest(config=_vllm(), gpu="H100-SXM", model=LLAMA8.name,
                                 load=fixed(200, 50, offline=True, num_requests=600),
                                 engine_version=version)
        return predict(request)

    old, new = answer("0.5.4"), answer(None)
    assert any(w.startswith("vllm 0.5.4 runs its own defaults") for w in old.warnings)
    assert old.ttft_s.p95 > 1.3 * new.ttft_s.p95  # the 344 late ones wait for free slots
    assert old.tpot_s.mean < new.tpot_s.mean  # ... and 256 decode faster than 600
    assert old.output_throughput_tok_s < new.output_throughput_tok_s


def _coefficients(version: str | None, harness: str):
    params = load_params()
    return resolve(_vllm(max_model_len=4096), H100, LLAMA8, params, longest_tokens=2000,
                   engine_version=version, harness=harness).coefficients, params


@pytest.mark.parametrize("harness", ["served", "in_process"])
def test_a_v0_release_pays_its_serial_host_loop_per_sequence(harness: str):
    # V0 prices each running sequence's host work on top of what the harness leaves; V1
    # releases and an unstated release do not, and nothing else in the step changes.
    v0, params = _coefficients("0.6.1", harness)
    v1, _ = _coefficients("0.10.1", harness)
    today, _ = _coefficients(None, harness)
    loop = params.engines["vllm"].serial_loop_seq_s
    assert loop > 0
    assert v0.seq_overhead_s == pytest.approx(v1.seq_overhead_s + loop, rel=1e-12)
    assert v1.seq_overhead_s == today.seq_overhead_s
    assert v0.step_overhead_s == v1.step_overhead_s and v0.dense_flop_s == v1.dense_flop_s
