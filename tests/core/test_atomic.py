"""`core.atomic`: a write appears whole or not at all, and never leaves a temporary behind."""

from __future__ import annotations

import threading

import pytest

from core.atomic import atomic_path, write_atomic


def _siblings(path):
    return sorted(p.name for p in path.parent.iterdir())


def test_success_replaces_the_old_content(tmp_path):
    target = tmp_path / "out.json"
    target.write_text("old")
    assert write_atomic(target, "new ✓") == target
    assert target.read_bytes() == "new ✓".encode()
    write_atomic(str(target), b"\x00bytes")
    assert target.read_bytes() == b"\x00bytes"
    assert _siblings(target) == ["out.json"]


def test_a_write_that_raises_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "out.json"
    target.write_text("old")
    with pytest.raises(RuntimeError, match="half-way"), atomic_path(target) as tmp:
        tmp.write_text("half a fi")
        assert target.read_text() == "old"  # nothing shows under the target while writing
        raise RuntimeError("killed half-way")
    assert target.read_text() == "old"
    assert _siblings(target) == ["out.json"]


def test_a_failed_first_write_leaves_nothing(tmp_path):
    target = tmp_path / "new.parquet"
    with pytest.raises(OSError), atomic_path(target) as tmp:
        tmp.write_text("x")
        raise OSError("disk full")
    assert list(tmp_path.iterdir()) == []


def test_the_parent_folder_is_created(tmp_path):
    target = tmp_path / "a" / "b" / "c.txt"
    write_atomic(target, "hi")
    assert target.read_text() == "hi"


def test_a_block_that_writes_nothing_fails_and_leaves_nothing(tmp_path):
    target = tmp_path / "never.txt"
    with pytest.raises(FileNotFoundError), atomic_path(target):
        pass  # the temporary was never created: there is nothing to rename
    assert list(tmp_path.iterdir()) == []


def test_threads_writing_one_target_each_rename_a_whole_file(tmp_path):
    target = tmp_path / "shared.txt"
    payloads = [str(i) * 200_000 for i in range(8)]
    errors: list[BaseException] = []

    def write(text: str) -> None:
        try:
            write_atomic(target, text)
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(p,)) for p in payloads]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert target.read_text() in payloads
    assert _siblings(target) == ["shared.txt"]
