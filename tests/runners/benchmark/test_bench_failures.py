"""What a run's status says when the server is broken (issue 16, F1–F3), in the library every
front end calls (run_bench, prepare, BenchRequest): the failure verdict and its threshold,
bounded model discovery, non-HTTP answers, and only http/https URLs."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from core.errors import RunnerError
from profiler.workspace import Workspace
from runners.benchmark.bench import run_bench
from runners.benchmark.bench_request import BenchRequest
from runners.benchmark.metrics import FAILED_ERROR_RATE, run_failure
from runners.benchmark.stored_runs import list_runs, load_run
from runners.load.generator import prepare
from runners.load.process import LoadOptions
from runners.load.schemas import RequestResult
from runners.load.workloads import build_schedule
from tests.runners.hostile import HostileServer
from tests.runners.loads import closed

SPEC = closed(2, num_requests=4, input_tokens=8, output_tokens=2)


def _ok() -> RequestResult:
    return RequestResult(success=True, sent_at_s=0.0, first_token_at_s=0.1, last_token_at_s=0.2,
                         end_at_s=0.2, chunk_times_s=[0.1, 0.2])


def _failed(kind: str, error: str) -> RequestResult:
    return RequestResult(success=False, error=error, error_kind=kind, sent_at_s=0.0,
                         end_at_s=1.0)


def test_the_threshold_is_one_failure_in_ten():
    assert FAILED_ERROR_RATE == 0.10  # README, bench section, documents this figure


@pytest.mark.parametrize(("oks", "failures", "verdict"), [
    (10, [], None),
    (9, [("timeout", "slow")], None),  # 1 of 10: not more than one in ten
    (18, [("timeout", "slow")] * 2, None),  # 2 of 20
    (8, [("timeout", "slow"), ("http", "HTTP 500")],
     "20% of the requests failed (more than 10%): 2 of 10 failed; most often timeout (1): slow"),
    (7, [("http", "HTTP 500"), ("timeout", "slow"), ("http", "HTTP 503")],
     "30% of the requests failed (more than 10%): 3 of 10 failed; most often http (2): HTTP 500"),
    (0, [("malformed", "bad JSON")] * 3,
     "no request succeeded: 3 of 3 failed; most often malformed (3): bad JSON"),
])
def test_a_run_fails_when_no_request_or_too_few_succeed(oks, failures, verdict):
    results = [_ok() for _ in range(oks)] + [_failed(k, e) for k, e in failures]
    assert run_failure(results) == verdict


def test_requests_cancelled_by_a_stop_do_not_count():
    cancelled = [_failed("cancelled", "run stopped") for _ in range(5)]
    assert run_failure([_ok(), *cancelled]) is None
    assert run_failure(cancelled) is None  # stopped before anything finished: incomplete
    assert run_failure([_failed("timeout", "slow"), *cancelled]) == (
        "no request succeeded: 1 of 1 failed; most often timeout (1): slow")


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://h/x", "h:8000", "http://",
                                 "http://h:port", "gopher://h"])
def test_only_http_urls_make_a_request(url):
    with pytest.raises(ValidationError, match="URL"):
        BenchRequest(endpoint_url=url, workload=SPEC)
    with pytest.raises(ValidationError, match="URL"):
        LoadOptions(url=url)


def test_http_and_https_urls_are_accepted():
    for url in ("http://127.0.0.1:8000", "https://api.example.org/v1", "HTTP://h"):
        assert BenchRequest(endpoint_url=url, workload=SPEC).endpoint_url == url


@pytest.fixture
def hostile(request):
    server = HostileServer(request.param).start()
    yield server
    server.stop()


@pytest.mark.parametrize("hostile", ["silent"], indirect=True)
def test_model_discovery_is_bounded_by_the_request_timeout(hostile):
    options = LoadOptions(url=hostile.url, timeout_s=0.5)
    # the message names the timeout that ended the wait: it was that bound, not a hang
    with pytest.raises(RunnerError, match=r"did not answer within 0\.5 s"):
        import asyncio

        asyncio.run(prepare(build_schedule(SPEC), options))


@pytest.mark.parametrize("hostile", ["silent"], indirect=True)
def test_a_silent_server_fails_the_run_within_the_timeout(hostile, tmp_path):
    ws = Workspace(tmp_path / "w.duckdb")
    with pytest.raises(RunnerError, match="did not answer within 1 s"):
        run_bench(BenchRequest(endpoint_url=hostile.url, workload=SPEC, timeout_s=1.0),
                  workspace=ws)
    [info] = list_runs(ws)
    assert info.status == "failed"


@pytest.mark.parametrize("hostile", ["not_http"], indirect=True)
def test_non_http_answers_fail_every_request_and_the_run(hostile, tmp_path):
    ws = Workspace(tmp_path / "w.duckdb")
    report = run_bench(BenchRequest(endpoint_url=hostile.url, model="m", vocab_size=5000,
                                    workload=SPEC, timeout_s=2.0), workspace=ws)
    assert report.status == "failed" and report.summary.completed == 0
    assert report.error is not None and report.error.startswith("no request succeeded: 4 of 4")
    info = load_run(ws, report.run_id).info
    assert info.status == "failed" and info.error == report.error
