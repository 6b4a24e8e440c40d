"""Writing a rendered bundle into its folder, all or nothing: bundle files already there are
refused unless replaced, every file is written and synced in a staging folder next to the
target and then moved in; replaced files are restored if a move fails.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from engines.errors import ExportError


def refuse_existing(out: Path, names: list[str]) -> None:
    """Raises ExportError when any of the bundle files `names` is already in `out`."""
    present = [name for name in names if (out / name).exists() or (out / name).is_symlink()]
    if present:
        more = f" and {len(present) - 1} more bundle files" if len(present) > 1 else ""
        raise ExportError(f"{out / present[0]}{more} already exist; choose an empty folder, "
                          "or pass --force to replace them")


def _write_file(path: Path, text: str) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    if path.suffix == ".sh":
        path.chmod(0o755)


def install(files: dict[str, str], out: Path) -> list[Path]:
    """Write `files` into a staging folder next to `out`, then move them in, all or nothing."""
    if out.exists() and not out.is_dir():
        raise ExportError(f"{out}: exists and is not a folder")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.export-"))
    except OSError as exc:
        raise ExportError(f"{out}: cannot write: {exc.strerror or exc}") from None
    try:
        staging.chmod(0o755)  # mkdtemp makes it private; the bundle is an ordinary folder
        for name, text in files.items():
            _write_file(staging / name, text)
        if not out.exists():
            os.rename(staging, out)  # the whole bundle appears at once
        else:
            _move_in(staging, out, list(files))
    except OSError as exc:
        raise ExportError(f"{out}: cannot write: {exc.strerror or exc}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return [out / name for name in files]


def _move_in(staging: Path, out: Path, names: list[str]) -> None:
    """Replace bundle files in an existing folder; restore the old ones if a move fails."""
    backup = staging / ".previous"
    backup.mkdir()
    saved: list[str] = []
    placed: list[str] = []
    try:
        for name in names:
            target = out / name
            if target.exists() or target.is_symlink():
                os.replace(target, backup / name)
                saved.append(name)
            os.replace(staging / name, target)
            placed.append(name)
    except BaseException:
        for name in placed:
            (out / name).unlink(missing_ok=True)
        for name in saved:
            os.replace(backup / name, out / name)
        raise
