"""Tiny hostile servers for the failure tests (issue 16, F1–F3): a raw socket server whose
answer to every connection is one `mode`, so each broken-server shape is reproduced exactly.

Modes:
- `silent`: accepts, reads, never answers (keeps the connection open).
- `not_http`: answers every request with bytes that are not HTTP, then closes.
- `endless`, `cut`, `garbage_sse`: a well-behaved HTTP server for GETs (`/v1/models` lists
  model `m`, `/health` is 200, anything else 404) and `/tokenize` (ids up to 5000, the
  vocabulary learnt from it) whose streaming POSTs never end (a content
  chunk every 50 ms), close in the middle of a chunked stream, or stream SSE data that is not
  JSON.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time

MODES = ("silent", "not_http", "endless", "cut", "garbage_sse")
_MODELS = b'{"object":"list","data":[{"id":"m","object":"model"}]}'
_CHUNK = b'data: {"choices":[{"index":0,"text":"x"}]}\n\n'
_ANSWERS = {b"/v1/models": (b"200 OK", _MODELS), b"/health": (b"200 OK", b""),
            b"/tokenize": (b"200 OK", b'{"tokens":[1,5000]}')}  # ids up to 5000


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


class HostileServer:
    """A server on 127.0.0.1 that misbehaves as `mode` says; `url` is its base URL."""

    def __init__(self, mode: str) -> None:
        assert mode in MODES
        self.mode = mode
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.posts = 0  # streaming requests received
        self._closing = threading.Event()
        self._conns: list[socket.socket] = []

    def start(self) -> HostileServer:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def stop(self) -> None:
        self._closing.set()
        self.sock.close()
        for conn in self._conns:
            with contextlib.suppress(OSError):
                conn.close()

    def _accept(self) -> None:
        while not self._closing.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self._conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while not self._closing.is_set():
                head = self._read_request(conn)
                if head is None:
                    return
                if self.mode == "silent":
                    continue  # read on, answer nothing
                if self.mode == "not_http":
                    conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\nProtocol mismatch.\r\n")
                    conn.close()
                    return
                if head.startswith((b"GET", b"POST /tokenize")):
                    self._get(conn, head)
                    continue
                self.posts += 1
                self._stream(conn)
                return

    def _read_request(self, conn: socket.socket) -> bytes | None:
        """The request line and headers; the body (Content-Length) is read and dropped."""
        data = b""
        while b"\r\n\r\n" not in data:
            got = conn.recv(65536)
            if not got:
                return None
            data += got
        head, _, body = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(body) < length:
            got = conn.recv(65536)
            if not got:
                return None
            body += got
        return head

    def _get(self, conn: socket.socket, head: bytes) -> None:
        path = head.split(b" ")[1]
        status, body = _ANSWERS.get(path, (b"404 Not Found", b"no"))
        conn.sendall(b"HTTP/1.1 " + status + b"\r\nContent-Type: application/json\r\n"
                     b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)

    def _stream(self, conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")
        if self.mode == "endless":
            while not self._closing.is_set():
                conn.sendall(_chunk(_CHUNK))
                time.sleep(0.05)
        elif self.mode == "cut":
            conn.sendall(_chunk(_CHUNK) + b"40\r\ndata: {\"choi")  # a chunk cut short
            conn.close()
        else:  # garbage_sse
            conn.sendall(_chunk(b"data: <html>not json</html>\n\n") + _chunk(b"data: [DONE]\n\n")
                         + b"0\r\n\r\n")
