"""What a trace file's first bytes say: its compression and the container it holds.

Owns the magic numbers and the checks on a file's head: gzip or zstd (other archives are
refused), Parquet, JSON array, JSONL or CSV, and content that is clearly not text (images,
programs, UTF-16). Expanding compressed input is `profiler.ingestion.sources`'s.
"""

from __future__ import annotations

from typing import Literal

from core.errors import TraceError

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
BINARY_MAGIC = {
    b"\x89PNG\r\n\x1a\n": "PNG image",
    b"\xff\xd8\xff": "JPEG image",
    b"GIF8": "GIF image",
    b"%PDF-": "PDF document",
    b"\x7fELF": "program (ELF)",
    b"SQLite format 3\x00": "SQLite database",
    b"ARROW1": "Arrow/Feather file",
}
BINARY_CONTROL = bytes(b for b in range(0x20) if b not in b"\t\n\r\x0c\x08\x1b")
BINARY_CONTROL_SHARE = 0.1
SNIFF_BYTES = 64 * 1024


def read_head(path: str, n: int = SNIFF_BYTES) -> bytes:
    """The first `n` bytes of the file at `path`."""
    with open(path, "rb") as fh:
        return fh.read(n)


def compression_of(head: bytes, source: str) -> str | None:
    """"gzip" or "zstd" by the head's magic, None for uncompressed data; another archive
    raises TraceError."""
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


def _binary_kind(head: bytes) -> str | None:
    """A name for content that is clearly not text (known magic, NULs, control bytes)."""
    for magic, name in BINARY_MAGIC.items():
        if head.startswith(magic):
            return name
    if b"\x00" in head:
        return "binary file"
    control = len(head) - len(head.translate(None, BINARY_CONTROL))
    return "binary file" if control > len(head) * BINARY_CONTROL_SHARE else None


def container_of(head: bytes, source: str) -> Container:
    """The container an uncompressed head holds; empty, UTF-16 or binary content raises
    TraceError."""
    if head.startswith(PARQUET_MAGIC):
        return "parquet"
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if not text:
        raise TraceError("the file is empty", path=source, hint="export the trace again")
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise TraceError("the file is UTF-16 text", path=source,
                         hint="re-encode it as UTF-8, e.g. with iconv -f UTF-16 -t UTF-8")
    binary = _binary_kind(head)
    if binary is not None:
        raise TraceError(
            f"this is a {binary}, not a trace (CSV/TSV, JSON, JSONL or Parquet)",
            path=source,
        )
    if text.startswith(b"["):
        return "json_array"
    if text.startswith(b"{"):
        return "jsonl"
    return "csv"
