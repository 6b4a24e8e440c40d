"""Typed records that leave the profiler: the canonical `requests` table and the Profile.

The canonical table (DESIGN §2.1) is the contract every later stage reads; the Profile
(DESIGN §2.2) is what `profile --json` prints, with exactly the DESIGN field names.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from core.records import Record

REQUESTS_TABLE = "requests"

# Column name -> DuckDB type, in table order (DESIGN §2.1).
REQUEST_COLUMNS: dict[str, str] = {
    "request_id": "BIGINT",
    "arrival_s": "DOUBLE",
    "input_tokens": "INTEGER",
    "output_tokens": "INTEGER",
    "session_id": "VARCHAR",
    "model": "VARCHAR",
    "block_hashes": "UBIGINT[]",
    "block_size": "INTEGER",
    "status": "VARCHAR",
    "tokens_estimated": "BOOLEAN",
}


class LengthStats(Record):
    """Distribution summary of a token count (linear-interpolated percentiles)."""

    p50: float
    p90: float
    p99: float
    mean: float
    max: float
    min: float


class Segment(Record):
    """One cluster of requests in (log input, log output) space."""

    share: float = Field(description="fraction of all requests in this segment")
    n_requests: int
    input_tokens_p50: float
    output_tokens_p50: float
    log_input_mean: float = Field(description="mean of ln(1 + input_tokens) in the segment")
    log_output_mean: float = Field(description="mean of ln(1 + output_tokens) in the segment")
    log_cov: list[list[float]] = Field(description="2x2 covariance of the two logs")


class RateSeries(Record):
    """Requests and tokens per tumbling window aligned to t = 0, for charts and synthesis."""

    window_s: float
    t_s: list[float] = Field(description="window start times")
    requests: list[int]
    input_tokens: list[int]
    output_tokens: list[int]


ArrivalsKind = Literal["trace", "synthesized", "undefined"]


class NgramAcceptance(Record):
    """Prompt-lookup (ngram) speculative acceptance replayed on the trace's output text
    (`profiler.analysis.ngram_acceptance`): what the recommender uses instead of the method
    default."""

    acceptance: float = Field(ge=0, le=1, description="per-token acceptance a with "
                              "(1 - a^(k+1)) / (1 - a) = tokens_per_step")
    tokens_per_step: float = Field(description="output tokens / decode steps in the replay")
    k: int = Field(description="draft tokens per step (num_speculative_tokens)")
    ngram_min: int
    ngram_max: int
    outputs: int = Field(description="outputs (replies) replayed")
    tokens: int = Field(description="output tokens replayed")
    steps: int
    drafted: int = Field(description="draft tokens proposed")
    accepted: int = Field(description="draft tokens accepted")
    tokenization: Literal["tokenizer", "words"] = Field(
        description="tokenizer ids, or words and punctuation when no tokenizer was given")


class FormatInfo(Record):
    """What the ingester detected, how it read the file, and what it measured on the text
    while reading it (shown to the user)."""

    kind: str
    label: str
    explanation: str
    columns: dict[str, str] = Field(description="canonical field -> source column used")
    timestamp_rule: str
    arrivals: ArrivalsKind
    block_size: int | None = None
    tokens_estimated: bool = False
    source: str
    ngram_acceptance: NgramAcceptance | None = Field(
        default=None, description="measured where the trace holds output text, else None")


class Profile(Record):
    """The load profile of one trace, DESIGN §2.2. Times in seconds."""

    n_requests: int
    duration_s: float | None
    mean_qps: float | None
    peak_qps_1s: float | None
    peak_qps_60s: float | None
    peak_to_mean_1s: float | None
    peak_to_mean_60s: float | None
    interarrival_cv: float | None
    input_tokens: LengthStats
    output_tokens: LengthStats
    multi_turn_share: float | None
    prefix_reuse_infinite: float | None
    prefix_reuse_lru: dict[str, float] | None
    segments: list[Segment]
    rate_series: RateSeries | None
    format: FormatInfo
    warnings: list[str]
