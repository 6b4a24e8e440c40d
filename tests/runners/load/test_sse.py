"""The shared SSE parser: any split of a stream gives the same events; pings, CRLF, usage-only
streams and error events inside a 200 stream. Pure: no socket."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from runners.load.sse import SSEEvent, SSEParser, parse_all

# Recorded from the real vLLM 0.32 CPU server (tiny model), trimmed ids; completions then chat.
_COMPLETIONS = [
    {"id": "cmpl-1", "object": "text_completion", "model": "tiny",
     "choices": [{"index": 0, "text": t, "finish_reason": f}]}
    for t, f in [(" model", None), (" 9010", None), (" 787", None), ("07", None),
                 (" 6605", "length")]
] + [{"id": "cmpl-1", "choices": [],
      "usage": {"prompt_tokens": 2, "total_tokens": 7, "completion_tokens": 5}}]
_CHAT = [
    {"id": "chat-1", "object": "chat.completion.chunk",
     "choices": [{"index": 0, "delta": d, "finish_reason": f}]}
    for d, f in [({"role": "assistant", "content": ""}, None), ({"content": " 4947"}, None),
                 ({"content": " 501"}, None), ({"content": ""}, "length")]
] + [{"id": "chat-1", "choices": [],
      "usage": {"prompt_tokens": 17, "total_tokens": 20, "completion_tokens": 3}}]


def _stream(objs: list[dict], eol: bytes = b"\n") -> bytes:
    out = b"".join(b"data: " + json.dumps(o).encode() + eol + eol for o in objs)
    return out + b"data: [DONE]" + eol + eol


RECORDED = _stream(_COMPLETIONS) + b": ping - 2024-01-01 00:00:00\n\n" + _stream(_CHAT)
EXPECTED = (
    [SSEEvent("data", o) for o in _COMPLETIONS] + [SSEEvent("done")]
    + [SSEEvent("data", o) for o in _CHAT] + [SSEEvent("done")]
)


def _feed_split(data: bytes, cuts: list[int]) -> list[SSEEvent]:
    parser = SSEParser()
    events: list[SSEEvent] = []
    prev = 0
    for cut in [*sorted(cuts), len(data)]:
        events += parser.feed(data[prev:cut])
        prev = cut
    return events + parser.close()


def test_whole_recorded_stream():
    assert parse_all(RECORDED) == EXPECTED


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(RECORDED)), max_size=40))
def test_any_split_gives_the_same_events(cuts):
    assert _feed_split(RECORDED, cuts) == EXPECTED


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(RECORDED)), max_size=40))
def test_crlf_any_split_gives_the_same_events(cuts):
    crlf = RECORDED.replace(b"\n", b"\r\n")
    assert _feed_split(crlf, cuts) == EXPECTED


def test_byte_by_byte_and_all_at_once_agree():
    parser = SSEParser()
    events = [e for i in range(len(RECORDED)) for e in parser.feed(RECORDED[i : i + 1])]
    assert events + parser.close() == EXPECTED


def test_events_are_returned_only_when_terminated():
    parser = SSEParser()
    assert parser.feed(b'data: {"a": 1}\n') == []
    assert parser.feed(b"\n") == [SSEEvent("data", {"a": 1})]


def test_comments_pings_and_unknown_fields_are_skipped():
    data = b': ping\n\n:\n\nid: 7\nretry: 100\ndata: {"x": 1}\n\nevent: ping\n\n'
    assert parse_all(data) == [SSEEvent("data", {"x": 1})]


def test_multi_line_data_is_joined_and_no_space_after_colon():
    data = b'data:{"x":\ndata: 2}\n\n'
    assert parse_all(data) == [SSEEvent("data", {"x": 2})]


def test_usage_only_stream():
    usage = {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 0}}
    assert parse_all(_stream([usage])) == [SSEEvent("data", usage), SSEEvent("done")]


def test_error_event_in_a_200_stream_vllm_shape():
    # What the real vLLM CPU server sent when its engine died mid-request.
    err = {"error": {"message": "EngineCore encountered an issue.", "type":
                     "InternalServerError", "param": None, "code": 500}}
    (event, done) = parse_all(_stream([err]))
    assert event.kind == "error"
    assert event.error == "500: EngineCore encountered an issue."
    assert done.kind == "done"


def test_error_event_other_shapes():
    (bare,) = parse_all(b'data: {"object": "error", "message": "boom\\n  here"}\n\n')
    assert (bare.kind, bare.error) == ("error", "boom here")
    (named,) = parse_all(b'event: error\ndata: {"detail": "x"}\n\n')
    assert named.kind == "error"
    (string,) = parse_all(b'data: {"error": "overloaded"}\n\n')
    assert (string.kind, string.error) == ("error", "overloaded")


def test_malformed_json_and_non_object():
    bad, arr = parse_all(b"data: {not json\n\ndata: [1, 2]\n\n")
    assert bad.kind == "malformed" and "bad JSON" in bad.error
    assert arr.kind == "malformed" and "not a JSON object" in arr.error


def test_unterminated_last_event_is_parsed_at_close():
    parser = SSEParser()
    assert parser.feed(b'data: {"a": 1}\n\ndata: [DONE]') == [SSEEvent("data", {"a": 1})]
    assert parser.close() == [SSEEvent("done")]
    assert parser.close() == []


def test_lone_cr_line_ends():
    assert parse_all(b'data: {"a": 1}\r\rdata: [DONE]\r\r') == [
        SSEEvent("data", {"a": 1}), SSEEvent("done")
    ]
