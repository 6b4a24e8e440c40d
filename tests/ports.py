"""A free loopback port for a test's own server (the app, a container on the host network)."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A TCP port nothing listens on at the moment of asking (the kernel's choice)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
