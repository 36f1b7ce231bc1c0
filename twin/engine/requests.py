"""Per-request records as numpy columns keyed by request id, and the lifecycle audit.

A request is an id (a row), never an object. Rows live in a rolling window: `compact()` drops the
oldest rows once they are terminal (never one still in flight), so memory stays bounded however long
the twin runs while every in-flight id stays valid; `sink` (if set) receives the dropped rows first.
An old request in flight holds the window open: past MAX_WINDOW_ROWS arrivals are refused without a
row (`refuse_staged`), so even then memory is bounded.
Terminal transitions go through `complete()`, `reject()` and `time_out()` only: each request is
counted once, and a second finish, a finish of a rejected, timed-out or unknown request is counted as
an error and ignored.
The counters (not the window) carry the run totals that `audit()` checks for conservation.
"""
from __future__ import annotations

import math

import numpy as np

from twin.engine.compiled import FLOATS, INT64, INTS, kernel

# request states; everything below DONE is in flight. TIMED_OUT: its client gave up while it was
# still queued for prefill (twin.engine.deadlines)
QUEUED, PREFILL, TRANSFER, DECODE_QUEUE, DECODING, DONE, REJECTED, TIMED_OUT = range(8)
STATE_NAMES = ("queued", "prefill", "transfer", "decode_queue", "decoding", "done", "rejected", "timed_out")
REJECT_REASONS = ("kv_too_long", "overloaded")   # reason codes a rejection carries (column `reason` = index + 1)
KEEP_ROWS = 10_000    # assumption: rows kept beyond those in flight (~4.5 MB at ~450 B per request);
#                       pages read snapshots, not rows, so the window only serves --out and debugging
MAX_WINDOW_ROWS = 250_000   # assumption: the window's ceiling (50-100 MB at 200-400 B a row); it spans
#                             every request since the oldest in flight, so arrivals past it are refused
GROWTH = 1.25   # a full column or block list grows by a quarter, not double: capacity stays within 25%
#                 of the most rows ever held (a live twin's 76k-row window took 131,072 rows, now 78,125)

_min = np.minimum.reduce   # ndarray.min() without its Python wrapper (rows() runs per access)
_max = np.maximum.reduce
_FLOAT_COLS = ("arrival", "prefill_start", "prefill_end", "first_token", "finish",
               "progress")    # the last time its client heard anything: arrival, a prefill's end, or a
#                               decode batch it left (twin.engine.deadlines); not in frame()
_INT_COLS = ("input", "output", "cached", "state", "instance", "generated", "requeued",
             "recomputed", "reason", "block_lo", "block_hi")
# The columns are the rows of two arrays, `floats` and `ints` (the order above): a compiled pass takes
# the two arrays, not a column each (numba unboxes each array argument, ~0.1 us a call), and
# indexes them with these (numba reads them when it compiles: a change here must clear the kernels'
# cache, twin/engine/__pycache__/*.nbi)
F_ARRIVAL, F_PREFILL_START, F_PREFILL_END, F_FIRST_TOKEN, F_FINISH, F_PROGRESS = range(len(_FLOAT_COLS))
(I_INPUT, I_OUTPUT, I_CACHED, I_STATE, I_INSTANCE, I_GENERATED, I_REQUEUED, I_RECOMPUTED, I_REASON, I_BLOCK_LO,
 I_BLOCK_HI) = range(len(_INT_COLS))


def _grown(cap: int, need: int) -> int:
    """The capacity after `cap` is outgrown by `need`: a quarter more, or `need` if that is more."""
    return max(need, int(cap * GROWTH))


class Column:
    """One column addressed by request id; the table maps ids to rows of its window."""
    __slots__ = ("table", "a")

    def __init__(self, table: "RequestTable", a: np.ndarray):
        self.table, self.a = table, a

    def __getitem__(self, key):
        return self.a[self.table.rows(key) if self.table.base else key]

    def __setitem__(self, key, value) -> None:
        self.a[self.table.rows(key) if self.table.base else key] = value

    def __len__(self) -> int:
        return self.table.n - self.table.base


class RequestTable:
    """Columns of the requests in the window [base, n), then the `staged` rows of requests not
    yet arrived; capacity grows by GROWTH as requests arrive."""

    def __init__(self, capacity: int = 1 << 14):
        self.n = 0                  # ids handed out so far (= requests admitted)
        self.staged = 0             # rows after those: requests taken from the source, not yet arrived
        self.first_arrival = math.inf   # the earliest arrival ever staged: no `progress` is before it
        self.base = 0               # smallest id still held in the columns
        self.block_ids = np.zeros(capacity * 8, dtype=np.int64)   # window's blocks, CSR
        self.block_base = 0         # absolute block position of block_ids[0]
        self.n_blocks = 0           # absolute block positions handed out so far
        self.completed = 0
        self.dropped = 0            # refused past the window's ceiling: counted, never given an id or a row
        self.rejected = np.zeros(len(REJECT_REASONS), dtype=np.int64)
        self.n_rejected = 0         # their sum: `in_flight` is asked at every arrival tick
        self.timed_out = 0          # gave up waiting for prefill (time_out)
        self.tokens_short = 0       # completed with fewer output tokens than asked for
        self.errors = {"finish_twice": 0, "finish_rejected": 0, "finish_timed_out": 0, "finish_unknown": 0,
                       "reject_terminal": 0}
        self.sink = None            # callable(frame) receiving rows before they are dropped
        self.floats = np.full((len(_FLOAT_COLS), capacity), np.nan)
        self.ints = np.zeros((len(_INT_COLS), capacity), dtype=np.int64)
        for i, c in enumerate(_FLOAT_COLS):
            setattr(self, c, Column(self, self.floats[i]))
        for i, c in enumerate(_INT_COLS):
            setattr(self, c, Column(self, self.ints[i]))

    def rows(self, key):
        """Rows of request ids (an id, an array of ids or a slice of ids)."""
        b = self.base
        if type(key) is np.ndarray:         # the common case first: one subtraction, one check
            if not b:
                return key
            r = key - b                     # small arrays are checked in Python (no ufunc call)
            if r.size and (min(r.tolist()) if r.size <= 16 and r.ndim == 1 else _min(r)) < 0:
                raise IndexError(f"request id below {b}: compacted out of the window (terminal)")
            return r
        if isinstance(key, slice):
            start = b if key.start is None else max(int(key.start), b)
            stop = self.n if key.stop is None else int(key.stop)
            return slice(start - b, max(stop - b, 0))
        if not b:
            return key
        if type(key) is int or isinstance(key, np.integer):
            r = key - b
            if r < 0:
                raise IndexError(f"request id {key} < {b}: compacted out of the window (terminal)")
            return r
        return self.rows(np.asarray(key))

    def _grow(self, need: int) -> None:
        cap = self.floats.shape[1]
        if need <= cap:
            return
        new = _grown(cap, need)
        floats, ints = np.full((len(_FLOAT_COLS), new), np.nan), np.zeros((len(_INT_COLS), new), dtype=np.int64)
        floats[:, :cap], ints[:, :cap] = self.floats, self.ints
        self.floats, self.ints = floats, ints
        for i, c in enumerate(_FLOAT_COLS):
            getattr(self, c).a = floats[i]
        for i, c in enumerate(_INT_COLS):
            getattr(self, c).a = ints[i]

    def add(self, arrival, inp, out, ptr=None, block_ids=None) -> np.ndarray:
        """Append requests that arrive now (block ids in CSR form, or none); returns their ids."""
        self.stage(arrival, inp, out, ptr, block_ids)
        return self.admit(len(arrival))

    def stage(self, arrival, inp, out, ptr=None, block_ids=None) -> None:
        """Write requests that have not arrived yet into the rows after the admitted ones (and
        any staged before them): `admit()` hands out their ids in order as they arrive, and
        `unstage()` drops those left. One vector step for many arrivals, not one per tick."""
        k = len(arrival)
        end = self.n + self.staged
        self._grow(end - self.base + k)
        rows = slice(end - self.base, end - self.base + k)
        self.staged += k
        self.arrival.a[rows] = arrival
        self.progress.a[rows] = arrival
        if k and self.arrival.a[rows].min() < self.first_arrival:
            self.first_arrival = float(self.arrival.a[rows].min())
        self.input.a[rows] = inp
        self.output.a[rows] = out
        self.state.a[rows] = QUEUED
        self.instance.a[rows] = -1
        if block_ids is not None and len(block_ids):
            have = self.n_blocks - self.block_base
            need = have + len(block_ids)
            if need > len(self.block_ids):
                grown = np.zeros(_grown(len(self.block_ids), need), dtype=np.int64)
                grown[:have] = self.block_ids[:have]
                self.block_ids = grown
            self.block_ids[have:need] = block_ids
            self.block_lo.a[rows] = self.n_blocks + ptr[:-1]
            self.block_hi.a[rows] = self.n_blocks + ptr[1:]
            self.n_blocks += len(block_ids)

    def admit(self, k: int) -> np.ndarray:
        """The next k staged requests arrive: their ids (the table counts them from now on)."""
        if not 0 < k <= self.staged:
            raise ValueError(f"admit: k = {k}: must be from 1 to the {self.staged} staged requests")
        ids = np.arange(self.n, self.n + k)
        self.n += k
        self.staged -= k
        return ids

    def refuse_staged(self, k: int) -> None:
        """The next k staged requests arrive while the window is at its ceiling: they are counted
        (arrived, rejected as overloaded) and go to the sink (if any), but get no id and keep no
        row, and their blocks are freed, so memory stays bounded while an old request in flight
        holds the window open."""
        if not 0 < k <= self.staged:
            raise ValueError(f"refuse_staged: k = {k}: must be from 1 to the {self.staged} staged requests")
        lo, m = self.n - self.base, self.staged - k
        code = REJECT_REASONS.index("overloaded")
        if self.sink is not None:             # --out and sweeps still see them, with no id (-1)
            self.state.a[lo:lo + k] = REJECTED
            self.reason.a[lo:lo + k] = code + 1
            df = self.frame(self.n, self.n + k)
            df["id"] = -1
            self.sink(df)
        b_lo = int(self.block_lo.a[lo:lo + k].min(initial=self.n_blocks))    # their blocks: one run
        b_hi = int(self.block_hi.a[lo:lo + k].max(initial=b_lo))
        b_lo = min(b_lo, b_hi)
        for a, empty in ((self.floats, np.nan), (self.ints, 0)):
            a[:, lo:lo + m] = a[:, lo + k:lo + k + m]
            a[:, lo + m:lo + m + k] = empty
        if b_hi > b_lo:                        # later staged blocks move down over the freed run
            gap = b_hi - b_lo
            have = self.n_blocks - self.block_base
            self.block_ids[b_lo - self.block_base:have - gap] = self.block_ids[b_hi - self.block_base:have]
            rows = slice(lo, lo + m)
            moved = self.block_hi.a[rows] > self.block_lo.a[rows]
            self.block_lo.a[rows] -= gap * moved
            self.block_hi.a[rows] -= gap * moved
            self.n_blocks -= gap
        self.staged = m
        self.dropped += k
        self.rejected[code] += k
        self.n_rejected += int(k)

    def unstage(self) -> None:
        """Drop the staged requests (their source was redrawn): fresh rows, their blocks freed."""
        if not self.staged:
            return
        rows = slice(self.n - self.base, self.n + self.staged - self.base)
        lo, hi = self.block_lo.a[rows], self.block_hi.a[rows]
        if (hi > lo).any():
            self.n_blocks = int(lo[hi > lo].min())
        self.floats[:, rows] = np.nan
        self.ints[:, rows] = 0
        self.staged = 0

    def blocks(self, i: int) -> np.ndarray:
        lo, hi = int(self.block_lo[i]), int(self.block_hi[i])
        if hi <= lo:
            return self.block_ids[:0]
        return self.block_ids[lo - self.block_base:hi - self.block_base]

    # ---- terminal transitions (each exactly once) ----------------------------------------------
    def _known(self, ids, err: str) -> np.ndarray:
        """The ids sorted, each once (a repeated id in one call counts once), known ones only."""
        ids = np.array(ids, dtype=np.int64)       # a copy to sort in place (no np.sort wrapper)
        ids.sort()
        listed = ids.tolist()                     # checked in Python: a few ids per call, mostly
        if len(set(listed)) < len(listed):
            ids = np.unique(ids)
        if listed and (listed[0] < self.base or listed[-1] >= self.n):
            known = (ids >= self.base) & (ids < self.n)
            self.errors[err] += int((~known).sum())
            ids = ids[known]
        return ids

    def complete(self, ids, now: float) -> np.ndarray:
        """Mark requests done at `now`; returns the ids that really finished now (sorted)."""
        ids = np.array(ids, dtype=np.int64)       # a copy to sort in place
        ids.sort()
        short = _complete_rows(ids, self.base, self.n, self.ints, self.floats, now)
        if short < 0:                             # a repeated, unknown or terminal id among them
            return self._complete_checked(ids, now)
        self.completed += len(ids)
        self.tokens_short += short
        return ids

    def _complete_checked(self, ids, now: float) -> np.ndarray:
        """complete() that counts each error (a second finish, a rejected or unknown id) and
        finishes the rest."""
        ids = self._known(ids, "finish_unknown")
        rows = ids - self.base                    # known: in the window
        st = self.state.a[rows]
        if len(st) and _max(st) >= DONE:          # the error path: count, keep the live ones
            self.errors["finish_twice"] += int((st == DONE).sum())
            self.errors["finish_rejected"] += int((st == REJECTED).sum())
            self.errors["finish_timed_out"] += int((st == TIMED_OUT).sum())
            live = st < DONE
            ids, rows = ids[live], rows[live]
        self.state.a[rows] = DONE
        self.finish.a[rows] = now
        self.completed += len(ids)
        self.tokens_short += int(np.count_nonzero(self.generated.a[rows] < self.output.a[rows]))
        return ids

    def reject(self, ids, reason: str) -> np.ndarray:
        """Refuse requests that cannot be served, with a reason code from REJECT_REASONS."""
        code = REJECT_REASONS.index(reason)
        ids = self._known(ids, "reject_terminal")
        st = self.state[ids]
        self.errors["reject_terminal"] += int((st >= DONE).sum())
        ids = ids[st < DONE]
        self.state[ids] = REJECTED
        self.reason[ids] = code + 1
        self.rejected[code] += len(ids)
        self.n_rejected += len(ids)
        return ids

    def time_out(self, ids: np.ndarray, when: np.ndarray) -> None:
        """Requests (in flight, in the window) whose clients gave up at `when`: terminal, counted once."""
        rows = self.rows(ids)
        self.state.a[rows] = TIMED_OUT
        self.finish.a[rows] = when
        self.timed_out += len(rows)

    # ---- the audit -----------------------------------------------------------------------------
    @property
    def arrived(self) -> int:
        """Admitted (ids handed out) and refused without a row."""
        return self.n + self.dropped

    @property
    def in_flight(self) -> int:
        return int(self.arrived - self.completed - self.n_rejected - self.timed_out)

    def in_flight_ids(self) -> np.ndarray:
        return self.base + np.flatnonzero(self.state.a[:self.n - self.base] < DONE)

    def counts(self) -> dict:
        rejected = self.n_rejected
        arrived = self.arrived
        return {"arrived": int(arrived), "completed": int(self.completed), "rejected": rejected,
                "timed_out": self.timed_out, "in_flight": int(arrived - self.completed - rejected - self.timed_out)}

    def audit(self, held: np.ndarray | None = None) -> dict:
        """Run totals and their checks: arrived = completed + rejected + timed out + in flight, the in-flight
        count agrees with the rows' states, and (given the ids the engine holds) no in-flight
        request is held by nothing (`orphaned`: it can never finish) and no finished one is held."""
        live = self.in_flight_ids()
        out = {**self.counts(),
               "rejected_by_reason": {r: int(k) for r, k in zip(REJECT_REASONS, self.rejected)},
               "tokens_short": int(self.tokens_short), "errors": dict(self.errors)}
        ok = len(live) == self.in_flight and not any(self.errors.values())
        if held is not None:
            held = np.unique(held[held >= self.base])
            out["orphaned"] = int(len(np.setdiff1d(live, held, assume_unique=True)))
            out["held_terminal"] = int((self.state[held] >= DONE).sum()) if len(held) else 0
            ok = ok and not out["orphaned"] and not out["held_terminal"]
        out["conserved"] = bool(ok)
        return out

    # ---- the rolling window --------------------------------------------------------------------
    def compact(self, keep: int = KEEP_ROWS) -> int:
        """Drop the oldest terminal rows beyond the last `keep` (stopping at the first request still
        in flight); runs only when it frees at least half a window. Returns the rows dropped. Only
        the rows it could drop are looked at, and only when they are enough (most intervals)."""
        least, cut = max(keep // 2, 1), self.n - keep
        if cut - self.base < least:
            return 0
        live = self.state.a[:cut - self.base] < DONE
        if live.any():
            cut = self.base + int(live.argmax())      # the oldest request in flight
        drop = cut - self.base
        if drop < least:
            return 0
        if self.sink is not None:
            self.sink(self.frame(stop=cut))
        m = self.n + self.staged - cut                        # staged rows move with the rest
        for a, empty in ((self.floats, np.nan), (self.ints, 0)):
            a[:, :m] = a[:, drop:drop + m]
            a[:, m:m + drop] = empty                          # fresh rows start empty
        self.base = cut
        lo, hi = self.block_lo.a[:m], self.block_hi.a[:m]
        bb = int(lo[hi > lo].min()) if (hi > lo).any() else self.n_blocks
        shift = bb - self.block_base
        self.block_ids[:self.n_blocks - bb] = self.block_ids[shift:self.n_blocks - self.block_base]
        self.block_base = bb
        return drop

    def frame(self, start: int | None = None, stop: int | None = None):
        """Requests of the window (or ids [start, stop) of it) as a DataFrame (times in seconds)."""
        import pandas as pd     # lazy: pandas only for frames (the engine's hot path never needs it)
        sl = self.rows(slice(start, stop))
        df = pd.DataFrame({"id": np.arange(self.base, self.base + len(self.arrival.a))[sl],
                           **{c: getattr(self, c).a[sl] for c in _FLOAT_COLS + _INT_COLS
                              if c not in ("block_lo", "block_hi", "progress")}})
        df["state"] = pd.Categorical.from_codes(df["state"], STATE_NAMES)
        df["reason"] = pd.Categorical.from_codes(df["reason"], ("",) + REJECT_REASONS)
        df["queueing_s"] = df["prefill_start"] - df["arrival"]
        df["ttft_s"] = df["first_token"] - df["arrival"]
        gen = np.maximum(df["output"] - 1, 1)
        df["tpot_s"] = (df["finish"] - df["first_token"]) / gen
        return df


@kernel(signature=f"({INT64}, int64, int64, {INTS}, {FLOATS}, float64)")
def _complete_rows(ids, base, n, ints, floats, now):
    """complete()'s common case in one compiled pass: the sorted ids are each there once, in the
    window and in flight; they are marked DONE at `now`, and it returns how many made fewer tokens
    than asked. Otherwise it writes nothing and returns -1 (the checked path counts the errors)."""
    prev = base - 1
    for i in range(len(ids)):
        x = ids[i]
        if x <= prev or x >= n or ints[I_STATE, x - base] >= DONE:
            return -1
        prev = x
    short = 0
    for i in range(len(ids)):
        r = ids[i] - base
        ints[I_STATE, r] = DONE
        floats[F_FINISH, r] = now
        if ints[I_GENERATED, r] < ints[I_OUTPUT, r]:
            short += 1
    return short
