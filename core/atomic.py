"""Writes that appear whole or not at all: a temporary sibling, then one rename.

A reader (or a process killed half-way) never sees a partly written file under the target's
name; a failed write leaves the old file, if any, untouched and no temporary behind.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_path(target: str | Path) -> Iterator[Path]:
    """A temporary path next to `target` to write to; renamed onto `target` when the block
    ends normally, removed when it raises. The parent folder is created if missing."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
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
