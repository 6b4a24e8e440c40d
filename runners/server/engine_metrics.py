"""An engine's metrics in our keys: one scrape's Prometheus samples mapped to `MetricSample`s
by the plug-in's sample names (`engines.base.MetricKey`: summed over label sets, ratios
averaged, histograms as `_sum`/`_count`), and what a run's samples say: the prefix-cache hit
rate and speculative decoding as the engine counted them.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import Field

from core.records import Record
from profiler.analysis.ngram_acceptance import solve_acceptance
from runners.server.exposition import PromSample

# Keys whose samples are ratios or gauges per engine: averaged over label sets, not summed.
_MEAN_KEYS = frozenset({"kv_cache_usage", "prefix_cache_hit_rate", "spec_accept_length"})
# Keys scraped as histograms: we keep their _sum and _count.
_HISTOGRAM_SUFFIXES = ("_sum", "_count")


class MetricSample(Record):
    """One of our metric keys at one scrape, on the request stamps' clock."""

    at_s: float = Field(description="perf_counter when the scrape answered.")
    key: str = Field(description="Our key (engines.base.MetricKey), `_sum`/`_count` for "
                     "histograms.")
    name: str = Field(description="The engine's sample name it was read from.")
    value: float


def extract(
    samples: list[PromSample], metric_names: Mapping[str, tuple[str, ...]], at_s: float
) -> list[MetricSample]:
    """Our keys from one scrape: for each key the first of its names present (newest first),
    summed over label sets (averaged for ratios); histograms give `<key>_sum`/`<key>_count`.
    """
    by_name: dict[str, list[float]] = {}
    for s in samples:
        by_name.setdefault(s.name, []).append(s.value)
    out = []
    for key, names in metric_names.items():
        for name in names:
            found = _read(key, name, by_name, at_s)
            if found:
                out.extend(found)
                break
    return out


def _read(key: str, name: str, by_name: dict[str, list[float]], at_s: float
          ) -> list[MetricSample]:
    if name in by_name:
        values = by_name[name]
        value = sum(values) / len(values) if key in _MEAN_KEYS else sum(values)
        return [MetricSample(at_s=at_s, key=key, name=name, value=value)]
    if all(name + suffix in by_name for suffix in _HISTOGRAM_SUFFIXES):
        return [MetricSample(at_s=at_s, key=key + suffix, name=name + suffix,
                             value=sum(by_name[name + suffix]))
                for suffix in _HISTOGRAM_SUFFIXES]
    return []


def _series(samples: list[MetricSample], key: str) -> list[float]:
    """One key's values in scrape order."""
    return [s.value for s in sorted(samples, key=lambda s: s.at_s) if s.key == key]


def hit_rate(samples: list[MetricSample]) -> float | None:
    """Prefix-cache hit rate over the run: Δhits / Δqueries between the first and last scrape
    (token counters); else the mean of a scraped hit-rate gauge; None without either."""
    hits = _series(samples, "prefix_cache_hits_tokens")
    queries = _series(samples, "prefix_cache_queries_tokens")
    if len(hits) >= 2 and len(queries) >= 2 and queries[-1] > queries[0]:
        return (hits[-1] - hits[0]) / (queries[-1] - queries[0])
    gauge = _series(samples, "prefix_cache_hit_rate")
    return sum(gauge) / len(gauge) if gauge else None


class SpecMeasured(Record):
    """Speculative decoding as the engine counted it over a run."""

    tokens_per_step: float = Field(description="Mean tokens a verify step emitted (accepted "
                                   "drafts + the bonus token).")
    draft_tokens: int | None = Field(description="k: draft tokens per step (Δdraft tokens / "
                                     "Δdrafts), None when the engine does not count drafts.")
    acceptance: float | None = Field(description="Per-token acceptance a with (1 − a^(k+1)) / "
                                     "(1 − a) = tokens_per_step: the rate the simulator takes; "
                                     "None without k.")
    source: str = Field(description="The engine metrics it was read from.")


def spec_measured(samples: list[MetricSample]) -> SpecMeasured | None:
    """Speculative decoding over the run from the engine's counters (vLLM: Δaccepted / Δdrafts
    + 1 tokens per step, k = Δdraft tokens / Δdrafts), else the mean of an accept-length gauge
    (SGLang, TRT-LLM: tokens per step only, k unknown); None when the engine counted none."""
    def delta(key: str) -> float:
        vals = _series(samples, key)
        return vals[-1] - vals[0] if len(vals) >= 2 else 0.0

    drafts, drafted, accepted = (delta(k) for k in ("spec_drafts", "spec_draft_tokens",
                                                     "spec_accepted_tokens"))
    if drafts > 0 and drafted > 0:
        k = max(1, round(drafted / drafts))
        per_step = 1.0 + accepted / drafts
        return SpecMeasured(tokens_per_step=per_step, draft_tokens=k,
                            acceptance=solve_acceptance(per_step, k),
                            source="Δaccepted / Δdrafts, Δdraft tokens / Δdrafts (counters)")
    gauge = [s.value for s in samples if s.key == "spec_accept_length" and s.value > 0]
    if not gauge:
        return None
    return SpecMeasured(tokens_per_step=sum(gauge) / len(gauge), draft_tokens=None,
                        acceptance=None, source="mean of the accept-length gauge")
