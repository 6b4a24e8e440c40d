"""Prometheus scraping during a run: the text exposition parser, the mapping from an engine's
sample names to our metric keys, and the interval scraper.

Sample names come from the engine plug-in (`metric_names`, `metrics_path`); this module never
knows an engine. Samples are stamped with `time.perf_counter()`, the clock of the request
stamps, so queue depth and TTFT share one time axis.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
from collections.abc import Callable, Mapping
from time import perf_counter

import aiohttp
from pydantic import BaseModel, ConfigDict, Field

from core.errors import RunnerError
from runners.errors import one_line

DEFAULT_INTERVAL_S = 1.0
# Keys whose samples are ratios or gauges per engine: averaged over label sets, not summed.
_MEAN_KEYS = frozenset({"kv_cache_usage", "prefix_cache_hit_rate"})
# Keys scraped as histograms: we keep their _sum and _count.
_HISTOGRAM_SUFFIXES = ("_sum", "_count")
_NAME_RE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}


class ExpositionError(RunnerError):
    """A /metrics body that is not Prometheus text format (line number and text named)."""


class PromSample(BaseModel):
    """One sample line: name, labels, value (and the optional timestamp in ms)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    labels: dict[str, str] = Field(default_factory=dict)
    value: float
    timestamp_ms: int | None = None


class MetricSample(BaseModel):
    """One of our metric keys at one scrape, on the request stamps' clock."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    at_s: float = Field(description="perf_counter when the scrape answered.")
    key: str = Field(description="Our key (engines.base.MetricKey), `_sum`/`_count` for "
                     "histograms.")
    name: str = Field(description="The engine's sample name it was read from.")
    value: float


def parse_exposition(text: str) -> list[PromSample]:
    """Parse Prometheus text format 0.0.4: comments, labels (escaped values), NaN/±Inf and
    optional timestamps.

    Raises:
        ExpositionError: a line that is neither a comment nor a sample.
    """
    out = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            out.append(_parse_line(line))
        except (ValueError, IndexError) as exc:
            raise ExpositionError(f"metrics line {lineno}: {exc}: {one_line(line, 120)}"
                                  ) from None
    return out


def _parse_line(line: str) -> PromSample:
    match = _NAME_RE.match(line)
    if match is None:
        raise ValueError("no metric name")
    name, pos = match.group(), match.end()
    labels: dict[str, str] = {}
    if pos < len(line) and line[pos] == "{":
        labels, pos = _parse_labels(line, pos + 1)
    rest = line[pos:].split()
    if not rest or len(rest) > 2:
        raise ValueError("expected a value and an optional timestamp")
    return PromSample(name=name, labels=labels, value=_value(rest[0]),
                      timestamp_ms=int(rest[1]) if len(rest) == 2 else None)


def _parse_labels(line: str, pos: int) -> tuple[dict[str, str], int]:
    """Labels from just after `{`; returns them and the position after `}`."""
    labels: dict[str, str] = {}
    while True:
        while line[pos] in " ,":
            pos += 1
        if line[pos] == "}":
            return labels, pos + 1
        match = _NAME_RE.match(line, pos)
        if match is None or line[match.end()] != "=" or line[match.end() + 1] != '"':
            raise ValueError("bad label")
        value, pos = _label_value(line, match.end() + 2)
        labels[match.group()] = value


def _label_value(line: str, pos: int) -> tuple[str, int]:
    chars = []
    while line[pos] != '"':
        if line[pos] == "\\":
            pos += 1
            chars.append(_ESCAPES.get(line[pos], "\\" + line[pos]))
        else:
            chars.append(line[pos])
        pos += 1
    return "".join(chars), pos + 1


def _value(text: str) -> float:
    special = {"nan": math.nan, "+inf": math.inf, "inf": math.inf, "-inf": -math.inf}
    return special[text.lower()] if text.lower() in special else float(text)


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


def hit_rate(samples: list[MetricSample]) -> float | None:
    """Prefix-cache hit rate over the run: Δhits / Δqueries between the first and last scrape
    (token counters); else the mean of a scraped hit-rate gauge; None without either."""
    def series(key: str) -> list[float]:
        return [s.value for s in sorted(samples, key=lambda s: s.at_s) if s.key == key]

    hits, queries = series("prefix_cache_hits_tokens"), series("prefix_cache_queries_tokens")
    if len(hits) >= 2 and len(queries) >= 2 and queries[-1] > queries[0]:
        return (hits[-1] - hits[0]) / (queries[-1] - queries[0])
    gauge = series("prefix_cache_hit_rate")
    return sum(gauge) / len(gauge) if gauge else None


class Scraper:
    """Scrapes `url` every `interval_s` until stopped; each scrape's samples go to `sink`.

    Failed scrapes are counted (`failures`, `last_error`), never raised: a server without
    metrics must not stop a benchmark.
    """

    def __init__(self, url: str, metric_names: Mapping[str, tuple[str, ...]], *,
                 sink: Callable[[list[MetricSample]], None],
                 interval_s: float = DEFAULT_INTERVAL_S, timeout_s: float = 5.0) -> None:
        self.url, self.metric_names, self.sink = url, metric_names, sink
        self.interval_s, self.timeout_s = interval_s, timeout_s
        self.scrapes = 0
        self.failures = 0
        self.last_error: str | None = None
        self.latest: dict[str, float] = {}

    async def scrape_once(self, session: aiohttp.ClientSession) -> list[MetricSample]:
        """One GET + parse; the samples (also handed to `sink`), [] on failure."""
        try:
            async with asyncio.timeout(self.timeout_s), session.get(self.url) as resp:
                body = await resp.text()
                at = perf_counter()
                if resp.status != 200:
                    raise ExpositionError(f"HTTP {resp.status} from {self.url}")
            parsed = await asyncio.to_thread(parse_exposition, body)
        except (ExpositionError, aiohttp.ClientError, TimeoutError, OSError) as exc:
            self.failures += 1
            self.last_error = one_line(f"{type(exc).__name__}: {exc}")
            return []
        samples = extract(parsed, self.metric_names, at)
        self.scrapes += 1
        self.latest = {s.key: s.value for s in samples}
        self.sink(samples)
        return samples

    async def run(self, stop: asyncio.Event) -> None:
        """Scrape now and every `interval_s` until `stop` is set, then once more."""
        async with aiohttp.ClientSession() as session:
            while not stop.is_set():
                await self.scrape_once(session)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.interval_s)
            await self.scrape_once(session)
