"""Tests for recommender/sim/predict.py: `predict` through the simulator.

The steady-state algebra (recommender.model.steady) is an independent model of the same load: the
two must agree on closed-loop throughput below the knee. Other checks are DESIGN §4 regularities.
"""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest

from core.errors import UsageError
from core.load import (
    Burst,
    ClosedLoop,
    DatasetLengths,
    FixedLengths,
    LoadSpec,
    Offline,
    Rate,
    SentRequests,
    TraceWindow,
    fixed,
)
from core.run_shape import Boundary, Soak, Sweep
from recommender.catalog.lookup import get_gpu, get_model
from recommender.model.params import default_params
from recommender.sim.predict import simulate_load
from tests.recommender.deploy import deploy, steady

GPU = get_gpu("H100-SXM")
MODEL = get_model("llama-3.1-8b")


@pytest.mark.parametrize(("engine", "conc"), [("vllm", 1), ("vllm", 16), ("vllm", 96),
                                                ("trtllm", 8), ("sglang", 48)])
def test_closed_loop_throughput_agrees_with_steady_state(engine, conc):
    """Throughput and the mean request time agree. How that time splits into TTFT and TPOT
    does not have to: with every request the same length the simulated batch runs in lock
    step (all start, all finish, all refill at once), so the new prompts' prefill lands in
    their TTFT and no running sequence's TPOT, where the steady state spreads prefills over
    every decode step. The simulated TPOT is then at most the steady one, and at least the
    steady one less that prefill share."""
    cfg = deploy(engine, MODEL)
    sim = simulate_load(cfg, MODEL, GPU, fixed(1000, 200, concurrency=conc,
                                               num_requests=40 * max(conc, 5)))
    closed = steady(cfg, MODEL, GPU, fixed(1000, 200, concurrency=conc))
    assert sim.output_throughput_tok_s == pytest.approx(closed.output_throughput_tok_s, rel=0.08)
    assert sim.e2e_s.mean == pytest.approx(closed.e2e_s, rel=0.08)
    assert sim.tpot_s.mean <= closed.tpot_s * 1.08
    moved = max(sim.ttft_s.mean - closed.ttft_s, 0.0) / 199  # the prefill time moved, a token
    assert sim.tpot_s.mean >= (closed.tpot_s - moved) * 0.92


@pytest.mark.parametrize("load", [{"concurrency": 48}, {"offline": True, "num_requests": 1500},
                                  {"rate_rps": 30.0, "num_requests": 1200}])
def test_more_gpus_never_predict_less_throughput(load):
    got = [simulate_load(deploy("vllm", MODEL), MODEL, GPU, fixed(800, 300, **load), gpus=g)
           .output_throughput_tok_s for g in (1, 2, 3, 4, 8)]
    # Open loop: once capacity exceeds the offered rate, throughput is the rate (the seeded
    # sample per replica differs, hence 3 %).
    slack = 0.97 if "rate_rps" in load else 1.0
    assert all(b >= slack * a for a, b in itertools.pairwise(got)), got


def test_replicas_split_closed_loop_users_evenly():
    # 10 users on 4 replicas: 3, 3, 2, 2. Throughput is the sum of the replicas' own (up to
    # the start ramp, which follows the whole deployment's cycle time).
    cfg = deploy("vllm", MODEL)
    four = simulate_load(cfg, MODEL, GPU, fixed(500, 100, concurrency=10, num_requests=400),
                         gpus=4)
    three = simulate_load(cfg, MODEL, GPU, fixed(500, 100, concurrency=3, num_requests=120))
    two = simulate_load(cfg, MODEL, GPU, fixed(500, 100, concurrency=2, num_requests=80))
    want = 2 * three.request_throughput_rps + 2 * two.request_throughput_rps
    assert four.request_throughput_rps == pytest.approx(want, rel=0.005)
    assert four.requests == 400 and four.completed == 400


def test_rate_mode_tails_grow_with_load_and_summary_is_ms():
    cfg = deploy("vllm", MODEL)
    light = simulate_load(cfg, MODEL, GPU, fixed(1000, 200, rate_rps=2.0, seed=3))
    heavy = simulate_load(cfg, MODEL, GPU, fixed(1000, 200, rate_rps=9.0, seed=3))
    assert heavy.ttft_s.p99 > light.ttft_s.p99 and heavy.tpot_s.p50 > light.tpot_s.p50
    s = heavy.json_ms()
    assert s["ttft_ms"]["p99"] == pytest.approx(heavy.ttft_s.p99 * 1e3)
    assert set(s["itl_ms"]) == {"mean", "p50", "p90", "p95", "p99"}
    # 2000 seeded exponential gaps at 9 req/s: the simulated span is about 2000 / 9 s.
    gaps = np.random.default_rng(3).exponential(1 / 9.0, 2000)
    assert heavy.makespan_s > gaps[1:].sum()


@pytest.mark.parametrize("kw", [
    {"concurrency": 0}, {"rate_rps": -1.0}, {"offline": True},
    {"concurrency": 2, "rate_rps": 1.0},
])
def test_bad_loads_are_refused(kw):
    with pytest.raises(ValueError):  # pydantic's ValidationError is a ValueError
        fixed(100, 10, **kw)


def test_gpus_not_a_multiple_of_tp_or_a_trace_load_raise_usage_error():
    with pytest.raises(UsageError):
        simulate_load(deploy("vllm", MODEL, tp=2), MODEL, GPU, fixed(100, 10, concurrency=2),
                      gpus=3)
    trace = LoadSpec(lengths=TraceWindow(path="trace.jsonl"))
    with pytest.raises(UsageError):
        simulate_load(deploy("vllm", MODEL), MODEL, GPU, trace)


def test_request_larger_than_kv_is_a_usage_error():
    with pytest.raises(UsageError):
        big = get_model("llama-3.1-70b")
        simulate_load(deploy("vllm", big, tp=2), big, GPU, fixed(120000, 10, concurrency=1))


@pytest.mark.parametrize("conc", [1, 24])
def test_speculative_closed_loop_agrees_with_steady_state(conc):
    from engines.config import SpeculativeConfig

    spec = SpeculativeConfig(method="ngram", num_tokens=4)
    cfg = deploy("vllm", MODEL, speculative=spec)
    # The two implementations agree for any parameters: the defaults, not fit.json's, so a
    # refit does not move the test (with the fit of cd25757 the simulator's TPOT at 24 users
    # is 10 % under the closed form's, 6 % with these)
    params = default_params()
    sim = simulate_load(cfg, MODEL, GPU, fixed(800, 300, concurrency=conc,
                                               num_requests=40 * max(conc, 5)),
                        spec_acceptance=0.5, params=params)
    closed = steady(cfg, MODEL, GPU, fixed(800, 300, concurrency=conc), acceptance=0.5,
                    params=params)
    assert sim.output_throughput_tok_s == pytest.approx(closed.output_throughput_tok_s, rel=0.08)
    # (1 − 0.5^5)/(1 − 0.5) = 1.9375 tokens per step: TPOT is about the step over E.
    assert closed.tpot_s == pytest.approx(closed.itl_s / 1.9375, rel=0.01)
    assert sim.tpot_s.mean == pytest.approx(closed.tpot_s, rel=0.08)


def _sharegpt(isl: int, osl: int, **load) -> LoadSpec:
    spec = fixed(isl, osl, **load)
    return spec.model_copy(update={"lengths": DatasetLengths(
        dataset="sharegpt", input_tokens=isl, output_tokens=osl)})


def test_dataset_lengths_spread_lowers_all_at_once_throughput():
    # 1000 ShareGPT-like requests queued at once: the long outputs decode at a small batch
    # after the rest finished, so requests/s fall below the fixed-mean run's; the tokens
    # counted are the ones drawn (their mean is the stated one, to rounding).
    cfg = deploy("vllm", MODEL)
    spread = simulate_load(cfg, MODEL, GPU, _sharegpt(215, 196, offline=True, num_requests=1000))
    same = simulate_load(cfg, MODEL, GPU, fixed(215, 196, offline=True, num_requests=1000))
    assert spread.completed == 1000
    assert spread.request_throughput_rps < 0.95 * same.request_throughput_rps
    per_request = spread.output_throughput_tok_s / spread.request_throughput_rps
    assert per_request == pytest.approx(196, abs=0.5)


def test_dataset_request_too_long_is_refused_alone():
    # max_model_len 2048 holds the mean request (215 + 196) but not ShareGPT's longest drawn
    # ones scaled to means of 800 + 700: those are refused one by one, the rest served.
    cfg = deploy("vllm", MODEL).model_copy(update={"max_model_len": 2048})
    pred = simulate_load(cfg, MODEL, GPU, _sharegpt(800, 700, offline=True, num_requests=400))
    assert 0 < pred.refused < 400 and pred.completed == 400 - pred.refused
    assert any("refused" in w and "max_model_len 2048" in w for w in pred.warnings)


def test_closed_loop_users_all_send_their_first_request_at_once():
    # vllm bench serve --max-concurrency C (and GuideLLM, InferenceX's client) start every
    # user at t = 0: a closed loop of C users asked for C requests is the same run as those
    # C requests queued offline.
    cfg = deploy("vllm", MODEL)
    closed = simulate_load(cfg, MODEL, GPU, fixed(3000, 200, concurrency=16, num_requests=16))
    burst = simulate_load(cfg, MODEL, GPU, fixed(3000, 200, offline=True, num_requests=16))
    assert closed.ttft_s.mean == pytest.approx(burst.ttft_s.mean, rel=1e-9)
    assert closed.e2e_s.mean == pytest.approx(burst.e2e_s.mean, rel=1e-9)
    # 16 prompts of 3,000 tokens meet in one prefill queue: the last waits for the others
    alone = simulate_load(cfg, MODEL, GPU, fixed(3000, 200, concurrency=1, num_requests=1))
    assert closed.ttft_s.p99 > 4 * alone.ttft_s.mean


def test_sent_closed_loop_is_the_fixed_closed_loop_on_any_replica_count():
    """A benchmark's closed loop of equal requests is the fixed-length closed loop: the same
    figures on one scheduler and on four (users 3, 3, 2, 2; the sent pool dealt round-robin)."""
    cfg = deploy("vllm", MODEL)
    sent = SentRequests(input_tokens=[500] * 400, output_tokens=[100] * 400)
    for gpus in (1, 4):
        got = simulate_load(cfg, MODEL, GPU, LoadSpec(lengths=sent,
                                                      arrival=ClosedLoop(concurrency=10)),
                            gpus=gpus)
        want = simulate_load(cfg, MODEL, GPU, fixed(500, 100, concurrency=10, num_requests=400),
                             gpus=gpus)
        assert got.requests == want.requests == 400
        assert got.request_throughput_rps == pytest.approx(want.request_throughput_rps,
                                                           rel=1e-12)
        assert got.ttft_s == want.ttft_s and got.e2e_s == want.e2e_s


def test_sent_open_loop_requests_arrive_at_their_offsets():
    """Two requests 10 s apart on an idle deployment: each is served alone, so the second
    finishes 10 s after the first and both see the same TTFT."""
    cfg = deploy("vllm", MODEL)
    sent = SentRequests(at_s=[0.0, 10.0], input_tokens=[800, 800], output_tokens=[50, 50])
    got = simulate_load(cfg, MODEL, GPU, LoadSpec(lengths=sent))
    assert got.mode == "sent" and got.requests == 2 and got.completed == 2
    assert got.ttft_s.p50 == pytest.approx(got.ttft_s.p99, rel=1e-9)
    assert got.makespan_s == pytest.approx(10.0 + got.e2e_s.mean, rel=1e-6)


def test_sent_requests_no_deployment_can_serve_are_refused():
    cfg = deploy("vllm", MODEL).model_copy(update={"max_model_len": 1024})
    sent = SentRequests(at_s=[0.0], input_tokens=[4000], output_tokens=[10])
    with pytest.raises(UsageError, match="every request refused"):
        simulate_load(cfg, MODEL, GPU, LoadSpec(lengths=sent))


@pytest.mark.parametrize("gpus", [1, 2])
def test_a_burst_is_predicted_at_exactly_its_phases_rates(gpus):
    """Steady 2 req/s for 5 s, 10 req/s for 3 s, 2 req/s for 5 s: each phase offers exactly
    rate × length requests (as bench sends them), per replica the stream's 1/R share."""
    cfg = deploy("vllm", MODEL)
    burst = Burst(base_rate_rps=2.0, peak_rate_rps=10.0, steady_s=5.0, burst_s=3.0)
    load = LoadSpec(lengths=FixedLengths(input_tokens=200, output_tokens=20), arrival=burst,
                    seed=4)
    got = simulate_load(cfg, MODEL, GPU, load, gpus=gpus)
    per_replica = sum(round(rate / gpus * span) for rate, span in
                      [(2.0, 5.0), (10.0, 3.0), (2.0, 5.0)])
    assert got.mode == "burst" and got.replicas == gpus
    assert got.requests == per_replica * gpus == 50 and got.completed == 50
    assert got.makespan_s > 8.0  # the recovery phase starts at 5 + 3 s


def test_an_open_loop_rate_over_a_duration_sends_rate_times_duration():
    load = LoadSpec(lengths=FixedLengths(input_tokens=200, output_tokens=20),
                    arrival=Rate(rate_rps=3.5), duration_s=20.0)
    got = simulate_load(deploy("vllm", MODEL), MODEL, GPU, load)
    assert got.requests == 70  # 3.5 req/s × 20 s


def test_a_soak_is_predicted_as_its_steady_load():
    lengths = FixedLengths(input_tokens=200, output_tokens=20)
    steady = LoadSpec(lengths=lengths, arrival=Rate(rate_rps=3.0), duration_s=10.0, seed=2)
    soak = steady.model_copy(update={"run": Soak(window_s=2.0)})
    cfg = deploy("vllm", MODEL)
    got, want = (simulate_load(cfg, MODEL, GPU, x) for x in (soak, steady))
    assert got.requests == want.requests == 30 and got.ttft_s == want.ttft_s


@pytest.mark.parametrize(("load", "message"), [
    (fixed(200, 20, concurrency=1, num_requests=8).model_copy(
        update={"run": Sweep(max_concurrency=8)}), "predict one level"),
    (fixed(200, 20, rate_rps=1.0, num_requests=8).model_copy(
        update={"run": Boundary()}), "predict one step"),
    (fixed(200, 20, rate_rps=1.0, num_requests=8).model_copy(
        update={"max_in_flight": 2}), "no cap on requests in flight"),
    (fixed(200, 20, concurrency=2, duration_s=30.0), "give a request count"),
])
def test_what_one_prediction_cannot_hold_is_one_usage_error(load, message):
    with pytest.raises(UsageError, match=message):
        simulate_load(deploy("vllm", MODEL), MODEL, GPU, load)


def test_an_open_loop_past_capacity_says_its_backlog_grows():
    """Sent at 1.5x and 0.5x what the deployment finishes offline: past capacity the
    prediction says so with the second half's counts (about half the sends, and fewer finished
    than sent beyond a Poisson count's noise) and its requests take far longer; below it,
    nothing is said."""
    cfg = deploy("vllm", MODEL)
    lengths = FixedLengths(input_tokens=1000, output_tokens=200)
    offline = simulate_load(cfg, MODEL, GPU, LoadSpec(lengths=lengths, arrival=Offline(),
                                                      num_requests=400))
    capacity = offline.request_throughput_rps
    over, under = (simulate_load(cfg, MODEL, GPU, fixed(1000, 200, rate_rps=share * capacity,
                                                        num_requests=600, seed=5))
                   for share in (1.5, 0.5))
    assert not [w for w in under.warnings if "capacity" in w]
    [warned] = [w for w in over.warnings if w.startswith("over capacity")]
    sent, done = (int(x.replace(",", "")) for x in re.findall(
        r"was sent ([\d,]+) requests and finished ([\d,]+)", warned)[0])
    assert 250 <= sent <= 350  # about half of the 600 sends
    assert done < sent - 3 * np.sqrt(sent)
    assert over.e2e_s.mean > 3 * under.e2e_s.mean  # the backlog: in the queue or the batch
