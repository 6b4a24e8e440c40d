"""The CLI: parse arguments, call one library function per command, print the result.

No figures are computed here. Errors a user can cause (ServeFitError) print one line on stderr
and exit 2; Ctrl-C prints one line and exits 130, and SIGTERM likewise with 143, in every
command, even where a library swallowed the KeyboardInterrupt; heavy libraries are imported
inside the commands so `--help` stays instant.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Sequence
from typing import Any, get_args

from app.cli.common import (
    COMMAND_HELP,
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    key_values,
    usage_error,
    write_output,
)
from core.errors import ServeFitError, UsageError, printable
from core.load import Dataset
from profiler.formats.base import FIELDS
from profiler.formats.registry import ALL_KINDS
from profiler.ingestion.timestamps import TIME_UNITS

PROG = "python -m app"


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; return the process exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), "")
    parser = build_parser(command if command in COMMAND_HELP else "")
    args = parser.parse_args(argv)
    args.argv = argv  # the command line as given (bench stores it with the run)
    # light: signal and ctypes only
    from runners.benchmark.shutdown import ctrl_c_kept, raise_if_interrupted, sigterm_interrupts

    # SIGTERM takes Ctrl-C's path in every command, and a Ctrl-C a library swallowed still
    # ends the command as one (write_output checks too, so nothing is written after it).
    with sigterm_interrupts() as term, ctrl_c_kept() as ctrl_c:
        try:
            code = int(args.handler(args) or 0)
            raise_if_interrupted()
            return code
        except KeyboardInterrupt:
            return _stopped(terminated=term.received)
        except BrokenPipeError:  # the reader (e.g. `| head`) went away: nothing left to say
            sys.stderr.close()
            return 0
        except Exception as exc:
            # An error that follows a Ctrl-C is what a library made of it (numba wraps the
            # KeyboardInterrupt of a callback into SystemError, DuckDB into RuntimeError):
            # the command was stopped, and says so.
            if ctrl_c.received:
                return _stopped(terminated=term.received)
            if not isinstance(exc, ServeFitError):
                raise
            print(f"{PROG}: error: {printable(str(exc))}", file=sys.stderr)
            return exc.exit_code


def _stopped(*, terminated: bool) -> int:
    """Say that the command was stopped (Ctrl-C, or SIGTERM when `terminated`); its exit
    code."""
    from runners.benchmark.shutdown import forget_caught_interrupt

    forget_caught_interrupt()  # else `python -m` may still die of SIGINT at exit
    code, said = ((EXIT_TERMINATED, "terminated") if terminated
                  else (EXIT_INTERRUPTED, "interrupted"))
    # A second interrupt while saying so (a signal still pending when the first was handled)
    # must not replace the line with a traceback; app/__main__ catches one that comes later.
    with contextlib.suppress(KeyboardInterrupt):
        print(f"{PROG}: {said}", file=sys.stderr)
    return code


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The CLI's parser: every command with its options (`only` None), or only command
    `only` with its options and the others by name and help ("": none), so a command's
    registries are imported only when it runs."""
    from app.cli.bench import add_bench
    from app.cli.recommend import add_recommend

    adders = {"profile": _add_profile, "synth": _add_synth, "predict": _add_predict,
              "export": _add_export, "bench": add_bench, "recommend": add_recommend}
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, add in adders.items():
        if only is None or only == name:
            add(sub)
        else:
            sub.add_parser(name, help=COMMAND_HELP[name])
    return parser


def _add_trace_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--format", help=f"force the trace format: {', '.join(ALL_KINDS)} "
                                    "(default: detect)")
    p.add_argument("--map", action="append", default=[], metavar="FIELD=COLUMN",
                   help=f"name the column of a field: {', '.join(FIELDS)} (repeatable)")
    p.add_argument("--time-unit", help="override the timestamp rule: " + ", ".join(TIME_UNITS))
    p.add_argument("--tokenizer", metavar="DIR", help="local Hugging Face tokenizer folder")
    p.add_argument("--synthesize-arrivals", type=float, metavar="RATE",
                   help="Poisson arrivals at RATE req/s for traces without timestamps")
    p.add_argument("--max-decompressed-mb", type=int, metavar="MB",
                   help="cap on a compressed trace's expanded size")
    p.add_argument("--workspace", metavar="PATH",
                   help="DuckDB workspace file (default $SERVEFIT_WORKSPACE, else "
                        "workspace.duckdb in $SERVEFIT_APP_HOME, else .servefit/)")
    p.add_argument("--seed", type=int, default=0, help="seed for every random choice")


def _add_profile(sub: Any) -> None:
    p = sub.add_parser("profile", help=COMMAND_HELP["profile"])
    p.add_argument("trace")
    _add_trace_options(p)
    p.add_argument("--lru-capacity-blocks", type=int, nargs="+", action="extend",
                   metavar="N", help="LRU prefix-cache sizes to simulate (default 1000 10000 "
                                     "100000)")
    from profiler.analysis.backends import BACKENDS, DEFAULT_BACKEND

    p.add_argument("--backend", default=DEFAULT_BACKEND, choices=list(BACKENDS),
                   help="engine that computes the figures (default duckdb; spark needs "
                        "requirements-spark.txt and Java 17)")
    p.add_argument("--spark-master", metavar="URL",
                   help="Spark master for --backend spark (default local[*])")
    p.add_argument("--json", action="store_true", help="print the profile as JSON")
    p.add_argument("-o", "--output", metavar="PROFILE_JSON", help="also write the profile here")
    p.set_defaults(handler=_cmd_profile)


def _add_synth(sub: Any) -> None:
    p = sub.add_parser("synth", help=COMMAND_HELP["synth"])
    p.add_argument("source", metavar="PROFILE_OR_TRACE")
    p.add_argument("--requests", type=int, required=True, metavar="N")
    p.add_argument("-o", "--output", required=True, metavar="OUT_PARQUET")
    p.add_argument("--rate-scale", type=float, default=1.0,
                   help="multiply the profile's arrival rate")
    _add_trace_options(p)
    p.set_defaults(handler=_cmd_synth)


def _add_export(sub: Any) -> None:
    p = sub.add_parser("export", help=COMMAND_HELP["export"])
    p.add_argument("rec", metavar="REC_JSON",
                   help="recommendation: an EngineConfig or {\"config\": …, \"gpu\": …}")
    p.add_argument("--out", required=True, metavar="DIR", help="bundle folder (created)")
    p.add_argument("--force", action="store_true",
                   help="replace bundle files already in DIR (default: refuse)")
    p.add_argument("--json", action="store_true", help="print the written paths as JSON")
    p.set_defaults(handler=_cmd_export)


def _add_predict(sub: Any) -> None:
    from engines.config import SpeculativeMethod
    from engines.registry import ENGINES  # the choices come from the registries
    from recommender.model.perf import PRECISIONS
    from recommender.model.resolve import HARNESSES
    from recommender.model.steptime import DEFAULT_KIND, PROVIDERS

    p = sub.add_parser("predict", help=COMMAND_HELP["predict"])
    p.add_argument("--engine", required=True, choices=list(ENGINES))
    p.add_argument("--model", required=True, help="catalog name, HF id or config.json path")
    p.add_argument("--gpu", required=True, help="catalog GPU name, e.g. H100-SXM")
    p.add_argument("--gpus", type=int, help="GPUs in total (default: one instance, "
                   "tp x dp): more are data-parallel replicas")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel size (of each "
                   "attention DP rank)")
    p.add_argument("--dp", type=int, default=1, help="attention data-parallel ranks per "
                   "instance (DEP: needs --ep tp x dp; MoE models)")
    p.add_argument("--ep", type=int, default=1, help="expert-parallel size: 1 (experts "
                   "tensor-sharded), tp (TEP) or tp x dp (DEP); MoE models")
    p.add_argument("--precision", default="bf16", choices=list(PRECISIONS))
    p.add_argument("--kv-cache-dtype", default="auto")
    p.add_argument("--isl", type=int, required=True,
                   help="input tokens per request (the mean with --lengths sharegpt)")
    p.add_argument("--osl", type=int, required=True,
                   help="output tokens per request (the mean with --lengths sharegpt)")
    p.add_argument("--lengths", choices=["fixed", *get_args(Dataset)], default="fixed",
                   help="fixed: every request is ISL/OSL; sharegpt: each request's lengths "
                        "drawn (seeded) from ShareGPT's distribution, scaled to means ISL/OSL; "
                        "random-range-0.8: each uniform between 0.8x and 1x its set length "
                        "(bench_serving's --random-range-ratio 0.8), means ISL/OSL")
    load = p.add_mutually_exclusive_group(required=True)
    load.add_argument("--concurrency", type=int, help="closed loop at this concurrency")
    load.add_argument("--rate", type=float, metavar="RPS", help="Poisson arrivals (seeded)")
    load.add_argument("--offline", action="store_true", help="all requests queued at t = 0")
    p.add_argument("--num-requests", type=int,
                   help="requests to simulate (needed with --offline; default: closed loop "
                        "max(10 x concurrency, 200), rate 2000)")
    p.add_argument("--max-num-seqs", type=int, help="running-sequence cap (engine default)")
    p.add_argument("--max-batched-tokens", type=int, help="token budget per step")
    p.add_argument("--gpu-memory-fraction", type=float, metavar="F",
                   help="the engine's own memory-fraction knob (vLLM gpu-memory-utilization, "
                        "SGLang mem-fraction-static, TensorRT-LLM free_gpu_memory_fraction; "
                        "default: the engine release's)")
    p.add_argument("--harness", choices=[h.replace("_", "-") for h in HARNESSES],
                   default="served",
                   help="how the load reaches the engine: served (its OpenAI API server, as "
                        "vllm bench serve, GuideLLM, AIPerf) or in-process (trtllm-bench, vllm "
                        "bench throughput, SGLang's offline throughput bench: no HTTP, "
                        "tokenisation or streaming costs)")
    p.add_argument("--engine-version", metavar="X.Y",
                   help="the engine release asked about (its memory-fraction and scheduler "
                        "defaults where they differ from the plug-in's release, e.g. vLLM's V0 "
                        "engine before 0.8)")
    p.add_argument("--fit", metavar="FIT_JSON",
                   help="fitted parameters to answer with (default: the shipped "
                        "data/calibration/fit.json; e.g. a refit of your own runs)")
    p.add_argument("--max-model-len", type=int, metavar="L",
                   help="longest sequence (prompt + output) the engine serves (default: sized "
                        "to the workload, ISL + OSL + 10 %% in 1024s, never the model's full "
                        "context)")
    p.add_argument("--chunked-prefill", action=argparse.BooleanOptionalAction, default=None,
                   help="prompts split over steps within the token budget, or each whole in one "
                        "step (default: the engine release's)")
    p.add_argument("--step-time", choices=list(PROVIDERS), default=DEFAULT_KIND,
                   help="where step kernel times come from: NVIDIA's measured per-operation "
                        "tables (aiconfigurator-core, the default; cells they lack fall back to "
                        "the roofline), or the roofline model everywhere")
    p.add_argument("--speculative", choices=get_args(SpeculativeMethod),
                   help="speculative decoding method")
    p.add_argument("--spec-tokens", type=int, default=3, help="draft tokens per step (k)")
    p.add_argument("--draft-model", help="draft model (eagle, eagle3, draft_model)")
    p.add_argument("--spec-acceptance", type=float,
                   help="per-token acceptance rate (default: the method's)")
    p.add_argument("--seed", type=int, default=0, help="seed of the Poisson arrivals")
    p.add_argument("--slo-ttft-p95-ms", type=float, metavar="X",
                   help="per-request TTFT bound of goodput, as bench counts it")
    p.add_argument("--slo-tpot-p95-ms", type=float, metavar="Y",
                   help="per-request TPOT bound of goodput, as bench counts it")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=_cmd_predict)


def predict_request(args: argparse.Namespace) -> Any:
    """The `PredictRequest` the parsed `predict` flags make (the accuracy bench builds each
    calibration row's request through this same function).

    Raises:
        UsageError: a count below 1, --offline without --num-requests, or a value the
            config or load refuses.
    """
    from pydantic import ValidationError

    from core.load import fixed
    from engines.config import EngineConfig
    from recommender.model.perf import weight_quantization
    from recommender.model.speculative import speculative_config
    from recommender.sim.predict import PredictRequest

    if args.offline and not args.num_requests:
        raise UsageError("--offline needs --num-requests N")
    for name in ("isl", "osl", "tp", "dp", "ep", "concurrency", "num_requests", "gpus",
                 "max_num_seqs", "max_batched_tokens", "max_model_len"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1")
    if not args.speculative and (args.spec_acceptance is not None or args.draft_model):
        raise UsageError("--spec-acceptance and --draft-model need --speculative METHOD")
    spec = None
    if args.speculative:
        spec = speculative_config(args.speculative, args.spec_tokens, args.draft_model)
    try:
        config = EngineConfig(
            engine=args.engine, model=args.model, tp=args.tp, dp=args.dp, ep=args.ep,
            max_num_seqs=args.max_num_seqs, max_batched_tokens=args.max_batched_tokens,
            gpu_memory_fraction=args.gpu_memory_fraction, kv_cache_dtype=args.kv_cache_dtype,
            max_model_len=args.max_model_len, chunked_prefill=args.chunked_prefill,
            weight_quantization=weight_quantization(args.precision), speculative=spec)
        load = fixed(args.isl, args.osl, concurrency=args.concurrency, rate_rps=args.rate,
                     offline=args.offline, num_requests=args.num_requests, seed=args.seed,
                     dataset=None if args.lengths == "fixed" else args.lengths)
        return PredictRequest(config=config, gpu=args.gpu, model=args.model, gpus=args.gpus,
                              load=load, harness=args.harness.replace("-", "_"),
                              engine_version=args.engine_version, step_time=args.step_time,
                              spec_acceptance=args.spec_acceptance,
                              slo_ttft_s=_seconds(args.slo_ttft_p95_ms),
                              slo_tpot_s=_seconds(args.slo_tpot_p95_ms))
    except ValidationError as exc:
        raise usage_error(exc, option=True, flags={
            "rate_rps": "--rate", "weight_quantization": "--precision",
            "slo_ttft_s": "--slo-ttft-p95-ms", "slo_tpot_s": "--slo-tpot-p95-ms",
            "speculative": "--speculative", "input_tokens": "--isl",
            "output_tokens": "--osl"}) from None


def _cmd_predict(args: argparse.Namespace) -> int:
    from recommender.model.params import load_params
    from recommender.sim.predict import predict

    request = predict_request(args)
    params = load_params(args.fit, step_time=args.step_time) if args.fit else None
    prediction = predict(request, params=params)
    if args.json:
        print(json.dumps(prediction.json_ms(), indent=2))
    else:
        from app.render.figures import prediction_text

        print(prediction_text(prediction))
    return 0


def _seconds(ms: float | None) -> float | None:
    return None if ms is None else ms / 1e3


def _ingest_options(args: argparse.Namespace) -> Any:
    from pydantic import ValidationError

    from profiler.ingestion.options import IngestOptions
    from profiler.ingestion.timestamps import parse_unit

    column_map = dict(key_values(args.map, "--map", "FIELD=COLUMN"))
    try:
        return IngestOptions(
            format=args.format,
            column_map=column_map,
            time_unit=parse_unit(args.time_unit) if args.time_unit else None,
            tokenizer_dir=args.tokenizer,
            synthesize_arrivals_rps=args.synthesize_arrivals,
            seed=args.seed,
            max_decompressed_bytes=(args.max_decompressed_mb << 20)
            if args.max_decompressed_mb is not None else None,
        )
    except ValidationError as exc:
        raise usage_error(exc, option=True, flags={
            "column_map": "--map", "tokenizer_dir": "--tokenizer",
            "synthesize_arrivals_rps": "--synthesize-arrivals",
            "max_decompressed_bytes": "--max-decompressed-mb"}) from None


def _workspace(args: argparse.Namespace) -> Any:
    from profiler.workspace import Workspace

    return Workspace.resolve(args.workspace)


def _cmd_profile(args: argparse.Namespace) -> int:
    from app.render.profile import profile_text
    from profiler.analysis.backends import profile_with
    from profiler.analysis.profile import DEFAULT_LRU_CAPACITIES

    capacities = args.lru_capacity_blocks or list(DEFAULT_LRU_CAPACITIES)
    if any(c < 1 for c in capacities):
        raise UsageError("--lru-capacity-blocks must be positive")
    profile = profile_with(args.backend, args.trace, workspace=_workspace(args),
                           options=_ingest_options(args), lru_capacities=capacities,
                           seed=args.seed, master=args.spark_master)
    text = profile.model_dump_json(indent=2)
    if args.output:
        write_output(args.output, text + "\n")
    print(text if args.json else profile_text(profile))
    return 0


def _cmd_synth(args: argparse.Namespace) -> int:
    from profiler.analysis.profile import load_profile_or_trace
    from profiler.synthesis.synth import synthesize

    if args.requests < 1:
        raise UsageError("--requests must be at least 1")
    profile = load_profile_or_trace(args.source, workspace=_workspace(args),
                                    options=_ingest_options(args), seed=args.seed)
    summary = synthesize(profile, n_requests=args.requests, seed=args.seed,
                         out_path=args.output, rate_scale=args.rate_scale)
    print(summary.model_dump_json(indent=2))
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    import json

    from engines.errors import EngineError
    from engines.export.bundle import export_bundle
    from engines.export.loading import load_request
    from recommender.catalog.facts import with_catalog_facts
    from recommender.decision.export_view import saved_export

    try:
        request = load_request(args.rec, recommendation=saved_export)
        written = export_bundle(with_catalog_facts(request), args.out, replace=args.force)
    except EngineError as exc:  # engines/ owns its own tree; map it at this edge
        raise UsageError(str(exc)) from None
    paths = [str(path) for path in written]
    print(json.dumps({"out": args.out, "files": paths}, indent=2) if args.json
          else "\n".join(paths))
    return 0

