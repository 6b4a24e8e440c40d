"""Session set-up shared by every test package: one folder, per test run, for the step-time
tables aiconfigurator's builds leave (`recommender.steptime_aic.cache_dir`), shared by the
xdist workers and the CLI subprocesses they start, never the user's own cache folder."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from pathlib import Path

import pytest

CACHE_ENV = "SERVEFIT_CACHE_DIR"  # recommender.steptime_aic.CACHE_ENV (not imported: light)
_FOLDER = pytest.StashKey[Path]()


def pytest_configure(config: pytest.Config) -> None:
    worker = getattr(config, "workerinput", None)
    run = worker["testrunuid"] if worker else uuid.uuid4().hex
    folder = Path(tempfile.gettempdir()) / f"servefit-test-cache-{run}"
    os.environ[CACHE_ENV] = str(folder)
    config.stash[_FOLDER] = folder


def pytest_unconfigure(config: pytest.Config) -> None:
    if getattr(config, "workerinput", None) is None and _FOLDER in config.stash:
        shutil.rmtree(config.stash[_FOLDER], ignore_errors=True)
