"""serve-replay's pieces that need no server: the raw client's SSE scanning (whatever the reads' split)
and the issue's bar (within 5% or 2 ms)."""
from __future__ import annotations

from conftest import run_coro
from twin.serve.replay import _SSE, within

EVENTS = [b'data: {"id":"c","choices":[{"index":0,"text":"the ","finish_reason":null}]}\n\n',
          b'data: {"id":"c","choices":[{"index":0,"text":"twin ","finish_reason":null}]}\n\n',
          b'data: {"id":"c","choices":[{"index":0,"text":"","finish_reason":"length"}],'
          b'"twin_timing":{"arrival_s":1.5,"chunk_times_s":[1.6,1.62],"chunk_tokens":[1,2]}}\n\ndata: [DONE]\n\n']
RESPONSE = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
            + b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in EVENTS) + b"0\r\n\r\n")


def _feed(parts: list[bytes]) -> _SSE:
    async def go():
        p = _SSE(b"")
        for part in parts:
            p.data_received(part)
        return p
    return run_coro(go())


def test_raw_client_counts_text_events_however_the_reads_split():
    whole = _feed([RESPONSE])
    assert whole.status == b"200" and len(whole.times) == 2
    assert whole.twin == {"arrival_s": 1.5, "chunk_times_s": [1.6, 1.62], "chunk_tokens": [1, 2]}
    for cut in range(1, len(RESPONSE)):
        p = _feed([RESPONSE[:cut], RESPONSE[cut:]])
        assert len(p.times) == 2 and p.twin == whole.twin, cut
    assert len(_feed([RESPONSE[i:i + 1] for i in range(len(RESPONSE))]).times) == 2


def test_within_five_percent_or_two_ms():
    assert within(21.0, 20.0) and within(101.9, 100.0) and within(105.0, 100.0)
    assert not within(106.0, 100.0) and not within(23.1, 21.0) and within(1000.0, 1040.0)
