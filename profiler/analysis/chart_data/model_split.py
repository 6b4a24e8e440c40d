"""The per-model split, for the Profile view: requests and lengths per model, of a trace that
names the model of each request (BurstGPT's ChatGPT and GPT-4).
"""

# ruff: noqa: S608 - the only name composed into SQL here is the constant REQUESTS_TABLE; every
# value is a bound parameter.

from __future__ import annotations

from typing import Any

from pydantic import Field

from core.records import Record
from profiler.schema import REQUESTS_TABLE

# The most models the split lists one by one; the rest are summed as one row.
MAX_MODELS = 12

_MODELS_SQL = f"""
SELECT model, count(*), quantile_cont(input_tokens, 0.5), quantile_cont(output_tokens, 0.5),
       sum(input_tokens)::BIGINT, sum(output_tokens)::BIGINT
FROM {REQUESTS_TABLE} WHERE model IS NOT NULL GROUP BY model ORDER BY count(*) DESC, model
"""


class ModelShare(Record):
    """One model's part of a trace that names the model of each request."""

    model: str = Field(description="as the trace names it; 'other (N models)' sums the rest")
    requests: int
    share: float = Field(description="of the requests that name a model")
    input_tokens_p50: float | None = Field(description="None on the summed row")
    output_tokens_p50: float | None
    input_tokens_total: int
    output_tokens_total: int


def model_split(con: Any) -> list[ModelShare] | None:
    """Requests and lengths per model, busiest first (past MAX_MODELS, one summed row);
    None when fewer than two models are named."""
    rows = con.execute(_MODELS_SQL).fetchall()
    if len(rows) < 2:
        return None
    total = sum(r[1] for r in rows)
    out = [ModelShare(model=str(m), requests=n, share=n / total, input_tokens_p50=float(i),
                      output_tokens_p50=float(o), input_tokens_total=int(si),
                      output_tokens_total=int(so))
           for m, n, i, o, si, so in rows[:MAX_MODELS]]
    rest = rows[MAX_MODELS:]
    if rest:
        n = sum(r[1] for r in rest)
        out.append(ModelShare(model=f"other ({len(rest)} models)", requests=n, share=n / total,
                              input_tokens_p50=None, output_tokens_p50=None,
                              input_tokens_total=sum(int(r[4]) for r in rest),
                              output_tokens_total=sum(int(r[5]) for r in rest)))
    return out
