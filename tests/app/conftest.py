"""Fixtures for the app tests: a fresh app home and empty Streamlit caches for the Streamlit
AppTests, `app_on` (a view opened with given session state), and `cli`, the command line run
inside the test process."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
import streamlit as st

ENTRY = Path(__file__).resolve().parents[2] / "app" / "streamlit_app.py"
MAIN = ENTRY.parent / "__main__.py"


def app_on(page: str, state: Mapping[str, object], timeout_s: float = 300):
    """An AppTest of the app with `state` in its session (a chosen trace, a recommendation),
    run once and switched to `page` (e.g. "views/recommend.py")."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ENTRY), default_timeout=timeout_s)
    for key, value in state.items():
        at.session_state[key] = value
    at.run()
    return at.switch_page(page).run()


@pytest.fixture
def app_home(tmp_path, monkeypatch):
    """The app's store under tmp_path; caches cleared so nothing leaks between tests."""
    home = tmp_path / "app-home"
    monkeypatch.setenv("SERVEFIT_APP_HOME", str(home))
    monkeypatch.chdir(tmp_path)
    st.cache_data.clear()
    st.cache_resource.clear()
    yield home
    st.cache_data.clear()
    st.cache_resource.clear()


@dataclass(frozen=True)
class CliResult:
    """What a `python -m app` run leaves a user: the exit status and the two streams."""

    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def cli(monkeypatch, capfd) -> Callable[..., CliResult]:
    """`python -m app ARGS` run by `app.cli.main.main` inside this process, from `cwd`.

    For tests of what a command does (its output, files, exit codes); a few tests per command
    keep a real subprocess for start-up and the process's own exit. Each call starts from what
    a fresh process would see: the given cwd, no SERVEFIT_WORKSPACE, sys.argv as
    `python -m app ARGS` sets it (bench stores it), and the streams read at the file-descriptor
    level (capfd), so output from below Python's sys.stdout is not missed. monkeypatch undoes
    the cwd, environment and argv after the test.
    """
    from app.cli.main import main

    monkeypatch.delenv("SERVEFIT_WORKSPACE", raising=False)

    def run(*args: str, cwd: Path) -> CliResult:
        monkeypatch.chdir(cwd)
        monkeypatch.setattr(sys, "argv", [str(MAIN), *args])
        capfd.readouterr()  # drop whatever was printed before this command
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse's --help (0) and usage errors (2), as a process
            code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
        out = capfd.readouterr()
        return CliResult(code, out.out, out.err)

    return run


# The real vLLM CPU server (slow tests only): the runners' fixtures, shared here so the browser
# test can validate against it.
from tests.runners.conftest import tiny_model_dir, vllm_url  # noqa: E402, F401
