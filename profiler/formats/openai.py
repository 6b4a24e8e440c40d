"""OpenAI-style request logs: one JSON object per request with `messages` or `prompt`.

Accepted shapes: the request fields at the top level, or under `request`/`body` with the
response under `response`. Token counts come from `usage` when present (exact); otherwise the
prompt and the response text are measured (tokenizer or estimate). Time from `created`
(epoch seconds in OpenAI's API), `timestamp`, `time` or `created_at` (number or ISO text);
session from `session_id`, `conversation_id`, `metadata.session_id` or `user`. Where the
response text is logged it is the output the n-gram acceptance replay measures (`messages`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from profiler.analysis.ngram_acceptance import Message
from profiler.formats.base import RawRequest, TextFormat
from profiler.ingestion.textblocks import ROLE_NAMES, TextMeasurer, message_text, render_message

TIME_KEYS = ("created", "timestamp", "time", "created_at", "start_time")
SESSION_KEYS = ("session_id", "conversation_id", "user")


def _request_part(obj: dict[str, Any]) -> dict[str, Any]:
    for key in ("request", "body"):
        if isinstance(obj.get(key), dict):
            return obj[key]
    return obj


def _match(obj: dict[str, Any]) -> bool:
    req = _request_part(obj)
    return "messages" in req or "prompt" in req


def _prompt_text(req: dict[str, Any]) -> str:
    if "messages" in req:
        messages = req["messages"] or []
        if not isinstance(messages, list):
            raise ValueError("`messages` is not a list")
        return "".join(
            render_message(str(m.get("role", "user")), message_text(m.get("content")))
            for m in messages
            if isinstance(m, dict)
        )
    prompt = req.get("prompt")
    if isinstance(prompt, list):
        return "".join(str(p) for p in prompt)
    return "" if prompt is None else str(prompt)


def _response_text(resp: dict[str, Any]) -> str | None:
    choices = resp.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    choice = choices[0]
    if isinstance(choice.get("message"), dict):
        return message_text(choice["message"].get("content"))
    text = choice.get("text")
    return None if text is None else str(text)


def _time(obj: dict[str, Any], req: dict[str, Any]) -> float | None:
    for source in (obj, req):
        for key in TIME_KEYS:
            value = source.get(key)
            if value is None:
                continue
            if isinstance(value, bool):
                raise ValueError(f"`{key}` is not a time")
            if isinstance(value, int | float):
                return float(value)
            parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
            if parsed.tzinfo is None:
                parsed = parsed.replace(tzinfo=UTC)
            return parsed.timestamp()
    return None


def _session(obj: dict[str, Any], req: dict[str, Any]) -> str | None:
    metadata = obj.get("metadata")
    meta: dict[str, Any] = metadata if isinstance(metadata, dict) else {}
    for source in (obj, meta, req):
        for key in SESSION_KEYS:
            if source.get(key) not in (None, ""):
                return str(source[key])
    return None


def _usage(obj: dict[str, Any], resp: dict[str, Any]) -> dict[str, Any]:
    usage = resp.get("usage") if isinstance(resp.get("usage"), dict) else obj.get("usage")
    return usage if isinstance(usage, dict) else {}


def _status(obj: dict[str, Any]) -> str | None:
    code = obj.get("status_code", obj.get("status"))
    if obj.get("error"):
        return "failure"
    if isinstance(code, int):
        return "failure" if code >= 400 else "success"
    return None


def to_requests(obj: dict[str, Any], measurer: TextMeasurer) -> list[RawRequest]:
    """One request from one log object. Raises ValueError on a malformed object."""
    req = _request_part(obj)
    resp = obj["response"] if isinstance(obj.get("response"), dict) else obj
    prompt_tokens, hashes = measurer.measure(_prompt_text(req))
    usage = _usage(obj, resp)
    estimated = measurer.estimated
    if usage.get("prompt_tokens") is not None:
        prompt_tokens, estimated = usage["prompt_tokens"], False
    if usage.get("completion_tokens") is not None:
        output_tokens = usage["completion_tokens"]
    else:
        text = _response_text(resp)
        if text is None:
            raise ValueError("no usage.completion_tokens and no response text to count")
        output_tokens, estimated = measurer.count(text), estimated or measurer.estimated
    model = req.get("model") or resp.get("model")
    return [
        RawRequest(
            t_raw=_time(obj, req),
            input_tokens=prompt_tokens,
            output_tokens=output_tokens,
            block_hashes=hashes,
            tokens_estimated=estimated,
            session_id=_session(obj, req),
            model=None if model is None else str(model),
            status=_status(obj),
        )
    ]


def messages(obj: dict[str, Any]) -> list[Message]:
    """The prompt's messages (or prompt text), then the response text as the output."""
    req = _request_part(obj)
    resp = obj["response"] if isinstance(obj.get("response"), dict) else obj
    if isinstance(req.get("messages"), list):
        out = [Message(f"{ROLE_NAMES.get(role, role)}:", message_text(m.get("content")), False)
               for m in req["messages"] if isinstance(m, dict)
               for role in [str(m.get("role", "user"))]]
    else:
        out = [Message("", _prompt_text(req), False)]
    text = _response_text(resp)
    if text is not None:
        out.append(Message("assistant:", text, True))
    return out


FORMAT = TextFormat(
    kind="openai",
    label="OpenAI-style request log",
    match=_match,
    to_requests=to_requests,
    time_reason="`created` and friends: number (unit by magnitude) or ISO datetime (UTC)",
    columns={"input": "usage.prompt_tokens | messages/prompt text",
             "output": "usage.completion_tokens | response text",
             "time": "created", "session": "session_id | conversation_id | user"},
    messages=messages,
)
