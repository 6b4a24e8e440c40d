"""TCP connections whose every read carries the kernel's receive time (Linux `SO_TIMESTAMPNS`).

Why: a stamp taken when the event loop gets round to a socket adds the loop's and the machine's
scheduling delay to every TTFT and ITL, and on a busy or virtualised machine that delay reaches
milliseconds. The kernel stamps a segment when it arrives; `recvmsg` hands that stamp over with
the bytes, so the time a chunk reached this host does not depend on when we read it.
The kernel's stamp is on the wall clock; `_WallToPerf` maps it onto `perf_counter` with an
offset measured from back-to-back clock reads and renewed every 100 ms (NTP slews the two clocks
alike; a step is caught by the renewal, and a stamp is never put after its read). Where the
option does not exist (not Linux) reads are stamped with `perf_counter` as they are read.

The connection is a plain non-blocking socket on the running loop (`add_reader`/`add_writer`),
with the part of the asyncio transport interface the raw HTTP client uses: `write`, `close`.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import sys
import time
from time import perf_counter
from typing import Protocol

# Python's socket module does not name it; 35 is Linux's SO_TIMESTAMPNS (and SCM_TIMESTAMPNS)
# on x86 and ARM.
_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35 if sys.platform == "linux" else None)
_TIMESPEC = struct.Struct("@ll")  # struct timespec: seconds, nanoseconds (native longs)
_ANC_SIZE = socket.CMSG_SPACE(_TIMESPEC.size) if hasattr(socket, "CMSG_SPACE") else 0
_READ_SIZE = 256 * 1024
_MAX_AGE_S = 1.0  # a kernel stamp older than its read by this means a clock step: not used
_RENEW_S = 0.1


class _WallToPerf:
    """wall-clock ns -> perf_counter s. Why not "now minus age" per read: a thread switch
    between the two clock reads would shift that stamp by the switch's length."""

    def __init__(self) -> None:
        self.offset_ns = 0
        self.renew_at_s = 0.0

    def _measure(self) -> None:
        best = None
        for _ in range(5):  # keep the pair read closest together
            before = time.perf_counter_ns()
            wall = time.time_ns()
            after = time.perf_counter_ns()
            if best is None or after - before < best[0]:
                best = (after - before, wall - (before + after) // 2)
        assert best is not None  # range(5) is not empty; off the per-read path (every 0.1 s)
        self.offset_ns = best[1]
        self.renew_at_s = perf_counter() + _RENEW_S

    def perf_s(self, wall_ns: int, now_s: float) -> float:
        """`wall_ns` on perf_counter; `now_s` is the read's own perf_counter (never exceeded)."""
        if now_s >= self.renew_at_s:
            self._measure()
        stamp = (wall_ns - self.offset_ns) * 1e-9
        return stamp if now_s - _MAX_AGE_S < stamp <= now_s else now_s


_CLOCK = _WallToPerf()


class Receiver(Protocol):
    """What a `StampedSocket` reports to (the raw HTTP client's connection)."""

    def connection_made(self, transport: StampedSocket) -> None: ...

    def received(self, now: float, data: bytes) -> None: ...

    def connection_lost(self, exc: Exception | None) -> None: ...


class StampedSocket:
    """One connected socket: reads stamped by the kernel, writes buffered when the socket is
    full. `close()` reports `connection_lost(None)` on the next loop turn, as asyncio does."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket,
                 receiver: Receiver, kernel_stamps: bool) -> None:
        self.loop, self.sock, self.receiver = loop, sock, receiver
        self.fd = sock.fileno()
        self.kernel_stamps = kernel_stamps
        self.pending = bytearray()
        self.closed = False

    def start(self) -> None:
        self.receiver.connection_made(self)
        self.loop.add_reader(self.fd, self._readable)

    def _readable(self) -> None:
        # One read per readiness event: epoll is level-triggered, so what is left comes next
        # turn, and no read ends in an EAGAIN exception.
        try:
            data, ancillary, _, _ = self.sock.recvmsg(_READ_SIZE, _ANC_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lost(exc)
            return
        if not data:
            self._lost(None)
            return
        self.receiver.received(self._stamp(ancillary), data)

    def _stamp(self, ancillary: list[tuple[int, int, bytes]]) -> float:
        now = perf_counter()
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS and \
                    len(payload) >= _TIMESPEC.size:
                sec, nsec = _TIMESPEC.unpack_from(payload)
                return _CLOCK.perf_s(sec * 1_000_000_000 + nsec, now)
        return now

    def write(self, data: bytes) -> None:
        if self.closed:
            return
        if self.pending:  # earlier bytes still wait: keep the order
            self.pending += data
            return
        try:
            sent = self.sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError as exc:
            self._lost(exc)
            return
        if sent < len(data):
            self.pending += data[sent:]
            self.loop.add_writer(self.fd, self._writable)

    def _writable(self) -> None:
        try:
            sent = self.sock.send(self.pending)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lost(exc)
            return
        del self.pending[:sent]
        if not self.pending:
            self.loop.remove_writer(self.fd)

    def _shut(self) -> bool:
        if self.closed:
            return False
        self.closed = True
        self.loop.remove_reader(self.fd)
        if self.pending:
            self.loop.remove_writer(self.fd)
        self.sock.close()
        return True

    def close(self) -> None:
        if self._shut():
            self.loop.call_soon(self.receiver.connection_lost, None)

    def _lost(self, exc: Exception | None) -> None:
        if self._shut():
            self.receiver.connection_lost(exc)


async def open_stamped(host: str, port: int, receiver: Receiver) -> StampedSocket:
    """Connect to host:port (each address `getaddrinfo` gives, in turn) and start reading."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    error: OSError | None = None
    for family, kind, proto, _, address in infos:
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await loop.sock_connect(sock, address)
        except OSError as exc:
            sock.close()
            error = exc
            continue
        except BaseException:
            sock.close()
            raise
        conn = StampedSocket(loop, sock, receiver, _enable_stamps(sock))
        conn.start()
        return conn
    raise error or OSError(f"cannot resolve {host}:{port}")


def _enable_stamps(sock: socket.socket) -> bool:
    if _SO_TIMESTAMPNS is None:
        return False
    try:
        sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
    except OSError:
        return False
    return True
