"""Live validation from the app: what this machine offers (Docker, an NVIDIA GPU, the
host's model cache) and `BenchJob`, one benchmark on a background thread of a session.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import Field

from app.cached import store_workspace
from app.redact import hide_home
from core.records import Record


class Environment(Record):
    """What this machine offers for live validation (shown, never guessed silently)."""

    docker_url: str = Field(description="the Docker daemon's address the launcher would use")
    docker_socket: bool = Field(description="its socket is here (always True for tcp://)")
    nvidia_gpu: bool
    host_models_dir: str = Field(description="host path of the HF cache for sibling containers")


def environment() -> Environment:
    """The Docker daemon's socket, an NVIDIA GPU, and the host's HF cache path (for
    containers)."""
    import shutil

    from runners.server.docker_engine import daemon_url

    url = daemon_url()
    return Environment(
        docker_url=url,
        docker_socket=not url.startswith("unix://") or Path(url.removeprefix("unix://")).exists(),
        nvidia_gpu=shutil.which("nvidia-smi") is not None,
        host_models_dir=os.environ.get("SERVEFIT_HOST_MODELS")
        or str(Path.home() / ".cache" / "huggingface"))


class BenchJob:
    """One live benchmark running on a background thread of this session.

    The thread only calls the runner; the view reads `samples`, `report` and `error` from a
    fragment that reruns every second. Each appended sample is a whole object, so a reader
    never sees half of one.
    """

    def __init__(self, request: Any, deployment: tuple[Any, str] | None = None) -> None:
        """`deployment`: the (EngineConfig, GPU name) the run serves, when a recommendation
        says; the run's own requests are then predicted on it once the run ends."""
        import threading

        self.request = request
        self.deployment = deployment
        self.predicted: Any = None  # the LoadPrediction of the requests the run sent
        self.unpredicted = ""  # why they could not be predicted as sent, if so
        self.samples: list[Any] = []
        self.report: Any = None
        self.error: str | None = None
        self.launch_status = ""  # what the launch is doing, until the server is ready
        self.shown = False  # whether a full page rerun has shown the finished run
        self.stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="servefit-bench", daemon=True)

    def start(self) -> BenchJob:
        self._thread.start()
        return self

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def _launching(self, line: str) -> None:
        self.launch_status = line  # one str assignment: a reader sees the old or the new

    def _run(self) -> None:
        from core.errors import ServeFitError
        from runners.benchmark.bench import run_bench

        try:
            self.report = run_bench(self.request, workspace=store_workspace(),
                                    progress=self.samples.append, stop=self.stop,
                                    launch_status=self._launching)
        except ServeFitError as exc:
            self.error = hide_home(str(exc))
        except Exception as exc:  # a bug still reaches the user as one line, and the log
            import logging

            logging.getLogger(__name__).exception("benchmark failed")
            self.error = f"the benchmark failed unexpectedly: {type(exc).__name__}: {exc}"
        if self.report is not None and self.deployment is not None:
            self._predict(*self.deployment)

    def _predict(self, config: Any, gpu: str) -> None:
        """The prediction of exactly what the run sent (`app.run_prediction`)."""
        from app.run_prediction import predict_run
        from core.errors import ServeFitError

        try:
            self.predicted = predict_run(self.request, config, gpu)
        except ServeFitError as exc:
            self.unpredicted = hide_home(str(exc))
