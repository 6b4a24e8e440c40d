# ServeFit web app. Build: docker build -t servefit .
# Run (see README "Docker"): the app on :8501; validation starts engines' official images as
# sibling containers through the mounted Docker socket.
FROM python:3.11.7-slim-bookworm

# The Docker CLI only (no daemon), a pinned static binary fetched with Python: no apt repository
# and no curl in the image. TARGETARCH is set by BuildKit (amd64 or arm64). 27.5 speaks API 1.47,
# which Docker 29 daemons (minimum API 1.44) still accept; Debian's docker.io client does not.
ARG DOCKER_CLI_VERSION=27.5.1
ARG TARGETARCH=amd64
COPY scripts/install_docker_cli.py /tmp/install_docker_cli.py
RUN python /tmp/install_docker_cli.py "$DOCKER_CLI_VERSION" /usr/local/bin "$TARGETARCH" \
 && rm /tmp/install_docker_cli.py \
 && docker --version

WORKDIR /opt/servefit
COPY requirements.txt ./
RUN pip install --no-cache-dir -r requirements.txt

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

# PYTHONPATH: `streamlit run` puts app/ on the path, not the repository root.
# SERVEFIT_APP_HOME: uploads, workspaces, history and runs (mount a volume to keep them).
# HF_HOME: the Hugging Face cache mounted from the host at /models.
# NUMBA_CACHE_DIR: compiled kernels (prefix cache, simulator); the code folder is not writable
# for this user, and on the volume they survive a restart.
ENV PYTHONPATH=/opt/servefit \
    PYTHONUNBUFFERED=1 \
    SERVEFIT_APP_HOME=/var/lib/servefit \
    HF_HOME=/models \
    NUMBA_CACHE_DIR=/var/lib/servefit/numba
VOLUME ["/var/lib/servefit"]
EXPOSE 8501
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8501/_stcore/health', timeout=4)"]
CMD ["python", "-m", "streamlit", "run", "app/streamlit_app.py", "--server.port", "8501", "--server.address", "0.0.0.0"]
