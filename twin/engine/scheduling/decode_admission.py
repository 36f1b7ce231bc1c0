"""Decode admission: the queue's head, in order, while the KV the admitted sequences reserve
(prompt + all output tokens) stays within the instance's capacity; an empty instance always takes
its first sequence. Needs are whole tokens, so the running sums are exact (and the last is the
largest, so when it fits, all do)."""
from __future__ import annotations

import numpy as np

from twin.engine.scheduling.base import DECODE_ADMISSION, DecodeAdmission, register


@register(DECODE_ADMISSION, "fifo-kv-reserve")
class FifoKvReserve(DecodeAdmission):
    def admit(self, need, reserved, kv_capacity, empty):
        total = reserved + int(np.add.reduce(need))     # Python numbers (numpy scalars are slow)
        if total <= kv_capacity:          # all fit (needs >= 0: the last running sum is the largest)
            return len(need)
        fits = reserved + np.cumsum(need) <= kv_capacity
        if empty and len(fits):
            fits[0] = True
        return len(fits) if fits.all() else int(np.argmin(fits))
