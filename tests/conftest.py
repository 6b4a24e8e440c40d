"""Session set-up shared by every test package: the folder for the step-time tables
aiconfigurator's builds leave (`recommender.model.steptime_aic.cache_dir`), shared by the xdist
workers and the CLI subprocesses they start, never the user's own cache folder; Ctrl-C
deliverable to the tests that press it; and the cyclic GC of a worker kept off its collected
modules (`pytest_collection_finish`).

The tables folder is the checkout's `.pytest_cache/servefit-aic-tables/<digest>`, kept between
runs: a table is a pure function of its cell key, aiconfigurator's release and the grids (all in
its file name, `steptime_aic._table_path`), and the digest is of the modules that build and key
tables, so a change to how a table is built starts an empty folder (the older ones are removed).
A fresh checkout's first run builds every table the suite asks for (~115; 12-17 s of the fast
suite's time on two cores); later runs read them. The tests of the cache itself set their own
folder."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
from pathlib import Path

import pytest

CACHE_ENV = "SERVEFIT_CACHE_DIR"  # recommender.model.steptime_aic.CACHE_ENV (not imported: light)
ROOT = Path(__file__).resolve().parents[1]
TABLES_ROOT = ROOT / ".pytest_cache" / "servefit-aic-tables"
# What a built table depends on besides its file name: the code that builds and keys it.
TABLE_CODE = [ROOT / "recommender" / "model" / name
              for name in ("aic_tables.py", "aic_cells.py", "steptime_aic.py")]


def tables_folder() -> Path:
    """The tables folder of the current table-building code (`TABLE_CODE`)."""
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in TABLE_CODE)).hexdigest()[:16]
    return TABLES_ROOT / digest


def pytest_configure(config: pytest.Config) -> None:
    # A suite started in the background by a non-interactive shell (`.ci/run &`, nohup)
    # inherits SIGINT ignored, which Python then leaves ignored, and so do the CLI
    # processes the tests start: the tests of what Ctrl-C does would see nothing happen.
    # The tests press Ctrl-C on purpose, so this process (and, through exec, its children)
    # takes it the default way.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if CACHE_ENV in os.environ and os.environ.get("PYTEST_XDIST_WORKER"):
        return  # an xdist worker: the controller chose the folder
    folder = tables_folder()
    if TABLES_ROOT.is_dir():  # tables of older table-building code: never read again
        for old in TABLES_ROOT.iterdir():
            if old != folder:
                shutil.rmtree(old, ignore_errors=True)
    os.environ[CACHE_ENV] = str(folder)


def pytest_collection_finish(session: pytest.Session) -> None:
    # A worker holds every collected module and item (and the libraries they import) for the
    # whole run, and Python's cyclic GC walked that heap again and again: 11 s of the fast
    # suite's CPU over the three workers (gc.callbacks, 5,600 young collections in one). Frozen
    # after collection, it is no longer scanned; with a young generation of 20,000 objects
    # instead of 700, collections are rarer: 5 s. Objects a test leaves are still collected.
    import gc

    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 20, 20)


def pytest_unconfigure(config: pytest.Config) -> None:
    # Back in the GC's care before the interpreter's last collection, which skips a frozen
    # heap: DuckDB's bindings (nanobind) reported every object it then left as a leak.
    import gc

    gc.unfreeze()
