"""Validate view: benchmark the recommended configuration live, then predicted against measured.

Three ways to reach a server: an endpoint that already runs, the engine launched locally, or its
official image launched as a sibling container. The run goes on a background thread
(app.jobs.BenchJob); a fragment polls it every second for the live view.
"""

from __future__ import annotations

import shlex
from typing import get_args

import pandas as pd
import streamlit as st

from app import charts
from app.cached import local_engine_missing, profile_for, trace_path_for, workspace_for
from app.jobs import BenchJob, environment
from app.redact import hide_home, user_paths
from app.render.figures import comparison_rows, measured_rows, speculation_text
from app.render.formats import plain
from app.session import current_recommendation, current_trace, remember_run
from app.storage import app_home
from core.errors import ServeFitError
from engines.config import EngineKind
from runners.benchmark.bench_request import BenchRequest
from runners.benchmark.from_options import build_request
from runners.benchmark.options import BenchOptions, bench_argv, parse_options
from runners.load.schedule import BENCH_KINDS
from runners.load.schemas import Api
from runners.server.launch_spec import LAUNCH_MODES

JOB_KEY = "servefit.validate.job"
JOB_FOR_KEY = "servefit.validate.job_for"  # the command line of the form the job ran


def _where(env, config) -> dict:
    """The server fields of the run's `BenchOptions`, with what each way needs said before a
    run rather than after it failed."""
    pick_engine = config.engine
    where = st.radio("Server", list(LAUNCH_MODES), format_func=LAUNCH_MODES.__getitem__,
                     key="val.where")
    if where == "endpoint":
        st.caption("Nothing is launched: a server must already answer the OpenAI API at this "
                   "URL (e.g. the exported `serve.sh` on the GPU machine).")
        kinds = list(get_args(EngineKind))
        return {"endpoint": st.text_input("Base URL", "http://127.0.0.1:8000", key="val.url"),
                "model": st.text_input("Served model name (empty: the server's first)", "",
                                       key="val.model") or None,
                "engine": st.selectbox("Engine serving it (for its /metrics names)", kinds,
                                       index=kinds.index(pick_engine), key="val.engine")}
    # The command shown names the recommendation saved as rec.json; the run here uses it as is.
    out: dict = {"launch": where, "config_path": "rec.json", "log_dir": str(app_home() / "logs")}
    if where == "local":
        out["engine_venv"] = st.text_input("Virtual environment holding the engine (empty: the "
                                           "engine's command on PATH)", "", key="val.venv") or None
        missing = local_engine_missing(config.model_dump_json(), out["engine_venv"])
        if missing:
            st.warning(plain(hide_home(f"Not startable here: {missing}.")))
        if not env.nvidia_gpu:
            st.warning("No NVIDIA GPU here (no nvidia-smi): only a CPU build of an engine can "
                       "start, and its figures say nothing about the GPU prediction.")
    else:
        out["model_cache_dir"] = st.text_input("Host folder of the Hugging Face cache",
                                               env.host_models_dir, key="val.models_dir")
        out.update(_docker_form())
        if not env.nvidia_gpu and out["docker_gpus"] != "none":
            st.warning("No NVIDIA GPU here (no nvidia-smi): the container asks for GPUs, "
                       "which Docker refuses without one; run the command below on the GPU "
                       "machine.")
        if not env.docker_socket:
            st.warning(f"No Docker here (no socket at {env.docker_url}): run the app with the "
                       "Docker socket mounted (see README, Docker), or run the command below "
                       "on the GPU machine.")
    return out


def _docker_form() -> dict:
    """The container's image, GPUs, network and pull policy (the CLI's --image, --docker-gpus,
    --docker-network and --pull)."""
    cols = st.columns(4)
    return {"image": cols[0].text_input("Image (empty: the engine's official one)", "",
                                        key="val.image") or None,
            "docker_gpus": cols[1].text_input("GPUs (all, none, 2, device=0,1)", "all",
                                              key="val.gpus"),
            "docker_network": cols[2].selectbox(
                "Network", ["bridge", "host"], key="val.network",
                help="bridge publishes the engine's port; host shares this machine's network "
                     "(needed where Docker has no bridge)"),
            "pull": cols[3].selectbox("Pull the image", ["missing", "always", "never"],
                                      key="val.pull")}


def _trace_form(cols, profile, trace_path: str) -> dict:
    return {"trace": trace_path,
            "duration_s": cols[0].number_input("Window (s of the trace)", 1.0, value=60.0,
                                               key="val.window"),
            "time_scale": cols[1].number_input("Time scale (0.5 = twice as fast)", 0.01,
                                               value=1.0, key="val.scale")}


def _lengths(cols, profile) -> dict:
    return {"prompt_tokens": cols[0].number_input(
                "Prompt tokens", 1, value=max(1, int(profile.input_tokens.p50)), key="val.prompt"),
            "output_tokens": cols[1].number_input(
                "Output tokens", 1, value=max(1, int(profile.output_tokens.p50)),
                key="val.output")}


def _sweep_form(cols, profile, trace_path: str) -> dict:
    return {**_lengths(cols, profile),
            "concurrency": cols[2].number_input("Highest concurrency", 1, value=64,
                                                key="val.concurrency"),
            "num_requests": cols[2].number_input("Requests per level", 1, value=64,
                                                 key="val.per_level")}


def _burst_form(cols, profile, trace_path: str) -> dict:
    steady = max(0.1, round(profile.mean_qps or 1.0, 2))
    out = {**_lengths(cols, profile),
           "rate_rps": cols[2].number_input("Steady rate (req/s)", 0.01, value=steady,
                                            key="val.rate"),
           "peak_rate_rps": cols[2].number_input(
               "Burst rate (req/s)", 0.01, value=max(steady, float(profile.peak_qps_1s or steady)),
               key="val.peak")}
    steady_s = cols[0].number_input("Steady phases (s each)", 1.0, value=20.0, key="val.steady")
    out["burst_s"] = cols[1].number_input("Burst (s)", 1.0, value=20.0, key="val.burst")
    out["duration_s"] = 2 * steady_s + out["burst_s"]  # bench takes the whole run's length
    return out


def _boundary_form(cols, profile, trace_path: str) -> dict:
    return {"trace": trace_path,
            "num_requests": cols[0].number_input("Requests per step (from the trace's start)",
                                                 6, value=200, key="val.step_requests"),
            "time_scale": cols[1].number_input("First step's time scale (0.5 = twice as fast)",
                                               0.001, value=1.0, key="val.boundary_scale"),
            "step_factor": cols[2].number_input("Load × per step", 1.05, value=1.5,
                                                key="val.step_factor"),
            "max_steps": cols[2].number_input("Most steps", 1, value=8, key="val.max_steps")}


# The bench kinds this view has a form for (label, form); the list shown is runners' registry
# (runners.load.schedule.BENCH_KINDS) narrowed to these.
_FORMS = {"trace": ("Replay my trace", _trace_form),
          "sweep": ("Concurrency sweep to the knee", _sweep_form),
          "burst": ("Burst: steady, step up, steady", _burst_form),
          "boundary": ("SLO boundary: my trace faster each step until the SLOs break",
                       _boundary_form)}
WORKLOADS = {kind: _FORMS[kind][0] for kind in BENCH_KINDS if kind in _FORMS}


def _workload(trace_path: str) -> dict:
    """The load fields of the run's `BenchOptions`."""
    profile = profile_for(current_trace())
    kind = st.selectbox("Workload", list(WORKLOADS), format_func=WORKLOADS.__getitem__,
                        key="val.kind")
    assert kind is not None  # a selectbox with options and no index=None always has a value
    cols = st.columns(4)
    out: dict = {"workload": kind, "api": cols[3].selectbox("API", list(get_args(Api)),
                                                            key="val.api")}
    out["warmup_s"] = cols[3].number_input("Warm-up (s, not measured)", 0.0, value=0.0,
                                           key="val.warmup")
    return {**out, **_FORMS[kind][1](cols, profile, trace_path)}


def _slo_ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1e3, 6)  # 0.07 s → 70, not 70.00…01


def bench_options(rec, where: dict, load: dict) -> BenchOptions:
    """The form's values and the recommendation's SLOs as the CLI's options record.

    Raises:
        UsageError: values the options record rejects (one line).
    """
    return parse_options({**where, **load,
                          "slo_ttft_p95_ms": _slo_ms(rec.request.slo_ttft_p95_s),
                          "slo_tpot_p95_ms": _slo_ms(rec.request.slo_tpot_p95_s)})


def bench_request(rec, options: BenchOptions) -> BenchRequest:
    """The run for `options` through the one builder the CLI uses; the launch config is the
    recommendation's pick, a trace replays the app's workspace of the current trace; the load
    is sent from its own process, where the app's reruns cannot delay it (issue 13)."""
    return build_request(options, workspace=str(workspace_for(current_trace()).path),
                         config=rec.pick.config, replay_workspace=True, isolate_load=True)


@st.fragment(run_every=1.0)
def _live() -> None:
    job: BenchJob | None = st.session_state.get(JOB_KEY)
    if job is None:
        return
    if job.samples:
        last = job.samples[-1]
        cols = st.columns(5)
        cols[0].metric("Elapsed", f"{last.elapsed_s:,.0f} s")
        cols[1].metric("Completed", f"{last.completed:,}")
        cols[2].metric("Errors", f"{last.errors:,}")
        cols[3].metric("Throughput", f"{last.throughput_rps:,.2f} req/s")
        cols[4].metric("Queue depth", "n/a" if last.queue_depth is None
                       else f"{last.queue_depth:,.0f}")
        st.plotly_chart(charts.live_run(job.samples), width="stretch", key="val.live")
    if job.running:
        st.info("Benchmark running…" if job.samples or not job.launch_status
                else plain(f"Starting the engine: {hide_home(job.launch_status)}…"))
        if st.button("Stop", key="val.stop"):
            job.stop.set()
        return
    if not job.shown:  # it just ended: rerun the whole page once (re-enables Start)
        job.shown = True
        st.rerun()
    if job.error:
        st.error(plain(job.error))
    elif job.report is not None:
        remember_run(job.report.run_id)
        _results(job)


def _results(job: BenchJob) -> None:
    rec, report = current_recommendation(), job.report
    st.subheader(f"Run {report.run_id}: {report.status}")
    if report.error:  # a failed run (runners.benchmark.bench.run_failure) says why, as the CLI does
        st.error(plain(f"The run failed: {report.error}"))
    st.caption("Stored in the app's store (see Runs). " + (
        "The prediction is of the requests this run sent, as sent, on one instance of the "
        f"recommended configuration; the measurement is this run on {report.url}."
        if job.predicted is not None else
        "The prediction is for the whole trace on the recommended GPUs (this run's own "
        f"requests could not be predicted: {job.unpredicted or 'no recommendation'}); the "
        f"measurement is this run on {report.url}."))
    s = report.summary
    st.markdown(f"{s.count:,} requests sent, {s.completed:,} completed, "
                f"{s.count - s.completed:,} failed, over {s.duration_s:,.1f} s.")
    # Small tables as plain HTML (st.table): readable, copyable and printable.
    st.table(pd.DataFrame(measured_rows(s)).set_index("latency (ms)"))
    if report.scraped.speculative is not None:
        st.markdown("Speculative decoding, engine counters: "
                    + plain(speculation_text(report.scraped.speculative)))
    if rec is not None:
        st.markdown("**Predicted against measured**")
        predicted = job.predicted if job.predicted is not None else rec.pick.predicted
        st.table(pd.DataFrame(comparison_rows(predicted, s))
                 .set_index("figure"))
    if report.boundary is not None:
        _boundary(report.boundary, rec)


def _boundary(measured, rec) -> None:
    """The measured boundary's steps, and the predicted boundary against it."""
    from core.capacity import compare_boundary

    found = measured.boundary_rps
    st.markdown("**SLO boundary, measured**: " + (
        "none: the first step already broke" if found is None else
        f"{'at least ' if measured.capped else ''}{found:,.3g} req/s")
        + f" (stopped: {measured.stopped_because})")
    st.table(pd.DataFrame({
        "step": [x.step for x in measured.steps],
        "load ×": [round(x.multiple, 3) for x in measured.steps],
        "offered req/s": [round(x.offered_rps, 3) for x in measured.steps],
        "completed": [x.completed for x in measured.steps],
        "TTFT p95 (ms)": [None if x.ttft_p95_s is None else round(x.ttft_p95_s * 1e3, 1)
                          for x in measured.steps],
        "verdict": ["holds" if x.holds else f"breaks: {x.broke}" for x in measured.steps],
    }).set_index("step"))
    if rec is None or rec.capacity is None or found is None:
        return
    delta = compare_boundary(rec.capacity.pick, found)
    st.table(pd.DataFrame({
        "predicted req/s": [round(delta.predicted_rps, 3)],
        "measured req/s": [round(delta.measured_rps, 3)],
        "error (%)": [None if delta.error is None else round(delta.error * 100, 1)],
        "within the band": ["n/a" if delta.within_band is None
                            else "yes" if delta.within_band else "no"],
    }))
    st.caption("The prediction is the pick's boundary on the recommended GPUs; a measured "
               "boundary on the same hardware is one more calibration point for it.")


def render() -> None:
    st.title("Validate live")
    rec = current_recommendation()
    if rec is None:
        st.info("Get a recommendation first (Recommend, or open a saved one under Runs); "
                "this view benchmarks its pick.")
        return
    st.caption(f"Config: {rec.pick.label} ({rec.model}); trace: {plain(current_trace().name)}")
    env = environment()
    try:
        where = _where(env, rec.pick.config)
        with user_paths(current_trace()):
            options = bench_options(rec, where, _workload(trace_path_for(current_trace())))
    except ServeFitError as exc:
        st.error(plain(str(exc)))
        return
    with st.expander("Run it from a shell instead"):
        st.caption("Save the recommendation, then run the benchmark where the engine can run:")
        st.download_button("rec.json", rec.model_dump_json(indent=2), "rec.json",
                           mime="application/json", key="val.rec_json")
        st.code(shlex.join(bench_argv(options)), language="bash")
    job: BenchJob | None = st.session_state.get(JOB_KEY)
    asked = shlex.join(bench_argv(options))
    if job is not None and not job.running and st.session_state.get(JOB_FOR_KEY) != asked:
        # A finished run (or its error) belongs to the form as it was: after the server or
        # the load changes, showing it here would pass it off as this form's answer.
        st.session_state.pop(JOB_KEY)
        st.caption("The last run was for other settings; its results are under Runs.")
        job = None
    busy = job is not None and job.running
    if st.button("Start the benchmark", type="primary", disabled=busy, key="val.start"):
        try:
            request = bench_request(rec, options)
        except ServeFitError as exc:
            st.error(plain(f"cannot run this benchmark: {hide_home(str(exc))}"))
        else:
            deployment = (rec.pick.config, rec.gpu) if rec is not None else None
            st.session_state[JOB_KEY] = BenchJob(request, deployment).start()
            st.session_state[JOB_FOR_KEY] = asked
    _live()


render()
