"""`python -m app bench`: parse the options, run one live benchmark, print its summary.

Heavy imports stay inside the command so `--help` is instant; the figures come from
`runners.benchmark.bench_report.report_json` (the CLI only formats them).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from app.cli.common import COMMAND_HELP, EXIT_TERMINATED
from core.errors import UsageError

PROG = "python -m app"


def add_bench(sub: Any) -> None:
    """Register the `bench` sub-command; its workload and API kinds are the runners'
    registries (runners.load.schedule.BENCH_KINDS, runners.load.schemas.Api)."""
    from typing import get_args

    from runners.load.schedule import BENCH_KINDS
    from runners.load.schemas import Api
    from runners.server.launch_spec import LAUNCH_MODES

    p = sub.add_parser("bench", help=COMMAND_HELP["bench"])
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--endpoint", metavar="URL", help="an OpenAI-compatible server")
    where.add_argument("--launch", choices=[m for m in LAUNCH_MODES if m != "endpoint"],
                       help="start the engine from --config, benchmark it, stop it")
    p.add_argument("--config", dest="config_path", metavar="REC_JSON",
                   help="with --launch: recommendation or bare EngineConfig JSON; with "
                        "--predict: the deployment predicted")
    p.add_argument("--predict", action="store_true",
                   help="also predict exactly the requests this run sends, served by "
                        "--config's deployment, and print the prediction beside the run")
    p.add_argument("--engine-venv", metavar="DIR",
                   help="--launch local: virtual environment holding the engine (default: "
                        "the engine's command on PATH)")
    p.add_argument("--log-dir", metavar="DIR",
                   help="engine logs (default logs/ in $SERVEFIT_APP_HOME, else .servefit/logs)")
    p.add_argument("--model-cache-dir", metavar="DIR",
                   help="--launch docker: host Hugging Face cache (default ~/.cache/huggingface)")
    p.add_argument("--image", help="--launch docker: image (default: the engine's official "
                                   "image at the pinned release)")
    p.add_argument("--docker-gpus", default="all", metavar="GPUS",
                   help="--launch docker: all, none, a count, or device=0,1 (default all)")
    p.add_argument("--docker-network", choices=["bridge", "host"], default="bridge",
                   help="--launch docker: publish the port (bridge) or share the host's network")
    p.add_argument("--pull", choices=["missing", "always", "never"], default="missing",
                   help="--launch docker: pull the image when missing (default), always, never")
    p.add_argument("--model", help="served model name (default: the server's first)")
    p.add_argument("--engine", help="engine serving --endpoint, for its /metrics names "
                                    "(default: the config's engine, else vllm)")
    p.add_argument("--workload", required=True, choices=BENCH_KINDS)
    p.add_argument("--trace", metavar="FILE", help="trace to replay (--workload trace)")
    p.add_argument("--time-scale", type=float, default=1.0,
                   help="trace: multiply gaps (0.5 = twice as fast)")
    p.add_argument("--concurrency", type=int, metavar="C",
                   help="requests in flight; sweep: the cap (default 64)")
    p.add_argument("--rate", dest="rate_rps", type=float, metavar="R",
                   help="arrivals per second (poisson, gamma, soak; burst: steady rate)")
    p.add_argument("--peak-rate", dest="peak_rate_rps", type=float, metavar="R",
                   help="burst: rate during the burst (default 4x --rate)")
    p.add_argument("--gamma-cv", type=float, help="gamma: inter-arrival CV (default 2)")
    p.add_argument("--duration-s", type=float, metavar="D", help="run length (burst: total)")
    p.add_argument("--burst-s", type=float, help="burst: length of the step up (default D/3)")
    p.add_argument("--num-requests", type=int, metavar="N", help="requests (sweep: per level)")
    p.add_argument("--prompt-tokens", type=int, metavar="P")
    p.add_argument("--output-tokens", type=int, metavar="M")
    p.add_argument("--api", choices=get_args(Api), default="completions")
    p.add_argument("--slo-ttft-p95-ms", type=float, metavar="X")
    p.add_argument("--slo-tpot-p95-ms", type=float, metavar="Y")
    p.add_argument("--workers", type=int, default=1, help="load-generator processes")
    p.add_argument("--vocab-size", type=int, metavar="V",
                   help="top of prompt token ids, for servers without /tokenize")
    p.add_argument("--timeout-s", type=float, default=600.0, help="bound on each request")
    p.add_argument("--warmup-s", type=float, default=0.0, metavar="W",
                   help="unmeasured load for W seconds first (cold kernels, caches)")
    p.add_argument("--step-factor", type=float, metavar="F",
                   help="boundary: load multiplier per step (default 1.5)")
    p.add_argument("--max-steps", type=int, metavar="K", help="boundary: most steps (default 8)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workspace", metavar="PATH",
                   help="DuckDB workspace for the results (default $SERVEFIT_WORKSPACE, else "
                        "workspace.duckdb in $SERVEFIT_APP_HOME, else .servefit/)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(handler=cmd_bench)


_NOT_OPTIONS = ("command", "handler", "workspace", "json", "argv", "predict")


def options_of(args: argparse.Namespace) -> Any:
    """The parsed command line as `runners.benchmark.options.BenchOptions`."""
    from runners.benchmark.options import parse_options

    return parse_options({k: v for k, v in vars(args).items()
                          if k not in _NOT_OPTIONS and v is not None})


EXIT_FAILED_RUN = 1  # the run ended and was stored, but failed (its report says why)


def cmd_bench(args: argparse.Namespace) -> int:
    """Exit 0 for a complete run, EXIT_FAILED_RUN for a failed one (report printed, reason on
    stderr), 2 when it could not run, 130 on Ctrl-C, EXIT_TERMINATED on SIGTERM."""
    from runners.benchmark.bench_report import report_json
    from runners.benchmark.from_options import bench
    from runners.benchmark.live_run import progress_line
    from runners.benchmark.shutdown import asyncio_ctrl_c, sigterm_interrupts

    options = options_of(args)
    config = _launch_config(options)  # fails early, as the prediction does
    predicted = _predicted(options, args.workspace, config) if args.predict else None
    live = sys.stderr.isatty()

    def progress(sample: Any) -> None:
        if live:
            print("\r" + progress_line(sample), end="", file=sys.stderr, flush=True)

    # Ctrl-C goes to asyncio's handler, which cancels the run so that it is stored.
    with sigterm_interrupts() as term, asyncio_ctrl_c():
        try:
            report = bench(options, workspace=args.workspace, argv=args.argv, progress=progress,
                           config=config)
        except KeyboardInterrupt:
            if not term.received:
                raise
            print(f"{PROG}: terminated (run stored as incomplete)", file=sys.stderr)
            return EXIT_TERMINATED
    if live:
        print(file=sys.stderr)
    summary = report_json(report)
    if predicted is not None:
        summary["predicted"] = predicted.json_ms()
    print(json.dumps(summary, indent=2) if args.json else _text(summary))
    if report.status == "failed":
        print(f"{PROG}: error: run {report.run_id} failed: {report.error}", file=sys.stderr)
        return EXIT_FAILED_RUN
    return 0


def _predicted(options: Any, workspace: str | None, config: Any) -> Any:
    """The prediction of the requests `options` send (`app.run_prediction`), for the
    deployment --config names (`config`: the one --launch starts, None without)."""
    from app.run_prediction import predict_run
    from runners.benchmark.from_options import build_request

    if options.config_path is None:
        raise UsageError("--predict needs --config REC_JSON: the deployment to predict")
    export = _rec_request(options.config_path)
    return predict_run(build_request(options, workspace=workspace, config=config),
                       export.config, export.gpu)


def _launch_config(options: Any) -> Any:
    """The EngineConfig --launch starts (None without --launch): --config's, as its export
    bundle would launch it (a pre-quantized checkpoint where the engine cannot quantize)."""
    from engines.errors import EngineError
    from engines.export.bundle import served_config

    if options.launch is None:
        return None
    try:
        return served_config(_rec_request(options.config_path or ""))
    except EngineError as exc:  # engines/ owns its own tree: map it at this edge
        raise UsageError(str(exc)) from None


def _rec_request(path: str) -> Any:
    """--config's rec.json as an ExportRequest, whichever of its shapes the file holds (a
    saved Recommendation's pick too: `recommender.decision.export_view.saved_export`)."""
    from engines.export.loading import load_request
    from recommender.decision.export_view import saved_export

    return load_request(path, recommendation=saved_export)


def _ms_line(d: dict[str, float | None]) -> str:
    return "  ".join(f"{k} {'-' if v is None else f'{v:.1f}'}" for k, v in d.items())


def _text(s: dict[str, Any]) -> str:
    def ms(key: str) -> str:
        return _ms_line(s[key])

    lines = [
        f"run {s['run_id']} ({s['status']}) against {s['url']}",
        *([f"failed     {s['error']}"] if s.get("error") else []),
        f"requests   {s['completed']} of {s['count']} completed; errors {s['errors'] or 0}",
        f"throughput {s['request_throughput_rps']:.2f} req/s, "
        f"{s['output_throughput_tok_s']:.1f} output tok/s; goodput {s['goodput_rps']:.2f} req/s",
        f"TTFT ms    {ms('ttft_ms')}",
        f"TPOT ms    {ms('tpot_ms')}",
        f"ITL ms     {ms('itl_ms')}",
        f"E2E ms     {ms('e2e_ms')}",
    ]
    if "predicted" in s:
        p = s["predicted"]
        lines += [f"predicted  {p['requests']} requests as sent, on --config's deployment: "
                  f"{p['request_throughput_rps']:.2f} req/s, "
                  f"{p['output_throughput_tok_s']:.1f} output tok/s",
                  *(f"  {name:<8} {_ms_line(p[key])}" for name, key in
                    (("TTFT ms", "ttft_ms"), ("TPOT ms", "tpot_ms"), ("E2E ms", "e2e_ms")))]
    if s.get("slo_met") is not None:
        lines.append(f"SLOs       {'met' if s['slo_met'] else 'NOT met'} (p95)")
    if "knee_concurrency" in s:
        lines.append(f"knee       concurrency {s['knee_concurrency'] or 'not reached'}")
    if "burst" in s:
        b = s["burst"]
        lines.append(f"burst      TTFT p50 spike x{_num(b['ttft_spike_ratio'])}, queue peak "
                     f"{_num(b['peak_queue_depth'])}, recovered after "
                     f"{_num(b['recovery_s'], 's')}")
    if "soak" in s:
        k = s["soak"]
        lines.append(f"soak       last/first window: TTFT p50 x{_num(k['ttft_p50_ratio'])}, "
                     f"p95 x{_num(k['ttft_p95_ratio'])}, throughput "
                     f"x{_num(k['throughput_ratio'])}")
    if "boundary" in s:
        lines += _boundary_lines(s["boundary"])
    hit = s["scraped"]["prefix_cache_hit_rate"]
    if hit is not None:
        lines.append(f"prefix hit {hit:.1%} (engine counters)")
    spec = s["scraped"].get("speculative")
    if spec is not None:
        from app.render.figures import speculation_text
        from runners.server.engine_metrics import SpecMeasured

        lines.append("speculate  " + speculation_text(SpecMeasured.model_validate(spec)))
    return "\n".join(lines)


def _num(value: float | None, unit: str = "") -> str:
    return "-" if value is None else f"{value:.2f}{' ' + unit if unit else ''}"


def _boundary_lines(b: dict[str, Any]) -> list[str]:
    rate = b["boundary_rps"]
    found = ("none: the first step already broke" if rate is None
             else f"{'at least ' if b['capped'] else ''}{rate:.2f} req/s")
    lines = [f"boundary   {found} (stopped: {b['stopped_because']})"]
    for st in b["steps"]:
        verdict = "holds" if st["holds"] else f"breaks: {st['broke']}"
        lines.append(f"  step {st['step']}  x{st['multiple']:.3g}  offered "
                     f"{st['offered_rps']:.2f} req/s  done {st['completed']}/{st['sent']}  "
                     f"TTFT p95 {_num(_ms(st['ttft_p95_s']), 'ms')}  {verdict}")
    return lines


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e3
