"""A Docker daemon of the test's own, and the images the Docker test runs (issue 26).

The daemon runs as root with its data root and socket in a temp folder: no bridge and no
iptables (containers use the host's network), overlay2 with vfs as the fallback. No registry is
reachable here, so the base image is a Debian bookworm root made with `debootstrap` from
Debian's packages, with this machine's CA bundle and a pip.conf naming it (pip inside the build
reaches the package index only with it). Everything is removed at the end, on failure too.

Where the test cannot run (not root, or no dockerd/debootstrap) it is skipped, unless
$SERVEFIT_DOCKER_TEST=required (scripts/test.sh sets it after installing them), when that is a
failure.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
BASE_TAG = "servefit-standin:bookworm"
APP_TAG = "servefit:test"
STUB_TAG = "servefit-stub-engine:test"
DEBOOTSTRAP_PACKAGES = "python3,python3-pip,python3-venv,python-is-python3,ca-certificates"
_START_BOUND_S = 90.0


@dataclass(frozen=True)
class Daemon:
    url: str
    socket: Path
    client: Any
    root: Path


def _unavailable() -> str | None:
    if os.geteuid() != 0:
        return "the Docker test starts its own dockerd: run as root"
    for tool in ("dockerd", "debootstrap"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install docker.io debootstrap)"
    return None


def _start(root: Path, driver: str) -> tuple[subprocess.Popen[bytes], Any]:
    import docker

    sock = root / "docker.sock"
    log = (root / f"dockerd-{driver}.log").open("wb")
    proc = subprocess.Popen(
        ["dockerd", "--data-root", str(root / f"data-{driver}"), "--exec-root",
         str(root / "exec"), "--pidfile", str(root / "dockerd.pid"), "-H", f"unix://{sock}",
         "--bridge=none", "--iptables=false", "--ip6tables=false", "--storage-driver", driver],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + _START_BOUND_S
    while time.monotonic() < deadline and proc.poll() is None:
        if sock.exists():
            client = docker.DockerClient(base_url=f"unix://{sock}", timeout=600)
            try:
                client.ping()
                return proc, client
            except Exception:  # not listening yet
                client.close()
        time.sleep(0.5)
    _stop(proc)
    tail = (root / f"dockerd-{driver}.log").read_text(errors="replace")[-2000:]
    raise RuntimeError(f"dockerd with {driver} did not start:\n{tail}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def _unmount_under(root: Path) -> None:
    """Unmount what dockerd left mounted under `root` (its exec root's netns/default bind
    mount outlives it), deepest first, so the folder can be removed."""
    prefix = str(root.resolve()) + "/"
    with open("/proc/mounts", encoding="utf-8") as mounts:
        points = [line.split()[1] for line in mounts if line.split()[1].startswith(prefix)]
    for point in sorted(points, key=len, reverse=True):
        subprocess.run(["umount", "-l", point], check=False, capture_output=True)


@pytest.fixture(scope="session")
def daemon(tmp_path_factory) -> Iterator[Daemon]:
    why = _unavailable()
    if why:
        if os.environ.get("SERVEFIT_DOCKER_TEST") == "required":
            pytest.fail(why)
        pytest.skip(why)
    root = Path(tmp_path_factory.mktemp("dk"))
    try:
        proc, client = _start(root, "overlay2")
    except RuntimeError:
        proc, client = _start(root, "vfs")  # ~15x slower, but any filesystem holds it
    try:
        yield Daemon(url=f"unix://{root / 'docker.sock'}", socket=root / "docker.sock",
                     client=client, root=root)
    finally:
        for container in client.containers.list(all=True):
            container.remove(force=True)
        client.close()
        _stop(proc)
        _unmount_under(root)
        shutil.rmtree(root, ignore_errors=True)


def _standin_base(daemon: Daemon) -> str:
    """Debian bookworm from Debian's packages, imported as BASE_TAG."""
    base = daemon.root / "base"
    subprocess.run(["debootstrap", "--variant=minbase", f"--include={DEBOOTSTRAP_PACKAGES}",
                    "bookworm", str(base)], check=True, capture_output=True, timeout=900)
    if CA_BUNDLE.exists():  # this machine reaches PyPI through its own CA
        shutil.copy(CA_BUNDLE, base / "etc/ssl/certs/ca-certificates.crt")
        (base / "etc/pip.conf").write_text(f"[global]\ncert = {CA_BUNDLE}\n")
    archive = daemon.root / "base.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(base, arcname=".")
    shutil.rmtree(base, ignore_errors=True)
    repository, tag = BASE_TAG.split(":")
    daemon.client.api.import_image_from_file(str(archive), repository=repository, tag=tag)
    archive.unlink()
    return BASE_TAG


def build(daemon: Daemon, context: Path, tag: str, buildargs: dict[str, str]) -> str:
    """`docker build` through the API on the host's network; the log's tail on failure."""
    lines: list[str] = []
    for event in daemon.client.api.build(path=str(context), tag=tag, buildargs=buildargs,
                                         network_mode="host", rm=True, forcerm=True,
                                         decode=True):
        lines.extend(str(event.get("stream", "")).splitlines())
        if "error" in event:
            raise AssertionError(f"building {tag} failed: {event['error']}\n"
                                 + "\n".join(lines[-40:]))
    return tag


@pytest.fixture(scope="session")
def images(daemon: Daemon) -> dict[str, str]:
    """The stand-in base, the project's image built on it, and the stub engine image."""
    base = _standin_base(daemon)
    app = build(daemon, ROOT, APP_TAG, {"BASE_IMAGE": base})
    stub_context = daemon.root / "stub"
    stub_context.mkdir()
    shutil.copy(ROOT / "tests" / "runners" / "fake_openai.py", stub_context)
    shutil.copy(ROOT / "tests" / "docker" / "stub_engine.Dockerfile",
                stub_context / "Dockerfile")
    stub = build(daemon, stub_context, STUB_TAG, {"APP_IMAGE": app})
    return {"base": base, "app": app, "stub": stub}
