"""The engine's image on the Docker host: present as the pull policy allows, pulled when it must
be, with the pull's progress (bytes of the layers known so far) written to the server's log and
told one line at a time. Containers are `docker_container`'s.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

from runners.server.docker_engine import DockerError, error_reason

PullPolicy = Literal["missing", "always", "never"]
_PULL_LOG_EVERY_S = 5.0  # one progress line per layer state change, and a summary this often


def ensure_image(client: Any, image: str, policy: PullPolicy, log_path: Path, *,
                 timeout_s: float, status: Callable[[str], None] | None = None) -> None:
    """Make `image` present: pull it when missing (or always), never when told not to; the
    pull's progress goes to `log_path` (and one line at a time to `status`) as it arrives.

    Raises:
        DockerError: absent with pulling off, the pull failed, or it took over `timeout_s`.
    """
    import docker.errors

    if policy != "always":
        try:
            client.images.get(image)
            return
        except docker.errors.ImageNotFound:
            if policy == "never":
                raise DockerError(f"image {image} is not on this Docker host and pulling is "
                                  "off: pull it first, or allow pulling") from None
        except Exception as exc:
            raise DockerError(f"could not look up image {image}: {error_reason(exc)}") from None
    _pull(client, image, log_path, timeout_s=timeout_s, status=status or (lambda _: None))


def _pull(client: Any, image: str, log_path: Path, *, timeout_s: float,
          status: Callable[[str], None]) -> None:
    deadline = time.monotonic() + timeout_s
    layers: dict[str, tuple[int, int]] = {}  # layer id -> (bytes done, bytes total)
    last_summary = 0.0
    with log_path.open("a", encoding="utf-8") as log:
        log.write(f"pulling {image}\n")
        status(f"pulling {image}")
        try:
            for event in client.api.pull(image, stream=True, decode=True):
                if "error" in event:
                    raise DockerError(f"could not pull {image}: {event['error']}")
                _note_layer(layers, event)
                if time.monotonic() - last_summary >= _PULL_LOG_EVERY_S:
                    last_summary = time.monotonic()
                    line = pull_summary(image, layers)
                    log.write(line + "\n")
                    log.flush()
                    status(line)
                if time.monotonic() > deadline:
                    raise DockerError(f"pulling {image} took over {timeout_s:g} s")
        except DockerError:
            raise
        except Exception as exc:
            raise DockerError(f"could not pull {image}: {error_reason(exc)}") from None
        log.write(f"pulled {image}\n")


def _note_layer(layers: dict[str, tuple[int, int]], event: Mapping[str, Any]) -> None:
    layer, detail = event.get("id"), event.get("progressDetail") or {}
    if layer and event.get("status") == "Downloading" and detail.get("total"):
        layers[layer] = (int(detail.get("current", 0)), int(detail["total"]))
    elif layer and event.get("status") in ("Download complete", "Pull complete") \
            and layer in layers:
        layers[layer] = (layers[layer][1], layers[layer][1])


def pull_summary(image: str, layers: Mapping[str, tuple[int, int]]) -> str:
    """One progress line: bytes downloaded of the layers whose size is known so far."""
    done = sum(d for d, _ in layers.values())
    total = sum(t for _, t in layers.values())
    share = f" ({done / total:.0%})" if total else ""
    return (f"pulling {image}: {done / 1e6:,.0f} of {total / 1e6:,.0f} MB in "
            f"{len(layers)} layers{share}")
