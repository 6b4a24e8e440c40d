"""Tests for recommender/sim/kernel/freshness.py: numba's cache files beside a folder of
modules are removed when any module changed since they were written, kept otherwise, and a
cache folder that cannot be written is left to numba. Numba keys a cached function on its own
file only, so a change to another module of the kernel must clear them all."""

from __future__ import annotations

import hashlib
from pathlib import Path

from recommender.sim.kernel.freshness import KERNEL_DIR, STAMP, prune_stale


def _kernel(tmp_path: Path) -> tuple[Path, list[Path]]:
    """Two modules and the cache files numba leaves for them (an index and its data)."""
    (tmp_path / "loop.py").write_text("def run():\n    return step()\n")
    (tmp_path / "schedule.py").write_text("def step():\n    return 1\n")
    cache = tmp_path / "__pycache__"
    cache.mkdir()
    files = [cache / "loop.run-10.py311.nbi", cache / "loop.run-10.py311.1.nbc",
             cache / "schedule.step-1.py311.nbi"]
    for f in files:
        f.write_bytes(b"compiled")
    return tmp_path, files


def test_the_first_look_records_the_sources_and_clears_what_it_cannot_vouch_for(tmp_path):
    folder, files = _kernel(tmp_path)
    assert prune_stale(folder) is True
    assert not any(f.exists() for f in files)
    expected = hashlib.sha256()
    for name in ("loop.py", "schedule.py"):
        expected.update(name.encode() + b"\0" + (folder / name).read_bytes() + b"\0")
    assert (folder / "__pycache__" / STAMP).read_text() == expected.hexdigest()


def test_unchanged_sources_keep_the_cache(tmp_path):
    folder, _ = _kernel(tmp_path)
    prune_stale(folder)
    fresh = folder / "__pycache__" / "loop.run-10.py311.nbi"
    fresh.write_bytes(b"compiled again")
    assert prune_stale(folder) is False
    assert fresh.read_bytes() == b"compiled again"


def test_a_change_to_a_callee_clears_the_callers_cache_too(tmp_path):
    # schedule.py changes, loop.py does not: numba would load loop.run's old code.
    folder, _ = _kernel(tmp_path)
    prune_stale(folder)
    caller = folder / "__pycache__" / "loop.run-10.py311.nbi"
    caller.write_bytes(b"compiled with step() == 1")
    (folder / "schedule.py").write_text("def step():\n    return 2\n")
    assert prune_stale(folder) is True
    assert not caller.exists()
    assert prune_stale(folder) is False


def test_a_cache_folder_that_cannot_be_written_is_left_to_numba(tmp_path):
    # __pycache__ a file, not a folder: nothing to remove, no stamp can be written there.
    (tmp_path / "loop.py").write_text("def run():\n    return 1\n")
    (tmp_path / "__pycache__").write_bytes(b"not a folder")
    assert prune_stale(tmp_path) is False
    assert (tmp_path / "__pycache__").read_bytes() == b"not a folder"


def test_the_kernel_folder_is_the_one_with_the_loop():
    assert (KERNEL_DIR / "loop.py").is_file() and (KERNEL_DIR / "freshness.py").is_file()
