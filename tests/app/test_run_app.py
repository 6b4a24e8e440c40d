"""scripts/run_app.sh: outside Docker the app listens on 127.0.0.1 unless told otherwise
(issue 16 F8: it listened on every interface)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[2]


def _listening_addresses(port: int) -> set[str]:
    """Local addresses of the LISTEN sockets on `port`, from the kernel's tables (hex as
    /proc/net/tcp writes them: 0100007F is 127.0.0.1, 00000000 is 0.0.0.0)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as fh:
            for line in fh.readlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                address, hex_port = local.split(":")
                if state == "0A" and int(hex_port, 16) == port:
                    found.add(address)
    return found


def _start(tmp_path: Path, **env: str) -> tuple[subprocess.Popen, int]:
    port = free_port()
    proc = subprocess.Popen(
        ["bash", str(ROOT / "scripts" / "run_app.sh")],
        env={**os.environ, "PORT": str(port), "SERVEFIT_SETUP": "0",
             "SERVEFIT_APP_HOME": str(tmp_path / "home"), **env},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2):
                return proc, port
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                _stop(proc)
                pytest.fail("run_app.sh did not start the app")
            time.sleep(0.2)


def _stop(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads Linux's socket tables")
@pytest.mark.parametrize(("env", "expected"), [
    ({}, {"0100007F"}),
    ({"ADDRESS": "0.0.0.0"}, {"00000000"}),
])
def test_run_app_listens_on_loopback_unless_told(tmp_path, env, expected):
    proc, port = _start(tmp_path, **env)
    try:
        assert _listening_addresses(port) == expected
    finally:
        _stop(proc)
