"""The relay's reading of the engine process's socket: non-blocking, a message half-written is kept
until its rest arrives, never read as a failure of the engine; end of file is."""
from __future__ import annotations

import pickle
import socket

from twin.serve import messages, wire
from twin.serve.relay import LiveTwin


def test_a_message_split_across_reads_is_dispatched_once_whole():
    lt = LiveTwin()
    here, there = socket.socketpair()
    lt.peer = wire.Peer(here)
    lost = []
    lt._lost = lambda: lost.append(True)
    body = pickle.dumps(messages.Gauges({"sim_time": 1.5, "pad": "x" * 5000}, 0.99, 3))
    frame = len(body).to_bytes(4, "big") + body + len(body).to_bytes(4, "big") + body
    there.sendall(frame[:2])
    lt._readable()                            # two bytes of a header
    lt._readable()                            # nothing to read (EAGAIN): not a lost engine
    assert lt.gauges == {} and not lost
    there.sendall(frame[2:3000])
    lt._readable()
    assert lt.gauges == {} and not lost
    there.sendall(frame[3000:])
    lt._readable()
    assert lt.gauges["sim_time"] == 1.5 and (lt.pace, lt.late) == (0.99, 3) and not lost and not lt.peer.frames.buf
    there.close()
    lt._readable()                            # end of file: the engine process is gone
    assert lost == [True]
    here.close()


def test_the_writer_sends_from_the_relay_callback_and_waits_out_a_paused_connection():
    """A stream's chunks are written by the relay's callback itself; when the connection's writing is
    paused (a slow client) the chunks that come meanwhile wait and leave together, in order, and the
    stream is done only once everything is written."""
    import asyncio

    from conftest import run_coro
    from twin.serve import prompt
    from twin.serve.api import _Choice, _Writer
    from twin.serve.relay import Stream

    async def go():
        s = Stream(10, 6, None)
        sent, gate = [], asyncio.get_running_loop().create_future()

        async def send(msg):
            assert msg["more_body"]
            if len(sent) == 1:
                await gate                    # the second write finds the connection paused
            sent.append(msg["body"])
        w = _Writer([_Choice(s, b"<F>", b"<P>", b"|")], send, prompt.filler)
        s.push(1.00, 1, "")
        assert sent == [b"<F>" + prompt.filler(0, 1).encode() + b"|}\n\n"]
        s.push(1.02, 3, "")                   # paused inside send
        s.push(1.04, 4, "")
        s.push(1.06, 6, "stop")
        await asyncio.sleep(0.01)
        assert len(sent) == 1 and not w.done.done()
        gate.set_result(None)
        await asyncio.wait_for(w.done, 1.0)
        return sent
    sent = run_coro(go())
    chunk = lambda start, k: b"<P>" + prompt.filler(start, k).encode() + b"|}\n\n"   # noqa: E731
    assert sent[1:] == [chunk(1, 2), chunk(3, 1) + chunk(4, 2)]
