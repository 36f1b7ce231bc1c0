"""Issue 34, item 5: the room server (`make room`, twin.cli.room) survives slow clients. Half-sent
requests hold no thread, one address holds at most its cap of connections (the next gets a 429
saying so), a request must arrive whole within its deadline, and the docs and the Makefile start
the same server."""
from __future__ import annotations

import re
import socket
import threading
from pathlib import Path

import pytest

from twin.cli import room

ROOT = Path(__file__).resolve().parents[1]
ATTACKER = "127.0.0.66"          # loopback, but another address than the viewers' 127.0.0.1


def hello(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"hello " + environ["REMOTE_ADDR"].encode() + b" " + environ.get("HTTP_X_FORWARDED_FOR", "").encode()]


@pytest.fixture
def serve():
    """serve(**options) -> (host, port) of a room server for `hello`, running in a thread."""
    servers = []

    def start(**kw):
        srv = room.room_server(hello, "127.0.0.1", 0, **kw)
        threading.Thread(target=srv.run, daemon=True).start()
        servers.append(srv)
        return srv.effective_host, srv.effective_port
    yield start
    for srv in servers:
        srv.task_dispatcher.shutdown(timeout=1)
        for ch in list(srv._map.values()):
            ch.close()


def connect(addr, source: str = "127.0.0.1") -> socket.socket:
    s = socket.create_connection(addr, timeout=20, source_address=(source, 0))
    return s


def get(addr, source: str = "127.0.0.1", headers: bytes = b"") -> bytes:
    """A whole answer to GET / (read until the server closes)."""
    with connect(addr, source) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: room\r\n" + headers + b"Connection: close\r\n\r\n")
        data = b""
        while chunk := s.recv(4096):
            data += chunk
    return data


def test_half_sent_requests_hold_no_thread(serve):
    addr = serve(threads=2, per_address=50)
    slow = [connect(addr, ATTACKER) for _ in range(20)]          # ten times the threads
    for s in slow:
        s.sendall(b"GET / HTTP/1.1\r\nHost: room\r\nX-Slow: ")
    reply = get(addr)
    assert reply.startswith(b"HTTP/1.1 200") and reply.endswith(b"hello 127.0.0.1 ")
    for s in slow:
        s.close()


def test_one_address_gets_a_429_past_its_cap_and_others_are_served(serve, monkeypatch):
    monkeypatch.delenv("TWIN_TRUSTED_PROXIES", raising=False)
    addr = serve(per_address=3)
    held = [connect(addr, ATTACKER) for _ in range(3)]
    held[-1].sendall(b"GET / HTTP/1.1\r\nHost: room\r\n\r\n")
    assert held[-1].recv(4096).startswith(b"HTTP/1.1 200")       # connections are served up to the cap
                                                                  # (the status line comes first, whole)
    refused = get(addr, ATTACKER)
    head, _, body = refused.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 429 Too Many Requests") and b"Retry-After: 30" in head
    assert b"at most 3 at once" in body and ATTACKER.encode() in body and len(refused) < 600
    assert get(addr).startswith(b"HTTP/1.1 200")                  # another address is not refused
    held.pop().close()                                            # one closed: one more may open
    for _ in range(100):                                          # (once the server has seen it close)
        reply = get(addr, ATTACKER)
        if reply.startswith(b"HTTP/1.1 200"):
            break
    assert reply.startswith(b"HTTP/1.1 200")
    for s in held:
        s.close()


def test_a_trusted_proxy_is_not_capped(serve, monkeypatch):
    monkeypatch.setenv("TWIN_TRUSTED_PROXIES", ATTACKER)
    addr = serve(per_address=2)
    held = [connect(addr, ATTACKER) for _ in range(4)]
    assert get(addr, ATTACKER).startswith(b"HTTP/1.1 200")
    for s in held:
        s.close()


def test_a_request_trickling_in_is_closed_at_its_deadline(serve):
    addr = serve(request_s=1)
    s = connect(addr, ATTACKER)
    s.sendall(b"GET / HTTP/1.1\r\nHost: room\r\n")
    for _ in range(8):                    # a byte every 0.5 s keeps it from being idle, not from its deadline
        s.sendall(b"X")
        try:
            s.settimeout(0.5)
            if s.recv(64) == b"":
                break
        except socket.timeout:
            continue
    s.settimeout(20)
    assert s.recv(64) == b""              # closed by the server, never answered
    s.close()
    assert get(addr, ATTACKER).startswith(b"HTTP/1.1 200")   # and its slot is free again


def test_forwarded_for_reaches_the_app_which_alone_decides_whom_to_believe(serve):
    reply = get(serve(), headers=b"X-Forwarded-For: 6.6.6.6, 1.2.3.4\r\n")
    assert reply.endswith(b"hello 127.0.0.1 6.6.6.6, 1.2.3.4")     # (twin.ui.guard.remote_address)


def test_the_server_header_names_no_server_software(serve):
    head = get(serve()).split(b"\r\n\r\n")[0].decode()
    assert "Server: CloudMatrix Twin" in head and "waitress" not in head.lower()


def test_make_room_is_the_command_the_docs_give():
    recipe = re.search(r"^room:.*\n\t(.*)\n", (ROOT / "Makefile").read_text(), re.M).group(1)
    command = recipe.replace("$(BIN)", ".venv/bin").replace("$(PORT)", "8050")
    assert command == ".venv/bin/python -m twin.cli.room --host 0.0.0.0 --port 8050"
    assert f"`{command}`" in (ROOT / "docs/how-to/serve-a-room.md").read_text()
    for doc in ("docs/how-to/serve-a-room.md", "docs/class.md", "README.md"):
        blocks = "\n".join(re.findall(r"```[a-z]*\n(.*?)```", (ROOT / doc).read_text(), re.S))
        assert "make room" in blocks, doc
        assert "gunicorn" not in blocks, doc     # gthread fell to 8 half-sent requests
