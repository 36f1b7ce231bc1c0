"""Prefill and decode instances as SimPy processes: one event per prefill batch and per decode step.

Sequences in a decode batch are numpy arrays (request id, context length, tokens still to
produce); a step advances all of them at once. A prefill batch looks its prompts up in EMS,
computes only the missed tokens, stores the new blocks and ships the KV to a decode instance.
"""
from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

import numpy as np

from .requests import DECODE_QUEUE, DECODING, PREFILL

if TYPE_CHECKING:
    from .core import Engine


class Instance:
    """What prefill and decode instances share: placement, queue, health and a wake-up event."""

    def __init__(self, eng: "Engine", kind: str, idx: int, slot: int, dies: np.ndarray):
        self.eng, self.kind, self.idx, self.slot = eng, kind, idx, slot
        self.dies = dies                       # topology die indices
        self.nodes = np.unique(dies // eng.dies_per_node)
        self.npus = len(dies) / eng.pm.dies_per_npu
        self.queue: deque[int] = deque()
        self.alive = True
        self.down_reason = ""
        self._wake = eng.env.event()
        self.name = f"{kind}-{idx}"

    def wake(self) -> None:
        if not self._wake.triggered:
            self._wake.succeed()

    def wait(self):
        self._wake = self.eng.env.event()
        return self._wake


class PrefillInstance(Instance):
    def __init__(self, eng, idx, slot, dies):
        super().__init__(eng, "prefill", idx, slot, dies)
        self.queued_tokens = 0
        self.budget = eng.dep.prefill.tokens_per_die * len(dies)
        self.running: list[int] = []

    def enqueue(self, rid: int) -> None:
        self.queue.append(rid)
        self.queued_tokens += int(self.eng.req.input[rid])
        self.eng.req.instance[rid] = self.idx
        self.wake()

    def run(self):
        eng, req = self.eng, self.eng.req
        while True:
            if not self.queue or not self.alive or eng.partitioned:
                yield self.wait()
                continue
            batch, tokens = [], 0
            while self.queue and (not batch or tokens + req.input[self.queue[0]] <= self.budget):
                rid = self.queue.popleft()
                batch.append(rid)
                tokens += int(req.input[rid])
            self.queued_tokens -= tokens
            self.running = batch
            ids = np.array(batch)
            start = eng.env.now
            req.state[ids] = PREFILL
            req.prefill_start[ids] = start
            cached = eng.cache_lookup(ids, self)
            seconds = eng.prefill_seconds(req.input[ids], cached, len(self.dies))
            eng.metrics.add_busy(self.slot, start, seconds, eng.interval_end)
            eng.account_prefill(self, ids, cached)
            yield eng.env.timeout(seconds)
            if not self.running:       # the instance failed mid-batch; its requests were requeued
                continue
            self.running = []
            now = eng.env.now
            req.prefill_end[ids] = now
            req.first_token[ids] = now
            req.generated[ids] = 1
            eng.metrics.cur.input_tokens += float(req.input[ids].sum())
            single = req.output[ids] <= 1
            if single.any():
                eng.finish(ids[single])
            if (~single).any():
                eng.env.process(eng.transfer_kv(ids[~single], self))


class DecodeInstance(Instance):
    def __init__(self, eng, idx, slot, dies):
        super().__init__(eng, "decode", idx, slot, dies)
        self.ids = np.zeros(0, dtype=np.int64)
        self.ctx = np.zeros(0)
        self.left = np.zeros(0, dtype=np.int64)
        self.reserved = 0.0              # KV tokens reserved by the admitted sequences

    def enqueue(self, rids: np.ndarray) -> None:
        self.eng.req.state[rids] = DECODE_QUEUE
        self.eng.req.instance[rids] = self.idx
        self.queue.extend(int(r) for r in rids)
        self.wake()

    def load(self) -> int:
        return len(self.ids) + len(self.queue)

    def _admit(self) -> None:
        eng, req = self.eng, self.eng.req
        cap = eng.decode_cap(self)
        kv_cap = eng.kv_capacity_tokens * len(self.dies)
        room = cap - len(self.ids)
        if room <= 0 or not self.queue:
            return
        take = []
        while self.queue and len(take) < room:
            rid = self.queue[0]
            need = req.input[rid] + req.output[rid]
            if self.reserved + need > kv_cap and (len(self.ids) or take):
                break
            self.queue.popleft()
            self.reserved += need
            take.append(rid)
        if take:
            t = np.array(take)
            req.state[t] = DECODING
            self.ids = np.concatenate([self.ids, t])
            self.ctx = np.concatenate([self.ctx, (req.input[t] + req.generated[t]).astype(float)])
            self.left = np.concatenate([self.left, req.output[t] - req.generated[t]])

    def run(self):
        eng, req = self.eng, self.eng.req
        while True:
            if self.alive and not eng.partitioned:
                self._admit()
            if not len(self.ids) or not self.alive or eng.partitioned:
                yield self.wait()
                continue
            n = len(self.ids)
            start = eng.env.now
            seconds = eng.decode_seconds(n / self.npus, float(self.ctx.mean()))
            eng.metrics.add_busy(self.slot, start, seconds, eng.interval_end)
            eng.account_decode(self, n, seconds)
            yield eng.env.timeout(seconds)
            if not self.alive or len(self.ids) != n:   # failed mid-step: the step is lost
                continue
            got = eng.accepted_tokens(n)
            made = np.minimum(got, self.left)
            self.left -= made
            self.ctx += made
            req.generated[self.ids] += made
            eng.metrics.cur.output_tokens += float(made.sum())
            first = np.isnan(req.first_token[self.ids])
            if first.any():                      # decode-only runs: first token from decode
                req.first_token[self.ids[first]] = eng.env.now
            done = self.left <= 0
            if done.any():
                fin = self.ids[done]
                self.reserved -= float((req.input[fin] + req.output[fin]).sum())
                keep = ~done
                self.ids, self.ctx, self.left = self.ids[keep], self.ctx[keep], self.left[keep]
                eng.finish(fin)

    def evict_all(self) -> np.ndarray:
        """Drop every sequence (instance failure); returns the ids for requeueing."""
        ids = np.concatenate([self.ids, np.array(list(self.queue), dtype=np.int64)])
        self.ids = np.zeros(0, dtype=np.int64)
        self.ctx = np.zeros(0)
        self.left = np.zeros(0, dtype=np.int64)
        self.queue.clear()
        self.reserved = 0.0
        return ids

