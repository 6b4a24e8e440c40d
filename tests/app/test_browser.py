"""Real-browser test: `streamlit run` on a free port, Playwright driving Debian's Chromium."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pandas as pd
import pytest

from tests import reference as ref

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--disable-quic"]
ARTIFACTS = Path(os.environ.get("SERVEFIT_TEST_ARTIFACTS", ROOT / "tests" / "artifacts"))

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def app_url(tmp_path):
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(ROOT / "app" / "streamlit_app.py"),
         "--server.port", str(port), "--server.address", "127.0.0.1",
         "--server.headless", "true", "--browser.gatherUsageStats", "false"],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("streamlit did not start") from None
                time.sleep(0.3)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


@pytest.fixture
def page():
    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser.new_page(viewport={"width": 1400, "height": 1000})
        finally:
            browser.close()


def _metric(page, label: str) -> str:
    box = page.locator('[data-testid="stMetric"]').filter(has_text=label).first
    return box.locator('[data-testid="stMetricValue"]').inner_text(timeout=60_000)


def test_sample_then_upload_then_broken_file(app_url, page, tmp_path):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.goto(app_url)
    sample = pd.read_csv(ref.SAMPLE)
    assert _metric(page, "Requests") == f"{len(sample):,}"
    page.screenshot(path=str(ARTIFACTS / "profile_sample.png"), full_page=True)

    trace = ref.TRACES / "BurstGPT_3.head400.csv"
    page.locator('input[type="file"]').set_input_files(str(trace))
    df = pd.read_csv(trace)
    share = ref.multi_turn_share(df["Session ID"])
    page.get_by_text(f"{share:.1%}").first.wait_for(timeout=60_000)
    assert _metric(page, "Requests") == f"{len(df):,}"
    page.screenshot(path=str(ARTIFACTS / "profile_upload.png"), full_page=True)

    broken = tmp_path / "broken.csv"
    broken.write_text("a,b\n1,2\n")
    page.locator('input[type="file"]').set_input_files(str(broken))
    alert = page.locator('[data-testid="stAlert"]').filter(has_text="unknown columns")
    alert.first.wait_for(timeout=60_000)
    assert "--map" in alert.first.inner_text()
    assert "Traceback" not in page.content()
