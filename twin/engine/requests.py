"""Per-request records as growable numpy columns: a request is a row index, never an object."""
from __future__ import annotations

import numpy as np

# request states
QUEUED, PREFILL, TRANSFER, DECODE_QUEUE, DECODING, DONE, REJECTED = range(7)
STATE_NAMES = ("queued", "prefill", "transfer", "decode_queue", "decoding", "done", "rejected")

_FLOAT_COLS = ("arrival", "prefill_start", "prefill_end", "first_token", "finish")
_INT_COLS = ("input", "output", "cached", "state", "instance", "generated", "requeued",
             "recomputed", "block_lo", "block_hi")


class RequestTable:
    """Columns of every request seen so far; arrays double in size as requests arrive."""

    def __init__(self, capacity: int = 1 << 14):
        self.n = 0
        self.block_ids = np.zeros(capacity * 8, dtype=np.int64)   # all requests' blocks, CSR
        self.n_blocks = 0
        for c in _FLOAT_COLS:
            setattr(self, c, np.full(capacity, np.nan))
        for c in _INT_COLS:
            setattr(self, c, np.zeros(capacity, dtype=np.int64))

    def _grow(self, need: int) -> None:
        cap = len(self.arrival)
        if need <= cap:
            return
        new = max(need, 2 * cap)
        for c in _FLOAT_COLS:
            a = np.full(new, np.nan)
            a[:cap] = getattr(self, c)
            setattr(self, c, a)
        for c in _INT_COLS:
            a = np.zeros(new, dtype=np.int64)
            a[:cap] = getattr(self, c)
            setattr(self, c, a)

    def add(self, arrival, inp, out, ptr=None, block_ids=None) -> np.ndarray:
        """Append requests (block ids in CSR form, or none); returns their ids."""
        k = len(arrival)
        self._grow(self.n + k)
        ids = np.arange(self.n, self.n + k)
        self.arrival[ids] = arrival
        self.input[ids] = inp
        self.output[ids] = out
        self.state[ids] = QUEUED
        self.instance[ids] = -1
        if block_ids is not None and len(block_ids):
            need = self.n_blocks + len(block_ids)
            if need > len(self.block_ids):
                grown = np.zeros(max(need, 2 * len(self.block_ids)), dtype=np.int64)
                grown[:self.n_blocks] = self.block_ids[:self.n_blocks]
                self.block_ids = grown
            self.block_ids[self.n_blocks:need] = block_ids
            self.block_lo[ids] = self.n_blocks + ptr[:-1]
            self.block_hi[ids] = self.n_blocks + ptr[1:]
            self.n_blocks = need
        self.n += k
        return ids

    def blocks(self, i: int) -> np.ndarray:
        return self.block_ids[self.block_lo[i]:self.block_hi[i]]

    def counts(self) -> dict:
        st = self.state[: self.n]
        c = np.bincount(st, minlength=len(STATE_NAMES))
        return {"arrived": int(self.n), "completed": int(c[DONE]), "rejected": int(c[REJECTED]),
                "in_flight": int(self.n - c[DONE] - c[REJECTED])}

    def frame(self):
        """All requests as a pandas DataFrame (times in seconds)."""
        import pandas as pd
        n = self.n
        df = pd.DataFrame({c: getattr(self, c)[:n] for c in _FLOAT_COLS + _INT_COLS})
        df["state"] = pd.Categorical.from_codes(df["state"], STATE_NAMES)
        df["queueing_s"] = df["prefill_start"] - df["arrival"]
        df["ttft_s"] = df["first_token"] - df["arrival"]
        gen = np.maximum(df["output"] - 1, 1)
        df["tpot_s"] = (df["finish"] - df["first_token"]) / gen
        return df
