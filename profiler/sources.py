"""Opening a trace file: compression, container sniffing and the byte-level sanity checks.

Compressed input (gzip, zstd) is expanded once into a private temporary file, streaming and
with a cap on the expansion, so a truncated archive or a decompression bomb fails early with
one clear line and DuckDB then reads a plain file of known size.
"""

from __future__ import annotations

import gzip
import os
import shutil
import tempfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Literal

from profiler.errors import TraceError

Container = Literal["parquet", "csv", "jsonl", "json_array"]

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
PARQUET_MAGIC = b"PAR1"
UNSUPPORTED_MAGIC = {
    b"BZh": "bzip2",
    b"\xfd7zXZ\x00": "xz",
    b"PK\x03\x04": "zip",
    b"7z\xbc\xaf\x27\x1c": "7z",
}
SNIFF_BYTES = 64 * 1024
COPY_CHUNK = 1 << 20
DEFAULT_MAX_EXPANSION = 200
DEFAULT_MIN_CAP_BYTES = 256 << 20


@dataclass(frozen=True)
class OpenedTrace:
    """A trace ready for DuckDB: a plain file path and the container it holds."""

    source: str
    path: str
    container: Container
    compression: str | None


def _head(path: str, n: int = SNIFF_BYTES) -> bytes:
    with open(path, "rb") as fh:
        return fh.read(n)


def _compression(head: bytes, source: str) -> str | None:
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head.startswith(ZSTD_MAGIC):
        return "zstd"
    for magic, name in UNSUPPORTED_MAGIC.items():
        if head.startswith(magic):
            raise TraceError(
                f"{name} archives are not supported",
                path=source,
                hint="decompress it first, or recompress with gzip or zstd",
            )
    return None


def _open_decompressor(raw: BinaryIO, kind: str) -> BinaryIO:
    if kind == "gzip":
        return gzip.GzipFile(fileobj=raw)  # type: ignore[return-value]
    import zstandard

    return zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)


def _expand(source: str, kind: str, dest: str, cap_bytes: int) -> None:
    """Stream-decompress `source` into `dest`, refusing to write more than `cap_bytes`."""
    written = 0
    try:
        with open(source, "rb") as raw, open(dest, "wb") as out:
            reader = _open_decompressor(raw, kind)
            while chunk := reader.read(COPY_CHUNK):
                written += len(chunk)
                if written > cap_bytes:
                    raise TraceError(
                        f"{kind} data expands past {cap_bytes >> 20} MiB "
                        f"({os.path.getsize(source)} compressed bytes): refusing a "
                        "possible decompression bomb",
                        path=source,
                        hint="raise --max-decompressed-mb if the file is genuine",
                    )
                out.write(chunk)
    except (EOFError, gzip.BadGzipFile, zlib.error, OSError) as exc:
        raise TraceError(
            f"{kind} data is truncated or corrupt ({exc})",
            path=source,
            hint="re-download or re-compress the file",
        ) from None
    except Exception as exc:  # zstandard raises its own ZstdError
        if type(exc).__name__ == "ZstdError":
            raise TraceError(
                f"zstd data is truncated or corrupt ({exc})", path=source
            ) from None
        raise


def _container(head: bytes, source: str) -> Container:
    if head.startswith(PARQUET_MAGIC):
        return "parquet"
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if not text:
        raise TraceError("the file is empty", path=source, hint="export the trace again")
    if b"\x00" in head:
        raise TraceError(
            "this is a binary file, not a trace (CSV/TSV, JSON, JSONL or Parquet)",
            path=source,
        )
    if text.startswith(b"["):
        return "json_array"
    if text.startswith(b"{"):
        return "jsonl"
    return "csv"


@contextmanager
def open_trace(
    source: str | os.PathLike[str],
    *,
    max_expansion: int = DEFAULT_MAX_EXPANSION,
    max_decompressed_bytes: int | None = None,
) -> Iterator[OpenedTrace]:
    """Yield the trace as a plain file DuckDB can read; temporary copies are removed after.

    Raises:
        TraceError: missing, empty, binary, unsupported archive, truncated or too large once
            expanded.
    """
    source = str(source)
    if not Path(source).is_file():
        raise TraceError("no such file", path=source)
    head = _head(source)
    kind = _compression(head, source)
    if kind is None:
        yield OpenedTrace(source, source, _container(head, source), None)
        return
    cap = max_decompressed_bytes or max(
        DEFAULT_MIN_CAP_BYTES, max_expansion * os.path.getsize(source)
    )
    tmpdir = tempfile.mkdtemp(prefix="servefit-")
    try:
        plain = os.path.join(tmpdir, Path(source).name + ".plain")
        _expand(source, kind, plain, cap)
        yield OpenedTrace(source, plain, _container(_head(plain), source), kind)
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)


def first_invalid_utf8_line(path: str) -> tuple[int, int] | None:
    """Return (1-based line, byte offset) of the first byte that is not UTF-8, if any."""
    import codecs

    decoder = codecs.getincrementaldecoder("utf-8")()
    line, offset = 1, 0
    with open(path, "rb") as fh:
        while chunk := fh.read(COPY_CHUNK):
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as exc:
                bad = exc.start
                return line + chunk[:bad].count(b"\n"), offset + bad
            line += chunk.count(b"\n")
            offset += len(chunk)
    return None
