"""Numba's on-disk cache of the kernel kept in step with the kernel's sources (`ensure_fresh`).

Numba keys a cached function on its own file's modification time and size only. A function
it calls, or a constant it reads, in another kernel module is compiled into it; when that
module changes and the function's own file does not, numba loads the old machine code: a
checkout updated in place (`git pull`) would simulate with the previous kernel, silently. So
before the first kernel call of a process, a digest of every kernel module's source is
compared with the one recorded beside the cache files; when they differ, the kernel's cache
files are removed and numba compiles afresh (once, ~15 s). A fresh clone or image has no
cache to doubt. Numba's other cache locations (a read-only source tree, NUMBA_CACHE_DIR) are
not looked after.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

KERNEL_DIR = Path(__file__).resolve().parent
STAMP = "kernel-sources.sha256"
CACHE_PATTERNS = ("*.nbi", "*.nbc")


def sources_digest(folder: Path) -> str:
    """sha256 over the folder's modules, by name then content."""
    digest = hashlib.sha256()
    for path in sorted(folder.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def prune_stale(folder: Path) -> bool:
    """Remove the numba cache files in `folder`'s __pycache__ unless they were written for
    the folder's sources as they are now, and record the sources' digest. True when files
    were removed. A cache folder that cannot be read or written is left to numba."""
    from core.atomic import write_atomic

    cache = folder / "__pycache__"
    digest = sources_digest(folder)
    stamp = cache / STAMP
    try:
        if stamp.read_text() == digest:
            return False
    except OSError:
        pass
    stale = [f for pattern in CACHE_PATTERNS for f in cache.glob(pattern)]
    try:
        for f in stale:
            f.unlink(missing_ok=True)
        cache.mkdir(exist_ok=True)
        write_atomic(stamp, digest.encode())
    except OSError:
        return False
    return bool(stale)


@functools.cache
def ensure_fresh() -> None:
    """`prune_stale` on the kernel's folder, once per process, before its first kernel call."""
    prune_stale(KERNEL_DIR)
