"""Free TCP ports, chosen by the kernel (bind to port 0), never assumed.

Owns only port discovery; it starts nothing and holds no socket after returning.
"""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on `host` that was free a moment ago (the kernel's pick for port 0).

    The socket is closed before returning, so another process could take the port before the
    server binds it; launchers report the resulting start-up failure with the server's log.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
