"""Bad trace input: one line naming file, row and column, a project error, no workspace change.

Every bad file is generated here, small, in `tmp_path`. Each case runs twice: against a fresh
workspace (which must not exist afterwards) and against one that already holds a good trace
(whose `requests` and `trace_meta` must be unchanged).
"""

from __future__ import annotations

import gzip
import json
import os
import random
import shutil
import struct
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import zstandard

from core.errors import FormatDetectionError, ServeFitError, TraceError, UsageError
from profiler.ingestion import sources
from profiler.ingestion.ingest import ingest
from profiler.ingestion.options import IngestOptions
from profiler.workspace import Workspace

TRACES = Path(__file__).resolve().parents[2] / "data" / "traces"
GOOD_CSV = TRACES / "BurstGPT_1.head400.csv"

HEADER = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
GOOD_ROWS = [(5, 472, 18), (45, 1087, 230), (118, 417, 276), (163, 1360, 96), (231, 84, 12)]


@pytest.fixture(scope="session")
def good_csv() -> Path:
    return GOOD_CSV


def burst_csv(rows: list[tuple[Any, Any, Any]]) -> bytes:
    body = "".join(f"{t},ChatGPT,{i},{o},0,Conversation log\n" for t, i, o in rows)
    return (HEADER + body).encode()


def with_value(position: int, value: str) -> bytes:
    """The good rows with data row 3's field `position` (0 time, 1 input, 2 output) replaced."""
    rows: list[tuple[Any, Any, Any]] = [tuple(r) for r in GOOD_ROWS]
    row = list(rows[2])
    row[position] = value
    rows[2] = (row[0], row[1], row[2])
    return burst_csv(rows)


def jsonl(objects: list[Any]) -> bytes:
    return "".join(json.dumps(o) + "\n" for o in objects).encode()


def mooncake(t: int) -> dict[str, Any]:
    return {"timestamp": t, "input_length": 100 + t, "output_length": 7, "hash_ids": [1, 2]}


def chat(i: int) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": f"hello {i}"}],
            "usage": {"prompt_tokens": 9, "completion_tokens": 3}, "created": 1_700_000_000 + i}


def png_bytes() -> bytes:
    ihdr = struct.pack(">IIBBBBB", 4, 4, 8, 2, 0, 0, 0)
    chunk = struct.pack(">I", len(ihdr)) + b"IHDR" + ihdr
    return b"\x89PNG\r\n\x1a\n" + chunk + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))


def random_binary() -> bytes:
    rng = random.Random(7)
    return bytes(rng.randrange(256) for _ in range(4096)) + b"\x00\x00\x00"


def truncated_gzip(good: bytes) -> bytes:
    data = gzip.compress(good)
    return data[: len(data) * 2 // 3]


def truncated_zstd(good: bytes) -> bytes:
    data = zstandard.ZstdCompressor().compress(good * 20)
    return data[: len(data) * 2 // 3]


# --- workspace states ------------------------------------------------------------------------


def snapshot(ws: Workspace) -> tuple[list[Any], list[Any]]:
    with ws.connect(read_only=True) as con:
        rows = con.execute("SELECT * FROM requests ORDER BY request_id").fetchall()
        meta = con.execute("SELECT * FROM trace_meta").fetchall()
    return rows, meta


class WorkspaceState:
    """A workspace that is either absent or holds the good trace, and the check after a failure.

    A populated one is a copy of `template` (the good trace ingested once for the module,
    with its snapshot): one file, as ingesting into a fresh path leaves it."""

    def __init__(self, root: Path, template: tuple[Path, Any] | None) -> None:
        self.dir = root / "ws"
        self.ws = Workspace.resolve(self.dir / "w.duckdb")
        self.before = None
        if template is not None:
            self.dir.mkdir()
            shutil.copyfile(template[0], self.ws.path)
            self.before = template[1]

    def assert_unchanged(self) -> None:
        if self.before is None:
            assert not self.ws.path.exists()
            assert not Path(str(self.ws.path) + ".wal").exists()
            assert not self.dir.exists(), "a failed ingest left the workspace folder behind"
        else:
            assert snapshot(self.ws) == self.before


@pytest.fixture(scope="module")
def populated(tmp_path_factory: pytest.TempPathFactory, good_csv: Path) -> tuple[Path, Any]:
    """The good trace ingested into a workspace, and that workspace's snapshot."""
    ws = Workspace.resolve(tmp_path_factory.mktemp("populated") / "w.duckdb")
    ingest(str(good_csv), ws, IngestOptions())
    assert [p.name for p in ws.path.parent.iterdir()] == ["w.duckdb"]
    return ws.path, snapshot(ws)


@pytest.fixture(params=["fresh", "populated"])
def state(request: pytest.FixtureRequest, tmp_path: Path) -> WorkspaceState:
    template = request.getfixturevalue("populated") if request.param == "populated" else None
    return WorkspaceState(tmp_path, template)


def fails(
    state: WorkspaceState, path: Path, options: IngestOptions | None = None,
    error: type[ServeFitError] = TraceError,
) -> str:
    """Ingest `path`, expect `error`, check the one-line rule and the workspace; the message."""
    with pytest.raises(ServeFitError) as info:
        ingest(str(path), state.ws, options or IngestOptions())
    assert isinstance(info.value, error), f"{type(info.value).__name__}: {info.value}"
    message = str(info.value)
    assert "\n" not in message and "\r" not in message
    assert message.strip() == message and message
    assert info.value.exit_code == 2
    state.assert_unchanged()
    return message


# --- the catalogue of bad files --------------------------------------------------------------

Case = tuple[str, Callable[[bytes], bytes], dict[str, Any], tuple[str, ...], type[ServeFitError]]

CASES: list[Case] = [
    ("empty.csv", lambda g: b"", {}, ("empty",), TraceError),
    ("blank.csv", lambda g: b"  \n\t\n \r\n", {}, ("empty",), TraceError),
    ("header.csv", lambda g: HEADER.encode(), {}, ("no data rows",), TraceError),
    ("zero_lines.jsonl", lambda g: b"\n\n", {}, ("empty",), TraceError),
    ("empty_array.json", lambda g: b"[]\n", {}, ("no data rows",), TraceError),
    ("unknown.csv", lambda g: b"when,a,b\n1,2,3\n", {},
     ("'when'", "'a'", "'b'", "--map"), FormatDetectionError),
    ("text.csv", lambda g: with_value(2, "abc"), {},
     ("row 3", "'Response tokens'", "'abc'"), TraceError),
    ("negative.csv", lambda g: with_value(2, "-3"), {},
     ("row 3", "'Response tokens'", "'-3'"), TraceError),
    ("nan.csv", lambda g: with_value(1, "NaN"), {},
     ("row 3", "'Request tokens'"), TraceError),
    ("fraction.csv", lambda g: with_value(2, "12.5"), {},
     ("row 3", "'Response tokens'", "12.5"), TraceError),
    ("huge.csv", lambda g: with_value(2, "3000000000"), {},
     ("row 3", "'Response tokens'", "3000000000"), TraceError),
    ("missing.csv", lambda g: with_value(2, ""), {},
     ("row 3", "'Response tokens'", "empty"), TraceError),
    ("bad_time.csv", lambda g: with_value(0, "yesterday"), {},
     ("row 3", "'Timestamp'", "yesterday"), TraceError),
    ("bad_datetime.csv", lambda g: (
        b"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03,10,2\n"
        b"2023-11-16 18:17:04,11,3\nnot a date,12,4\n"), {},
     ("row 3", "'TIMESTAMP'", "not a date"), TraceError),
    ("mixed_units.csv", lambda g: (
        b"ts,input_tokens,output_tokens\n1700000000000,5,1\n1700000001000,6,2\n"
        b"1700000002,7,3\n1700000003000,8,4\n1700000004000,9,5\n"), {},
     ("row 3", "'ts'", "mixed time units"), TraceError),
    ("latin1.csv", lambda g: HEADER.encode() + b"5,Chat,1,2,0,x\n6,Chat,1,2,0,x\n"
     b"7,Caf\xe9GPT,1,2,0,x\n", {}, ("row 3", "line 4", "UTF-8"), TraceError),
    ("random.bin", lambda g: random_binary(), {}, ("binary",), TraceError),
    ("image.png", lambda g: png_bytes(), {}, ("PNG",), TraceError),
    ("utf16.csv", lambda g: HEADER.encode("utf-16"), {}, ("UTF-16",), TraceError),
    ("cut.csv.gz", truncated_gzip, {}, ("gzip", "truncated"), TraceError),
    ("cut.csv.zst", truncated_zstd, {}, ("zstd", "truncated"), TraceError),
    ("trace.csv.bz2", lambda g: b"BZh91AY&SY" + bytes(40), {}, ("bzip2",), TraceError),
    ("trace.zip", lambda g: b"PK\x03\x04" + bytes(40), {}, ("zip",), TraceError),
    ("trace.xz", lambda g: b"\xfd7zXZ\x00" + bytes(40), {}, ("xz",), TraceError),
    ("malformed.jsonl", lambda g: jsonl([mooncake(1)]) + b'{"timestamp": 2, "input_len\n'
     + jsonl([mooncake(3)]), {}, ("row 2", "JSON"), TraceError),
    ("bad_line.jsonl", lambda g: jsonl([mooncake(1), mooncake(2)]) + b"{\"timestamp\": 3,,}\n",
     {}, ("row 3", "not valid JSON"), TraceError),
    ("blank_lines.jsonl", lambda g: jsonl([mooncake(1)]) + b"\n" + b"{oops}\n", {},
     ("row 2", "line 3"), TraceError),
    ("cut.json", lambda g: json.dumps([mooncake(1), mooncake(2), mooncake(3)]).encode()[:-30],
     {}, ("row 3", "truncated"), TraceError),
    ("sharegpt.jsonl", lambda g: jsonl([
        {"id": "a", "conversations": [{"from": "human", "value": "hi"},
                                      {"from": "gpt", "value": "hello"}]},
        {"id": "b", "conversations": "not a list"}]), {}, ("row 2", "conversations"),
     TraceError),
    ("sharegpt.json", lambda g: json.dumps([
        {"id": "a", "conversations": [{"from": "human", "value": "hi"}]},
        {"id": "b", "conversations": [{"from": "human", "value": "x"}]},
        {"id": "c", "conversations": {"from": "human"}}]).encode(),
     {"format": "sharegpt"}, ("row 3", "conversations"), TraceError),
    ("openai.jsonl", lambda g: jsonl([
        chat(0), {"messages": [{"role": "user", "content": "no answer"}], "created": 1}]),
     {}, ("row 2", "completion_tokens"), TraceError),
    ("openai_tokens.jsonl", lambda g: jsonl([
        chat(0), chat(1), {**chat(2), "usage": {"prompt_tokens": 4, "completion_tokens": -1}}]),
     {}, ("row 3", "-1", "completion_tokens"), TraceError),
    ("openai_huge_int.jsonl", lambda g: jsonl([chat(0)]) + (
        b'{"prompt": "x", "created": 1' + b"0" * 400 + b', "usage": {"prompt_tokens": 1, '
        b'"completion_tokens": 1}}\n'), {}, ("row 2",), TraceError),
    ("map_missing.csv", lambda g: b"a,b,c\n1,2,3\n",
     {"column_map": {"input": "a", "output": "nope"}}, ("'nope'", "'a'"), UsageError),
    ("format_text_on_csv.csv", lambda g: g, {"format": "openai"}, ("openai",), UsageError),
    ("format_mismatch.csv", lambda g: g, {"format": "azure"}, ("azure",),
     FormatDetectionError),
    ("ragged_small.csv", lambda g: HEADER.encode() + b"1,a,1,2,3,x\n2,a,1,2,3,x,7,8\n", {},
     ("row 2", "8 fields", "header has 6"), TraceError),
    ("not_object.jsonl", lambda g: jsonl([mooncake(1), mooncake(2), [1, 2], mooncake(4)]), {},
     ("row 3", "not a JSON object"), TraceError),
    ("no_turns.jsonl", lambda g: jsonl([
        {"id": "a", "conversations": [{"from": "gpt", "value": "hello"}]}]), {},
     ("no requests",), TraceError),
    ("ragged.csv", lambda g: HEADER.encode() + b"".join(
        b"%d,a,1,2,3,x\n" % i for i in range(30_000)) + b"9,a,1,2,3,x,extra\n", {},
     ("row 30001", "line 30002"), TraceError),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_file(state: WorkspaceState, tmp_path: Path, good_csv: Path, case: Case) -> None:
    name, build, opts, expected, error = case
    path = tmp_path / name
    path.write_bytes(build(good_csv.read_bytes()))
    message = fails(state, path, IngestOptions(**opts), error)
    assert str(path) in message
    for part in expected:
        assert part in message, f"{part!r} not in {message!r}"


@pytest.mark.parametrize(("opts", "expected"), [
    ({"format": "excel"}, "--format"),
    ({"column_map": {"tokens": "x"}}, "--map field 'tokens'"),
])
def test_bad_options(state: WorkspaceState, good_csv: Path, opts: dict[str, Any],
                     expected: str) -> None:
    message = fails(state, good_csv, IngestOptions(**opts), UsageError)
    assert expected in message


def test_missing_file(state: WorkspaceState, tmp_path: Path) -> None:
    path = tmp_path / "absent.csv"
    assert str(path) in fails(state, path)


# --- sizes: long lines and decompression bombs -----------------------------------------------


def test_enormous_jsonl_line(state: WorkspaceState, tmp_path: Path) -> None:
    path = tmp_path / "long.jsonl"
    with path.open("wb") as fh:
        fh.write(jsonl([mooncake(1)]))
        fh.write(b'{"timestamp": 2, "input_length": 1, "output_length": 1, "pad": "')
        fh.write(b"x" * (40 << 20))
        fh.write(b'"}\n')
    message = fails(state, path)
    assert str(path) in message and "row 2" in message and "too long" in message


def test_enormous_csv_field(state: WorkspaceState, tmp_path: Path) -> None:
    path = tmp_path / "long.csv"
    # 3 MiB: past DuckDB's 2,000,000-byte CSV line limit (a 10 MiB field took DuckDB 2.5 s to
    # refuse, for the same message).
    path.write_bytes(burst_csv(GOOD_ROWS[:1]) + b"9," + b"m" * (3 << 20) + b",1,2,3,x\n")
    message = fails(state, path)
    assert str(path) in message and "row 2" in message and "too long" in message


def _gzip_rows(path: Path, n_rows: int) -> None:
    """A gzip of `n_rows` identical CSV rows, written streaming (compresses ~1000×)."""
    block = ("5,ChatGPT,472,18,490,Conversation log\n" * 10_000).encode()
    with gzip.open(path, "wb", compresslevel=6) as fh:
        fh.write(HEADER.encode())
        for _ in range(n_rows // 10_000):
            fh.write(block)


def test_bomb_with_explicit_cap(state: WorkspaceState, tmp_path: Path) -> None:
    path = tmp_path / "bomb.csv.gz"
    _gzip_rows(path, 200_000)  # ~7.6 MB expanded
    message = fails(state, path, IngestOptions(max_decompressed_bytes=1 << 20))
    assert str(path) in message and "decompression bomb" in message and "1 MiB" in message


def test_bomb_by_default_ratio(
    state: WorkspaceState, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without an explicit cap the limit is max(floor, 200 × compressed size)."""
    path = tmp_path / "bomb.csv.gz"
    _gzip_rows(path, 200_000)
    compressed = path.stat().st_size
    assert 200 * compressed < 7_000_000  # so the ratio, not the floor, is what refuses it
    monkeypatch.setattr(sources, "DEFAULT_MIN_CAP_BYTES", 1 << 20)
    message = fails(state, path)
    assert "decompression bomb" in message


def test_bomb_past_the_real_default_floor(
    state: WorkspaceState, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shipped defaults: ~300 MB of rows in < 1 MB of gzip stop at the 256 MiB floor."""
    path = tmp_path / "bomb.csv.gz"
    block = ("5,ChatGPT,472,18,490,Conversation log\n" * 100_000).encode()
    with gzip.open(path, "wb", compresslevel=9) as fh:
        fh.write(HEADER.encode())
        for _ in range(300_000_000 // len(block)):
            fh.write(block)
    assert 200 * path.stat().st_size < sources.DEFAULT_MIN_CAP_BYTES
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(scratch))
    message = fails(state, path)
    assert "decompression bomb" in message and "256 MiB" in message
    assert not os.listdir(scratch)


def test_zstd_bomb_stays_in_bounded_memory(tmp_path: Path) -> None:
    path = tmp_path / "bomb.csv.zst"
    cctx = zstandard.ZstdCompressor(level=3)
    with path.open("wb") as raw, cctx.stream_writer(raw) as out:
        out.write(HEADER.encode())
        for _ in range(64):
            out.write(bytes(1 << 20))  # 64 MiB of zeros, a few KB compressed
    ws = Workspace.resolve(tmp_path / "ws" / "w.duckdb")
    with pytest.raises(TraceError, match="decompression bomb"):
        ingest(str(path), ws, IngestOptions(max_decompressed_bytes=8 << 20))
    assert not ws.path.exists()


# --- good input that looks odd ---------------------------------------------------------------


def test_backwards_timestamps_are_sorted_with_a_warning(tmp_path: Path) -> None:
    times = [5.0, 3.0, 9.0, 1.0, 7.0, 7.0, 2.0]
    path = tmp_path / "backwards.csv"
    frame = pd.DataFrame({"ts": times, "input_tokens": range(10, 17),
                          "output_tokens": range(20, 27)})
    frame.to_csv(path, index=False)
    ws = Workspace.resolve(tmp_path / "ws" / "w.duckdb")
    result = ingest(str(path), ws, IngestOptions())

    back = int((frame["ts"].diff() < 0).sum())
    assert any(f"{back} rows" in w and "sorted" in w for w in result.warnings)
    expected = frame.sort_values("ts", kind="stable").reset_index(drop=True)
    with ws.connect(read_only=True) as con:
        got = con.execute("SELECT request_id, arrival_s, input_tokens, output_tokens "
                          "FROM requests ORDER BY request_id").df()
    assert got["request_id"].tolist() == list(range(len(times)))
    assert got["arrival_s"].tolist() == (expected["ts"] - expected["ts"].min()).tolist()
    assert got["input_tokens"].tolist() == expected["input_tokens"].tolist()
    assert got["output_tokens"].tolist() == expected["output_tokens"].tolist()


def _requests(ws: Workspace) -> tuple[Any, ...]:
    with ws.connect(read_only=True) as con:
        return con.execute("SELECT count(*), sum(arrival_s), sum(input_tokens), "
                           "sum(output_tokens), list(model ORDER BY request_id) "
                           "FROM requests").fetchone()


@pytest.mark.parametrize("kind", ["gzip", "gzip_members", "zstd", "zstd_frames"])
def test_good_compressed_trace(
    tmp_path: Path, good_csv: Path, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    raw = good_csv.read_bytes()
    half = raw.index(b"\n", len(raw) // 2) + 1
    data = {
        "gzip": lambda: gzip.compress(raw),
        "gzip_members": lambda: gzip.compress(raw[:half]) + gzip.compress(raw[half:]),
        "zstd": lambda: zstandard.ZstdCompressor().compress(raw),
        "zstd_frames": lambda: (zstandard.ZstdCompressor().compress(raw[:half])
                                + zstandard.ZstdCompressor().compress(raw[half:])),
    }[kind]()
    path = tmp_path / f"trace.csv.{'gz' if kind.startswith('gzip') else 'zst'}"
    path.write_bytes(data)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(scratch))

    plain_ws = Workspace.resolve(tmp_path / "plain.duckdb")
    packed_ws = Workspace.resolve(tmp_path / "packed.duckdb")
    ingest(str(good_csv), plain_ws, IngestOptions())
    result = ingest(str(path), packed_ws, IngestOptions())
    assert result.n_requests == len(pd.read_csv(good_csv))
    assert _requests(packed_ws) == _requests(plain_ws)
    assert not os.listdir(scratch), "the expanded copy was not removed"


def test_failed_expansion_removes_its_temporary_copy(
    tmp_path: Path, good_csv: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "cut.csv.gz"
    path.write_bytes(truncated_gzip(good_csv.read_bytes()))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(scratch))
    with pytest.raises(TraceError):
        ingest(str(path), Workspace.resolve(tmp_path / "ws.duckdb"), IngestOptions())
    assert not os.listdir(scratch)
