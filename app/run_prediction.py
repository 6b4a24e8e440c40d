"""The prediction of a benchmark run's own requests, for `bench --predict` and Validate.

Joins the two halves no library package may join (runners does not import the recommender):
the schedule a run sends (`runners.benchmark.bench_request.schedules_of`, the same call the
run makes) as a `core.load.LoadSpec` of sent requests (`Schedule.load_spec`), predicted by
`recommender.sim.predict.predict` for the deployment the run serves, its goodput under the
run's SLOs. So the measurement is set beside the prediction of exactly its load, not of the
whole trace the pick was chosen on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.errors import RunnerError, UsageError

if TYPE_CHECKING:  # imported where used: the CLI starts without the recommender
    from engines.config import EngineConfig
    from recommender.sim.predict import LoadPrediction
    from runners.benchmark.bench_request import BenchRequest


def predict_run(request: BenchRequest, config: EngineConfig, gpu: str | None
                ) -> LoadPrediction:
    """The `LoadPrediction` of what `request` (a `runners.benchmark.bench_request.BenchRequest`)
    sends, served by `config` (an `EngineConfig`; one instance) on `gpu` (a catalog GPU name).

    Raises:
        UsageError: no GPU named, a sweep or boundary (several schedules), or a schedule
            that cannot be predicted as sent (`Schedule.load_spec`), or what `predict`
            refuses.
    """
    from recommender.sim.predict import PredictRequest, predict
    from runners.benchmark.bench_request import schedules_of

    if gpu is None:
        raise UsageError("--predict needs the GPU the deployment runs on: the config names "
                         "none (a bare EngineConfig); use a recommendation's rec.json")
    schedules = schedules_of(request)
    if len(schedules) != 1:
        raise UsageError("--predict predicts one run's requests; a sweep or a boundary sends "
                         "several (predict a level with `predict`)")
    try:
        load = schedules[0][1].load_spec()
    except RunnerError as exc:
        raise UsageError(f"--predict: {exc}") from None
    return predict(PredictRequest(config=config, gpu=gpu, model=config.model, load=load,
                                  slo_ttft_s=request.slo_ttft_p95_s,
                                  slo_tpot_s=request.slo_tpot_p95_s))
