"""The room server (`make room`): the dashboard on waitress, with per-address connection caps.

    python -m twin.cli.room --host 0.0.0.0 --port 8050

Why waitress: its one I/O thread (asyncore) reads each request whole, headers and body, before it
hands it to one of the worker threads, so a client that sends half a request, or nothing, holds a
socket and a few KB, never a thread. gunicorn's gthread worker gives a thread to a connection as soon
as it is readable, so 8 half-sent requests (slowloris) stopped every viewer's poll. One process:
every twin lives in it.

Waitress's own limits are global (a cap on connections, an idle timeout), so one address could
still fill the cap. This server adds, per remote address, a cap on open connections (the next is
answered 429 and closed at once) and a deadline for a request to arrive whole once its first byte
has. A trusted reverse proxy (TWIN_TRUSTED_PROXIES) is not capped: it carries the whole room, and
caps its own clients (nginx `limit_conn`).
"""
from __future__ import annotations

import argparse
import logging
import resource
import socket
import time
from collections import Counter

from waitress import wasyncore
from waitress.adjustments import Adjustments
from waitress.channel import HTTPChannel
from waitress.server import TcpWSGIServer
from waitress.task import ThreadedTaskDispatcher

from twin.live.budget import LogBudget
from twin.ui import guard

log = logging.getLogger(__name__)
log_refusal = LogBudget(log, 20)

SERVER_NAME = "CloudMatrix Twin"   # the `Server` header: no framework or Python versions
THREADS = 8               # worker threads: a poll is ~1-10 ms of work, 8 keep a room of ~100 tabs waiting little
PER_ADDRESS = 512         # open connections from one address: a browser keeps 2 to 6 per server, so a class of
                          # ~100 browsers behind one campus NAT fits (the classroom admits 400 per address);
                          # assumption, sized here: 1,000 half-sent or idle ones cost the viewers nothing
CONNECTIONS = 16000       # open connections in all (waitress stops accepting past it): 31 addresses at their
                          # cap; each holds a socket and a small buffer (the file limit is raised to its hard one)
IDLE_S = 30               # a connection with no request in progress is closed after this many seconds
REQUEST_S = 20            # a request must arrive whole (headers and body) this many seconds after its first byte:
                          # the largest body (4 MB trace upload) at 2 Mbit/s; assumption
HEADER_BYTES = 32 * 1024  # request line and headers (a Dash request's are < 2 KB)
MAX_BODY = 4 * 1024 * 1024   # = app.MAX_BODY_BYTES: waitress refuses larger (413) before buffering it
LINGER_S = 1              # a refused connection is drained this long at most after its 429, so the client reads
                          # the answer (closing on its unread request would reset the connection and lose it)
ACCEPT_BURST = 64         # connections accepted per wake-up of the I/O loop
MAX_LINGER = 32           # refused connections drained at once; past it (a flood) the next are closed at once:
                          # each drained one costs the I/O loop a little on every pass


class RoomChannel(HTTPChannel):
    """A connection that remembers when its current request began to arrive, and counts itself
    against its address while open."""

    request_t0: float | None = None

    def received(self, data: bytes) -> bool:
        if self.request is None and data:
            self.request_t0 = time.time()
        try:
            return super().received(data)
        finally:
            if self.request is None:            # nothing half-read
                self.request_t0 = None

    def add_channel(self, map=None):
        super().add_channel(map)
        self.server.open_by_addr[self.peer] += 1

    def del_channel(self, map=None):
        if self._fileno is not None and self._fileno in self.server.active_channels:
            self.server.release(self.peer)
        super().del_channel(map)

    def __init__(self, server, sock, addr, adj, map=None):
        self.peer = addr[0]                 # before the base class registers the channel (add_channel)
        super().__init__(server, sock, addr, adj, map)


class Refusal(wasyncore.dispatcher):
    """A connection over its address's cap: its 429 is written, then what the client sends is read
    and dropped until it closes (or the server drops it after LINGER_S)."""

    def __init__(self, sock, map, reply: bytes):
        super().__init__(sock, map=map)
        self.t0, self.out = time.time(), reply

    def writable(self) -> bool:
        return bool(self.out)

    def handle_write(self) -> None:
        self.out = self.out[self.send(self.out):]
        if not self.out:
            try:
                self.socket.shutdown(socket.SHUT_WR)
            except OSError:
                self.close()

    def handle_read(self) -> None:
        self.recv(4096)          # b"" at the end: handle_close

    def handle_close(self) -> None:
        self.close()


class RoomServer(TcpWSGIServer):
    """waitress's TCP server with a per-address connection cap and a whole-request deadline."""

    channel_class = RoomChannel

    def __init__(self, app, *, per_address: int = PER_ADDRESS, request_s: float = REQUEST_S, **kw):
        self.per_address, self.request_s = int(per_address), float(request_s)
        self.open_by_addr: Counter[str] = Counter()
        self.refused = 0
        self.refusals: set[Refusal] = set()
        self.backlog_empty = False
        super().__init__(app, **kw)

    def release(self, addr: str) -> None:
        self.open_by_addr[addr] -= 1
        if self.open_by_addr[addr] <= 0:
            del self.open_by_addr[addr]

    def handle_accept(self) -> None:
        """Accept what waits, up to ACCEPT_BURST connections per wake-up (waitress takes one), so a
        burst of connections does not hold the viewers' requests behind it in the I/O loop."""
        self.backlog_empty = False
        for _ in range(ACCEPT_BURST):
            super().handle_accept()
            if self.backlog_empty:
                break

    def accept(self):
        """The next connection, or None when it was over its address's cap (then it got a 429) or
        none waits (then backlog_empty is set)."""
        try:
            got = super().accept()
        except OSError:                   # (logged by waitress) no burst after an accept error
            self.backlog_empty = True
            raise
        if got is None:
            self.backlog_empty = True
            return None
        conn, addr = got
        host = addr[0]
        if self.open_by_addr[host] < self.per_address or guard.trusted_proxy(host):
            return got
        self.refused += 1
        body = (f"Too many open connections from your address ({host}): at most {self.per_address} at "
                f"once. Close some (idle ones close after {IDLE_S} s) and retry.\n").encode()
        head = (f"HTTP/1.1 429 Too Many Requests\r\nContent-Type: text/plain; charset=utf-8\r\n"
                f"Content-Length: {len(body)}\r\nRetry-After: {IDLE_S}\r\nConnection: close\r\n"
                f"Server: {SERVER_NAME}\r\n\r\n").encode()
        self.refusals = {r for r in self.refusals if r.connected}
        if len(self.refusals) < MAX_LINGER:
            self.refusals.add(Refusal(conn, self._map, head + body))
        else:
            conn.close()
        log_refusal(logging.WARNING, "connection from %s refused: %d open (cap %d per address; %d refused so far)",
                    host, self.open_by_addr[host], self.per_address, self.refused)
        return None

    def maintenance(self, now: float) -> None:
        """waitress closes connections idle past channel_timeout; also close those whose request
        has been arriving for longer than request_s (a slowloris trickling bytes)."""
        super().maintenance(now)
        for r in [r for r in self.refusals if now - r.t0 > LINGER_S]:
            r.close()
            self.refusals.discard(r)
        for ch in list(self.active_channels.values()):
            t0 = getattr(ch, "request_t0", None)
            if t0 is not None and not ch.requests and now - t0 > self.request_s:
                ch.will_close = True


def serve_options(threads: int = THREADS) -> dict:
    """waitress's adjustments for the room (see the constants above)."""
    return {"threads": threads, "connection_limit": CONNECTIONS, "channel_timeout": IDLE_S,
            "cleanup_interval": 1, "asyncore_use_poll": True, "ident": SERVER_NAME,
            "max_request_header_size": HEADER_BYTES, "max_request_body_size": MAX_BODY,
            "expose_tracebacks": False,
            "clear_untrusted_proxy_headers": False}   # X-Forwarded-For reaches twin.ui.guard, which alone decides
                                                      # whom to believe (TWIN_TRUSTED_PROXIES, right to left)


def room_server(app, host: str, port: int, *, threads: int = THREADS, per_address: int = PER_ADDRESS,
                request_s: float = REQUEST_S) -> RoomServer:
    """The room server for a WSGI `app`, bound and listening (call .run() to serve)."""
    adj = Adjustments(host=host, port=port, **serve_options(threads))
    dispatcher = ThreadedTaskDispatcher()
    dispatcher.set_thread_count(adj.threads)
    return RoomServer(app, per_address=per_address, request_s=request_s, map={}, dispatcher=dispatcher,
                      adj=adj, sockinfo=adj.listen[0])


def _raise_file_limit() -> None:
    """Open connections are file descriptors: use the hard limit the system allows."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="0.0.0.0", help="address to listen on (0.0.0.0: every interface)")
    ap.add_argument("--port", type=int, default=8050)
    ap.add_argument("--threads", type=int, default=THREADS, choices=range(1, 65), metavar="1..64",
                    help="worker threads (requests being answered at once)")
    ap.add_argument("--per-address", type=int, default=PER_ADDRESS, choices=range(1, 10_001), metavar="1..10000",
                    help="open connections allowed from one address (raise it for a class behind one NAT)")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("waitress.queue").setLevel(logging.ERROR)   # "queue depth" on every busy second
    _raise_file_limit()
    from app import server
    from twin.live import session
    session.sessions().shared()       # the default scenario runs before the first page is asked for
    srv = room_server(server, a.host, a.port, threads=a.threads, per_address=a.per_address)
    print(f"CloudMatrix Twin room on http://{a.host}:{a.port}/  (waitress, {a.threads} threads, at most "
          f"{a.per_address} connections per address; instructor lock: "
          f"{'on' if session.sessions().locked else 'off'})", flush=True)
    try:
        srv.run()
    except KeyboardInterrupt:
        pass
    finally:
        srv.task_dispatcher.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
