"""`python -m twin serve --workers N`: one engine process and N HTTP worker processes on one port.

One HTTP process tops out at ~45,000 chunks a second on this machine (docs/serve.md), so the relaying
is split: each worker binds the port with SO_REUSEPORT (the kernel spreads new connections over
the workers by a hash of their addresses and ports), runs its own uvicorn event loop and relays its
own streams; all of them connect to the one engine process's Unix socket, which sends each worker
only its own requests' events (engine_proc). This process only supervises: it starts the engine
and the workers, starts a new one of either when it dies, and stops them all on SIGTERM / SIGINT.

A worker that stops (SIGTERM) ends its open streams with an OpenAI-style error event
(`server_shutting_down`) and exits within guard.STOP_GRACE_S (what a reader that does not read
still holds is cut then); one that is killed outright (SIGKILL) cannot, and its clients see the
connection close mid-stream. Either way the engine aborts the requests of the worker that went, the
other workers' streams go on, and a new worker takes its place in the port's share.
"""
from __future__ import annotations

import asyncio
import logging
import multiprocessing as mp
import os
import signal
import socket
import tempfile
import threading

from twin.serve import engine_proc, guard

log = logging.getLogger("twin.serve.workers")

POLL_S = 0.5        # the supervisor checks its children this often
STOP_S = 10.0       # a child asked to stop gets this long before it is killed
ACCEPT_BATCH = 64   # connections a worker accepts each time its port is readable (assumption: a burst's share)


def supervise(scenario: str, seed, background: bool, lead_s: float, host: str, port: int, workers: int,
              loop: str) -> int:
    path = os.path.join(tempfile.mkdtemp(prefix="twin-serve-"), "engine.sock")
    ctx = mp.get_context("spawn")

    def start(name):
        if name == "engine":
            args, target = (path, scenario, seed, background, lead_s, engine_proc.STEP_S, {}), engine_proc.main
        else:
            args, target = (path, host, port, workers, loop), worker_main
        p = ctx.Process(target=target, args=args, name=f"twin-{name}", daemon=True)
        p.start()
        return p

    names = ["engine", *(f"http-{i}" for i in range(workers))]
    procs = {n: start(n) for n in names}
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.wait(POLL_S):
        for n, p in procs.items():
            if not p.is_alive():
                log.error("twin serve: %s (pid %s) ended with exit code %s; starting a new one", n, p.pid, p.exitcode)
                procs[n] = start(n)
    for n in names[1:] + names[:1]:      # the workers first: they end their streams with an error event
        p = procs[n]
        p.terminate()
        p.join(STOP_S)
        if p.is_alive():
            p.kill()
    return 0


def worker_main(path: str, host: str, port: int, workers: int, loop: str) -> None:
    """One HTTP worker: its own socket on the shared port, its own event loop and relay."""
    from twin.serve.api import ServeApp
    from twin.serve.relay import LiveTwin
    os.setsid()          # a session of its own: its own CPU share under the kernel's autogroups
    logging.basicConfig(level=logging.INFO)
    parent = os.getppid()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    srv = ServeApp(LiveTwin(engine_path=path), workers=workers)
    server = _Server(guard.config(srv.app, workers, loop=loop), srv.live, sock)

    def orphaned():      # the supervisor is gone (killed outright): stop as if told to
        while not server.should_exit:
            if os.getppid() != parent:
                os.kill(os.getpid(), signal.SIGTERM)
                return
            threading.Event().wait(1.0)
    threading.Thread(target=orphaned, daemon=True).start()
    server.run()


class _Server(guard.Server):
    """The guarded server (its exit ends the open streams with an error event) that accepts
    connections itself, up to ACCEPT_BATCH each time the port is readable: uvloop's libuv accepts one
    connection per poll (libuv PR 3696), and with ~500 streams a worker's loop polls seldom enough
    that 1,000 new connections waited seconds in the kernel's accept queue (strace: one accept4 every
    0.1-1 s while ~160 waited; docs/serve.md)."""

    def __init__(self, config, live, sock: socket.socket):
        super().__init__(config, live)
        self.sock = sock

    async def startup(self, sockets=None):
        await super().startup(sockets=[])          # the lifespan, and no server of uvicorn's own
        if self.should_exit or not self.started:
            return
        config, loop = self.config, asyncio.get_running_loop()

        def protocol():
            return config.http_protocol_class(config=config, server_state=self.server_state,
                                              app_state=self.lifespan.state, _loop=loop)
        self.sock.listen(config.backlog)
        self.sock.setblocking(False)
        loop.add_reader(self.sock.fileno(), self._accept, loop, protocol)

    def _accept(self, loop, protocol) -> None:
        for _ in range(ACCEPT_BATCH):
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:          # (a connection reset before it was accepted, out of descriptors)
                log.warning("twin serve: accept failed: %r", exc)
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)   # each chunk leaves at once
            loop.create_task(loop.connect_accepted_socket(protocol, conn))

    async def shutdown(self, sockets=None):
        asyncio.get_running_loop().remove_reader(self.sock.fileno())
        self.sock.close()
        await super().shutdown(sockets=sockets)
