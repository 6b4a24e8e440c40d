"""Session set-up shared by every test package: one folder, per test run, for the step-time
tables aiconfigurator's builds leave (`recommender.model.steptime_aic.cache_dir`), shared by the
xdist workers and the CLI subprocesses they start, never the user's own cache folder; and
Ctrl-C deliverable to the tests that press it."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import uuid
from pathlib import Path

import pytest

CACHE_ENV = "SERVEFIT_CACHE_DIR"  # recommender.model.steptime_aic.CACHE_ENV (not imported: light)
# Set by the process that starts the run; its xdist workers inherit it and share the folder.
_RUN_ENV = "SERVEFIT_TEST_RUN"
_FOLDER = pytest.StashKey[Path]()


def pytest_configure(config: pytest.Config) -> None:
    # A suite started in the background by a non-interactive shell (`.ci/run &`, nohup)
    # inherits SIGINT ignored, which Python then leaves ignored, and so do the CLI
    # processes the tests start: the tests of what Ctrl-C does would see nothing happen.
    # The tests press Ctrl-C on purpose, so this process (and, through exec, its children)
    # takes it the default way.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    run = os.environ.get(_RUN_ENV)
    owner = run is None
    if run is None:
        run = uuid.uuid4().hex
        os.environ[_RUN_ENV] = run
    folder = Path(tempfile.gettempdir()) / f"servefit-test-cache-{run}"
    os.environ[CACHE_ENV] = str(folder)
    if owner:
        config.stash[_FOLDER] = folder


def pytest_unconfigure(config: pytest.Config) -> None:
    if _FOLDER in config.stash:
        shutil.rmtree(config.stash[_FOLDER], ignore_errors=True)
        os.environ.pop(_RUN_ENV, None)
