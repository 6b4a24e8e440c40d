"""profiler.ingestion.rescan: where a trace file first goes wrong, found from its bytes.

Expected lines, offsets and rows are computed here from the bytes written (plain Python), not
by the scans under test.
"""

from __future__ import annotations

import json
from pathlib import Path

from profiler.ingestion.rescan import (
    first_invalid_utf8_line,
    first_json_problem,
    first_long_line,
    first_ragged_row,
)

ROWS = [f"{i},ChatGPT,{100 + i},{20 + i}\n" for i in range(50)]


def test_the_first_byte_that_is_not_utf8_is_named_by_line_and_offset(tmp_path: Path) -> None:
    data = ("ts,model,in,out\n" + "".join(ROWS[:7])).encode() + b"8,Chat\xffGPT,1,2\n"
    path = tmp_path / "bad.csv"
    path.write_bytes(data)
    offset = data.index(b"\xff")
    assert first_invalid_utf8_line(str(path)) == (data[:offset].count(b"\n") + 1, offset)


def test_a_multibyte_character_cut_at_the_end_is_reported(tmp_path: Path) -> None:
    data = "ts\n1\n2 é".encode()[:-1]  # the é's second byte is missing
    path = tmp_path / "cut.csv"
    path.write_bytes(data)
    assert first_invalid_utf8_line(str(path)) == (3, len(data))
    path.write_bytes("ts\n1\n2 é\n".encode())
    assert first_invalid_utf8_line(str(path)) is None


def test_the_first_line_over_the_limit(tmp_path: Path) -> None:
    lines = ["short\n", "x" * 40 + "\n", "y" * 100 + "\n", "z" * 200 + "\n"]
    path = tmp_path / "long.txt"
    path.write_text("".join(lines))
    expected = next(i for i, line in enumerate(lines, 1) if len(line) - 1 > 64)
    assert first_long_line(str(path), 64) == expected
    assert first_long_line(str(path), 500) is None


def test_jsonl_names_the_row_and_line_of_the_first_non_object(tmp_path: Path) -> None:
    lines = [json.dumps({"a": i}) for i in range(5)] + ["", "[1, 2]", json.dumps({"a": 9})]
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines) + "\n")
    found = first_json_problem(str(path), "jsonl", 1 << 20)
    assert found is not None
    assert (found.row, found.line) == (6, lines.index("[1, 2]") + 1)  # blank lines are no row
    assert "an array, not a JSON object" in found.reason


def test_a_json_array_cut_short_names_the_element(tmp_path: Path) -> None:
    text = json.dumps([{"a": i} for i in range(4)])[:-1]  # drop the closing bracket
    path = tmp_path / "t.json"
    path.write_text(text)
    found = first_json_problem(str(path), "json_array", 1 << 20)
    assert found is not None and found.row == 4 and "cut short" in found.reason
    path.write_text(text + "]")
    assert first_json_problem(str(path), "json_array", 1 << 20) is None


def test_the_first_ragged_csv_row_with_its_separator(tmp_path: Path) -> None:
    rows = [line.replace(",", ";") for line in ROWS]
    rows[11] = "11;ChatGPT;1;2;extra\n"
    path = tmp_path / "semi.csv"
    path.write_text("ts;model;in;out\n" + "".join(rows))
    found = first_ragged_row(str(path))
    assert found is not None
    assert (found.row, found.line, found.fields, found.header_fields) == (12, 13, 5, 4)
    assert found.separator == ";"
    assert first_ragged_row(str(path), max_rows=11) is None  # only the leading rows are read
