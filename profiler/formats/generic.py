"""Any other table: columns found by common aliases, or named by the user's `--map`.

The user's map wins field by field; what it leaves out is looked up among the aliases below.
Input and output token columns are required; without a time column arrivals are undefined.
"""

from __future__ import annotations

from profiler.formats.base import FIELDS, FieldMap, TableFormat, find_column

ALIASES: dict[str, tuple[str, ...]] = {
    "time": ("timestamp", "time", "ts", "arrival_time", "arrival_s", "arrival", "created",
             "created_at", "start_time", "request_time", "send_time"),
    "input": ("input_tokens", "prompt_tokens", "input_length", "input_len", "prompt_len",
              "prompt_length", "context_tokens", "num_prompt_tokens", "isl", "request_tokens"),
    "output": ("output_tokens", "completion_tokens", "output_length", "output_len",
               "response_tokens", "generated_tokens", "num_output_tokens", "osl"),
    "session": ("session_id", "session", "conversation_id", "chat_id", "user_id"),
    "model": ("model", "model_name"),
    "status": ("status", "success", "outcome"),
    "hashes": ("block_hashes", "hash_ids"),
    "block_size": ("block_size",),
}


def resolve(columns: list[str], user_map: dict[str, str]) -> FieldMap | None:
    """Field map from the user's map plus aliases; None when input/output stay unknown."""
    chosen: dict[str, str | None] = {}
    for name in FIELDS:
        chosen[name] = user_map.get(name) or find_column(columns, *ALIASES[name])
    if not chosen["input"] or not chosen["output"]:
        return None
    return FieldMap(**chosen)  # type: ignore[arg-type]


FORMAT = TableFormat(
    kind="generic",
    label="Generic request table",
    match=lambda columns: resolve(columns, {}),
)
