"""Connection budgets of `twin serve` (issue 34), below the app: uvicorn's HTTP protocol with three
bounds of its own, so that no client's sockets can hold what others need.

- Open connections per client address: past MAX_CONNS_PER_ADDRESS (each worker its share) a new one
  is answered 429 in OpenAI's shape and closed, well before uvicorn's own cap (`limit_concurrency`,
  whose 503 would refuse everyone): one address never makes another get 503.
- A connection has HEADER_S to send a whole request head, when it opens and after each response:
  one that sends nothing or half a header (slowloris) is cut. Idle kept-alive connections close
  after KEEP_ALIVE_S (uvicorn's timeout_keep_alive).
- A response whose writes have waited WRITE_STALL_S for a reader that does not read is cut: what
  waits for it is bounded (the transport's high-water mark, and the chunks of those seconds), and
  the app sees the client gone (the engine aborts its request).

`Server` is uvicorn's server whose exit signal also ends the open streams with an OpenAI error
event and which gives them STOP_GRACE_S before it closes what is left.
"""
from __future__ import annotations

import json
from collections import Counter

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

MAX_CONNS_PER_ADDRESS = 256   # assumption: a classroom behind one NAT, ~8 connections each for 30 people
HEADER_S = 10.0               # assumption: a request head (a few hundred bytes) takes well under this
KEEP_ALIVE_S = 5              # uvicorn's default timeout_keep_alive
WRITE_STALL_S = 10.0          # assumption: a reader that takes nothing for this long has gone
REFUSED_LINGER_S = 1.0        # a refused connection's request is read and dropped this long (then it is cut)
STOP_GRACE_S = 3.0            # a stopping worker gives its streams this long to take their error event
MAX_OPEN_CONNECTIONS = 2064   # uvicorn's limit_concurrency for the whole server (api.MAX_OPEN + 64)


def _refusal(n: int) -> bytes:
    body = json.dumps({"error": {"message": f"over {n} open connections from this address; close some and retry",
                                 "type": "rate_limit_error", "param": None, "code": "too_many_connections"}}).encode()
    return (b"HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\nconnection: close\r\n"
            b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


def protocol(base: type = HttpToolsProtocol, per_address: int = MAX_CONNS_PER_ADDRESS) -> type:
    """uvicorn's HTTP protocol class `base` (httptools or h11) with the bounds above; one counter of
    connections per address for every connection the class serves (one per process)."""
    open_by = Counter()
    refusal = _refusal(per_address)

    class Guarded(base):
        open_by_address = open_by

        def connection_made(self, transport) -> None:
            peer = transport.get_extra_info("peername")
            self._addr = peer[0] if peer else "?"
            self._head = self._stall = None
            self._refused = open_by[self._addr] >= per_address
            if self._refused:          # answered and half-closed, never uvicorn's (nor counted in its cap)
                self.transport = transport
                transport.write(refusal)
                transport.write_eof()
                self._head = self.loop.call_later(REFUSED_LINGER_S, transport.abort)
                return
            open_by[self._addr] += 1
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            if not self._refused:      # (a refused one's request is read and dropped: no reset hides the 429)
                super().data_received(data)

        def eof_received(self):
            return None if self._refused else super().eof_received()

        def connection_lost(self, exc) -> None:
            if self._refused:
                self._head.cancel()
                return
            n = open_by[self._addr] - 1
            if n > 0:
                open_by[self._addr] = n
            else:
                del open_by[self._addr]
            for timer in (self._head, self._stall):
                if timer is not None:
                    timer.cancel()
            self._head = self._stall = None
            super().connection_lost(exc)

        def _arm(self) -> None:
            if self._head is not None:
                self._head.cancel()
            self._head = self.loop.call_later(HEADER_S, self._head_due)

        def _head_due(self) -> None:
            """No whole request head within HEADER_S: cut, unless a request is being served."""
            self._head = None
            if self.cycle is None or self.cycle.response_complete:
                self.transport.abort()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()

        def pause_writing(self) -> None:
            super().pause_writing()
            if self._stall is None:
                self._stall = self.loop.call_later(WRITE_STALL_S, self._stalled)

        def resume_writing(self) -> None:
            super().resume_writing()
            if self._stall is not None:
                self._stall.cancel()
                self._stall = None

        def _stalled(self) -> None:
            self._stall = None
            self.transport.abort()     # the cycle sees a disconnect; the app aborts the request

    Guarded.__name__ = f"Guarded{base.__name__}"
    return Guarded


def config(app, workers: int = 1, http: str = "httptools", **kw) -> uvicorn.Config:
    """The uvicorn configuration of one server process of `workers` (its share of the budgets)."""
    base = HttpToolsProtocol if http == "httptools" else H11Protocol
    return uvicorn.Config(app, http=protocol(base, max(MAX_CONNS_PER_ADDRESS // workers, 1)), log_level="warning",
                          limit_concurrency=max(MAX_OPEN_CONNECTIONS // workers, 1), timeout_keep_alive=KEEP_ALIVE_S,
                          timeout_graceful_shutdown=STOP_GRACE_S, lifespan="on", server_header=False, **kw)


class Server(uvicorn.Server):
    """uvicorn's Server whose exit signal also ends this process's open streams with an error event
    (`server_shutting_down`): otherwise a graceful stop would wait for every stream to finish."""

    def __init__(self, config: uvicorn.Config, live):
        super().__init__(config)
        self.live = live

    def handle_exit(self, sig, frame):
        super().handle_exit(sig, frame)
        if self.live.loop is not None:
            self.live.loop.call_soon_threadsafe(self.live.abandon, "worker_stopping")
