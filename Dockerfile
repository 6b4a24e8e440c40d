# ServeFit web app. Build: docker build -t servefit .
# Run (see README "Docker"): the app on :8501; validation starts engines' official images as
# sibling containers through the mounted Docker socket, with the Docker Engine API (the
# `docker` package from requirements.txt): the image holds no Docker binary.
#
# BASE_IMAGE: any Debian-like image with Python >= 3.11 and its venv module (CI builds from a
# debootstrap'ed Debian root because it cannot pull from a registry).
ARG BASE_IMAGE=python:3.11.7-slim-bookworm

# Stage 1: the pinned requirements in a virtual environment (wheels only: no compiler).
FROM ${BASE_IMAGE} AS build
COPY requirements.txt /tmp/requirements.txt
RUN python -m venv /opt/venv \
 && /opt/venv/bin/pip install --no-cache-dir --only-binary=:all: -r /tmp/requirements.txt \
 && find /opt/venv -depth -name __pycache__ -type d -exec rm -rf {} +

# Stage 2: the runtime: the same base, the environment and the app; no pip caches, no sources.
FROM ${BASE_IMAGE}
COPY --from=build /opt/venv /opt/venv
WORKDIR /opt/servefit

# Only what the app runs: the libraries (app/ holds the Streamlit config) and their data.
COPY core/ core/
COPY app/ app/
COPY profiler/ profiler/
COPY engines/ engines/
COPY recommender/ recommender/
COPY runners/ runners/
COPY data/ data/

# Non-root. Add the socket's group at run time (--group-add) to start sibling containers.
RUN useradd --create-home --uid 10001 --user-group servefit \
 && mkdir -p /var/lib/servefit /models && chown servefit:servefit /var/lib/servefit /models
USER 10001:10001

# PATH: the environment's python first.
# PYTHONPATH: `streamlit run` puts app/ on the path, not the repository root.
# SERVEFIT_APP_HOME: uploads, workspaces (the CLI's too), history and runs (mount a volume).
# HF_HOME: the Hugging Face cache mounted from the host at /models.
# NUMBA_CACHE_DIR: compiled kernels (prefix cache, simulator); the code folder is not writable
# for this user, and on the volume they survive a restart.
# STREAMLIT_SERVER_PORT/ADDRESS: where the app listens; `-e STREAMLIT_SERVER_PORT=…` moves it and
# the health check follows (a --server.port flag in CMD would leave the check on 8501).
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONPATH=/opt/servefit \
    PYTHONUNBUFFERED=1 \
    SERVEFIT_APP_HOME=/var/lib/servefit \
    HF_HOME=/models \
    NUMBA_CACHE_DIR=/var/lib/servefit/numba \
    STREAMLIT_SERVER_PORT=8501 \
    STREAMLIT_SERVER_ADDRESS=0.0.0.0
VOLUME ["/var/lib/servefit"]
EXPOSE 8501
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ['STREAMLIT_SERVER_PORT'] + '/_stcore/health', timeout=4)"]
CMD ["python", "-m", "streamlit", "run", "app/streamlit_app.py"]
