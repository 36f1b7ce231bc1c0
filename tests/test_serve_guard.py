"""The API's connection budgets (twin.serve.guard) on a real uvicorn server: connections per address
past the cap are answered 429 in OpenAI's shape while another address is served; a connection that
sends nothing, or half a request head, is cut; a response nobody reads is cut, and its request
aborted in the app. The server's app is a small ASGI app here (no twin): the guard is below it."""
from __future__ import annotations

import asyncio
import json
import socket
import threading
import time

import pytest

from twin.serve import guard

ABORTED: list = []


async def app(scope, receive, send):
    """/big: an endless response of 64 KB writes (until the client goes); anything else: a small one."""
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    if scope["path"] != "/big":
        return await send({"type": "http.response.body", "body": b"ok"})
    await receive()                                   # the (empty) body
    gone = asyncio.ensure_future(receive())
    while not gone.done():
        await send({"type": "http.response.body", "body": b"x" * 65536, "more_body": True})
        await asyncio.sleep(0)
    ABORTED.append((await gone)["type"])


@pytest.fixture(scope="module")
def port():
    old = guard.HEADER_S, guard.WRITE_STALL_S
    guard.HEADER_S, guard.WRITE_STALL_S = 0.5, 0.5
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        p = s.getsockname()[1]
    cfg = guard.config(app, host="127.0.0.1", port=p, loop="asyncio")
    cfg.lifespan = "off"
    cfg.http = guard.protocol(guard.HttpToolsProtocol, per_address=4)
    u = guard.uvicorn.Server(cfg)
    t = threading.Thread(target=u.run, daemon=True)
    t.start()
    while not u.started:
        time.sleep(0.02)
    yield p
    u.should_exit = True
    t.join(10)
    guard.HEADER_S, guard.WRITE_STALL_S = old


def _get(port: int, source: str = "127.0.0.1") -> bytes:
    with socket.create_connection(("127.0.0.1", port), source_address=(source, 0)) as c:
        c.sendall(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        out = b""
        while chunk := c.recv(65536):
            out += chunk
        return out


def _closed(c: socket.socket, timeout: float = 10.0) -> bool:
    """Whether the server closed (or cut) the connection within `timeout` (a generous bound)."""
    c.settimeout(timeout)
    try:
        while c.recv(65536):
            pass
        return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def test_connections_past_the_address_cap_get_429_and_others_are_served(port):
    held = [socket.create_connection(("127.0.0.1", port), source_address=("127.0.0.2", 0)) for _ in range(4)]
    try:
        refused = _get(port, "127.0.0.2")
        head, body = refused.split(b"\r\n\r\n", 1)
        assert head.startswith(b"HTTP/1.1 429") and json.loads(body)["error"]["code"] == "too_many_connections"
        assert _get(port, "127.0.0.3").startswith(b"HTTP/1.1 200")       # another address: served
    finally:
        for c in held:
            c.close()


@pytest.mark.parametrize("sent", [b"", b"GET / HTTP/1.1\r\nhost: x\r\n"])
def test_a_connection_that_sends_no_whole_request_head_is_cut(port, sent):
    with socket.create_connection(("127.0.0.1", port)) as c:
        c.sendall(sent)
        assert _closed(c)


def test_a_response_nobody_reads_is_cut_and_the_app_sees_the_client_gone(port):
    ABORTED.clear()
    with socket.socket() as c:
        c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        c.connect(("127.0.0.1", port))
        c.sendall(b"GET /big HTTP/1.1\r\nhost: x\r\n\r\n")
        deadline = time.time() + 20
        while not ABORTED and time.time() < deadline:
            time.sleep(0.1)
        assert ABORTED == ["http.disconnect"]
