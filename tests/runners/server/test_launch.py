"""The launcher against fake engines (small Python scripts written to tmp): readiness, the
failure message, and teardown that leaves no process group behind in every exit path.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest
from pydantic import ValidationError

from core.errors import RunnerError
from engines.config import EngineConfig
from engines.containers import docker_argv, docker_run_argv
from engines.registry import get_engine
from engines.rendering import openai_readiness
from runners.load.client import send
from runners.load.schemas import RequestSpec
from runners.server.docker_container import run_kwargs
from runners.server.docker_image import pull_summary
from runners.server.launch import launched
from runners.server.launch_spec import Endpoint, LaunchError, LaunchSpec
from runners.server.ports import free_port
from runners.server.process_group import group_alive
from runners.server.server_command import container_of, local_prerequisite

pytestmark = pytest.mark.timeout(60)

FAKE_ENGINE = r'''
import json, os, signal, subprocess, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

mode = os.environ.get("FAKE_MODE", "serve")
port = int(sys.argv[sys.argv.index("--port") + 1])
print("fake engine starting", mode, port, flush=True)
for i in range(30):
    print(f"log line {i}", flush=True)
if mode == "exit":
    print("FATAL: fake engine cannot start", flush=True)
    sys.exit(3)
if mode == "never":
    while True:
        time.sleep(1)
if mode == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if mode == "child":
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with open(os.environ["FAKE_CHILD_PID"], "w") as f:
        f.write(str(child.pid))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def log_message(self, *args):
        pass

    def do_GET(self):
        ok = self.path == "/health"
        self.send_response(200 if ok else 404)
        self.end_headers()

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path != "/v1/completions" or body.get("model") != "fake":
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        chunks = [{"choices": [{"index": 0, "text": "x"}]},
                  {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1}}]
        for c in chunks:
            self.wfile.write(b"data: " + json.dumps(c).encode() + b"\n\n")
        self.wfile.write(b"data: [DONE]\n\n")


ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
'''

FAKE_VLLM = r'''#!{python}
import os, sys
os.execv(sys.executable, [sys.executable, {engine!r}, *sys.argv[1:]])
'''

PROBE = openai_readiness("fake")


@pytest.fixture
def engine(tmp_path: Path) -> Path:
    path = tmp_path / "fake_engine.py"
    path.write_text(FAKE_ENGINE)
    return path


def _spec(tmp_path: Path, engine: Path, mode: str = "serve", **kw) -> LaunchSpec:
    fields = {
        "mode": "local",
        "argv": [sys.executable, str(engine), "--port", "{port}"],
        "env": {"FAKE_MODE": mode, "FAKE_CHILD_PID": str(tmp_path / "child.pid")},
        "probe": PROBE,
        "log_dir": tmp_path / "logs",
        "ready_timeout_s": 20.0,
        "poll_interval_s": 0.05,
        "stop_timeout_s": 5.0,
    }
    fields.update(kw)
    return LaunchSpec(**fields)


def _gone(pgid: int) -> bool:
    """The brief's check: os.killpg(pgid, 0) raises ProcessLookupError."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def _pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _one_request(url: str) -> bool:
    async def go() -> bool:
        async with aiohttp.ClientSession() as session:
            r = await send(session, url, RequestSpec(model="fake", prompt="hi", max_tokens=1),
                           timeout_s=5)
        return r.success

    return asyncio.run(go())


def test_free_port_is_bindable():
    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_local_ready_serves_and_tears_down(tmp_path, engine):
    started = time.monotonic()
    with launched(_spec(tmp_path, engine)) as ep:
        waited_s = time.monotonic() - started
        assert isinstance(ep, Endpoint) and ep.mode == "local"
        assert ep.pid is not None and group_alive(ep.pid)
        assert ep.url.startswith("http://127.0.0.1:") and ep.served_model_name == "fake"
        assert "{port}" not in " ".join(ep.command)
        assert ep.command[-1] == ep.url.rsplit(":", 1)[1]  # the free port went into argv
        assert ep.log_path is not None and "fake engine starting" in ep.log_path.read_text()
        assert 0 < ep.ready_s <= waited_s  # seconds from launch to ready (no budget)
        assert _one_request(ep.url)
    assert _gone(ep.pid)


def test_exception_in_body_tears_down_and_propagates(tmp_path, engine):
    with pytest.raises(RuntimeError, match="boom"), launched(_spec(tmp_path, engine)) as ep:
        pgid = ep.pid
        raise RuntimeError("boom")
    assert _gone(pgid)


def test_keyboard_interrupt_tears_down(tmp_path, engine):
    with pytest.raises(KeyboardInterrupt), launched(_spec(tmp_path, engine)) as ep:
        pgid = ep.pid
        os.kill(os.getpid(), signal.SIGINT)  # a real Ctrl-C, delivered to this process
        time.sleep(5)
    assert _gone(pgid)


def test_engine_that_exits_fails_with_log_tail_and_command(tmp_path, engine):
    spec = _spec(tmp_path, engine, mode="exit")
    with pytest.raises(LaunchError) as info, launched(spec):
        pytest.fail("must not get here")
    err = info.value
    msg = str(err)
    assert isinstance(err, RunnerError)
    assert "exited with code 3" in msg
    assert "FATAL: fake engine cannot start" in msg and "log line 29" in msg
    assert "log line 9\n" not in msg  # only the last ~20 lines
    assert str(engine) in err.command and "FAKE_MODE=exit" in err.command
    assert err.command in msg
    assert (tmp_path / "logs").is_dir()


@pytest.fixture
def popen_pids(monkeypatch) -> list[int]:
    """Pids of every process the launcher starts (to check their groups afterwards)."""
    pids: list[int] = []
    real_popen = subprocess.Popen

    def spy(*args, **kwargs):
        proc = real_popen(*args, **kwargs)
        pids.append(proc.pid)
        return proc

    monkeypatch.setattr(subprocess, "Popen", spy)
    return pids


def test_engine_never_healthy_times_out_and_is_killed(tmp_path, engine, popen_pids):
    spec = _spec(tmp_path, engine, mode="never", ready_timeout_s=1.0)
    with pytest.raises(LaunchError, match=r"not ready after 1 s") as info, launched(spec):
        pytest.fail("must not get here")
    assert "log line 29" in str(info.value) and "--port" in info.value.command
    assert len(popen_pids) == 1 and _gone(popen_pids[0])


def test_engine_that_exits_leaves_no_group(tmp_path, engine, popen_pids):
    with pytest.raises(LaunchError), launched(_spec(tmp_path, engine, "exit")):
        pass
    assert len(popen_pids) == 1 and _gone(popen_pids[0])


def test_child_process_is_killed_with_the_group(tmp_path, engine):
    with launched(_spec(tmp_path, engine, mode="child")) as ep:
        child = int((tmp_path / "child.pid").read_text())
        assert os.getpgid(child) == ep.pid
    assert _gone(ep.pid) and _pid_gone(child)


def test_crashed_engine_mid_run_leaves_no_orphan(tmp_path, engine):
    with launched(_spec(tmp_path, engine, mode="child")) as ep:
        child = int((tmp_path / "child.pid").read_text())
        os.kill(ep.pid, signal.SIGKILL)  # the server dies; its child lives on in the group
        time.sleep(0.2)
        assert not _pid_gone(child)
    assert _gone(ep.pid) and _pid_gone(child)


def test_engine_ignoring_sigterm_gets_sigkill(tmp_path, engine):
    spec = _spec(tmp_path, engine, mode="stubborn", stop_timeout_s=0.5)
    with launched(spec) as ep:
        pass
    assert _gone(ep.pid)  # it ignores SIGTERM: only the SIGKILL after 0.5 s ends it


def test_plugin_argv_in_a_venv(tmp_path, engine):
    """No argv: the plug-in's `vllm serve …` runs, with `vllm` taken from the venv's bin/."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    fake_vllm = venv / "bin" / "vllm"
    fake_vllm.write_text(FAKE_VLLM.format(python=sys.executable, engine=str(engine)))
    fake_vllm.chmod(0o755)
    config = EngineConfig(engine="vllm", model="m", max_num_seqs=4,
                          extra_args={"served-model-name": "fake"})
    spec = _spec(tmp_path, engine, argv=None, venv=venv, config=config, probe=None)
    said: list[str] = []
    with launched(spec, said.append) as ep:
        # what a live view shows while it starts: the program, then the engine's health
        assert said[0] == f"starting {fake_vllm}"
        assert said[-1] == f"waiting for the engine at {ep.url} (healthy)"
        port = int(ep.url.rsplit(":", 1)[1])
        expected = get_engine("vllm").server_argv(
            config.model_copy(update={"host": "127.0.0.1", "port": port}))
        assert ep.command == [str(fake_vllm), *expected[1:]]
        assert ep.served_model_name == "fake"
    assert _gone(ep.pid)


def test_docker_container_is_the_plugins_on_the_chosen_network(tmp_path):
    config = EngineConfig(engine="vllm", model="org/m", port=8000)
    bridge = LaunchSpec(mode="docker", config=config, log_dir=tmp_path, model_cache_dir="/hf",
                        gpus=[0, 1])
    container = container_of(bridge, 41234, "servefit-x")
    plugin = get_engine("vllm")
    assert docker_run_argv(container) == docker_argv(
        plugin, config, image=plugin.docker_image(), host_port=41234, model_cache_dir="/hf",
        gpus=[0, 1], container_name="servefit-x")
    host = container_of(bridge.model_copy(update={"docker_network": "host"}), 41234, "n")
    argv = docker_run_argv(host)
    assert argv[argv.index("--network"):argv.index("--network") + 2] == ["--network", "host"]
    assert "-p" not in argv
    assert argv[argv.index("--port") + 1] == "41234"  # the engine itself listens there


def test_docker_sdk_arguments_follow_the_container(tmp_path):
    from docker.types import DeviceRequest

    config = EngineConfig(engine="sglang", model="org/m", port=30000)
    spec = LaunchSpec(mode="docker", config=config, log_dir=tmp_path, model_cache_dir="/hf",
                      gpus=2)
    kwargs = run_kwargs(container_of(spec, 5000, "c1"), {"HF_TOKEN": "t", "OTHER": "x"})
    assert kwargs["ports"] == {"30000/tcp": 5000} and "network_mode" not in kwargs
    assert kwargs["device_requests"] == [DeviceRequest(count=2, capabilities=[["gpu"]])]
    assert kwargs["volumes"] == {"/hf": {"bind": "/root/.cache/huggingface", "mode": "rw"}}
    assert kwargs["environment"] == {"HF_TOKEN": "t"}  # passed by name, nothing else
    assert kwargs["shm_size"] == "32g" and kwargs["ipc_mode"] == "host"
    assert kwargs["command"][:2] == ["python3", "-m"]
    host = spec.model_copy(update={"docker_network": "host", "gpus": "none"})
    kwargs = run_kwargs(container_of(host, 5000, "c2"), {})
    assert kwargs["network_mode"] == "host" and "ports" not in kwargs
    assert kwargs["device_requests"] == [] and kwargs["environment"] == {}
    trt = LaunchSpec(mode="docker", config=EngineConfig(engine="trtllm", model="org/m"),
                     log_dir=tmp_path, model_cache_dir="/hf", gpus=[1, 3])
    kwargs = run_kwargs(container_of(trt, 5000, "c3", "/abs/options.yaml"), {})
    assert kwargs["device_requests"] == [
        DeviceRequest(device_ids=["1", "3"], capabilities=[["gpu"]])]
    assert kwargs["volumes"]["/abs/options.yaml"]["mode"] == "ro"
    assert [(u["Name"], u["Soft"], u["Hard"]) for u in kwargs["ulimits"]] == [
        ("memlock", -1, -1), ("stack", 67108864, 67108864)]


def test_docker_without_a_daemon_is_one_clear_error_and_leaves_nothing(tmp_path):
    config = EngineConfig(engine="vllm", model="m")
    socket_path = tmp_path / "no-daemon.sock"
    spec = LaunchSpec(mode="docker", config=config, log_dir=tmp_path / "logs",
                      docker_host=f"unix://{socket_path}", ready_timeout_s=5)
    said: list[str] = []
    with pytest.raises(LaunchError) as info, launched(spec, said.append):
        raise AssertionError("never ready")
    assert said == [f"connecting to Docker at unix://{socket_path}"]
    assert info.value.reason.startswith(f"cannot reach the Docker daemon at unix://{socket_path}")
    assert "start Docker" in info.value.reason
    assert "docker run --rm" in info.value.command  # the equivalent command is shown


def test_pull_progress_line_sums_the_known_layers():
    line = pull_summary("img:1", {"a": (50_000_000, 100_000_000), "b": (100_000_000,
                                                                      100_000_000)})
    assert line == "pulling img:1: 150 of 200 MB in 2 layers (75%)"
    assert pull_summary("img:1", {}) == "pulling img:1: 0 of 0 MB in 0 layers"


def test_endpoint_mode_starts_and_stops_nothing(tmp_path, engine):
    with launched(_spec(tmp_path, engine)) as server:
        spec = LaunchSpec(mode="endpoint", url=server.url + "/", probe=PROBE,
                          ready_timeout_s=5)
        with launched(spec) as ep:
            assert ep.url == server.url and ep.pid is None and ep.command == []
        assert group_alive(server.pid) and _one_request(server.url)
    assert _gone(server.pid)


def test_endpoint_not_answering_fails_within_the_bound(tmp_path):
    spec = LaunchSpec(mode="endpoint", url=f"http://127.0.0.1:{free_port()}", probe=PROBE,
                      ready_timeout_s=0.5, poll_interval_s=0.05)
    with pytest.raises(LaunchError, match=r"not ready after 0\.5 s"), launched(spec):
        pass


def test_health_ok_but_completion_fails_is_not_ready(tmp_path, engine):
    probe = openai_readiness("wrong-name")  # the fake answers 404 for other model names
    spec = _spec(tmp_path, engine, probe=probe, ready_timeout_s=1.0)
    with pytest.raises(LaunchError, match="HTTP 404") as info, launched(spec):
        pass
    assert "log line 29" in str(info.value)


def test_bad_command_is_a_launch_error(tmp_path, engine):
    spec = _spec(tmp_path, engine, argv=[str(tmp_path / "no-such-program")])
    with pytest.raises(LaunchError, match="could not start"), launched(spec):
        pass


@pytest.mark.parametrize("fields", [
    {"mode": "local", "argv": ["x"], "log_dir": "/tmp"},  # no probe, no config
    {"mode": "endpoint", "probe": PROBE},  # no url
    {"mode": "local", "url": "http://h:1", "probe": PROBE, "log_dir": "/tmp"},
    {"mode": "docker", "probe": PROBE, "log_dir": "/tmp"},  # no config
    {"mode": "local", "argv": ["x"], "probe": PROBE},  # no log_dir
    {"mode": "endpoint", "url": "http://h:1", "probe": PROBE, "argv": ["x"]},
    {"mode": "local", "argv": [], "probe": PROBE, "log_dir": "/tmp"},
])
def test_spec_validation(fields):
    with pytest.raises(ValidationError):
        LaunchSpec(**fields)


def _executable(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def test_a_local_engine_that_is_not_installed_is_said_before_a_run(tmp_path, monkeypatch):
    """Issue 27: local mode ran `python3 -m sglang.launch_server` without SGLang and showed
    the failure after it; the prerequisite is now one line up front, resolved as the launch
    resolves the program (the venv's bin first, then PATH)."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    vllm = EngineConfig(engine="vllm", model="m")
    assert "`vllm` is not in PATH" in local_prerequisite(vllm)
    venv = tmp_path / "venv"
    _executable(venv / "bin" / "vllm", "#!/bin/sh\nexit 0\n")
    assert local_prerequisite(vllm, venv) is None
    # a python without the package, then one whose path holds it
    sglang = EngineConfig(engine="sglang", model="m")
    argv = get_engine("sglang").server_argv(sglang)
    assert argv[1] == "-m"
    python = _executable(venv / "bin" / argv[0], f"#!/bin/sh\nexec {sys.executable} \"$@\"\n")
    why = local_prerequisite(sglang, venv)
    assert why is not None and "needs the `sglang` package" in why
    package = tmp_path / "site" / "sglang"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    python.write_text(f"#!/bin/sh\nPYTHONPATH={tmp_path / 'site'} exec {sys.executable} \"$@\"\n")
    assert local_prerequisite(sglang, venv) is None


@pytest.mark.parametrize("source", ["relative/dir", "./cache", "x", "../up"])
def test_a_mount_source_the_daemon_cannot_place_is_refused_before_it_is_asked(tmp_path,
                                                                             source):
    from engines.base import Bind
    from runners.server.docker_container import create
    from runners.server.docker_engine import DockerError

    config = EngineConfig(engine="vllm", model="m")
    with pytest.raises(ValidationError, match="absolute path"):  # the spec refuses it first
        LaunchSpec(mode="docker", config=config, log_dir=tmp_path, model_cache_dir=source)
    spec = LaunchSpec(mode="docker", config=config, log_dir=tmp_path)
    container = container_of(spec, 5000, "c").model_copy(update={"binds": [
        Bind(source=source, target="/root/.cache/huggingface")]})
    # No client is needed (None): the refusal comes first, whatever the daemon would say.
    with pytest.raises(DockerError, match=f"mount source '{re.escape(source)}' must be an "
                                          "absolute host path or a volume name"):
        create(None, container, {})
