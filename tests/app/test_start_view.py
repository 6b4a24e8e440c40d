"""The Start view: the sample by default, the column-mapping form, one-line errors (AppTest)."""

from __future__ import annotations

import io

import pandas as pd
from streamlit.testing.v1 import AppTest

from app.resources import PENDING_KEY, TRACE_KEY, store_upload
from profiler.formats import TABLE_FORMATS, TEXT_FORMATS
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
    assert "AzureLLMInferenceTrace_conv.csv" in at.info[0].value
    assert at.session_state[TRACE_KEY].sample


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
    assert at.success[0].value.startswith(f"renamed.csv: {len(df):,} requests")
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
    assert "broken.parquet" in at.error[0].value and "Traceback" not in at.error[0].value
    assert at.session_state[TRACE_KEY].sample  # the session keeps working on the sample
