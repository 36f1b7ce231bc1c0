"""The relay's reading of the engine process's pipe: non-blocking (uvloop makes the fd so anyway), a
message half-written is kept until its rest arrives, never read as a failure of the engine."""
from __future__ import annotations

import multiprocessing as mp
import os
import pickle

from twin.serve.relay import LiveTwin


def test_a_message_split_across_reads_is_dispatched_once_whole():
    lt = LiveTwin()
    r, w = mp.Pipe(duplex=False)
    os.set_blocking(r.fileno(), False)
    lt.reader = r
    lost = []
    lt._lost = lambda: lost.append(True)
    body = pickle.dumps(("gauges", {"sim_time": 1.5, "pad": "x" * 5000}, 0.99, 3))
    frame = len(body).to_bytes(4, "big") + body + len(body).to_bytes(4, "big") + body
    fd = w.fileno()
    os.write(fd, frame[:2])
    lt._readable()                            # two bytes of a header
    lt._readable()                            # nothing to read (EAGAIN): not a lost engine
    assert lt.gauges == {} and not lost
    os.write(fd, frame[2:3000])
    lt._readable()
    assert lt.gauges == {} and not lost
    os.write(fd, frame[3000:])
    lt._readable()
    assert lt.gauges["sim_time"] == 1.5 and (lt.pace, lt.late) == (0.99, 3) and not lost and not lt._buf
    w.close()
    lt._readable()                            # end of file: the engine process is gone
    assert lost == [True]
    r.close()
