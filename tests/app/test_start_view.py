"""The Start view: the sample by default, the column-mapping form, one-line errors (AppTest)."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import re
import tempfile
import time
from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from app.session import PENDING_KEY, TRACE_KEY
from app.storage import COPY_CHUNK_BYTES, store_upload
from profiler.formats.registry import TABLE_FORMATS, TEXT_FORMATS
from tests import reference as ref
from tests.app.conftest import ENTRY

RENAMED = {"Timestamp": "when", "Request tokens": "q_len", "Response tokens": "a_len"}


def _store(data: bytes, name: str):
    return store_upload(io.BytesIO(data), name, len(data))


def _button(at: AppTest, label: str):
    return next(b for b in at.button if b.label == label)


def test_opens_on_the_bundled_sample(app_home):
    at = AppTest.from_file(str(ENTRY), default_timeout=120).run()
    assert not at.exception
    assert "AzureLLMInferenceTrace_conv.csv" in _literal(at.info[0].value)
    assert at.session_state[TRACE_KEY].sample


def test_the_current_trace_line_follows_a_change_made_in_the_same_run(app_home):
    """The line is drawn after the upload or button that changes the trace: it used to name
    the previous trace above the success message until the next rerun."""
    data = (ref.TRACES / "BurstGPT_1.head400.csv").read_bytes()
    at = AppTest.from_file(str(ENTRY), default_timeout=120)
    at.session_state[TRACE_KEY] = _store(data, "burst.csv")
    at.run()
    assert _literal(at.info[0].value) == "Current trace: burst.csv"
    _button(at, "Use the bundled sample instead").click().run()
    assert not at.exception and not at.error
    assert "AzureLLMInferenceTrace_conv.csv — the bundled sample" in _literal(at.info[0].value)
    assert at.success  # the same run's message, under a line that already agrees with it


def test_unknown_columns_get_a_mapping_form(app_home):
    df = pd.read_csv(ref.TRACES / "BurstGPT_3.head400.csv").rename(columns=RENAMED)
    choice = _store(df.to_csv(index=False).encode(), "renamed.csv")
    at = AppTest.from_file(str(ENTRY), default_timeout=120)
    at.session_state[PENDING_KEY] = choice
    at.run()
    assert at.selectbox(key="map.input").options[1:] == list(df.columns)
    formats = next(s for s in at.selectbox if s.label == "Format").options
    assert formats[0] == "detect"  # then every format plug-in the profiler registers
    assert sorted(formats[1:]) == sorted([*TABLE_FORMATS, *TEXT_FORMATS])
    units = next(s for s in at.selectbox if s.label == "Timestamp unit").options
    assert units == ["detect", "s", "ms", "us", "ns", "datetime"]
    _button(at, "Read the file with these options").click().run()
    assert not at.exception
    assert len(at.error) == 1 and "unknown columns" in at.error[0].value
    at.selectbox(key="map.time").set_value("when")
    at.selectbox(key="map.input").set_value("q_len")
    at.selectbox(key="map.output").set_value("a_len")
    _button(at, "Read the file with these options").click().run()
    assert not at.exception and not at.error
    assert _literal(at.success[0].value).startswith(f"renamed.csv: {len(df):,} requests")
    chosen = at.session_state[TRACE_KEY]
    assert chosen.options.column_map == {"time": "when", "input": "q_len", "output": "a_len"}
    at.switch_page("views/profile.py").run()
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Requests"] == f"{len(df):,}"


def test_a_broken_file_is_one_clear_message(app_home):
    choice = _store(b"\x00\x01binary\xff" * 100, "broken.parquet")
    at = AppTest.from_file(str(ENTRY), default_timeout=120)
    at.session_state[PENDING_KEY] = choice
    at.run()
    _button(at, "Read the file with these options").click().run()
    assert not at.exception
    assert len(at.error) == 1
    assert "broken.parquet" in _literal(at.error[0].value)
    assert "Traceback" not in at.error[0].value
    assert at.session_state[TRACE_KEY].sample  # the session keeps working on the sample


# -- issue 16: hostile upload names (F5, F7), server paths in errors (F8) ----------------------

JAPANESE_94 = ("東京大阪名古屋札幌福" * 9) + ".csv"  # 94 characters, 274 bytes
MARKDOWN_NAME = "**x** [a](javascript:alert(1)) ![i](x.png) :red[r] $y$.csv"
# CommonMark: a backslash before ASCII punctuation makes it literal.
UNESCAPED_MARKUP = re.compile(r"(?<!\\)[*_\[\]()!`:$<>#]")


def _upload(at: AppTest, name: str, data: bytes) -> AppTest:
    at.file_uploader[0].set_value((name, data, "text/csv")).run()
    assert not at.exception, at.exception
    return at


def _literal(markdown: str) -> str:
    """What CommonMark shows for text whose every punctuation mark is backslash-escaped."""
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", markdown)


def _stored_files(home: Path) -> list[str]:
    return sorted(str(p.relative_to(home / "uploads")) for p in (home / "uploads").rglob("*")
                  if p.is_file())


@pytest.mark.parametrize("name", ["..", ".", "", "a/../../etc/passwd", "C:\\x\\..\\t.csv",
                                  JAPANESE_94, "n" * 300 + ".csv", "line\nbreak\x85.csv",
                                  MARKDOWN_NAME])
def test_any_browser_file_name_is_stored_under_a_generated_name(app_home, name):
    assert len(JAPANESE_94) == 94 and len(JAPANESE_94.encode()) > 255
    data = (ref.TRACES / "BurstGPT_1.head400.csv").read_bytes()
    at = _upload(AppTest.from_file(str(ENTRY), default_timeout=120).run(), name, data)
    assert not at.error, [e.value for e in at.error]
    digest = hashlib.sha256(data).hexdigest()[:16]
    assert _stored_files(app_home) == [f"{digest}/trace"]  # no .incoming-* left either
    choice = at.session_state[TRACE_KEY]
    assert Path(choice.path) == app_home / "uploads" / digest / "trace"
    assert "/" not in choice.name and "\n" not in choice.name and len(choice.name) <= 120
    assert choice.name and choice.name not in {".", ".."}


def test_a_markdown_file_name_is_shown_as_text(app_home):
    """F7: the name rendered as bold, a link and an image in "Current trace" and the Profile
    caption; now every Markdown mark in it is escaped and it reads back as typed."""
    data = (ref.TRACES / "BurstGPT_1.head400.csv").read_bytes()
    at = _upload(AppTest.from_file(str(ENTRY), default_timeout=120).run(), MARKDOWN_NAME, data)
    success = at.success[0].value
    at.run()  # the next rerun shows the new current trace
    current = at.info[0].value.removeprefix("Current trace: ")
    at.switch_page("views/profile.py").run()
    assert not at.exception and not at.error
    caption = at.caption[0].value
    for text in (success, current, caption):
        assert UNESCAPED_MARKUP.search(text) is None, text
    assert _literal(current) == MARKDOWN_NAME
    assert _literal(success).startswith(f"{MARKDOWN_NAME}: 400 requests")
    assert _literal(caption).startswith(f"{MARKDOWN_NAME}: BurstGPT")


class _DroppedUpload(io.BytesIO):
    """An upload whose connection drops while the app copies it (the second read pass)."""

    def seek(self, offset: int, whence: int = 0) -> int:
        self.dropped = offset == 0 and whence == 0 and self.tell() > 0
        return super().seek(offset, whence)

    def read(self, size: int | None = -1) -> bytes:
        if getattr(self, "dropped", False) and self.tell() > 0:
            raise OSError(104, "Connection reset by peer")
        return super().read(size)


def test_a_failed_copy_leaves_no_incoming_file(app_home):
    data = b"x" * (COPY_CHUNK_BYTES + 10)
    with pytest.raises(OSError, match="reset"):
        store_upload(_DroppedUpload(data), "t.csv", len(data))
    assert _stored_files(app_home) == []


def test_errors_name_the_uploaded_file_not_the_server_path(app_home):
    """F8: a bad upload's error showed `…/uploads/<digest>/name.csv`."""
    at = AppTest.from_file(str(ENTRY), default_timeout=120).run()
    _upload(at, "secret-plan.csv", b"\x00\x01binary\xff" * 100)
    assert len(at.error) == 1
    message = _literal(at.error[0].value)
    assert message.startswith("secret-plan.csv: ")
    assert str(app_home) not in message and "uploads" not in message


def test_a_gzip_upload_error_names_the_uploaded_file(app_home):
    """The gzip expansion lives in the system temp folder; its path is not shown either."""
    broken = gzip.compress(b'{"timestamp": 1, "input_length": 5}\n{"timestamp": \n')
    at = AppTest.from_file(str(ENTRY), default_timeout=120).run()
    _upload(at, "mine.jsonl.gz", broken)
    assert len(at.error) == 1
    message = _literal(at.error[0].value)
    assert "mine.jsonl.gz" in message
    assert "servefit-expand" not in message and tempfile.gettempdir() not in message
    assert str(app_home) not in message


def test_an_orphan_from_a_killed_copy_is_removed_by_the_next_upload(app_home):
    data = (ref.TRACES / "BurstGPT_1.head400.csv").read_bytes()
    folder = app_home / "uploads" / hashlib.sha256(data).hexdigest()[:16]
    folder.mkdir(parents=True)
    orphan, fresh = folder / ".incoming-old", folder / ".incoming-copying-now"
    orphan.write_bytes(data[:100])
    fresh.write_bytes(data[:100])
    two_hours_ago = time.time() - 7200
    os.utime(orphan, (two_hours_ago, two_hours_ago))
    store_upload(io.BytesIO(data), "t.csv", len(data))
    assert sorted(p.name for p in folder.iterdir()) == [".incoming-copying-now", "trace"]
