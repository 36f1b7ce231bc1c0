"""The relay's reading of the engine process's socket: non-blocking, a message half-written is kept
until its rest arrives, never read as a failure of the engine; end of file is."""
from __future__ import annotations

import pickle
import socket

from twin.serve import wire
from twin.serve.live import LiveTwin


def test_a_message_split_across_reads_is_dispatched_once_whole():
    lt = LiveTwin()
    here, there = socket.socketpair()
    lt.peer = wire.Peer(here)
    lost = []
    lt._lost = lambda: lost.append(True)
    body = pickle.dumps(("gauges", {"sim_time": 1.5, "pad": "x" * 5000}, 0.99, 3))
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
