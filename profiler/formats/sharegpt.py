"""ShareGPT-style conversations: `{"id", "conversations": [{"from", "value"}, …]}`.

Each human turn becomes a request whose prompt is the conversation so far (every earlier
message and this one, rendered as `role: text` lines) and whose output is the reply that
follows it (0 tokens and status `unanswered` when no reply follows). The session is the
element's `id`. There are no timestamps: arrivals stay undefined unless synthesized. Those
replies are also the outputs the n-gram acceptance replay measures (`messages`).
"""

from __future__ import annotations

from typing import Any

from core.errors import TraceError
from profiler.analysis.ngram_acceptance import Message
from profiler.formats.base import RawRequest, TextFormat
from profiler.ingestion.textblocks import ROLE_NAMES, TextMeasurer, render_message

HUMAN_ROLES = ("human", "user")


def _match(obj: dict[str, Any]) -> bool:
    return isinstance(obj.get("conversations"), list)


def to_requests(obj: dict[str, Any], measurer: TextMeasurer) -> list[RawRequest]:
    """The requests of one conversation, in turn order."""
    turns = obj.get("conversations")
    if not isinstance(turns, list) or not all(isinstance(t, dict) for t in turns):
        raise TraceError("`conversations` must be a list of {from, value} objects")
    session = None if obj.get("id") is None else str(obj["id"])
    out: list[RawRequest] = []
    prompt = ""
    for i, turn in enumerate(turns):
        role, value = str(turn.get("from", "")), turn.get("value")
        text = "" if value is None else str(value)
        prompt += render_message(role, text)
        if role.lower() not in HUMAN_ROLES:
            continue
        reply = turns[i + 1] if i + 1 < len(turns) else None
        answered = reply is not None and str(reply.get("from", "")).lower() not in HUMAN_ROLES
        tokens, hashes = measurer.measure(prompt)
        out.append(
            RawRequest(
                t_raw=None,
                input_tokens=tokens,
                output_tokens=measurer.count(str(reply.get("value") or ""))
                if answered and reply is not None else 0,
                block_hashes=hashes,
                tokens_estimated=measurer.estimated,
                session_id=session,
                status="success" if answered else "unanswered",
            )
        )
    return out


def messages(obj: dict[str, Any]) -> list[Message]:
    """Every turn in order; a reply that follows a human turn is an output (as in
    `to_requests`, whose requests' outputs are exactly these replies)."""
    out: list[Message] = []
    previous_human = False
    for turn in obj["conversations"]:
        role, value = str(turn.get("from", "")), turn.get("value")
        human = role.lower() in HUMAN_ROLES
        out.append(Message(f"{ROLE_NAMES.get(role, role)}:", "" if value is None else str(value),
                           output=previous_human and not human))
        previous_human = human
    return out


FORMAT = TextFormat(
    kind="sharegpt",
    label="ShareGPT-style conversations",
    match=_match,
    to_requests=to_requests,
    time_reason="no timestamps in ShareGPT",
    columns={"input": "conversation so far (text)", "output": "next reply (text)",
             "session": "id"},
    messages=messages,
)
