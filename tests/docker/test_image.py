"""The project's Docker image built and run for real, as the README's `docker run` uses it.

On the test's own daemon (conftest): build the image on a stand-in Debian base, run it on the
host's network with the daemon's socket mounted, open the app in headless Chromium and profile
the bundled sample, run `profile`, `recommend` and `bench --launch docker` through `docker exec`,
and let Validate's docker path start a stub engine (no GPU, no weights) as a sibling container,
benchmark it and show predicted against measured. Nothing it started is left behind.
"""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import pandas as pd
import pytest

from tests.app import test_browser as browser
from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "data" / "samples" / "AzureLLMInferenceTrace_conv.csv"
HOME = "/var/lib/servefit"  # the image's SERVEFIT_APP_HOME

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]
page = browser.page  # headless Chromium, as the browser test drives it


@pytest.fixture(scope="module")
def app(daemon, images, tmp_path_factory):
    """The app's container as the README runs it, its own command included (host network
    here: no bridge), on a free port, with the socket mounted and its group added; yields
    (container, url, models dir)."""
    port = free_port()
    models = Path(tmp_path_factory.mktemp("models"))
    container = daemon.client.containers.run(
        images["app"], name="servefit-app-test", detach=True, network_mode="host",
        volumes={str(daemon.socket): {"bind": "/var/run/docker.sock", "mode": "rw"}},
        group_add=[str(daemon.socket.stat().st_gid)],
        environment={"SERVEFIT_HOST_MODELS": str(models), "STREAMLIT_SERVER_PORT": str(port),
                     "STREAMLIT_SERVER_ADDRESS": "127.0.0.1"})
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as answer:
                if answer.read() == b"ok":
                    break
        except OSError:
            container.reload()
            assert container.status == "running", container.logs()[-3000:].decode()
            assert time.monotonic() < deadline, "the app did not answer its health check"
            time.sleep(0.5)
    try:
        yield container, url, models
    finally:
        container.remove(force=True)


def _exec(container, *argv: str, timeout_s: float = 600) -> str:
    """`docker exec` as the image's user; the output, or a failure with it."""
    code, output = container.exec_run(list(argv), demux=False)
    text = output.decode(errors="replace")
    assert code == 0, f"{argv} exited {code}:\n{text[-3000:]}"
    return text


def test_the_image_is_the_runtime_only(daemon, images):
    image = daemon.client.images.get(images["app"])
    size_gb = image.attrs["Size"] / 1e9
    print(f"image {images['app']}: {size_gb:.2f} GB on the stand-in base")
    assert size_gb < 1.6  # the pinned wheels (~1.0 GB) on a ~0.3 GB Debian base
    config = image.attrs["Config"]
    assert config["User"] == "10001:10001"
    assert f"SERVEFIT_APP_HOME={HOME}" in config["Env"]
    found = daemon.client.containers.run(
        images["app"], ["sh", "-c", "command -v docker dockerd gcc cc || true"], remove=True,
        network_mode="host")
    assert found.decode().split() == []  # no Docker binary, no compiler


def test_the_app_profiles_the_bundled_sample_in_a_browser(app, page):
    _, url, _ = app
    page.goto(url)
    page.get_by_text("the bundled sample").first.wait_for(timeout=browser.SLOW_MS)
    browser._go(page, "Profile")
    assert browser._metric(page, "Requests") == f"{len(pd.read_csv(SAMPLE)):,}"
    page.locator('[data-testid="stPlotlyChart"]').first.wait_for(timeout=browser.SLOW_MS)


@pytest.fixture(scope="module")
def rec_json(app) -> str:
    """`recommend` run in the container for an MI300X: the pick is vLLM or SGLang (TensorRT-LLM
    is NVIDIA only, and its container's memlock ulimit cannot be set in this sandbox)."""
    container, _, _ = app
    _exec(container, "python", "-m", "app", "recommend", "data/samples/" + SAMPLE.name,
          "--gpu", "MI300X", "--model", "meta-llama/Llama-3.1-8B-Instruct",
          "--max-requests", "2000", "-o", f"{HOME}/rec.json")
    return f"{HOME}/rec.json"


def test_the_cli_profiles_and_recommends_in_the_container(app, rec_json):
    container, _, _ = app
    out = _exec(container, "python", "-m", "app", "profile", "data/samples/" + SAMPLE.name)
    assert f"{len(pd.read_csv(SAMPLE)):,}" in out
    # the CLI's workspace is in $SERVEFIT_APP_HOME, the image's writable volume
    _exec(container, "test", "-s", f"{HOME}/workspace.duckdb")
    rec = json.loads(_exec(container, "cat", rec_json))
    pick = rec["candidates"][rec["pick_index"]]  # rec.json stores each candidate once
    assert pick["config"]["engine"] in ("vllm", "sglang")


def _siblings(daemon, app_container) -> list[str]:
    return [c.name for c in daemon.client.containers.list(all=True) if c.id != app_container.id]


def test_bench_launches_a_sibling_engine_through_the_socket(daemon, images, app, rec_json):
    container, _, _ = app
    out = _exec(container, "python", "-m", "app", "bench", "--launch", "docker",
                "--config", rec_json, "--image", images["stub"],
                "--docker-gpus", "none", "--docker-network", "host", "--pull", "never",
                "--model-cache-dir", "servefit-hf-test",  # a named volume as the cache
                "--workload", "poisson", "--rate", "5", "--duration-s", "8",
                "--prompt-tokens", "100", "--output-tokens", "20")
    assert "(complete)" in out and "errors 0" in out
    assert _siblings(daemon, container) == []  # removed after the run
    assert "servefit-hf-test" in [v.name for v in daemon.client.volumes.list()]


def test_validate_launches_the_pick_in_docker_and_compares(daemon, images, app, page):
    container, url, models = app
    page.goto(url)
    page.get_by_text("the bundled sample").first.wait_for(timeout=browser.SLOW_MS)
    browser._go(page, "Recommend")
    browser._select(page, "GPU", "MI300X")
    page.get_by_role("button", name="Recommend", exact=True).click()
    page.get_by_text("Pick:").first.wait_for(timeout=browser.SLOW_MS)
    browser._go(page, "Validate")
    page.get_by_text("Launch the engine's official Docker image").click()
    for label, value in (("Image (empty: the engine's official one)", images["stub"]),
                         ("GPUs (all, none, 2, device=0,1)", "none"),
                         ("Window (s of the trace)", "10")):
        browser._fill(page, label, value)
    browser._select(page, "Network", "host")
    browser._select(page, "Pull the image", "never")
    assert page.get_by_label("Host folder of the Hugging Face cache").input_value() == \
        str(models)
    page.get_by_role("button", name="Start the benchmark").click()
    page.get_by_text("Predicted against measured").wait_for(timeout=browser.SLOW_MS)
    page.get_by_text("latency (ms)").first.wait_for(timeout=browser.SLOW_MS)  # the tables
    body = page.locator("body").inner_text()
    assert "The run failed" not in body and "Traceback" not in body
    assert " 0 failed" in body
    assert _siblings(daemon, container) == []
    container.reload()  # the image's HEALTHCHECK has run by now (every 30 s)
    assert container.attrs["State"]["Health"]["Status"] == "healthy"
