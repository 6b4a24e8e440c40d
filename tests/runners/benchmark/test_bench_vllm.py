"""End to end on the real vLLM CPU server (tiny model, tests/runners/conftest.py): a Mooncake
trace slice replayed with its shared first block, every request accounted for with exact
output lengths, the engine's prefix-cache hit counter rising by the shared tokens; a sweep
that stops right past its knee on a server running two sequences at a time; results in the store;
then the engine killed mid-run: the run is stored as failed with its rows, nothing left running.
Slow: two launches, ≈ 2-3 min.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import numpy as np
import pytest

from profiler.workspace import Workspace
from runners.benchmark.bench import run_bench
from runners.benchmark.bench_request import BenchRequest
from runners.benchmark.live_run import ProgressSample
from runners.benchmark.stored_runs import list_runs, load_run
from runners.load.workloads import build_schedule
from runners.server.launch import launched
from runners.server.process_group import group_alive
from tests.runners.conftest import vllm_spec
from tests.runners.loads import poisson, sweep
from tests.runners.loads import trace as replay_of

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[3]
TRACE = ROOT / "tests/data/traces/mooncake_conversation_trace.jsonl.gz"
SHARED_TOKENS = 512  # every request of this trace starts with hash block 0 (512 tokens)
N_TRACE = 10


def _two_seqs(model_dir: Path, log_dir: Path):
    spec = vllm_spec(model_dir, log_dir)
    return spec.model_copy(update={"argv": [*spec.argv, "--max-num-seqs", "2"]})


def test_trace_replay_and_sweep_on_real_vllm(tiny_model_dir, tmp_path):
    ws = Workspace(tmp_path / "w.duckdb")
    trace = replay_of(path=str(TRACE), workspace=str(ws.path), num_requests=N_TRACE,
                      time_scale=0.01, max_input_tokens=600, max_output_tokens=4,
                      max_in_flight=1)
    # Enough requests per level that each lasts about a second on an idle CPU, so the 0.1 s
    # scrapes see requests running (a 0.3 s level could fall between scrapes). 64 output
    # tokens: with reads stamped by the kernel, a short request's latency no longer carries the
    # client's own CPU wait (the engine shares the two cores), and 16-token requests left the
    # engine too little work for a knee inside the cap.
    swept_load = sweep(32, num_requests=16, input_tokens=64, output_tokens=64)
    with launched(_two_seqs(tiny_model_dir, tmp_path)) as ep:
        replay = run_bench(BenchRequest(endpoint_url=ep.url, workload=trace,
                                        scrape_interval_s=0.25), workspace=ws)
        swept = run_bench(BenchRequest(endpoint_url=ep.url, workload=swept_load,
                                       scrape_interval_s=0.1),
                          workspace=ws)
    assert not group_alive(ep.pid)

    expected = build_schedule(trace)
    record = load_run(ws, replay.run_id)
    assert replay.status == "complete" and replay.summary.completed == N_TRACE
    assert [r.idx for r in record.requests] == list(range(N_TRACE))
    assert [r.result.output_tokens for r in record.requests] == [
        r.output_tokens for r in expected.requests]
    assert [r.result.prompt_tokens for r in record.requests] == [
        r.input_tokens for r in expected.requests]
    # One request at a time: each after the first finds the shared 512-token block cached.
    assert replay.scraped.prefix_cache_hits_delta >= SHARED_TOKENS * (N_TRACE - 1)
    assert replay.scraped.failures == 0  # vLLM's real /metrics text parses
    keys = {m.key for m in record.metrics}
    assert {"queue_depth", "running", "kv_cache_usage", "prefix_cache_hits_tokens",
            "prefix_cache_queries_tokens"} <= keys, keys

    # The stop rule on a real server: levels double from 1, and the sweep ends right past the
    # knee it finds, or at the cap of 32 when none forms. Which of the two happens is not
    # asserted: the tiny CPU engine shares 2 cores with the client, so one level's throughput
    # moves by +-15 % against the next (fresh-clone CI runs saw the knee at 8, at 16, and none
    # within 32, with 4 -> 8 -10 % then 8 -> 16 +28 %). Where the knee falls is tested on a
    # server with a fixed capacity (test_bench.py::test_sweep_stops_past_the_knee).
    knee = swept.knee.knee_concurrency
    levels = [lv.concurrency for lv in swept.levels]
    print(f"\nsweep levels: {[lv.model_dump() for lv in swept.levels]}", file=sys.stderr)
    assert levels == [2**i for i in range(len(levels))]
    tput = np.array([lv.output_throughput_tok_s for lv in swept.levels])
    e2e = np.array([lv.e2e_p50_s for lv in swept.levels])
    flat = (tput[1:] / tput[:-1] < 1.10) & (e2e[1:] / e2e[:-1] > 1.20)
    if knee is not None:
        assert levels[-1] == 2 * knee <= 32
        assert flat.tolist() == [False] * (len(flat) - 1) + [True]  # only the last step is flat
    else:
        assert levels[-1] == 32 and not flat.any()
    # Past max_num_seqs=2 requests queue, and queueing shows in the tail: the last level
    # waits far longer for its first token. A knee found at 1 (a busy machine) ends the sweep
    # at 2, where nothing waits (CI: 94 vs 85 ms). Whether throughput grows with concurrency
    # is the engine's performance on a shared CPU, not the sweep's behaviour: beside two busy
    # loops level 2 made 343 tok/s against level 1's 485, and the sweep rightly stopped there.
    if levels[-1] > 2:
        assert swept.levels[-1].ttft_p95_s > 1.5 * swept.levels[0].ttft_p95_s
    # max_num_seqs=2 caps what the engine runs whenever a scrape lands. Neither "a scrape saw
    # it busy" nor vLLM's waiting gauge is asserted: on a fresh 2-core machine the server's
    # /metrics answers slowly under load (9 scrapes in a 3 s sweep, all between requests), and
    # with this tiny model the API front-end, not the engine, queues. The trace replay above
    # checks the scraped series themselves (every key present, prefix hits rose).
    scraped = swept.scraped
    assert scraped.failures == 0 and scraped.peak_running <= 2, scraped
    assert {r.run_id for r in list_runs(ws)} == {replay.run_id, swept.run_id}


def _children() -> list[int]:
    """Pids whose parent is this process (the launched server's group leader)."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid():
                out.append(int(entry.name))
    return out


def test_engine_killed_mid_run(tiny_model_dir, tmp_path):
    ws = Workspace(tmp_path / "w.duckdb")
    killed: list[int] = []
    # Children from before the run are not the server's: e.g. the JVM an earlier Spark test
    # in this process started lives as long as the process does.
    before = set(_children())

    def progress(p: ProgressSample) -> None:
        if p.completed >= 5 and not killed:
            [pid] = set(_children()) - before
            killed.append(pid)
            os.killpg(pid, signal.SIGKILL)

    spec = poisson(8, num_requests=200, input_tokens=32, output_tokens=8, seed=1)
    report = run_bench(BenchRequest(launch=vllm_spec(tiny_model_dir, tmp_path), workload=spec),
                       workspace=ws, progress=progress)
    assert report.status == "failed" and "health check" in (report.error or "")
    assert killed and not group_alive(killed[0]) and set(_children()) <= before
    [info] = list_runs(ws)
    record = load_run(ws, info.run_id)
    ok = np.array([r.result.success for r in record.requests])
    assert info.status == "failed" and ok.sum() >= 5 and len(record.requests) < 200
    assert all(r.result.output_tokens == 8 for r in record.requests if r.result.success)
