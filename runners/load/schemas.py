"""Typed records of the load generator: what to send (`RequestSpec`) and what happened
(`RequestResult`). Results store raw `time.perf_counter()` stamps; TTFT, ITL, E2E and TPOT
are derived from them here and nowhere else.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field, model_validator

from core.records import Record
from runners.load.failures import ErrorKind

Api = Literal["completions", "chat"]

# Body keys the client owns; `extra_body` may not override them.
MANAGED_KEYS = frozenset(
    {"model", "prompt", "messages", "max_tokens", "ignore_eos", "stream", "stream_options"}
)


class RequestSpec(Record):
    """One request to send to an OpenAI-compatible server."""

    model: str = Field(description="Model name as the server serves it.")
    prompt: str | list[int] = Field(
        description="Prompt text, or token ids (completions API only)."
    )
    max_tokens: int = Field(ge=1, description="Output length cap; exact with ignore_eos.")
    ignore_eos: bool = Field(default=True,
                             description="Keep generating past EOS (vLLM/SGLang extension).")
    api: Api = Field(default="completions",
                     description="/v1/completions or /v1/chat/completions.")
    extra_body: dict[str, Any] = Field(
        default_factory=dict,
        description="More body fields (temperature, min_tokens…); may not override managed keys.",
    )

    @model_validator(mode="after")
    def _check(self) -> RequestSpec:
        if self.api == "chat" and not isinstance(self.prompt, str):
            raise ValueError("token-id prompts need api='completions'; chat takes text")
        clash = MANAGED_KEYS & self.extra_body.keys()
        if clash:
            raise ValueError(f"extra_body may not set {sorted(clash)}; use the spec's fields")
        return self


class RequestResult(Record):
    """What happened to one request. Stamps are `time.perf_counter()` seconds.

    Invariant (exact on the stored stamps, by Sterbenz's lemma): for a successful request
    `e2e_s - ttft_s == math.fsum(itl_s)`.
    """

    success: bool = Field(description="True when the stream delivered content and no error.")
    error: str | None = Field(None, description="One-line reason when success is false.")
    error_kind: ErrorKind | None = Field(None, description="Failure class, for error counts.")
    http_status: int | None = Field(None, description="HTTP status, when a response came.")
    sent_at_s: float = Field(description="perf_counter just before the request was sent.")
    first_token_at_s: float | None = Field(None, description="Arrival of the first content chunk.")
    last_token_at_s: float | None = Field(None, description="Arrival of the last content chunk.")
    end_at_s: float = Field(description="Stream finished (after usage and [DONE]) or failed.")
    chunk_times_s: list[float] = Field(
        default_factory=list, description="Arrival time of every content chunk, in order."
    )
    chunk_tokens: list[int] | None = Field(
        None, description="Tokens per content chunk, when the server reported every one."
    )
    prompt_tokens: int | None = Field(None, description="From the usage chunk; None if absent.")
    output_tokens: int | None = Field(None, description="From the usage chunk; None if absent.")

    @property
    def ttft_s(self) -> float | None:
        """Send → first content chunk."""
        if self.first_token_at_s is None:
            return None
        return self.first_token_at_s - self.sent_at_s

    @property
    def e2e_s(self) -> float | None:
        """Send → last content chunk (the usage chunk and [DONE] do not count)."""
        if self.last_token_at_s is None:
            return None
        return self.last_token_at_s - self.sent_at_s

    @property
    def itl_s(self) -> list[float]:
        """Gaps between consecutive content chunks (per chunk, not per token)."""
        t = self.chunk_times_s
        return [t[i + 1] - t[i] for i in range(len(t) - 1)]

    @property
    def tpot_s(self) -> float | None:
        """(E2E − TTFT) / (output_tokens − 1); None without usage or with < 2 tokens."""
        if self.output_tokens is None or self.output_tokens < 2:
            return None
        ttft, e2e = self.ttft_s, self.e2e_s
        if ttft is None or e2e is None:
            return None
        return (e2e - ttft) / (self.output_tokens - 1)

    def metrics(self) -> dict[str, float | None]:
        """The derived scalars in one dict (for the store and summaries)."""
        itl = self.itl_s
        return {
            "ttft_s": self.ttft_s,
            "e2e_s": self.e2e_s,
            "tpot_s": self.tpot_s,
            "itl_mean_s": math.fsum(itl) / len(itl) if itl else None,
        }
