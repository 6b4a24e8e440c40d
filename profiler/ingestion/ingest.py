"""Reading a trace of any supported format into the canonical `requests` table.

Flow: open (decompress, sniff) -> detect the format -> stage rows in a TEMP table (typed with
TRY_CAST, each row numbered as in the source) -> validate, naming file, row and column of the
first bad value -> time rule -> write `requests` sorted by arrival, in one transaction (the rows
in `requests_rows`, `requests` a view adding the columns the trace does not have). Nothing
persistent is written before validation passes.

This module owns that flow, the workspace cache and the write. Table formats are staged by
`profiler.ingestion.table` (one DuckDB SELECT), text formats by `profiler.ingestion.text`; the
checks on staged rows (validation, time rule) live in `profiler.ingestion.checks`, the file's
reader in `profiler.ingestion.columns`, and the options every stage takes in
`profiler.ingestion.options`.
"""

# ruff: noqa: S608 - SQL here is composed only of constants and column names passed through
# quote_ident; every value (paths, rows, scales) is a bound parameter.

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from core.errors import UsageError
from profiler.formats.base import FIELDS
from profiler.formats.registry import TABLE_FORMATS, TEXT_FORMATS
from profiler.ingestion.checks import count_backwards, time_spec, validate
from profiler.ingestion.diagnose import map_duckdb_error
from profiler.ingestion.options import IngestOptions
from profiler.ingestion.sources import OpenedTrace, open_trace
from profiler.ingestion.table import stage_table
from profiler.ingestion.text import stage_text, text_format
from profiler.ingestion.timestamps import TimeSpec
from profiler.schema import REQUEST_COLUMNS, REQUESTS_TABLE, FormatInfo
from profiler.workspace import Workspace, is_interrupt

META_DDL = """CREATE OR REPLACE TABLE trace_meta (
    format_json VARCHAR, warnings_json VARCHAR, n_requests BIGINT, fingerprint VARCHAR)"""
# Bump when ingestion changes what it writes, so cached workspaces are re-ingested.
INGEST_VERSION = 4
# The stored rows; `requests` is a view over them (see _write).
ROWS_TABLE = f"{REQUESTS_TABLE}_rows"


@dataclass
class IngestResult:
    """What was read: the detected format, the row count and warnings for the user."""

    format: FormatInfo
    n_requests: int
    warnings: list[str] = field(default_factory=list)


def ingest(path: str, workspace: Workspace, options: IngestOptions | None = None) -> IngestResult:
    """Read `path` into the workspace's `requests` table, replacing what was there.

    Raises:
        TraceError: the file cannot be read or holds invalid requests (nothing is written).
        UsageError: an option is invalid (unknown format kind, map field or column).
    """
    options = options or IngestOptions()
    _check_options(options)
    import duckdb

    fingerprint = _fingerprint(path, options)
    cached = _cached(workspace, fingerprint)
    if cached is not None:
        return cached
    with (
        open_trace(path, max_decompressed_bytes=options.max_decompressed_bytes) as opened,
        workspace.connect() as con,
    ):
        try:
            return _ingest(con, opened, options, fingerprint)
        except duckdb.Error as exc:
            if is_interrupt(exc):  # Ctrl-C, not a bad trace: the workspace re-raises it
                raise
            raise map_duckdb_error(exc, opened) from None


def _fingerprint(path: str, options: IngestOptions) -> str | None:
    """Identity of (file version, options): same file, same mtime and size, same options."""
    try:
        st = os.stat(path)
    except OSError:
        return None  # open_trace reports the missing file
    key = [os.path.abspath(path), st.st_size, st.st_mtime_ns, options.model_dump(mode="json"),
           INGEST_VERSION]
    if options.tokenizer_dir:  # a changed tokenizer changes every count
        with contextlib.suppress(OSError):
            tok = os.stat(os.path.join(options.tokenizer_dir, "tokenizer.json"))
            key += [tok.st_size, tok.st_mtime_ns]
    return hashlib.sha256(json.dumps(key).encode()).hexdigest()


def _cached(workspace: Workspace, fingerprint: str | None) -> IngestResult | None:
    """The workspace's trace when it is this very file read with these options, else None."""
    import duckdb

    if fingerprint is None or not workspace.exists():
        return None
    try:
        with workspace.connect(read_only=True) as con:
            row = con.execute("SELECT format_json, warnings_json, n_requests FROM trace_meta "
                              "WHERE fingerprint = ?", [fingerprint]).fetchall()
    except duckdb.Error:  # an older workspace layout, or one without a trace: ingest anew
        return None
    if not row:
        return None
    info, warnings, n = row[0]
    return IngestResult(FormatInfo.model_validate_json(info), int(n), json.loads(warnings))


def _check_options(options: IngestOptions) -> None:
    kinds = (*TABLE_FORMATS, *TEXT_FORMATS)
    if options.format is not None and options.format not in kinds:
        raise UsageError(f"--format must be one of {', '.join(kinds)}, not {options.format!r}")
    unknown = sorted(set(options.column_map) - set(FIELDS))
    if unknown:
        raise UsageError(
            f"--map field {unknown[0]!r} is unknown; fields are {', '.join(FIELDS)}"
        )


def _ingest(
    con: Any, opened: OpenedTrace, options: IngestOptions, fingerprint: str | None
) -> IngestResult:
    text = text_format(con, opened, options)
    if text is not None:
        info, warnings = stage_text(con, opened, text, options)
    else:
        info, warnings = stage_table(con, opened, options)
    n = validate(con, opened, info)
    info = _block_size(con, info)
    spec = time_spec(con, opened, info, options)
    backwards = count_backwards(con) if spec is not None else 0
    if backwards:
        warnings.append(f"{backwards} rows arrive earlier than the row before them: "
                        "sorted by arrival time")
    if spec is None and options.synthesize_arrivals_rps:
        spec, note = _synthesize_arrivals(con, options)
        info = info.model_copy(update={"arrivals": "synthesized", "timestamp_rule": note})
        warnings.append(note)
    elif spec is None:
        warnings.append(
            "the trace has no timestamps: arrival-time figures are undefined "
            "(use --synthesize-arrivals RATE for Poisson arrivals)"
        )
    else:
        info = info.model_copy(update={"timestamp_rule": spec.reason})
        if options.synthesize_arrivals_rps:
            warnings.append("--synthesize-arrivals ignored: the trace has timestamps")
    _write(con, info, spec, warnings, needs_sort=backwards > 0,
           meta=(n, fingerprint))
    return IngestResult(format=info, n_requests=n, warnings=warnings)


# --- after validation ------------------------------------------------------------------------


def _block_size(con: Any, info: FormatInfo) -> FormatInfo:
    """The trace's block size when rows carry one (ServeFit tables) and all agree."""
    if info.block_size is not None or not {"block_size", "hashes"} <= set(info.columns):
        return info
    staged = {d[0] for d in con.execute("SELECT * FROM stage LIMIT 0").description}
    if not {"block_size", "block_hashes"} <= staged:  # an empty column: no row has hashes
        return info
    lo, hi = con.execute("SELECT min(block_size), max(block_size) FROM stage "
                         "WHERE block_hashes IS NOT NULL").fetchone()
    return info.model_copy(update={"block_size": lo}) if lo is not None and lo == hi else info


def _synthesize_arrivals(con: Any, options: IngestOptions) -> tuple[TimeSpec, str]:
    """Poisson arrivals in file order, in SQL: exponential gaps from a seeded hash of the row.

    u = top 53 bits of hash(src_row, seed) / 2^53 is uniform in [0, 1); gap = -ln(1 - u) / rate.
    Deterministic for a seed, and no Python per row however long the trace.

    Why not `core.arrivals`: its numpy draws would pull every row's time into Python memory and
    write it back; here DuckDB computes and stores the times in place, streaming, so ingesting
    a trace larger than memory still works.
    """
    rate = float(options.synthesize_arrivals_rps or 0)
    con.execute(
        """UPDATE stage SET t_raw = a.t FROM (
               SELECT src_row, coalesce(sum(g) OVER (ORDER BY src_row ROWS BETWEEN
                      UNBOUNDED PRECEDING AND 1 PRECEDING), 0.0) AS t
               FROM (SELECT src_row,
                            -ln(1.0 - (hash(src_row, ?::BIGINT) >> 11)::DOUBLE
                                / 9007199254740992.0) / ? AS g
                     FROM stage)
           ) a WHERE stage.src_row = a.src_row""",
        [options.seed, rate],
    )
    note = f"arrivals synthesized: Poisson at {rate:g} req/s (seed {options.seed}), in file order"
    return TimeSpec("s", note), note


# --- write -----------------------------------------------------------------------------------


def _write(
    con: Any, info: FormatInfo, spec: TimeSpec | None, warnings: list[str], *, needs_sort: bool,
    meta: tuple[int, str | None],
) -> None:
    """Replace `requests` and `trace_meta` in one transaction.

    Rows already in arrival order (the usual case) keep their file order, which saves a sort
    of the whole trace; otherwise they are sorted by (arrival, file row).

    The rows are stored in `requests_rows` with the core columns and the optional ones that
    hold a value; `requests` is a view over it with every canonical column, the others NULL
    (`tokens_estimated` false). Why a view: writing 10 M NULLs costs as much as the core
    columns, and a column added to the table later (ALTER TABLE … ADD COLUMN) is rewritten
    into every row group at the next checkpoint: 2 s of a 4 s ingest on 10 M rows.
    """
    scale = spec.seconds_per_unit if spec else 0.0
    arrival = "(t_raw - (SELECT min(t_raw) FROM stage)) * ?" if spec else "NULL::DOUBLE"
    params = [scale] if spec else []
    if needs_sort:
        request_id = "row_number() OVER (ORDER BY t_raw, src_row) - 1"
        order = "ORDER BY t_raw, src_row"
    else:
        request_id, order = "src_row - 1", ""
    optional = list(REQUEST_COLUMNS)[4:]
    present = _non_null_columns(con, optional)
    written = "".join(f", {c}" for c in optional if c in present)
    view = ", ".join(
        c if c in present or c not in optional else
        f"{'false' if c == 'tokens_estimated' else 'NULL'}::{REQUEST_COLUMNS[c]} AS {c}"
        for c in REQUEST_COLUMNS
    )
    with _transaction(con):
        _drop_requests(con)
        con.execute(
            f"""CREATE OR REPLACE TABLE {ROWS_TABLE} AS
                SELECT ({request_id})::BIGINT AS request_id,
                       ({arrival})::DOUBLE AS arrival_s,
                       in_v::INTEGER AS input_tokens, out_v::INTEGER AS output_tokens{written}
                FROM stage {order}""",
            params,
        )
        con.execute(f"CREATE VIEW {REQUESTS_TABLE} AS SELECT {view} FROM {ROWS_TABLE}")
        con.execute(META_DDL)
        con.execute("INSERT INTO trace_meta VALUES (?, ?, ?, ?)",
                    [info.model_dump_json(), json.dumps(warnings), *meta])
    con.execute("DROP TABLE stage")


def _drop_requests(con: Any) -> None:
    """Drop `requests`: a view (this layout) or a table (workspaces of INGEST_VERSION < 3)."""
    row = con.execute("SELECT table_type FROM information_schema.tables WHERE table_name = ? "
                      "AND table_schema = 'main' AND table_catalog = current_database()",
                      [REQUESTS_TABLE]).fetchone()
    if row is not None:
        kind = "VIEW" if row[0] == "VIEW" else "TABLE"
        con.execute(f"DROP {kind} {REQUESTS_TABLE}")


@contextlib.contextmanager
def _transaction(con: Any) -> Iterator[None]:
    con.execute("BEGIN TRANSACTION")
    try:
        yield
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")


def _non_null_columns(con: Any, optional: list[str]) -> set[str]:
    """The staged optional columns that hold at least one value.

    A column mapped but empty (e.g. the NULL session_id/block_hashes of a ServeFit file without
    them) is written like an absent one: all NULL, but added as a metadata-only column when it
    is in the tail, instead of carrying 10 M NULLs (a list column's most of all) through the
    write.
    """
    staged = [d[0] for d in con.execute("SELECT * FROM stage LIMIT 0").description]
    candidates = [c for c in optional if c in staged]
    if not candidates:
        return set()
    counts = con.execute(
        "SELECT " + ", ".join(f"count({c}) > 0" for c in candidates) + " FROM stage"
    ).fetchone()
    return {c for c, has in zip(candidates, counts, strict=True) if has}
