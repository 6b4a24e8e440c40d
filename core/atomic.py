"""Writes that appear whole or not at all: a temporary sibling, then one rename.

A reader (or a process killed half-way) never sees a partly written file under the target's
name; a failed write leaves the old file, if any, untouched and no temporary behind.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_path(target: str | Path) -> Iterator[Path]:
    """A temporary path next to `target` to write to; renamed onto `target` when the block
    ends normally, removed when it raises. The parent folder is created if missing."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    # Unique per call, not only per process: threads of one process (Streamlit sessions) may
    # write the same target at once, and each must rename its own whole file.
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{uuid.uuid4().hex[:12]}.tmp")
    try:
        yield tmp
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def write_atomic(target: str | Path, data: str | bytes) -> Path:
    """Write `data` (text as UTF-8) to `target` atomically; return the target path."""
    payload = data.encode() if isinstance(data, str) else data
    with atomic_path(target) as tmp:
        tmp.write_bytes(payload)
    return Path(target)
