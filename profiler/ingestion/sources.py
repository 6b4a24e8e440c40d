"""Opening a trace file: a plain file DuckDB can read, compressed input expanded first.

Compressed input (gzip, zstd) is expanded once into a private temporary file, streaming and
with a cap on the expansion, so a truncated archive or a decompression bomb fails early with
one clear line and DuckDB then reads a plain file of known size. The expansion folder
(`servefit-expand-*` in the system temp directory) is removed when the trace is closed; a
process killed before that (kill -9) cannot, so each folder holds a lock its process keeps
while alive, and the next expansion removes every folder whose lock nobody holds.

What the file's first bytes say (compression, container) is `profiler.ingestion.sniff`'s.
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
from typing import BinaryIO

from core.errors import TraceError
from profiler.ingestion.sniff import Container, compression_of, container_of, read_head

COPY_CHUNK = 1 << 20
ZSTD_FEED = 1 << 10
DEFAULT_MAX_EXPANSION = 200
DEFAULT_MIN_CAP_BYTES = 256 << 20
EXPANSION_PREFIX = "servefit-expand-"
EXPANSION_LOCK = ".lock"
EXPANSION_GRACE_S = 60.0


@dataclass(frozen=True)
class OpenedTrace:
    """A trace ready for DuckDB: a plain file path and the container it holds."""

    source: str
    path: str
    container: Container
    compression: str | None


def _gzip_chunks(raw: BinaryIO) -> Iterator[bytes]:
    reader = gzip.GzipFile(fileobj=raw)
    while chunk := reader.read(COPY_CHUNK):
        yield chunk


def _zstd_chunks(raw: BinaryIO) -> Iterator[bytes]:
    """Decompress every zstd frame; a frame cut short raises EOFError.

    `stream_reader` stops silently at a truncated frame, so frames are driven by hand through
    `decompressobj`, fed `ZSTD_FEED` bytes at a time: a zstd block holds at most 128 KiB, so one
    feed expands to at most ~32 MiB however the input was crafted.
    """
    import zstandard

    dctx = zstandard.ZstdDecompressor()
    dobj, in_frame = dctx.decompressobj(), False
    while data := raw.read(COPY_CHUNK):
        view = memoryview(data)
        while view:
            piece, view = view[:ZSTD_FEED], view[ZSTD_FEED:]
            in_frame = True
            if out := dobj.decompress(piece.tobytes()):
                yield out
            while dobj.eof:
                rest = dobj.unused_data
                dobj, in_frame = dctx.decompressobj(), bool(rest)
                if rest and (out := dobj.decompress(rest)):
                    yield out
    if in_frame:
        raise EOFError("the last zstd frame ends early")


def size_text(n: int) -> str:
    """A byte count as people read it: bytes below 1 MiB, MiB above."""
    return f"{n / (1 << 20):.3g} MiB" if n >= 1 << 20 else f"{n:,} bytes"


def _expand(source: str, kind: str, dest: str, cap_bytes: int) -> None:
    """Stream-decompress `source` into `dest`, refusing to write more than `cap_bytes`."""
    import zstandard

    written = 0
    try:
        with open(source, "rb") as raw, open(dest, "wb") as out:
            chunks = _gzip_chunks(raw) if kind == "gzip" else _zstd_chunks(raw)
            for chunk in chunks:
                written += len(chunk)
                if written > cap_bytes:
                    raise TraceError(
                        f"{kind} data expands past {size_text(cap_bytes)} "
                        f"({os.path.getsize(source):,} compressed bytes): refusing a "
                        "possible decompression bomb",
                        path=source,
                        hint="raise --max-decompressed-mb if the file is genuine",
                    )
                out.write(chunk)
    except (EOFError, gzip.BadGzipFile, zlib.error, zstandard.ZstdError) as exc:
        raise TraceError(
            f"{kind} data is truncated or corrupt ({one_line(exc)})",
            path=source,
            hint="re-download or re-compress the file",
        ) from None
    except OSError as exc:
        raise TraceError(
            f"cannot expand the {kind} data ({one_line(exc)})",
            path=source,
            hint="check free space in the temporary folder (TMPDIR)",
        ) from None


def one_line(exc: BaseException) -> str:
    """An exception's message on one line (its type name when it has none)."""
    return " ".join(str(exc).split()) or type(exc).__name__


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
    try:
        head = read_head(source)
    except OSError as exc:
        raise TraceError(f"cannot read the file ({exc.strerror or one_line(exc)})",
                         path=source) from None
    kind = compression_of(head, source)
    if kind is None:
        yield OpenedTrace(source, source, container_of(head, source), None)
        return
    cap = max_decompressed_bytes or max(
        DEFAULT_MIN_CAP_BYTES, max_expansion * os.path.getsize(source)
    )
    remove_stale_expansions()
    with _expansion_dir() as tmpdir:
        # The source's name keeps DuckDB's messages recognisable; cut to stay under NAME_MAX.
        name = Path(source).name.encode()[:200].decode(errors="ignore")
        plain = os.path.join(tmpdir, name + ".plain")
        _expand(source, kind, plain, cap)
        yield OpenedTrace(source, plain, container_of(read_head(plain), source), kind)


@contextmanager
def _expansion_dir() -> Iterator[str]:
    """A private temporary folder, locked (flock) for as long as this process uses it."""
    import fcntl

    tmpdir = tempfile.mkdtemp(prefix=EXPANSION_PREFIX)
    try:
        # Locked before it takes its name, so no other process ever finds it unlocked.
        with open(os.path.join(tmpdir, ".lock-new"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            os.rename(lock.name, os.path.join(tmpdir, EXPANSION_LOCK))
            yield tmpdir
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)


def remove_stale_expansions(root: str | None = None) -> list[str]:
    """Remove the expansion folders of processes that died without cleaning up; returns them.

    A folder is stale when its lock can be taken (its process is gone: the kernel dropped the
    lock), or when it has no lock file and is older than EXPANSION_GRACE_S (killed between
    creating the folder and locking it).
    """
    import fcntl
    import time

    base = root or tempfile.gettempdir()
    removed = []
    for entry in Path(base).glob(f"{EXPANSION_PREFIX}*"):
        try:
            fd = os.open(entry / EXPANSION_LOCK, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            stale = time.time() - _mtime(entry) > EXPANSION_GRACE_S
        except OSError:
            continue  # not ours to judge (another user's, or not a folder)
        else:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                stale = True
            except OSError:
                stale = False  # its process is alive and reading it
            finally:
                os.close(fd)
        if stale:
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(str(entry))
    return removed


def _mtime(path: Path) -> float:
    try:
        return path.lstat().st_mtime
    except OSError:
        return float("inf")
