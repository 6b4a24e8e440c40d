"""The interval scraper: GET an engine's /metrics every interval during a run, in a thread of
its own, and hand each scrape's samples on, stamped with `time.perf_counter()`, the clock of
the request stamps, so queue depth and TTFT share one time axis.

Sample names come from the engine plug-in (`metric_names`, `metrics_path`); this module never
knows an engine. Parsing the page is `exposition`'s, mapping it to our keys `engine_metrics`'s.
"""

from __future__ import annotations

import asyncio
import http.client
import threading
from collections.abc import Callable, Mapping
from time import perf_counter
from typing import Protocol
from urllib.parse import urlsplit

from runners.load.failures import one_line
from runners.server.engine_metrics import MetricSample, extract
from runners.server.exposition import ExpositionError, parse_exposition

DEFAULT_INTERVAL_S = 1.0
# How a kept-alive connection the server closed while idle fails on the next request, before
# any reply: the stale keep-alive race, not a failed scrape (RemoteDisconnected is one of the
# ConnectionResetErrors, named for the reader).
_STALE_ERRORS = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError,
                 ConnectionAbortedError)


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
