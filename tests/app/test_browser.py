"""Real-browser test: `streamlit run` on a free port, Playwright driving Debian's Chromium.

One session walks the app as a user would: upload a real trace, read its profile, get a
recommendation, download the vLLM config, look at Validate and Runs, then upload a broken file.
A screenshot of each view goes to tests/artifacts/ (or $SERVEFIT_TEST_ARTIFACTS).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tests import reference as ref
from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--disable-quic"]
ARTIFACTS = Path(os.environ.get("SERVEFIT_TEST_ARTIFACTS", ROOT / "tests" / "artifacts"))
TRACE = ref.TRACES / "BurstGPT_3.head400.csv"
SLOW_MS = 180_000

pytestmark = pytest.mark.slow


@pytest.fixture
def app_url(tmp_path):
    """The app as a user starts it, from a directory outside the checkout (its config sits
    beside the entry script, app/.streamlit/config.toml), with its store in tmp_path."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SERVEFIT_APP_HOME": str(tmp_path / "home")}
    log = (tmp_path / "streamlit.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(ROOT / "app" / "streamlit_app.py"),
         "--server.port", str(port), "--server.address", "127.0.0.1"],
        cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
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
        log.close()


@pytest.fixture
def page():
    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 1000},
                                          accept_downloads=True)
            yield context.new_page()
        finally:
            browser.close()


def _metric(page, label: str) -> str:
    box = page.locator('[data-testid="stMetric"]').filter(
        has=page.locator('[data-testid="stMetricLabel"]', has_text=re.compile(f"^{label}$")))
    return box.first.locator('[data-testid="stMetricValue"]').inner_text(timeout=SLOW_MS)


HEADINGS = {"Start": "ServeFit", "Profile": "Load profile", "Recommend": "Recommendation",
            "Validate": "Validate live", "Runs": "Runs and history"}


def _go(page, view: str) -> None:
    page.locator('[data-testid="stSidebarNav"] a', has_text=view).first.click()
    page.locator("h1", has_text=HEADINGS[view]).first.wait_for(timeout=SLOW_MS)


def _shot(page, name: str) -> None:
    page.wait_for_timeout(500)  # let Plotly finish drawing
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def _select(page, label: str, option_prefix: str) -> str:
    """Pick a selectbox option by typing into its combobox, as a user would."""
    combo = page.get_by_role("combobox", name=label)
    combo.click()
    combo.fill("")
    combo.press_sequentially(option_prefix, delay=50)
    option = page.get_by_role("option").filter(has_text=option_prefix).first
    text = option.inner_text(timeout=SLOW_MS)
    option.click()
    return text


def _outside(url: str) -> bool:
    """A request the page makes to another host than the app's (a CDN, a font server)."""
    parsed = urllib.parse.urlparse(url)
    return parsed.scheme not in ("data", "blob") and parsed.hostname not in (
        "127.0.0.1", "localhost")


@pytest.fixture
def fake_server():
    from tests.runners.fake_openai import FakeOpenAI

    server = FakeOpenAI(ttft_s=0.02, tpot_s=0.005).start()
    try:
        yield server
    finally:
        server.stop()


def _fill(page, label: str, value: str) -> None:
    """Type into a Streamlit input and commit it (Enter), as a user would. While a rerun
    redraws the form, the old and the new input can both be on the page for a moment: wait
    until the label names one input again before and after."""
    field = page.get_by_label(label)
    _one(page, field)
    field.fill(value)
    _one(page, field)
    field.press("Enter")
    page.wait_for_timeout(300)


def _one(page, locator, bound_ms: int = 30_000) -> None:
    """Wait (bounded) until `locator` matches exactly one element."""
    waited = 0
    while locator.count() != 1:
        assert waited < bound_ms, f"{locator} still matches {locator.count()} elements"
        page.wait_for_timeout(100)
        waited += 100


_PLOTS_JS = """() => [...document.querySelectorAll('.js-plotly-plot')].map(el => ({
    title: (el._fullLayout.title || {}).text || '',
    y2: el._fullLayout.yaxis2 ? el._fullLayout.yaxis2.range : null,
    y2type: el._fullLayout.yaxis2 ? el._fullLayout.yaxis2.type : null,
    data: el.data.map(t => ({name: t.name || '', x: t.x || [], y: t.y || [],
                              yaxis: t.yaxis || 'y'}))}))"""


# Metric tiles whose label or value is wider than its box (shown cut off with an ellipsis).
_CUT_JS = """() => [...document.querySelectorAll(
    '[data-testid="stMetricValue"] *, [data-testid="stMetricLabel"] *')]
    .filter(el => el.children.length === 0 && el.scrollWidth > el.clientWidth + 1)
    .map(el => el.textContent)"""


def _charts_read_right(page) -> None:
    """Issue 27 on the drawn page: the load curve's TPOT axis spans its data (within 0.1-10x,
    not 1 to 10^50) and the pick's star lies on the Pareto front as drawn."""
    page.wait_for_timeout(1000)
    plots = [{**p, "title": re.sub(r"<[^>]+>", "", p["title"])}  # titles come in <b>
             for p in page.evaluate(_PLOTS_JS)]
    (curve,) = [p for p in plots if p["title"].startswith("Predicted p95 latency against")]
    tpot = [v for t in curve["data"] if t["yaxis"] == "y2" and t["name"] != "p10-p90 interval"
            for v in t["y"] if v]
    low, high = (10 ** v for v in curve["y2"]) if curve["y2type"] == "log" else curve["y2"]
    assert low >= 0.1 * min(tpot) and high <= 10 * max(tpot), (curve["y2"], tpot)
    (front_chart,) = [p for p in plots if "Pareto" in p["title"]]
    traces = {t["name"]: t for t in front_chart["data"]}
    star, front = traces["pick"], traces["Pareto front"]
    assert _on_step_line(star["x"][0], star["y"][0], front["x"], front["y"]), (star, front)


def _on_step_line(x: float, y: float, xs: list[float], ys: list[float]) -> bool:
    """Whether (x, y) lies on the front as Plotly draws it (shape "hv": from each vertex
    across to the next one's x, then up or down to it)."""
    def near(a: float, b: float) -> bool:
        return abs(a - b) <= 1e-9 * max(abs(a), abs(b), 1e-12)

    for i, (xi, yi) in enumerate(zip(xs, ys, strict=True)):
        x_next = xs[i + 1] if i + 1 < len(xs) else xi
        if near(y, yi) and (xi <= x <= x_next or near(x, xi)):
            return True  # on the horizontal run
        if i + 1 < len(xs) and near(x, x_next) and min(yi, ys[i + 1]) <= y <= max(yi, ys[i + 1]):
            return True  # on the vertical step
    return False


def test_upload_profile_recommend_export_and_errors(app_url, page, tmp_path, fake_server):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    elsewhere: list[str] = []  # the app runs where nothing outside may be reachable
    page.on("request", lambda request: _outside(request.url) and elsewhere.append(request.url))
    page.goto(app_url)
    page.get_by_text("the bundled sample").first.wait_for(timeout=SLOW_MS)
    _shot(page, "start")
    # the upload cap of app/.streamlit/config.toml, though started from another directory
    assert "2GB per file" in page.locator('[data-testid="stFileUploader"]').first.inner_text()

    # upload a real trace through the file input
    df = pd.read_csv(TRACE)
    page.locator('input[type="file"]').first.set_input_files(str(TRACE))
    page.get_by_text(f"{TRACE.name}: {len(df):,} requests").wait_for(timeout=SLOW_MS)
    # the line on top names the upload in the same run, not the sample it replaced
    page.get_by_text(f"Current trace: {TRACE.name}").wait_for(timeout=SLOW_MS)

    _go(page, "Profile")
    assert _metric(page, "Requests") == f"{len(df):,}"
    assert f"{TRACE.name}: " in page.locator("body").inner_text()  # the upload's profile
    share = ref.multi_turn_share(df["Session ID"])
    assert _metric(page, "Multi-turn share") == f"{share:.1%}"
    page.locator('[data-testid="stPlotlyChart"]').first.wait_for(timeout=SLOW_MS)
    _shot(page, "profile")

    _go(page, "Recommend")
    page.get_by_role("button", name="Recommend", exact=True).click()
    page.get_by_text("Pick:").first.wait_for(timeout=SLOW_MS)
    assert _metric(page, "TTFT p95").endswith(" ms")
    # the decision, the price and the day plan are on the page, as a user reads them
    page.get_by_text("Over the trace's span").first.wait_for(timeout=SLOW_MS)
    body = page.locator("body").inner_text()
    assert "Decision" in body and "ranked by" in body
    assert "per GPU-hour" in body and "per million output tokens" in body
    assert "Over the trace's span" in body and "GPU-hours against" in body
    chosen = _select(page, "Configuration to export", "vllm: ")
    label = chosen.removeprefix("vllm: ").removesuffix(" (the pick)")
    with page.expect_download(timeout=SLOW_MS) as download:
        page.get_by_role("button", name="vllm-config.yaml").click()
    config = yaml.safe_load(Path(download.value.path()).read_text())
    tp = int(re.search(r"\btp(\d+)", label).group(1))
    assert config["tensor-parallel-size"] == tp
    seqs = re.search(r"\bseqs(\d+)", label)
    if seqs:
        assert config["max-num-seqs"] == int(seqs.group(1))
    _shot(page, "recommend")

    _charts_read_right(page)
    assert TRACE.name in page.locator("body").inner_text()  # the uploaded trace, not the sample

    _go(page, "Validate")
    page.get_by_text("Run it from a shell instead").click()
    page.locator("code", has_text="python -m app bench").first.wait_for(timeout=SLOW_MS)
    # endpoint mode against a server that answers the OpenAI API (no model behind it)
    _fill(page, "Base URL", fake_server.url)
    _fill(page, "Window (s of the trace)", "10")
    page.get_by_role("button", name="Start the benchmark").click()
    page.get_by_text("Predicted against measured").wait_for(timeout=SLOW_MS)
    # units on the measured table (drawn a moment after the heading above it)
    page.get_by_text("latency (ms)").first.wait_for(timeout=SLOW_MS)
    body = page.locator("body").inner_text()
    assert f"trace: {TRACE.name}" in body and "The run failed" not in body
    assert fake_server.bodies  # the requests reached it
    _shot(page, "validate")

    _go(page, "Runs")
    page.get_by_text("Profiled traces").wait_for(timeout=SLOW_MS)
    _shot(page, "runs")

    # Each view again at 1024 px: the screenshots for the notes, and no tile cut off
    page.set_viewport_size({"width": 1024, "height": 900})
    for view in ("Profile", "Recommend", "Validate", "Runs"):
        _go(page, view)
        page.wait_for_timeout(1500)
        assert not page.evaluate(_CUT_JS), (view, page.evaluate(_CUT_JS))
        _shot(page, f"{view.lower()}_1024")
    page.set_viewport_size({"width": 1400, "height": 1000})

    _go(page, "Start")
    broken = tmp_path / "broken.csv"
    broken.write_text("a,b\n1,2\n")
    page.locator('input[type="file"]').first.set_input_files(str(broken))
    alert = page.locator('[data-testid="stAlert"]').filter(has_text="unknown columns")
    alert.first.wait_for(timeout=SLOW_MS)
    assert "broken.csv" in alert.first.inner_text()
    assert "Traceback" not in page.content()
    _shot(page, "start_error")
    assert not elsewhere, elsewhere  # e.g. a Material Symbols favicon from fonts.gstatic.com


def _successes(metrics_url: str) -> float:
    """vLLM's own count of finished requests (its Prometheus counter, all finish reasons)."""
    with urllib.request.urlopen(metrics_url, timeout=10) as response:
        text = response.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("vllm:request_success_total"))


@pytest.mark.timeout(900)
def test_validate_against_the_real_vllm_server(app_url, page, vllm_url):
    """Validate's endpoint mode on vLLM's CPU build (tiny model): the run the page reports is
    the one the server counted."""
    from runners.load.prompts import server_root

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    metrics_url = server_root(vllm_url) + "/metrics"
    before = _successes(metrics_url)
    page.goto(app_url)
    _go(page, "Recommend")
    page.get_by_role("button", name="Recommend", exact=True).click()
    page.get_by_text("Pick:").first.wait_for(timeout=SLOW_MS)
    _go(page, "Validate")
    for label, value in (("Base URL", vllm_url),
                         ("Served model name (empty: the server's first)", "tiny")):
        page.get_by_label(label).fill(value)
        page.get_by_label(label).press("Enter")
    _select(page, "Engine serving it (for its /metrics names)", "vllm")
    _select(page, "Workload", "Concurrency sweep")
    for label, value in (("Prompt tokens", 32), ("Output tokens", 8),
                         ("Highest concurrency", 2), ("Requests per level", 4)):
        page.get_by_label(label).fill(str(value))
        page.get_by_label(label).press("Enter")
    page.get_by_role("button", name="Start the benchmark").click()
    page.get_by_text(re.compile(r"^Run sweep-\w+: complete$")).wait_for(timeout=300_000)
    line = page.get_by_text(re.compile(r"requests sent, .* completed")).inner_text()
    sent, completed = (int(x.replace(",", "")) for x in
                       re.match(r"([\d,]+) requests sent, ([\d,]+) completed", line).groups())
    assert completed == sent > 0
    assert _successes(metrics_url) - before == completed
    page.get_by_text("Predicted against measured").wait_for(timeout=SLOW_MS)
    _shot(page, "validate_vllm")
    # Another trace: the sample's pick is not shown as this trace's anywhere (issue 27)
    _go(page, "Start")
    page.locator('input[type="file"]').first.set_input_files(str(TRACE))
    page.get_by_text(f"Current trace: {TRACE.name}").wait_for(timeout=SLOW_MS)
    _go(page, "Recommend")
    page.wait_for_timeout(1500)
    assert page.get_by_text("Pick:").count() == 0
    _go(page, "Validate")
    page.get_by_text("Get a recommendation first").wait_for(timeout=SLOW_MS)


MARKDOWN_NAME = "**x** [a](javascript:alert(1)) ![i](x.png) :red[r] :smile: $y$ <b>z.csv"
JAPANESE_NAME = ("東京大阪名古屋札幌福" * 9) + ".csv"  # 94 characters, 274 bytes


def _upload_named(page, name: str, data: bytes) -> None:
    page.locator('input[type="file"]').first.set_input_files(
        {"name": name, "mimeType": "text/csv", "buffer": data})


def test_hostile_names_and_a_second_session(app_url, page, tmp_path):
    """Issue 16 F5, F7, F8 in a real browser: a name over 255 bytes and a Markdown name are
    stored and shown as typed (no bold, link or image), and a second browser session does not
    see the first one's uploads."""
    data = TRACE.read_bytes()
    n = len(pd.read_csv(TRACE))
    page.goto(app_url)
    page.get_by_text("the bundled sample").first.wait_for(timeout=SLOW_MS)
    _upload_named(page, JAPANESE_NAME, data + b"\n")  # other content: a second upload
    page.get_by_text(f"{JAPANESE_NAME}: {n:,} requests").wait_for(timeout=SLOW_MS)

    _upload_named(page, MARKDOWN_NAME, data)
    page.get_by_text(f"{MARKDOWN_NAME}: {n:,} requests").wait_for(timeout=SLOW_MS)
    _go(page, "Profile")
    caption = page.locator('[data-testid="stCaptionContainer"]').first
    caption.wait_for(timeout=SLOW_MS)
    _go(page, "Start")
    current = page.locator('[data-testid="stAlert"]').filter(has_text="Current trace:").first
    current.wait_for(timeout=SLOW_MS)
    assert current.inner_text().strip() == f"Current trace: {MARKDOWN_NAME}"
    assert current.locator("strong, a, img").count() == 0
    _go(page, "Profile")
    caption.wait_for(timeout=SLOW_MS)
    assert caption.inner_text().startswith(f"{MARKDOWN_NAME}: ")
    assert caption.locator("strong, a, img").count() == 0
    assert "This app has encountered an error" not in page.content()

    other = page.context.browser.new_context().new_page()
    other.goto(app_url)
    other.get_by_text("the bundled sample").first.wait_for(timeout=SLOW_MS)
    _go(other, "Runs")
    other.get_by_text("No trace profiled yet.").wait_for(timeout=SLOW_MS)
    assert MARKDOWN_NAME not in other.content() and JAPANESE_NAME not in other.content()
    _go(page, "Runs")
    page.get_by_text("Profiled traces").wait_for(timeout=SLOW_MS)
    page.locator('[data-testid="stDataFrame"]').first.wait_for(timeout=SLOW_MS)
