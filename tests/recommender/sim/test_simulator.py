"""Tests for recommender/sim/simulator.py: one replica's iteration-level scheduler.

Expected step times are built from the resolved deployment's step formula directly
(`Resolved.step_seconds`, perf's one formula, which the simulator's numba loop evaluates);
the scheduling itself is tested by its properties (chunks, conservation) and DESIGN §4
regularities, never by re-running its loop here. The formula itself is checked against
first principles in test_perf.py.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from engines.config import EngineConfig, SpeculativeConfig
from recommender.model.memory import plan_memory
from recommender.model.params import EngineParams, PerfParams, load_params
from recommender.model.perf import Batch
from recommender.model.resolve import resolve
from recommender.model.steptime import DEFAULT_KIND
from recommender.sim.simulator import SimOptions, SimRequests, simulate
from tests.recommender.sim.configs import GPU, MODEL
from tests.recommender.sim.configs import engine_config as _cfg
from tests.recommender.sim.configs import small_kv as _small

PARAMS = EngineParams(
    compute_efficiency=0.5,
    bandwidth_efficiency=0.8,
    step_overhead_s=0.001,
    per_seq_overhead_s=2e-5,
)
# The scheduler is checked under the roofline provider (named in the parameters, as a fit
# names the provider it was fitted beside), whose step times the tests' expectations are
# computed from; the measured tables' path through the simulator is checked in
# test_steptime.py.
ROOFLINE = PerfParams(engines={"vllm": PARAMS, "trtllm": PARAMS}, step_time="roofline")


def _reqs(inp, out, arrival=None, **kw) -> SimRequests:
    inp, out = np.asarray(inp), np.asarray(out)
    arr = np.zeros(len(inp)) if arrival is None else np.asarray(arrival, float)
    return SimRequests(arr, inp, out, **kw)


def _sim(req, cfg=None, **opts):
    return simulate(req, cfg or _cfg(), GPU, MODEL, params=ROOFLINE, options=SimOptions(**opts))


def _step(cfg: EngineConfig, batch: Batch, acceptance: float | None = None) -> float:
    """One step of `batch` on `cfg`, as the simulator resolves the deployment."""
    res = resolve(cfg, GPU, MODEL, ROOFLINE, acceptance=acceptance)
    assert res.step_time == "roofline"
    return res.step_seconds(batch)


@pytest.mark.parametrize(("inp", "out"), [(500, 20), (3000, 7)])
def test_single_request_decodes_one_token_a_step_after_its_prefill(inp, out):
    # Alone, the request's decode steps each carry one sequence at context inp + k: the
    # stream after the first token is the sum of those steps; times count from its arrival.
    decodes = [_step(_cfg(), Batch(0, 1, inp + k)) for k in range(out - 1)]
    res = _sim(_reqs([inp], [out], arrival=[3.0]))
    assert res.e2e_s[0] - res.ttft_s[0] == pytest.approx(sum(decodes), rel=1e-9)
    assert res.tpot_s[0] == pytest.approx(np.mean(decodes), rel=1e-9)
    assert res.summary.makespan_s == pytest.approx(3.0 + res.e2e_s[0], rel=1e-9)
    # Token conservation: exactly `out` tokens, `inp + out` in all, over the makespan.
    s = res.summary
    assert s.output_throughput_tok_s * s.makespan_s == pytest.approx(out)
    assert s.total_throughput_tok_s * s.makespan_s == pytest.approx(inp + out)


def test_prefill_takes_one_step_per_budget_sized_chunk():
    # Every step pays at least the fixed step overhead, so a prompt split into n chunks takes
    # at least n x step_overhead_s; and splitting the same work into more steps never saves
    # time (the roofline blend is a norm: subadditive), so each extra chunk costs at least
    # one more overhead.
    inp = 3000
    ttft = {b: _sim(_reqs([inp], [2]), _cfg(max_batched_tokens=b)).ttft_s[0]
            for b in (512, 1024, 2048, 4096)}
    chunks = {b: -(-inp // b) for b in ttft}  # 6, 3, 2, 1
    for b, t in ttft.items():
        assert t >= chunks[b] * PARAMS.step_overhead_s
    budgets = sorted(ttft)
    for small, big in itertools.pairwise(budgets):
        # A bigger budget never takes more steps, nor more time.
        assert ttft[small] >= ttft[big] + (chunks[small] - chunks[big]) * PARAMS.step_overhead_s


def test_long_prompt_ttft_grows_with_its_chunks_while_decodes_keep_emitting():
    # Eight short requests are decoding when a 24k-token prompt arrives. With a 2048-token
    # budget its prefill takes >= 12 steps and the decodes emit between them: no short request
    # waits anywhere near the whole prefill for its next token. With an 8192 budget the
    # prompt needs 3 chunks, so its first token comes sooner.
    inp, out = [200] * 8 + [24000], [400] * 8 + [5]
    arrival = [0.0] * 8 + [0.3]
    runs = {b: _sim(_reqs(inp, out, arrival=arrival), _cfg(max_batched_tokens=b))
            for b in (2048, 8192)}
    for b, res in runs.items():
        assert res.summary.completed == 9
        assert res.ttft_s[8] >= -(-24000 // b) * PARAMS.step_overhead_s
        # The short requests were still decoding when the prompt arrived...
        assert np.all(res.e2e_s[:8] > 0.3 + res.ttft_s[8])
        # ...and kept emitting during its prefill.
        assert np.max(res.max_itl_s[:8]) < res.ttft_s[8] / 2
    assert runs[2048].ttft_s[8] > runs[8192].ttft_s[8]
    # Conservation with the mix: every token asked for is emitted.
    for res in runs.values():
        s = res.summary
        assert s.output_throughput_tok_s * s.makespan_s == pytest.approx(sum(out))


def test_max_num_seqs_1_serves_one_after_another():
    inp, out = [300, 1500, 80], [40, 5, 90]
    alone = [_sim(_reqs([i], [o])).e2e_s[0] for i, o in zip(inp, out, strict=True)]
    res = _sim(_reqs(inp, out), _cfg(max_num_seqs=1))
    assert res.e2e_s == pytest.approx(np.cumsum(alone), rel=1e-9)
    # Each request's TTFT = the previous ones' service + its own prefill.
    assert res.ttft_s[1] == pytest.approx(alone[0] + _sim(_reqs([1500], [5])).ttft_s[0])


def test_offline_throughput_rises_with_max_num_seqs_until_kv_binds():
    n, inp, out = 256, 200, 300
    rng = np.random.default_rng(0)
    req = _reqs(np.full(n, inp), rng.integers(out - 50, out + 50, n))
    tput = {
        s: _sim(
            req, _small(16 * (inp + out), max_num_seqs=s), arrival="offline"
        ).summary.output_throughput_tok_s
        for s in (1, 2, 4, 8, 64, 256)
    }
    assert tput[1] < tput[2] < tput[4] < tput[8]
    assert tput[8] > 5 * tput[1]
    assert tput[256] == pytest.approx(tput[64], rel=0.1)  # KV-bound: no gain past it
    assert tput[64] < 2.5 * tput[8]


def test_preemption_with_tiny_kv_and_everything_completes():
    n = 60
    cfg = _small(4000, max_num_seqs=64)
    req = _reqs(np.full(n, 100), np.full(n, 600))
    res = _sim(req, cfg, arrival="offline")
    s = res.summary
    assert s.preemptions > 0 and res.preemptions.sum() == s.preemptions
    assert s.completed == n and np.all(np.isfinite(res.e2e_s))
    assert np.all(res.kv_usage <= 1.0) and np.all(res.kv_usage >= 0.0)
    assert np.all(res.ttft_s <= res.e2e_s)


def test_reserving_the_whole_output_admits_fewer_and_never_preempts():
    # TRT-LLM's GUARANTEED_NO_EVICT (its policy's `reserve_full` admission,
    # recommender.sim.policies): a request starts only when its 100 + 600 tokens' blocks are
    # free, so a ~4000-token pool runs at most floor(capacity / 704 tokens) at once and
    # nobody is preempted; allocating as they grow (vLLM's `grow`) starts more and preempts.
    n = 60
    req = _reqs(np.full(n, 100), np.full(n, 600))
    grow = _sim(req, _small(4000, max_num_seqs=64), arrival="offline")
    reserve = _sim(req, _small(4000, engine="trtllm", max_num_seqs=64), arrival="offline")
    per_request = -(-(100 + 600 - 1) // 16) * 16  # whole blocks
    fit = {name: r.summary.kv_capacity_blocks * 16 // per_request
           for name, r in (("grow", grow), ("reserve", reserve))}
    assert reserve.summary.preemptions == 0 and reserve.summary.completed == n
    assert reserve.running_seqs.max() <= fit["reserve"]
    assert grow.summary.preemptions > 0 and grow.running_seqs.max() > fit["grow"]


def test_prefix_reuse_cuts_second_ttft():
    bs, blocks = 16, 120  # 1920 shared prompt tokens
    hashes = np.tile(np.arange(1, blocks + 1, dtype=np.uint64), 2)
    req = _reqs(
        [blocks * bs + 10] * 2,
        [5, 5],
        arrival=[0.0, 5.0],
        block_hashes=hashes,
        block_offsets=np.array([0, blocks, 2 * blocks]),
        block_size=bs,
    )
    on = _sim(req, _cfg(prefix_caching=True))
    off = _sim(req, _cfg(prefix_caching=False))
    assert on.ttft_s[0] == pytest.approx(off.ttft_s[0])
    assert off.ttft_s[1] == pytest.approx(off.ttft_s[0])
    assert on.ttft_s[1] < 0.3 * on.ttft_s[0]


def test_prefix_cache_evicts_under_pressure():
    # Request 1 (unrelated) needs all but ~20 blocks of the pool, so it evicts most of
    # request 0's cached blocks, tail first: request 2 (= request 0's prompt) still hits the
    # leading ~20 blocks, so its TTFT falls between a full hit and none.
    bs = 16
    cfg = _small(3000)
    cap = plan_memory(cfg, GPU, MODEL).kv_capacity_tokens
    n0, n1 = 100, cap // bs - 20
    hashes = np.concatenate([np.arange(n0), 10_000 + np.arange(n1), np.arange(n0)])
    req = _reqs(
        [n0 * bs + 1, n1 * bs + 1, n0 * bs + 1],
        [2, 2, 2],
        arrival=[0, 5, 10],
        block_hashes=hashes.astype(np.uint64),
        block_offsets=np.array([0, n0, n0 + n1, 2 * n0 + n1]),
        block_size=bs,
    )
    res = _sim(req, cfg)
    assert 0.6 * res.ttft_s[0] < res.ttft_s[2] < 0.95 * res.ttft_s[0]


def test_a_prompt_preempted_mid_prefill_resumes_from_its_cached_blocks():
    # A (4096 + 600) runs first; B's 4096-token prompt does not fit beside it. B starts in
    # 1024-token chunks, runs out of blocks and preempts itself. With prefix caching (vLLM's
    # default) its computed full blocks stay cached: readmitted, it resumes there, so it is
    # preempted a few times until it waits for A. Without, it recomputes from token 0 and
    # is preempted again every other step through A's 600 decodes.
    cfg = _small(6500, max_num_seqs=8)
    req = _reqs([4096, 4096], [600, 2])
    on = _sim(req, cfg.model_copy(update={"prefix_caching": True}), arrival="offline")
    off = _sim(req, cfg.model_copy(update={"prefix_caching": False}), arrival="offline")
    assert on.summary.completed == off.summary.completed == 2
    free_beside_a = 6500 - (4096 + 600)
    assert 1 <= on.preemptions[1] <= -(-free_beside_a // 256) + 1
    assert off.preemptions[1] > 100
    assert on.ttft_s[1] < off.ttft_s[1]
    # Without the cache A's decode steps also carry B's recomputed chunks.
    assert on.e2e_s[0] < 0.5 * off.e2e_s[0]


def test_continuous_batching_about_twice_static_on_mixed_lengths():
    rng = np.random.default_rng(3)
    n = 512
    req = _reqs(rng.integers(50, 200, n), rng.integers(1, 1000, n))
    cfg = _cfg(max_num_seqs=32)
    cont = _sim(req, cfg, arrival="offline").summary.request_throughput_rps
    stat = _sim(req, cfg, arrival="offline", batching="static").summary.request_throughput_rps
    assert 1.5 < cont / stat < 3.0


def test_closed_loop_keeps_concurrency_and_is_deterministic():
    rng = np.random.default_rng(5)
    n = 300
    req = _reqs(
        rng.integers(20, 3000, n), rng.integers(1, 400, n), arrival=np.sort(rng.uniform(0, 30, n))
    )
    a = _sim(req, _cfg(max_num_seqs=256), arrival="closed_loop", concurrency=8)
    b = _sim(req, _cfg(max_num_seqs=256), arrival="closed_loop", concurrency=8)
    assert np.all(a.running_seqs + a.queue_len <= 8)
    assert a.running_seqs.max() == 8
    np.testing.assert_array_equal(a.e2e_s, b.e2e_s)
    np.testing.assert_array_equal(a.kv_usage, b.kv_usage)
    assert a.summary.completed == n


def test_a_user_done_before_the_ramp_ends_sends_its_next_request_at_once():
    # 4 users start over a 40 s ramp (t = 0, 10, 20, 30); each 100-token answer takes well
    # under 10 s, so user 0 is done long before user 3 starts. Its next request must enter
    # when it is sent, not queue behind users whose start is still to come: every TTFT
    # stays one short prefill, as a closed-loop client measures it.
    req = _reqs([200] * 12, [100] * 12)
    res = _sim(req, _cfg(max_num_seqs=256), arrival="closed_loop", concurrency=4,
               closed_loop_ramp_s=40.0)
    alone = _sim(_reqs([200], [100])).ttft_s[0]
    assert res.summary.completed == 12
    assert np.nanmax(res.ttft_s) < 3 * alone
    # the ramp still spaces the users' first requests: the last starts 30 s in
    assert res.summary.makespan_s > 30.0


def test_trace_mode_time_scale_and_goodput():
    rng = np.random.default_rng(7)
    n = 200
    req = _reqs(
        rng.integers(20, 800, n), rng.integers(1, 200, n), arrival=np.sort(rng.uniform(0, 100, n))
    )
    slow = _sim(req, slo_ttft_s=100.0, slo_tpot_s=100.0, series_interval_s=1.0)
    fast = _sim(req, time_scale=0.01, slo_ttft_s=1e-6)
    assert slow.summary.goodput_rps == pytest.approx(slow.summary.request_throughput_rps)
    assert fast.summary.goodput_rps == 0.0
    assert fast.summary.makespan_s < slow.summary.makespan_s
    assert fast.summary.ttft_s.p99 > slow.summary.ttft_s.p99
    assert slow.series_t_s[-1] >= 99.0 and np.all(np.diff(slow.series_t_s) > 0)
    # No SLO: every served request meets every SLO (DESIGN: goodput = completed requests/s
    # meeting every SLO), as a measured run counts it.
    free = _sim(req).summary
    assert free.goodput_rps == pytest.approx(free.completed / free.makespan_s)


def test_request_too_large_for_kv_is_rejected_not_stalling():
    cfg = _small(2000)
    cap = plan_memory(cfg, GPU, MODEL).kv_capacity_tokens
    res = _sim(_reqs([100, cap + 10, 100], [10, 10, 10]), cfg)
    assert res.summary.rejected == 1 and res.summary.completed == 2
    assert np.isnan(res.e2e_s[1]) and np.isfinite(res.e2e_s[[0, 2]]).all()


def test_rejected_request_with_block_hashes_keeps_the_others_prefix_hits():
    """Offsets index every request, rejected ones included (regression: they were compared
    with the served count and raised)."""
    bs, blocks = 16, 60  # 960 shared prompt tokens
    shared = np.arange(1, blocks + 1, dtype=np.uint64)
    long_blocks = np.arange(1000, 1400, dtype=np.uint64)  # 6400 tokens > max_model_len
    hashes = np.concatenate([shared, long_blocks, shared])
    req = _reqs(
        [blocks * bs + 10, 400 * bs, blocks * bs + 10],
        [5, 5, 5],
        arrival=[0.0, 1.0, 5.0],
        block_hashes=hashes,
        block_offsets=np.array([0, blocks, blocks + 400, 2 * blocks + 400]),
        block_size=bs,
    )
    res = _sim(req, _cfg(prefix_caching=True, max_model_len=4096))
    assert res.summary.rejected == 1 and np.isnan(res.ttft_s[1])
    assert res.ttft_s[2] < 0.3 * res.ttft_s[0]


# ---------------------------------------------------------------------------------------------
# Speculative decoding, ITL, chunked prefill, KV dtype, conservation (DESIGN §4.3, §4.4, §4.6)

NGRAM = SpeculativeConfig(method="ngram", num_tokens=3)
EAGLE = SpeculativeConfig(method="eagle", num_tokens=3, draft_model="yuhuili/EAGLE-LLaMA3.1-8B")


@pytest.mark.parametrize("acceptance", [0.0, 0.6, 0.9, 1.0])
def test_speculative_single_request_emits_exactly_its_tokens(acceptance):
    # E = (1 − a^(k+1)) / (1 − a) tokens per decode step (k + 1 at a = 1); a fluid emission
    # floor(s·E) reaches osl − 1 tokens after ceil((osl − 1) / E) decode steps, each a
    # k+1-token verification at batch 1 (its time from the step formula with the draft).
    k, inp, out = 3, 400, 61
    e = k + 1.0 if acceptance == 1.0 else (1 - acceptance ** (k + 1)) / (1 - acceptance)
    spec = SpeculativeConfig(method="ngram", num_tokens=k)
    res = resolve(_cfg(speculative=spec), GPU, MODEL, ROOFLINE, acceptance=acceptance)
    assert res.step.spec is not None and res.step.spec.k == k
    emitted, ctx, decode_s, steps = 0, inp, 0.0, 0
    while emitted < out - 1:
        decode_s += res.step_seconds(Batch(0, 1, ctx))
        new = min(int(np.floor((steps + 1) * e + 1e-12)) - int(np.floor(steps * e + 1e-12)),
                  out - 1 - emitted)
        emitted, ctx, steps = emitted + new, ctx + new, steps + 1
    assert steps == int(np.ceil((out - 1) / e - 1e-9))
    res = _sim(_reqs([inp], [out]), _cfg(speculative=spec), spec_acceptance=acceptance)
    assert res.e2e_s[0] - res.ttft_s[0] == pytest.approx(decode_s, rel=1e-9)
    assert res.summary.steps == 1 + steps


def _closed(conc: int, spec, n_per_user: int = 6, acceptance: float | None = None):
    n = max(conc * n_per_user, 24)
    cfg = EngineConfig(engine="vllm", model=MODEL.name, speculative=spec)
    return simulate(_reqs(np.full(n, 1000), np.full(n, 200)), cfg, GPU, MODEL,
                    params=load_params(step_time=DEFAULT_KIND),
                    options=SimOptions(arrival="closed_loop", concurrency=conc,
                                       spec_acceptance=acceptance)).summary


# The acceptance is pinned (the premise of the figures below), not the method's default.
@pytest.mark.parametrize(("spec", "high", "a"), [(NGRAM, 64, 0.5), (EAGLE, 128, 0.75)])
def test_speculation_helps_at_batch_1_and_hurts_at_high_concurrency(spec, high, a):
    # DESIGN §4.3 with the fitted parameters: 1.5-2x per-request speed at batch 1; past a few
    # dozen users the k+1-token verification is compute-bound (and samples k+1 positions per
    # sequence) and the gain turns negative: ngram (a = 0.5, E = 1.9) by 64 users, EAGLE
    # (a = 0.75, E = 2.7) later, about break-even at 64. With the default step-time provider
    # (the measured tables, with fit.json's parameters for them): the regularity users meet.
    plain1, spec1 = _closed(1, None), _closed(1, spec, acceptance=a)
    plain_hi, spec_hi = _closed(high, None), _closed(high, spec, acceptance=a)
    assert 1.4 < plain1.tpot_s.mean / spec1.tpot_s.mean < 2.6
    assert spec_hi.output_throughput_tok_s < plain_hi.output_throughput_tok_s
    assert spec_hi.completed == plain_hi.completed == high * 6


def test_conservation_under_preemption_with_speculation():
    # Every request finishes exactly once, KV never exceeds the pool, running <= max_num_seqs,
    # and output tokens emitted = asked (E2E − TTFT spans (out − 1) tokens at >= 1 per step).
    rng = np.random.default_rng(5)
    n = 300
    inp, out = rng.integers(50, 1500, n), rng.integers(1, 300, n)
    cfg = _small(6000, speculative=NGRAM, max_num_seqs=32)
    res = _sim(_reqs(inp, out, arrival=np.sort(rng.uniform(0, 5, n))), cfg)
    s = res.summary
    assert s.completed == n and s.rejected == 0 and s.preemptions > 0
    assert np.all(np.isfinite(res.e2e_s)) and np.all(res.e2e_s >= res.ttft_s)
    assert res.kv_usage.max() <= 1.0 + 1e-12 and res.running_seqs.max() <= 32
    assert s.output_throughput_tok_s * s.makespan_s == pytest.approx(out.sum())
    # a decode step emits at most k + 1 tokens: TPOT >= the fastest possible step / (k+1)
    fastest = _step(cfg, Batch(0, 1, 50))
    assert np.nanmin(res.tpot_s) >= fastest / 4 * (1 - 1e-9)


def test_itl_histogram_matches_step_times_at_batch_1():
    res = _sim(_reqs([800], [40]))
    gaps = [_step(_cfg(), Batch(0, 1, 800 + k)) for k in range(39)]
    s = res.summary
    assert s.itl_s.mean == pytest.approx(np.mean(gaps), rel=1e-9)
    assert s.itl_max_s == pytest.approx(max(gaps), rel=1e-9)
    assert s.itl_s.p50 == pytest.approx(np.median(gaps), rel=0.01)  # log bins: 0.6 % wide
    assert res.max_itl_s[0] == pytest.approx(max(gaps), rel=1e-9)


def test_chunked_prefill_cuts_decode_stalls_behind_a_long_prompt():
    # DESIGN §4.6: 20 short requests decoding when a 30k-token prompt arrives. Unchunked, its
    # whole prefill is one step and every decode waits for it; chunked (2048-token budget),
    # decodes continue between chunks.
    inp = [200] * 20 + [30000]
    out = [300] * 20 + [5]
    arrival = [0.0] * 20 + [0.5]
    runs = {}
    for chunked in (False, True):
        cfg = _cfg(chunked_prefill=chunked, max_batched_tokens=32768 if not chunked else 2048)
        runs[chunked] = _sim(_reqs(inp, out, arrival=arrival), cfg)
    short_max_itl = {c: np.max(r.max_itl_s[:20]) for c, r in runs.items()}
    short_tpot_p99 = {c: np.percentile(r.tpot_s[:20], 99) for c, r in runs.items()}
    assert short_max_itl[True] < 0.3 * short_max_itl[False]
    assert short_tpot_p99[True] <= short_tpot_p99[False]


def test_fp8_kv_about_doubles_the_running_ceiling():
    # DESIGN §4.4: offline, KV-bound (long contexts, no seq cap): fp8 KV holds twice the
    # tokens, so twice the sequences run; decode-heavy, that is ≈ 1.5x the throughput.
    n = 600
    runs = {}
    for dtype in ("auto", "fp8"):
        cfg = _cfg(kv_cache_dtype=dtype, max_num_seqs=4096, max_batched_tokens=8192)
        runs[dtype] = _sim(_reqs(np.full(n, 3000), np.full(n, 1000)), cfg, arrival="offline")
    ratio = runs["fp8"].running_seqs.max() / runs["auto"].running_seqs.max()
    assert 1.8 < ratio < 2.2
    assert (runs["fp8"].summary.output_throughput_tok_s
            > 1.3 * runs["auto"].summary.output_throughput_tok_s)


def test_unservable_counts_match_each_requests_own_refusal_and_the_simulation():
    from recommender.sim.refusals import refusal_reason, unservable_counts

    def by_refusal(config, gpu, inp, out) -> dict[str, int]:
        words = {"max_model_len": "max_model_len", "budget": "token budget",
                 "kv_pool": "more KV cache"}
        counts: dict[str, int] = {}
        for i, o in zip(inp, out, strict=True):
            why = refusal_reason(config, gpu, MODEL, int(i), int(o))
            if why is not None:
                rule = next(k for k, w in words.items() if w in why)
                counts[rule] = counts.get(rule, 0) + 1
        return counts

    inp = np.array([1000, 4000, 4096, 5000, 16000, 20000, 30000])
    out = np.full(len(inp), 10)
    capped = EngineConfig(engine="vllm", model=MODEL.name, chunked_prefill=False,
                          max_batched_tokens=4096, max_model_len=16384)
    got = unservable_counts(capped, GPU, MODEL, inp, out)
    assert got == by_refusal(capped, GPU, inp, out) == {"max_model_len": 2, "budget": 3}
    # The simulation rejects the same requests; with chunked prefill on only the length cap
    # refuses (a pool smaller than one max_model_len sequence is refused up front instead).
    result = simulate(SimRequests(np.arange(float(len(inp))), inp, out), capped, GPU, MODEL,
                      params=PARAMS)
    assert result.summary.rejected == 5
    chunked = capped.model_copy(update={"chunked_prefill": True})
    assert unservable_counts(chunked, GPU, MODEL, inp, out) == {"max_model_len": 2}
    assert unservable_counts(chunked, GPU, MODEL, inp[:3], out[:3]) == {}


def test_the_closed_loop_gap_spaces_a_users_requests_but_stays_out_of_its_latencies():
    # One user, 5 equal requests: each request runs alone, so its latencies are the same with
    # or without the client's gap, and each of the 4 requests after the first is sent G
    # later than the one before's finish: the run lasts 4·G longer. The API time R counts
    # in every request's TTFT and E2E, and also delays each next request's entry.
    r_s, g_s = 0.03, 0.2
    req = _reqs([500] * 5, [50] * 5)

    def run(gap_s: float):
        p = PARAMS.model_copy(update={"request_overhead_s": r_s, "closed_loop_gap_s": gap_s})
        params = PerfParams(engines={"vllm": p}, step_time="roofline")
        return simulate(req, _cfg(), GPU, MODEL, params=params,
                        options=SimOptions(arrival="closed_loop", concurrency=1))

    base, spaced = run(0.0), run(g_s)
    np.testing.assert_allclose(spaced.ttft_s, base.ttft_s, rtol=1e-12)
    np.testing.assert_allclose(spaced.e2e_s, base.e2e_s, rtol=1e-12)
    assert base.ttft_s.min() > r_s
    assert spaced.summary.makespan_s - base.summary.makespan_s == pytest.approx(4 * g_s)
