"""One calibration row: `CalRow`, a usable measurement (the workload and the SI-normalised value),
the `python -m app predict` flags that state its deployment and load, and the `predict` request
they make. What the model answers for a row is `recommender.calibration.answers`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import ValidationError

from core.errors import UsageError
from core.load import Dataset, DatasetLengths, LoadSpec, fixed
from engines.config import EngineConfig
from recommender.catalog.lookup import get_model
from recommender.catalog.specs import ModelSpec
from recommender.model.perf import weight_quantization
from recommender.model.resolve import Harness
from recommender.model.steptime import DEFAULT_KIND

if TYPE_CHECKING:  # sim.predict imports the simulator; only where used
    from recommender.sim.predict import PredictRequest


@dataclass(slots=True, frozen=True)
class CalRow:
    """One usable measurement: the workload `predict` needs and the SI-normalised value."""

    index: int
    engine: str
    model: str
    gpu: str
    gpus: int
    tp: int
    precision: str
    kv_cache_dtype: str
    isl: int
    osl: int
    concurrency: int | None
    num_requests: int | None
    max_num_seqs: int | None
    gpu_memory_fraction: float | None
    metric: str
    value: float
    split: str  # "train" or "test"
    # The publication (published.sources.source_key): leave-one-source-out groups by it.
    source: str = ""
    # Who measured it with which harness (published.sources.family_of): LOFO's groups.
    family: str = ""
    # Dataset whose length distribution the run drew from (core.load.DatasetLengths), None:
    # fixed lengths (or a spread not published, e.g. random-dataset outputs cut by EOS).
    dataset: Dataset | None = None
    # How the load reached the engine (`resolve.HARNESSES`): in_process for trtllm-bench and
    # vLLM's offline throughput / latency benchmarks (no API server between engine and client).
    harness: Harness = "served"
    engine_version: str | None = None  # the release measured, as the row states it
    dp: int = 1  # attention data-parallel ranks per instance
    ep: int = 1  # expert-parallel size
    max_batched_tokens: int | None = None
    # Poisson arrivals at this rate (MLPerf's Server scenario, `vllm bench serve
    # --request-rate R`): an open loop, neither closed-loop concurrency nor offline.
    rate_rps: float | None = None
    max_model_len: int | None = None  # the served context where the row states it
    chunked_prefill: bool | None = None  # where the row's command sets it

    def engine_config(self, model: ModelSpec) -> EngineConfig:
        """The measured deployment as an `EngineConfig` of `model` (the row's model spec).

        Raises:
            UsageError: an unknown precision, or a field the config refuses.
        """
        try:
            return EngineConfig(
                engine=self.engine, model=model.name, tp=self.tp,  # type: ignore[arg-type]
                dp=self.dp, ep=self.ep, max_num_seqs=self.max_num_seqs,
                max_batched_tokens=self.max_batched_tokens,
                gpu_memory_fraction=self.gpu_memory_fraction, max_model_len=self.max_model_len,
                chunked_prefill=self.chunked_prefill,
                kv_cache_dtype=self.kv_cache_dtype,  # type: ignore[arg-type]
                weight_quantization=weight_quantization(self.precision))
        except ValidationError as exc:
            raise UsageError(f"row {self.index}: {exc.errors()[0]['msg']}") from None

    def load(self) -> LoadSpec:
        """The measured load: closed loop at the row's concurrency, or offline; the row's
        ISL/OSL as fixed lengths, or as the means of its dataset's distribution."""
        spec = fixed(self.isl, self.osl, concurrency=self.concurrency, rate_rps=self.rate_rps,
                     offline=self.concurrency is None and self.rate_rps is None,
                     num_requests=self.num_requests)
        if self.dataset is None:
            return spec
        lengths = DatasetLengths(dataset=self.dataset, input_tokens=self.isl,
                                 output_tokens=self.osl)
        return spec.model_copy(update={"lengths": lengths})

    def predict_argv(self) -> list[str]:
        """The `python -m app predict` flags that state this measurement: what a user types
        to ask the model the row's question (without --json)."""
        argv = ["--engine", self.engine, "--model", self.model, "--gpu", self.gpu,
                "--gpus", str(self.gpus), "--tp", str(self.tp), "--precision", self.precision,
                "--kv-cache-dtype", self.kv_cache_dtype, "--isl", str(self.isl),
                "--osl", str(self.osl), "--harness", self.harness.replace("_", "-")]
        argv += (["--concurrency", str(self.concurrency)] if self.concurrency is not None
                 else ["--rate", repr(self.rate_rps)] if self.rate_rps is not None
                 else ["--offline"])
        optional = {"--num-requests": self.num_requests, "--max-num-seqs": self.max_num_seqs,
                    "--max-batched-tokens": self.max_batched_tokens,
                    "--max-model-len": self.max_model_len,
                    "--gpu-memory-fraction": self.gpu_memory_fraction,
                    "--engine-version": self.engine_version, "--lengths": self.dataset}
        if self.dp > 1:
            optional["--dp"] = self.dp
        if self.ep > 1:
            optional["--ep"] = self.ep
        for flag, value in optional.items():
            if value is not None:
                argv += [flag, str(value)]
        if self.chunked_prefill is not None:
            argv.append("--chunked-prefill" if self.chunked_prefill else "--no-chunked-prefill")
        return argv

    def request(self, step_time: str = DEFAULT_KIND) -> PredictRequest:
        """The `predict` request `predict_argv` makes (tests check the CLI builds the same)."""
        from recommender.sim.predict import PredictRequest

        config = self.engine_config(get_model(self.model)).model_copy(
            update={"model": self.model})  # as typed: predict looks it up in the catalog
        return PredictRequest(config=config, gpu=self.gpu, model=self.model,
                              gpus=self.gpus, load=self.load(), harness=self.harness,
                              engine_version=self.engine_version, step_time=step_time)


LATENCY_METRICS = frozenset({"ttft_s", "tpot_s", "itl_s", "e2e_s"})
