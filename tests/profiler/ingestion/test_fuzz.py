"""Fuzzing the format detector and the parsers (hypothesis).

Property: whatever the file holds, `ingest` either writes a sane `requests` table (token counts
>= 0, request_id 0..n-1, arrival_s non-decreasing from 0) or raises a ServeFitError with one
line, leaving a fresh workspace absent. Never a DuckDB, pyarrow, JSON or Unicode exception.

Inputs that once broke the property live in tests/data/fuzz_regressions/ (the raw file, plus
an optional `<name>.options.json` with IngestOptions) and are replayed on every run. Set
SERVEFIT_FUZZ_EXAMPLES to fuzz longer than the fast default (30 examples a property, so the
fast suite stays quick after every change); scripts/test.sh, which CI runs, sets 100.
"""

from __future__ import annotations

import csv
import gzip
import io
import itertools
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
import zstandard
from hypothesis import HealthCheck, currently_in_test_context, event, given, settings
from hypothesis import strategies as st

from core.errors import ServeFitError
from profiler.formats.generic import ALIASES
from profiler.formats.registry import TABLE_FORMATS, TEXT_FORMATS
from profiler.ingestion.ingest import ingest
from profiler.ingestion.options import IngestOptions
from profiler.workspace import Workspace

REGRESSIONS = Path(__file__).resolve().parents[2] / "data" / "fuzz_regressions"
EXAMPLES = int(os.environ.get("SERVEFIT_FUZZ_EXAMPLES", "30"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def check_ingest(data: bytes, options: IngestOptions | None = None,
                 name: str = "trace") -> None:
    """The fuzz property for one input file."""
    with tempfile.TemporaryDirectory(prefix="servefit-fuzz-") as tmp:
        path = Path(tmp) / name
        path.write_bytes(data)
        ws = Workspace.resolve(Path(tmp) / "ws" / "w.duckdb")
        try:
            result = ingest(str(path), ws, options or IngestOptions())
        except ServeFitError as exc:
            message = str(exc)
            _note(f"{type(exc).__name__}: {message.split(': ', 1)[-1][:40]}")
            assert message and "\n" not in message and "\r" not in message, repr(message)
            assert not (Path(tmp) / "ws").exists(), "a failed ingest left a workspace behind"
            return
        _note(f"ingested as {result.format.kind}")
        _check_table(ws, result.n_requests)


def _note(outcome: str) -> None:
    """Tally outcomes for --hypothesis-show-statistics (a no-op when replaying regressions)."""
    if currently_in_test_context():
        event(outcome)


def _check_table(ws: Workspace, n: int) -> None:
    with ws.connect(read_only=True) as con:
        rows = con.execute("SELECT request_id, arrival_s, input_tokens, output_tokens "
                           "FROM requests ORDER BY request_id").fetchall()
    assert len(rows) == n > 0
    assert [r[0] for r in rows] == list(range(n))
    assert all(r[2] >= 0 and r[3] >= 0 for r in rows)
    times = [r[1] for r in rows]
    if times[0] is not None:
        assert None not in times and all(math.isfinite(t) for t in times)
        assert times[0] == 0.0
        assert all(a <= b for a, b in itertools.pairwise(times))
    else:
        assert set(times) == {None}


# --- strategies ------------------------------------------------------------------------------

FORMAT_COLUMNS = sorted(
    {
        "Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type",
        "Session ID", "Elapsed time", "TIMESTAMP", "ContextTokens", "GeneratedTokens",
        "timestamp", "input_length", "output_length", "hash_ids", "request_id", "arrival_s",
        "input_tokens", "output_tokens", "session_id", "status", "block_hashes", "block_size",
    }
    | {alias for names in ALIASES.values() for alias in names}
)
JSON_KEYS = sorted({"timestamp", "input_length", "output_length", "hash_ids", "messages",
                    "prompt", "usage", "created", "response", "request", "body",
                    "conversations", "id", "from", "value", "choices", "session_id", "model",
                    "status_code", "error", "metadata", "user", "prompt_tokens",
                    "completion_tokens", "role", "content", "text", "message"})
SPECIAL_VALUES = ["", "NaN", "nan", "inf", "-1", "0", "1.5", "1e400", "-0", "3000000000",
                  "2023-11-16 18:17:03.98", "2023-13-45", "1700000000", "1700000000123",
                  "1700000000123456", '"', '""', "a,b", "[1, 2]", "{}", "null", "true", "\\N"]

junk_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
cell = st.one_of(
    st.sampled_from(SPECIAL_VALUES),
    st.integers(-(2**40), 2**40).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    junk_text,
)
column_name = st.one_of(st.sampled_from(FORMAT_COLUMNS), junk_text)


@st.composite
def csv_text(draw: st.DrawFn) -> bytes:
    sep = draw(st.sampled_from([",", ",", "\t", ";", "|"]))
    header = draw(st.lists(column_name, min_size=1, max_size=7))
    width = len(header)
    rows = draw(st.lists(
        st.lists(cell, min_size=max(width - 1, 0), max_size=width + 1), max_size=8))
    lines = [sep.join(header)] + [sep.join(r) for r in rows]
    end = draw(st.sampled_from(["\n", "\r\n", ""]))
    text = "\n".join(lines) + end
    encoding = draw(st.sampled_from(["utf-8", "utf-8", "utf-8-sig", "latin-1"]))
    return text.encode(encoding, errors="replace")


json_scalar = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True), junk_text,
    st.sampled_from(SPECIAL_VALUES),
)
json_value = st.recursive(
    json_scalar,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(JSON_KEYS), junk_text), inner, max_size=4),
    ),
    max_leaves=12,
)
message = st.fixed_dictionaries(
    {}, optional={"role": st.sampled_from(["user", "assistant", "system"]) | json_scalar,
                  "content": json_value, "from": st.sampled_from(["human", "gpt"]) | json_scalar,
                  "value": json_value})
json_object = st.dictionaries(
    st.sampled_from(JSON_KEYS) | junk_text,
    st.one_of(json_value, st.lists(message, max_size=3),
              st.fixed_dictionaries({}, optional={"prompt_tokens": json_scalar,
                                                  "completion_tokens": json_scalar})),
    max_size=6,
)


# Tokens json.dumps will not write but a file may hold: huge ints, overflowing floats, depth.
EXTREME_TOKENS = ["1" + "0" * 400, "-1" + "0" * 400, "1e999", "1" + "0" * 5000,
                  "[" * 3000 + "]" * 3000, "NaN", "-Infinity"]


def _with_extreme(draw: st.DrawFn, text: str) -> str:
    """Sometimes swap one `null` or one number of a dumped JSON text for an extreme token."""
    if not draw(st.booleans()):
        return text
    token = draw(st.sampled_from(EXTREME_TOKENS))
    target = draw(st.sampled_from(["null", ": 0", ": 1"]))
    return text.replace(target, target[:-4 if target == "null" else -1] + token, 1)


@st.composite
def json_lines(draw: st.DrawFn) -> bytes:
    objects = draw(st.lists(st.one_of(json_object, json_object, json_value), min_size=1,
                            max_size=6))
    if draw(st.booleans()):
        return json.dumps(objects).encode()
    lines = [_with_extreme(draw, json.dumps(o)) for o in objects]
    if draw(st.booleans()):  # damage one line
        i = draw(st.integers(0, len(lines) - 1))
        cut = draw(st.integers(0, len(lines[i])))
        lines[i] = lines[i][:cut] + draw(st.sampled_from(["", "}", ",", "\n", "\x00", "é"]))
    return ("\n".join(lines) + "\n").encode()


TEMPLATES = [
    ["Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type"],
    ["Timestamp", "Session ID", "Elapsed time", "Model", "Request tokens", "Response tokens"],
    ["TIMESTAMP", "ContextTokens", "GeneratedTokens"],
    ["request_id", "arrival_s", "input_tokens", "output_tokens", "session_id", "model",
     "status"],
    ["timestamp", "input_length", "output_length", "hash_ids"],
    ["ts", "prompt_tokens", "completion_tokens", "user_id"],
    ["created_at", "isl", "osl", "success"],
    ["arrival_ms", "input_tokens", "output_tokens"],
]
number = st.one_of(st.integers(0, 5000), st.integers(0, 5000),
                   st.integers(1_600_000_000, 1_800_000_000),
                   st.integers(1_600_000_000_000, 1_800_000_000_000)).map(str)
near_cell = st.one_of(number, number, number, cell,
                      st.datetimes().map(lambda d: d.isoformat(sep=" ")))


@st.composite
def near_valid_csv(draw: st.DrawFn) -> bytes:
    """A real format's header, maybe perturbed, over mostly numeric, rectangular rows."""
    header = list(draw(st.permutations(draw(st.sampled_from(TEMPLATES)))))
    if draw(st.booleans()):
        del header[draw(st.integers(0, len(header) - 1))]
    if draw(st.booleans()):
        header.append(draw(column_name))
    if not header:
        header = ["x"]
    rows = draw(st.lists(st.lists(near_cell, min_size=len(header), max_size=len(header)),
                         min_size=1, max_size=8))
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator=draw(st.sampled_from(["\n", "\r\n"])))
    writer.writerow(header)
    writer.writerows(rows)
    return buf.getvalue().encode()


def _usage() -> st.SearchStrategy[dict[str, Any]]:
    count = st.one_of(st.integers(0, 4000), st.integers(0, 4000), json_scalar)
    return st.fixed_dictionaries({"prompt_tokens": count, "completion_tokens": count})


near_objects = st.one_of(
    st.fixed_dictionaries(  # Mooncake
        {"timestamp": st.one_of(st.integers(0, 10**7), json_scalar),
         "input_length": st.one_of(st.integers(0, 10**5), json_scalar),
         "output_length": st.one_of(st.integers(0, 4000), json_scalar)},
        optional={"hash_ids": st.lists(st.integers(0, 2**64 - 1), max_size=5) | json_value}),
    st.fixed_dictionaries(  # OpenAI-style log
        {"messages": st.lists(st.fixed_dictionaries(
            {"role": st.sampled_from(["user", "assistant"]), "content": junk_text}), max_size=3)},
        optional={"usage": _usage(), "created": st.one_of(
            st.integers(1_600_000_000, 1_800_000_000), st.floats(0, 2e9), json_scalar,
            st.datetimes().map(lambda d: d.isoformat())),
            "model": json_scalar, "user": json_scalar, "status_code": json_scalar,
            "choices": st.lists(st.fixed_dictionaries({"text": json_scalar}), max_size=2)}),
    st.fixed_dictionaries(  # ShareGPT
        {"conversations": st.lists(st.fixed_dictionaries(
            {"from": st.sampled_from(["human", "gpt", "user", "system"]) | json_scalar,
             "value": junk_text | json_scalar}), max_size=4)},
        optional={"id": json_scalar}),
)


@st.composite
def near_valid_json(draw: st.DrawFn) -> bytes:
    kind = draw(st.integers(0, 2))
    objects = draw(st.lists(near_objects.filter(lambda o: True), min_size=1, max_size=6))
    same = [o for o in objects if set(o) & set(objects[0])] or objects  # mostly one format
    if kind == 0:
        return _with_extreme(draw, json.dumps(same)).encode()
    return "".join(_with_extreme(draw, json.dumps(o)) + "\n" for o in same).encode()


magic_prefix = st.sampled_from([b"", b"\x1f\x8b", b"\x28\xb5\x2f\xfd", b"PAR1", b"[", b"{",
                                b"BZh", b"\xef\xbb\xbf", b"\xff\xfe", b"a,b\n"])


# --- properties ------------------------------------------------------------------------------


@FUZZ
@given(prefix=magic_prefix, data=st.binary(max_size=600))
def test_arbitrary_bytes(prefix: bytes, data: bytes) -> None:
    check_ingest(prefix + data)


@FUZZ
@given(data=near_valid_csv())
def test_near_valid_csv(data: bytes) -> None:
    check_ingest(data)


@FUZZ
@given(data=near_valid_json())
def test_near_valid_json(data: bytes) -> None:
    check_ingest(data)


@FUZZ
@given(data=st.one_of(near_valid_csv(), near_valid_json(), csv_text(), json_lines(),
                      st.binary(max_size=200)),
       packer=st.sampled_from(["gzip", "zstd", "gzip_cut", "zstd_cut"]))
def test_compressed(data: bytes, packer: str) -> None:
    packed = (gzip.compress(data) if packer.startswith("gzip")
              else zstandard.ZstdCompressor().compress(data))
    if packer.endswith("_cut"):
        packed = packed[: max(2, len(packed) // 2)]
    check_ingest(packed)


@FUZZ
@given(data=csv_text())
def test_csv_like_text(data: bytes) -> None:
    check_ingest(data)


@FUZZ
@given(data=json_lines())
def test_json_lines(data: bytes) -> None:
    check_ingest(data)


@FUZZ
@given(columns=st.lists(column_name, min_size=1, max_size=8, unique=True),
       values=st.lists(st.integers(0, 2_000_000_000_000), min_size=1, max_size=4))
def test_format_detection(columns: list[str], values: list[int]) -> None:
    """Any column-name set: each matcher answers without raising, and a match names only
    existing columns; ingesting numbers under those names succeeds or fails cleanly."""
    for fmt in TABLE_FORMATS.values():
        fm = fmt.match(columns)
        if fm is not None:
            assert set(fm.used().values()) <= set(columns)
    quoted = ",".join('"' + c.replace('"', '""') + '"' for c in columns)
    body = "".join(",".join(str(v + i) for i in range(len(columns))) + "\n" for v in values)
    check_ingest((quoted + "\n" + body).encode())


@FUZZ
@given(obj=json_object)
def test_text_format_matchers(obj: dict[str, Any]) -> None:
    for fmt in TEXT_FORMATS.values():
        fmt.match(obj)
    check_ingest((json.dumps(obj) + "\n").encode())


# --- regressions -----------------------------------------------------------------------------


def _regression_files() -> list[Path]:
    if not REGRESSIONS.is_dir():
        return []
    return sorted(p for p in REGRESSIONS.iterdir()
                  if p.is_file() and not p.name.endswith(".options.json")
                  and p.name != "README.md")


@pytest.mark.parametrize("path", _regression_files(), ids=lambda p: p.name)
def test_regression(path: Path) -> None:
    sidecar = path.with_name(path.name + ".options.json")
    options = (IngestOptions.model_validate_json(sidecar.read_text())
               if sidecar.exists() else None)
    check_ingest(path.read_bytes(), options, name=path.name)
