"""Ingest: containers, detection, the timestamp rule, text formats and tokenizers."""

from __future__ import annotations

import gzip
import json
import math

import numpy as np
import pandas as pd
import pytest

from profiler.analysis.profile import profile_trace
from profiler.ingestion.ingest import ingest
from profiler.ingestion.options import IngestOptions
from profiler.workspace import Workspace
from tests import reference as ref

AZURE_CODE = ref.TRACES / "AzureLLMInferenceTrace_code.csv"


def _requests(ws: Workspace) -> pd.DataFrame:
    with ws.connect(read_only=True) as con:
        return con.execute("SELECT * FROM requests ORDER BY request_id").fetchdf()


@pytest.fixture
def ws(tmp_path):
    return Workspace.resolve(tmp_path / "ws" / "w.duckdb")


@pytest.fixture(scope="module")
def azure_code():
    df = pd.read_csv(AZURE_CODE)
    ts = pd.to_datetime(df["TIMESTAMP"])
    return df, (ts - ts.min()).dt.total_seconds().to_numpy()


def test_canonical_table_columns_and_order(ws, azure_code):
    df, t = azure_code
    ingest(str(AZURE_CODE), ws)
    got = _requests(ws)
    assert list(got.columns) == ["request_id", "arrival_s", "input_tokens", "output_tokens",
                                 "session_id", "model", "block_hashes", "block_size", "status",
                                 "tokens_estimated"]
    idx = np.argsort(t, kind="stable")
    assert got["request_id"].tolist() == list(range(len(df)))
    np.testing.assert_allclose(got["arrival_s"], t[idx], rtol=0, atol=1e-9)
    assert got["input_tokens"].tolist() == df["ContextTokens"].to_numpy()[idx].tolist()
    assert got["arrival_s"].iloc[0] == 0.0
    assert not got["tokens_estimated"].any() and got["session_id"].isna().all()
    with ws.connect(read_only=True) as con:
        types = dict(con.execute("SELECT column_name, data_type FROM duckdb_columns() "
                                 "WHERE table_name = 'requests'").fetchall())
    assert types == {"request_id": "BIGINT", "arrival_s": "DOUBLE", "input_tokens": "INTEGER",
                     "output_tokens": "INTEGER", "session_id": "VARCHAR", "model": "VARCHAR",
                     "block_hashes": "UBIGINT[]", "block_size": "INTEGER", "status": "VARCHAR",
                     "tokens_estimated": "BOOLEAN"}


@pytest.mark.parametrize("container", ["tsv", "parquet", "jsonl", "json_array", "csv.gz",
                                       "csv.zst"])
def test_every_container_gives_the_same_table(tmp_path, ws, azure_code, container):
    df, t = azure_code
    path = tmp_path / f"trace.{container}"
    if container == "tsv":
        df.to_csv(path, sep="\t", index=False)
    elif container == "parquet":
        df.assign(TIMESTAMP=pd.to_datetime(df["TIMESTAMP"])).to_parquet(path)
    elif container == "jsonl":
        df.to_json(path, orient="records", lines=True)
    elif container == "json_array":
        df.to_json(path, orient="records")
    elif container == "csv.gz":
        path.write_bytes(gzip.compress(AZURE_CODE.read_bytes()))
    else:
        import zstandard

        path.write_bytes(zstandard.ZstdCompressor().compress(AZURE_CODE.read_bytes()))
    result = ingest(str(path), ws)
    assert result.format.kind == "azure"
    got = _requests(ws)
    idx = np.argsort(t, kind="stable")
    np.testing.assert_allclose(got["arrival_s"], t[idx], rtol=0, atol=1e-6)
    assert got["output_tokens"].tolist() == df["GeneratedTokens"].to_numpy()[idx].tolist()


def test_generic_table_by_aliases_and_by_map(tmp_path, ws):
    rng = np.random.default_rng(1)
    n = 500
    t = np.sort(rng.uniform(0, 100, n))
    df = pd.DataFrame({"when_ms": (1.7e12 + t * 1000).round(), "p": rng.integers(1, 9000, n),
                       "c": rng.integers(1, 900, n), "conv": rng.integers(0, 50, n)})
    path = tmp_path / "gw.csv"
    df.to_csv(path, index=False)
    result = ingest(str(path), ws, IngestOptions(column_map={
        "time": "when_ms", "input": "p", "output": "c", "session": "conv"}))
    assert result.format.kind == "generic"
    assert "ms" in result.format.timestamp_rule
    got = _requests(ws)
    np.testing.assert_allclose(got["arrival_s"], (df["when_ms"] - df["when_ms"].min()) / 1000)
    assert got["session_id"].tolist() == df["conv"].astype(str).tolist()

    aliased = tmp_path / "alias.csv"
    df.rename(columns={"when_ms": "timestamp", "p": "prompt_tokens",
                       "c": "completion_tokens"}).to_csv(aliased, index=False)
    assert ingest(str(aliased), ws).format.columns == {
        "time": "timestamp", "input": "prompt_tokens", "output": "completion_tokens"}


@pytest.mark.parametrize(("scale", "unit"), [(1.0, "s"), (1e3, "ms"), (1e6, "us"),
                                             (1e9, "ns")])
def test_epoch_units_detected_by_magnitude(tmp_path, ws, scale, unit):
    t = np.array([0.0, 0.25, 1.5, 3.0, 10.0])
    epoch = (1_700_000_000 + t) * scale
    path = tmp_path / "e.csv"
    values = epoch if scale == 1.0 else epoch.astype(np.int64)  # epoch s keeps its fraction
    pd.DataFrame({"ts": values, "input_tokens": 1, "output_tokens": 2}).to_csv(path, index=False)
    result = ingest(str(path), ws)
    assert f"epoch {unit}" in result.format.timestamp_rule
    np.testing.assert_allclose(_requests(ws)["arrival_s"], t, atol=1e-6)


def test_small_values_are_relative_seconds_and_override_wins(tmp_path, ws):
    path = tmp_path / "r.csv"
    pd.DataFrame({"ts": [0, 500, 1500], "input_tokens": 1, "output_tokens": 1}).to_csv(
        path, index=False)
    assert "relative seconds" in ingest(str(path), ws).format.timestamp_rule
    assert _requests(ws)["arrival_s"].tolist() == [0.0, 500.0, 1500.0]
    ingest(str(path), ws, IngestOptions(time_unit="ms"))
    assert _requests(ws)["arrival_s"].tolist() == [0.0, 0.5, 1.5]


def test_iso_datetimes_with_zones(tmp_path, ws):
    path = tmp_path / "iso.csv"
    path.write_text("created_at,input_tokens,output_tokens\n"
                    "2024-05-10T10:00:00+02:00,5,5\n2024-05-10T08:00:01.5Z,5,5\n")
    result = ingest(str(path), ws)
    assert result.format.timestamp_rule.startswith("datetimes")
    assert _requests(ws)["arrival_s"].tolist() == [0.0, 1.5]


def test_canonical_parquet_round_trip(tmp_path, ws):
    ingest(str(ref.TRACES / "mooncake_synthetic_trace.jsonl.gz"), ws)
    first = _requests(ws)
    out = tmp_path / "canon.parquet"
    first.to_parquet(out)
    ws2 = Workspace.resolve(tmp_path / "ws2.duckdb")
    info = ingest(str(out), ws2).format
    assert (info.kind, info.block_size) == ("servefit", 512)
    again = _requests(ws2)
    assert again["arrival_s"].tolist() == first["arrival_s"].tolist()
    assert [list(h) for h in again["block_hashes"]] == [list(h) for h in first["block_hashes"]]
    assert again["block_size"].tolist() == [512] * len(first)


def test_default_workspace_is_inside_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SERVEFIT_WORKSPACE", raising=False)
    ws = Workspace.resolve()
    ingest(str(ref.TRACES / "BurstGPT_1.head400.csv"), ws)
    assert (tmp_path / ".servefit" / "workspace.duckdb").is_file()
    monkeypatch.setenv("SERVEFIT_WORKSPACE", str(tmp_path / "elsewhere.duckdb"))
    assert Workspace.resolve().path == tmp_path / "elsewhere.duckdb"


# --- text formats ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def conversations():
    with gzip.open(ref.TRACES / "sharegpt_head1000.json.gz", "rt", encoding="utf-8") as fh:
        return json.load(fh)[:120]


def _render(messages):
    return "".join(f"{m['role']}: {m['content']}\n" for m in messages)


def test_openai_logs(tmp_path, ws, conversations):
    """Logs built from real ShareGPT text: usage on even lines, text measured on odd lines."""
    lines, expected = [], []
    t0 = 1_700_000_000.0
    for conv in conversations:
        messages = []
        for turn in conv["conversations"]:
            role = {"human": "user", "gpt": "assistant"}.get(turn["from"], turn["from"])
            if role == "assistant" and messages and messages[-1]["role"] == "user":
                i = len(lines)
                rec = {"created": t0 + 0.5 * i, "model": "m", "user": conv["id"],
                       "messages": list(messages),
                       "choices": [{"message": {"role": "assistant",
                                                "content": turn["value"]}}]}
                prompt = _render(messages)
                if i % 2 == 0:
                    rec["usage"] = {"prompt_tokens": 7 + i, "completion_tokens": 3 + i}
                    expected.append((7 + i, 3 + i, prompt))
                else:
                    expected.append((math.ceil(len(prompt) / 4),
                                     math.ceil(len(turn["value"]) / 4), prompt))
                lines.append(json.dumps(rec))
            messages.append({"role": role, "content": turn["value"]})
    path = tmp_path / "openai.jsonl"
    path.write_text("\n".join(lines) + "\n")
    prof = profile_trace(str(path), workspace=ws, lru_capacities=[])
    assert prof.format.kind == "openai"
    got = _requests(ws)
    assert got["input_tokens"].tolist() == [e[0] for e in expected]
    assert got["output_tokens"].tolist() == [e[1] for e in expected]
    assert got["arrival_s"].tolist() == [0.5 * i for i in range(len(lines))]
    assert prof.mean_qps == pytest.approx(len(lines) / (0.5 * (len(lines) - 1)), rel=1e-9)
    blocks = [ref.prefix_ids(e[2], 64) for e in expected]
    assert prof.prefix_reuse_infinite == pytest.approx(ref.infinite_reuse(blocks), rel=1e-9)
    users = pd.Series([json.loads(x)["user"] for x in lines])
    assert prof.multi_turn_share == pytest.approx(ref.multi_turn_share(users), rel=1e-9)


def _train_tokenizer(texts, folder):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=400,
                                                       special_tokens=["[UNK]"]))
    folder.mkdir()
    tok.save(str(folder / "tokenizer.json"))
    return tok


def test_sharegpt_with_a_local_tokenizer(tmp_path, ws, conversations):
    convs = conversations[:40]
    tok = _train_tokenizer([t["value"] for c in convs for t in c["conversations"]],
                           tmp_path / "tok")
    path = tmp_path / "sg.json"
    path.write_text(json.dumps(convs))
    prof = profile_trace(str(path), workspace=ws, lru_capacities=[50],
                         options=IngestOptions(tokenizer_dir=str(tmp_path / "tok")))
    exp = ref.sharegpt_requests(convs)
    prompts = []
    for conv in convs:
        text = ""
        turns = conv["conversations"]
        for i, turn in enumerate(turns):
            role = {"human": "user", "gpt": "assistant"}.get(turn["from"], turn["from"])
            text += f"{role}: {turn['value']}\n"
            if turn["from"] == "human":
                reply = turns[i + 1]["value"] if i + 1 < len(turns) else None
                prompts.append((text, reply))
    ids = [tok.encode(p, add_special_tokens=False).ids for p, _ in prompts]
    got = _requests(ws)
    assert len(got) == len(exp) == len(prompts)
    assert got["input_tokens"].tolist() == [len(i) for i in ids]
    assert got["output_tokens"].tolist() == [
        0 if r is None else len(tok.encode(r, add_special_tokens=False).ids) for _, r in prompts]
    assert not got["tokens_estimated"].any()
    assert prof.format.ngram_acceptance.tokenization == "tokenizer"
    blocks = [[tuple(i[: j + 16]) for j in range(0, len(i), 16)] for i in ids]
    assert prof.prefix_reuse_infinite == pytest.approx(ref.infinite_reuse(blocks), rel=1e-9)
    assert prof.prefix_reuse_lru["50"] == pytest.approx(ref.lru_reuse(blocks, 50), rel=1e-9)


def test_sharegpt_synthesized_arrivals_are_said_and_seeded(tmp_path, conversations):
    path = tmp_path / "sg.json"
    path.write_text(json.dumps(conversations))
    opts = IngestOptions(synthesize_arrivals_rps=4.0, seed=7)
    a = profile_trace(str(path), workspace=Workspace.resolve(tmp_path / "a.duckdb"),
                      options=opts)
    b = profile_trace(str(path), workspace=Workspace.resolve(tmp_path / "b.duckdb"),
                      options=opts)
    assert a.format.arrivals == "synthesized"
    assert any("Poisson at 4 req/s" in w for w in a.warnings)
    assert a.duration_s == b.duration_s
    assert a.mean_qps == pytest.approx(4.0, rel=0.15)
    assert a.interarrival_cv == pytest.approx(1.0, rel=0.15)


def test_same_file_and_options_are_not_ingested_twice(tmp_path, ws, monkeypatch):
    import os

    import profiler.ingestion.ingest as ingest_module

    path = tmp_path / "b.csv"
    path.write_bytes((ref.TRACES / "BurstGPT_3.head400.csv").read_bytes())
    first = ingest(str(path), ws)

    def must_not_open(*args, **kwargs):
        raise AssertionError("re-read a trace the workspace already holds")

    with monkeypatch.context() as m:
        m.setattr(ingest_module, "open_trace", must_not_open)
        again = ingest(str(path), ws)
        assert (again.format, again.n_requests, again.warnings) == (
            first.format, first.n_requests, first.warnings)
        with pytest.raises(AssertionError):  # other options: read again
            ingest(str(path), ws, IngestOptions(time_unit="ms"))
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    with monkeypatch.context() as m:
        m.setattr(ingest_module, "open_trace", must_not_open)
        with pytest.raises(AssertionError):  # a newer version of the file: read again
            ingest(str(path), ws)


def test_usage_counts_everywhere_means_nothing_estimated(tmp_path, ws):
    lines = [json.dumps({"created": 1_700_000_000 + i, "prompt": "hello " * (i + 1),
                         "usage": {"prompt_tokens": 10 + i, "completion_tokens": 5}})
             for i in range(20)]
    path = tmp_path / "u.jsonl"
    path.write_text("\n".join(lines))
    result = ingest(str(path), ws)
    assert not result.format.tokens_estimated
    assert not any("estimated" in w for w in result.warnings)
    assert _requests(ws)["input_tokens"].tolist() == [10 + i for i in range(20)]


@pytest.mark.parametrize("hashes", ["null", "empty", "one_empty_rest_null"])
def test_servefit_parquet_with_empty_optional_columns(tmp_path, ws, hashes):
    """Columns that hold no value are skipped when staged; the table is the same: NULLs stay
    NULL, empty lists stay empty lists (Parquet statistics alone cannot tell them apart)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = 50
    lists = {"null": [None] * n, "empty": [[] for _ in range(n)],
             "one_empty_rest_null": [[]] + [None] * (n - 1)}[hashes]
    table = pa.table({
        "request_id": pa.array(range(n), pa.int64()),
        "arrival_s": pa.array([0.5 * i for i in range(n)], pa.float64()),
        "input_tokens": pa.array([10 + i for i in range(n)], pa.int32()),
        "output_tokens": pa.array([3 + i % 7 for i in range(n)], pa.int32()),
        "session_id": pa.array([None] * n, pa.string()),
        "model": pa.array(["m"] * n, pa.string()),
        "block_hashes": pa.array(lists, pa.list_(pa.uint64())),
        "block_size": pa.array([16] * n, pa.int32()),
        "status": pa.array([None] * n, pa.string()),
        "tokens_estimated": pa.array([False] * n, pa.bool_()),
    })
    path = tmp_path / "t.parquet"
    pq.write_table(table, path, row_group_size=16)
    info = ingest(str(path), ws).format
    got = _requests(ws)
    assert info.kind == "servefit"
    assert list(got.columns) == table.column_names
    assert got["session_id"].isna().all() and got["status"].isna().all()
    assert got["model"].tolist() == ["m"] * n
    assert got["input_tokens"].tolist() == [10 + i for i in range(n)]
    with ws.connect(read_only=True) as con:
        stored = [r[0] for r in con.execute(
            "SELECT block_hashes FROM requests ORDER BY request_id").fetchall()]
    assert stored == lists
    # The block size is the file's only where some row carries hashes (an empty list does).
    assert info.block_size == (None if hashes == "null" else 16)
