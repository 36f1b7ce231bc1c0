"""Clients that give up: a request left waiting in a queue `deadline_s` after its client last heard
anything times out, as a real client's read timeout fires and its user leaves.

What a client hears: the request's arrival (its wait starts), the end of its prefill (the first
token), and, when a fault takes it out of a decode batch, the tokens it streamed until then
(`RequestTable.progress`). Only a request *waiting in a queue* times out: in a prefill queue, or in
a decode queue for a decode slot. One being worked on (in a prefill batch, a KV transfer, a decode
batch) never does, so no work in progress is thrown away; nor does one that has streamed decode
tokens (generated > 1) and waits again because a fault sent it back: timing it out would throw
away decode work of the bottleneck pool (docs/deadlines.md). Under random failures the backlog sits in the decode
queues (prefill keeps up; the decode pool, losing instances, does not), so a deadline that spared
every request past prefill would shed nothing; the prefill work of a request that then times out
in a decode queue is lost, as it is on a real system whose user leaves.

An overloaded twin thus sheds load the way users feel it, by waits too long to bear, long before
the admission limit (Scenario.max_in_flight) or the request window's ceiling refuses arrivals.

When: a queue is first-in first-out, so its head waits longest; an instance drops the timed-out
requests at its head before it takes work (no request starts a batch past its deadline), and every
interval's close scans all queues (requests put back out of order by a fault or a hand-over are
found there). A timed-out request ends at its deadline (`finish` = progress + deadline_s).
Decode-only runs (KV from outside the run, no client to speak of) have no deadline.
"""
from __future__ import annotations

import math

import numpy as np

from twin.i18n import N_
from twin.engine.ports import QueueView

# Default client deadline: the OpenAI Python client's default timeout, 600 s ("default timeout is
# 10 minutes": DEFAULT_TIMEOUT = httpx.Timeout(timeout=600, connect=5.0), openai/openai-python
# src/openai/_constants.py); httpx applies it to each read, so a streaming client waits that long
# for its next token. Its retries (DEFAULT_MAX_RETRIES = 2) are not modelled.
DEFAULT_DEADLINE_S = 600.0
QUIET_S = 10.0    # assumption: simulated seconds with no time-out before the log says they stopped


class Deadlines:
    """Times out the queued requests whose clients have waited `deadline_s` with at most a first token."""

    def __init__(self, eng: QueueView):
        self.eng = eng
        self.deadline_s = eng.scenario.deadline_s
        self.on = eng.scenario.pipeline == "full"
        self.gave_up = 0           # timed out since time-outs began (0: none lately)
        self.last = -math.inf      # when the last one timed out

    def drop_head(self, inst) -> bool:
        """Time out the requests at the head of `inst`'s queue whose deadline has passed (up to the
        first that may not time out); True if the queue still holds any (a few reads when the head is
        in time: every batch and step asks)."""
        req, s, now = self.eng.req, self.deadline_s, self.eng.env.now
        if req.first_arrival + s > now:    # none has waited that long yet (no client heard before its arrival)
            return True
        queue, progress, generated, base = inst.queue, req.progress.a, req.generated.a, req.base
        head = queue[0] - base
        if progress.item(head) + s > now or generated.item(head) > 1:
            return True
        gone = []
        while queue and progress.item(queue[0] - base) + s <= now and generated.item(queue[0] - base) <= 1:
            gone.append(queue.popleft())
        self._time_out(inst, np.array(gone, dtype=np.int64))
        return bool(queue)

    def tick(self) -> None:
        """At an interval's close: time out every queued request past its deadline, wherever it
        waits in its queue; and say when time-outs have stopped."""
        eng = self.eng
        req, now, s = eng.req, eng.env.now, self.deadline_s
        if not self.on or req.first_arrival + s > now:     # (none can have timed out yet: drop_head)
            return
        for inst in eng.instances:
            queue = inst.queue
            if not queue:
                continue
            ids = np.fromiter(queue, dtype=np.int64, count=len(queue))
            rows = ids - req.base
            late = (req.progress.a[rows] + s <= now) & (req.generated.a[rows] <= 1)
            if late.any():
                queue.clear()
                queue.extend(ids[~late].tolist())
                self._time_out(inst, ids[late])
        if self.gave_up and now - self.last >= QUIET_S:
            eng.log("reject", N_("No request timing out any more, after %(n)s timed out"), n=f"{self.gave_up:,}")
            self.gave_up = 0

    def _time_out(self, inst, ids: np.ndarray) -> None:
        """`ids` (just taken off `inst`'s queue) time out at their deadlines; the event log says when
        requests start timing out, not at every one."""
        eng, req = self.eng, self.eng.req
        rows = ids - req.base
        req.time_out(ids, req.progress.a[rows] + self.deadline_s)
        if inst.kind == "prefill":
            inst.queued_tokens -= int(req.input.a[rows].sum())
        if not self.gave_up:
            eng.log("reject", N_("Requests timing out: %(n)s waited %(s)s s (the client deadline) in a queue "
                                 "and gave up"), n=f"{len(ids):,}", s=f"{self.deadline_s:g}")
        self.gave_up += len(ids)
        self.last = eng.env.now
