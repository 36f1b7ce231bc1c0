"""The messages between the engine process and its relays (the HTTP workers) over a Unix socket:
multiprocessing's framing (a 4-byte big-endian length, then a pickle), cut by the reader itself,
so that a message half-written by a descheduled sender waits for its rest instead of blocking or
failing the read. Both ends write without blocking: what does not fit waits in `Peer.out`.
"""
from __future__ import annotations

import os
import pickle
import socket

OUT_LIMIT = 64 << 20     # bytes waiting for a peer that does not read (a stalled worker): past it, it is dropped


def frame(msg) -> bytes:
    data = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
    return len(data).to_bytes(4, "big", signed=True) + data


class Frames:
    """Cuts a byte stream into messages."""

    def __init__(self):
        self.buf = bytearray()

    def feed(self, data: bytes) -> list:
        buf = self.buf
        buf += data
        out = []
        while len(buf) >= 4:
            n = int.from_bytes(buf[:4], "big", signed=True)
            if len(buf) < 4 + n:
                break
            out.append(pickle.loads(buf[4:4 + n]))
            del buf[:4 + n]
        return out


class Peer:
    """One end of a connection, non-blocking: `read()` gives the whole messages that arrived (None:
    the other end is gone), `send()` queues one and `flush()` writes what the socket takes."""

    def __init__(self, sock: socket.socket, ident: int = 0):
        sock.setblocking(False)
        self.sock, self.id, self.frames, self.out = sock, ident, Frames(), bytearray()

    def fileno(self) -> int:
        return self.sock.fileno()

    def read(self) -> list | None:
        try:
            data = os.read(self.sock.fileno(), 1 << 20)
        except BlockingIOError:
            return []
        except OSError:
            return None
        return self.frames.feed(data) if data else None

    def send(self, msg) -> None:
        self.out += frame(msg)

    def flush(self) -> bool:
        """False if the other end is gone or has not read OUT_LIMIT bytes."""
        if self.out:
            try:
                del self.out[:os.write(self.sock.fileno(), self.out)]
            except BlockingIOError:
                pass
            except OSError:
                return False
        return len(self.out) <= OUT_LIMIT

    def close(self) -> None:
        self.sock.close()


def listen(path: str) -> socket.socket:
    """The engine's listening socket at `path` (a stale one from a dead engine is replaced)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.listen(64)
    s.setblocking(False)
    return s


def connect(path: str) -> Peer | None:
    """A connection to the engine at `path`, or None if nothing listens there (yet)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
    except (FileNotFoundError, ConnectionRefusedError):
        s.close()
        return None
    return Peer(s)
