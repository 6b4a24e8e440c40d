"""Prometheus scraping during a run: the text exposition parser, the mapping from an engine's
sample names to our metric keys, and the interval scraper.

Sample names come from the engine plug-in (`metric_names`, `metrics_path`); this module never
knows an engine. Samples are stamped with `time.perf_counter()`, the clock of the request
stamps, so queue depth and TTFT share one time axis.
"""

from __future__ import annotations

import asyncio
import http.client
import math
import re
import threading
from collections.abc import Callable, Mapping
from time import perf_counter
from typing import Protocol
from urllib.parse import urlsplit

from pydantic import Field

from core.errors import RunnerError
from core.records import Record
from profiler.analysis.ngram_acceptance import solve_acceptance
from runners.load.failures import one_line

DEFAULT_INTERVAL_S = 1.0
# Keys whose samples are ratios or gauges per engine: averaged over label sets, not summed.
_MEAN_KEYS = frozenset({"kv_cache_usage", "prefix_cache_hit_rate", "spec_accept_length"})
# Keys scraped as histograms: we keep their _sum and _count.
_HISTOGRAM_SUFFIXES = ("_sum", "_count")
_NAME_RE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}
# How a kept-alive connection the server closed while idle fails on the next request, before
# any reply: the stale keep-alive race, not a failed scrape (RemoteDisconnected is one of the
# ConnectionResetErrors, named for the reader).
_STALE_ERRORS = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError,
                 ConnectionAbortedError)


class ExpositionError(RunnerError):
    """A /metrics body that is not Prometheus text format (line number and text named)."""


class PromSample(Record):
    """One sample line: name, labels, value (and the optional timestamp in ms)."""

    name: str
    labels: dict[str, str] = Field(default_factory=dict)
    value: float
    timestamp_ms: int | None = None


class MetricSample(Record):
    """One of our metric keys at one scrape, on the request stamps' clock."""

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


class Pacer(Protocol):
    """The scraper's clock: `now` stamps samples and schedules scrapes, `wait` sleeps until a
    deadline or the stop event. Tests pass a scripted one; runs use `RealPacer`."""

    def now(self) -> float: ...

    def wait(self, stop: threading.Event, timeout_s: float) -> None: ...


class RealPacer:
    """`time.perf_counter` (the request stamps' clock) and the stop event's own timed wait."""

    def now(self) -> float:
        return perf_counter()

    def wait(self, stop: threading.Event, timeout_s: float) -> None:
        stop.wait(timeout_s)


Fetch = Callable[[], tuple[str, float]]


class Scraper:
    """Scrapes `url` every `interval_s` until stopped; each scrape's samples go to `sink`.

    It runs in a thread of its own with one keep-alive connection, not on the event loop that
    reads the load's sockets: a busy load loop delayed the scrape's reply by seconds (and a
    parse of a large /metrics page blocked the loop's reads). Scrapes never overlap: one that
    takes longer than its period delays the next, which starts at once, instead of queueing.
    Failed scrapes are counted (`failures`, `last_error`), never raised: a server without
    metrics must not stop a benchmark. `sink` is called from the scraper's thread.

    `pacer` (the clock and the wait) and `fetch` (one GET: the body and the time its reply
    began) default to the real ones; tests script them to check the cadence exactly.
    """

    def __init__(self, url: str, metric_names: Mapping[str, tuple[str, ...]], *,
                 sink: Callable[[list[MetricSample]], None],
                 interval_s: float = DEFAULT_INTERVAL_S, timeout_s: float = 5.0,
                 pacer: Pacer | None = None, fetch: Fetch | None = None) -> None:
        self.url, self.metric_names, self.sink = url, metric_names, sink
        self.interval_s, self.timeout_s = interval_s, timeout_s
        self.pacer: Pacer = pacer or RealPacer()
        self._fetch: Fetch = fetch or self._get
        self.scrapes = 0
        self.failures = 0
        self.last_error: str | None = None
        self._conn: http.client.HTTPConnection | None = None

    def scrape_once(self) -> list[MetricSample]:
        """One GET + parse (blocking); the samples (also handed to `sink`), [] on failure."""
        try:
            body, at = self._fetch()
            samples = extract(parse_exposition(body), self.metric_names, at)
        except (ExpositionError, http.client.HTTPException, OSError, ValueError) as exc:
            self._close()
            self.failures += 1
            self.last_error = one_line(f"{type(exc).__name__}: {exc}")
            return []
        self.scrapes += 1
        self.sink(samples)
        return samples

    def _get(self) -> tuple[str, float]:
        """The body and the time at which the reply began (the server renders the page
        before it answers, so that is when the values were read)."""
        # An open socket kept from an earlier scrape has served a reply: a failed scrape closes
        # the connection, and http.client drops the socket after a `Connection: close` reply.
        reused = self._conn is not None and self._conn.sock is not None
        try:
            resp = self._send()
        except _STALE_ERRORS:
            if not reused:
                raise
            # The server (uvicorn's keep-alive timeout, or under load) closed the idle
            # connection as we sent on it; nothing was read, so the GET goes once more on a
            # fresh connection, as urllib3 and requests do. A second failure is counted.
            self._close()
            resp = self._send()
        at = self.pacer.now()
        body = resp.read().decode("utf-8", errors="replace")
        if resp.status != 200:
            raise ExpositionError(f"HTTP {resp.status} from {self.url}")
        return body, at

    def _send(self) -> http.client.HTTPResponse:
        """GET the URL on the kept connection (opened first when there is none); the reply,
        its status and headers read."""
        parts = urlsplit(self.url)
        if self._conn is None:
            kind = http.client.HTTPSConnection if parts.scheme == "https" else (
                http.client.HTTPConnection)
            self._conn = kind(parts.hostname or "", parts.port, timeout=self.timeout_s)
        path = parts.path or "/"
        self._conn.request("GET", path + (f"?{parts.query}" if parts.query else ""))
        return self._conn.getresponse()

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def scrape_until(self, stop: threading.Event, last: threading.Event) -> None:
        """The scraper thread's loop (blocking): scrape, wait out the rest of the period (none
        when the scrape took longer), repeat until `stop`; then once more if `last` is set."""
        try:
            while not stop.is_set():
                started = self.pacer.now()
                self.scrape_once()
                self.pacer.wait(stop, max(0.0, started + self.interval_s - self.pacer.now()))
            if last.is_set():
                self.scrape_once()
        finally:
            self._close()

    async def run(self, stop: asyncio.Event) -> None:
        """Scrape now and every `interval_s` (in the scraper's thread) until `stop` is set,
        then once more. Cancelled (the run failed), it takes no last scrape and does not wait
        for the one in flight, which ends within `timeout_s` on its own."""
        halt, last = threading.Event(), threading.Event()
        thread = threading.Thread(target=self.scrape_until, args=(halt, last), name="scraper",
                                  daemon=True)
        thread.start()
        try:
            await stop.wait()
        except asyncio.CancelledError:
            halt.set()
            raise
        last.set()
        halt.set()
        await asyncio.to_thread(thread.join)
