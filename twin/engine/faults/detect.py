"""The gray-failure detector: only what an operator can see, compared with what is normal for it.

Telemetry, once per metrics interval: each stepping die's own busy time per step (its kernels,
before it waits at the group's collectives) and each EMS server's block service time. A part is
flagged when its figure stays above `Policy.gray_threshold` times its group's median (the dies of
its instance; the servers in service) for `Policy.gray_window_s` without a break, so the time to
detect is measured, not declared. A flag on a part no open gray fault slows is a false alarm:
counted and logged, never acted on.

The telemetry comes from the model: a die's step time is what its own predictor gives at its
health and batch share (`TimePredictor.alone`), a server's service time is 1 over its CPU health;
each carries noise from routed-expert load, which varies a die's work step to step with CV
[balance] load_cv over the experts' share of its step at the instance's batch, averaged over the
interval's steps (a server's with a prefill die's CV, assumption). The noise has a generator of
its own: the run's draws and events are untouched, so a healthy run's fingerprint does not move.
"""
from __future__ import annotations

import math

import numpy as np

from twin.engine.compiled import kernel
from twin.i18n import N_
from twin.predict.base import Health

NOISE_STREAM = 0x74656c65     # the detector's own random stream, beside the run's seed ("tele")
BATCH_GRID = 4                # decode batch per NPU: grid points per doubling (assumption, see Detector._own)
CTX_BUCKET = 1024             # decode context: tokens per bucket (assumption)
_NONE = np.zeros(0, dtype=np.int64)


class Detector:
    """Flags slow dies and EMS servers from telemetry; counts what it flags and its false alarms."""

    def __init__(self, eng, gray):
        self.eng, self.gray = eng, gray
        self.rng = np.random.default_rng([eng.scenario.seed, NOISE_STREAM])
        self.false_alarms = 0
        self.flags: list[dict] = []        # every flag: t, part, ratio, whether a known fault explains it
        n_servers = len(eng.ems.servers) if eng.ems is not None else 0
        # per die, then per EMS server: since when it has been above the threshold (NaN: it is not),
        # and whether it was flagged since (until it drops below)
        self.since = np.full(len(eng.topo.die_ids) + n_servers, np.nan)
        self.flagged = np.zeros(len(self.since), dtype=bool)
        self._memo: dict[tuple, tuple[float, float]] = {}
        self._server_cv: float | None = None
        none, no_ids = np.zeros(0), np.zeros(0, dtype=np.int64)     # load the compiled passes now, not in a tick
        _readings(none, none, none, no_ids, no_ids, 1.0, none)
        _track(none, 1.0, none, np.zeros(0, dtype=bool), 0.0, 1.0, no_ids)

    def tick(self, now: float) -> None:
        """Read one interval's telemetry and flag what stays slow."""
        eng, pol = self.eng, self.eng.faults.policy
        thr = pol.gray_threshold
        ratio = np.zeros(len(self.since))      # this interval's reading per part (0: none)
        healthy: dict[int, list] = {}      # dies per instance -> the healthy instances of that size
        for inst in eng.instances:
            busy = len(inst.ids) if inst.kind == "decode" else inst.busy or inst.queue
            if not inst.ready or not busy:
                continue
            if inst.pm.health.die_slow:
                r = self._ratios(self._die_times(inst), thr)
                if r is not None:
                    ratio[inst.dies] = r
            else:
                healthy.setdefault(len(inst.dies), []).append(inst)
        order = [inst for group in healthy.values() for inst in group]     # size by size, as drawn
        cv = [self._own(inst, 1.0, 1.0)[1] for inst in order]
        parts = [inst.dies for inst in order]
        live = self._live_servers()
        if len(live):                          # the servers in service: one more group
            cv.append(self._server_cv)
            parts.append(live + len(eng.topo.die_ids))
        sizes = [len(p) for p in parts]
        # one draw for the healthy dies, size by size, then the servers: the numbers a draw for each
        # would give (a Generator's normals do not depend on how they are split over calls)
        z = self.rng.standard_normal(sum(sizes))
        if cv:
            scale = np.ones(len(z))            # a slow server serves at its health
            slow = eng.topo.slow_parts("cpu") if len(live) else None
            if slow:
                names = eng.ems.servers
                scale[len(z) - len(live):] = [slow.get(names[i], 1.0) for i in live]
            _readings(z, scale, np.array(cv), np.cumsum(sizes), np.concatenate(parts), thr, ratio)
        out = np.empty(len(ratio), dtype=np.int64)
        for i in out[:_track(ratio, thr, self.since, self.flagged, now, pol.gray_window_s - 1e-9, out)].tolist():
            self._flag(i, float(ratio[i]), now)

    def _flag(self, i: int, ratio: float, now: float) -> None:
        dies = self.eng.topo.die_ids
        name = dies[i] if i < len(dies) else self.eng.ems.servers[i - len(dies)]
        known = self.gray.noticed_die(i) if i < len(dies) else self.gray.noticed_server(name)
        self.flags.append({"t": round(now, 3), "part": name, "ratio": round(ratio, 3), "known": known})
        if not known:
            self.false_alarms += 1
            self.eng.log("detect", N_("telemetry: %(part)s at %(ratio)sx its group's median, no fault known there "
                                      "(false alarm)"), part=name, ratio=f"{ratio:.2f}")

    # ---- telemetry -----------------------------------------------------------------------------
    def _noise(self, cv: float, n: int) -> np.ndarray:
        """Relative noise of n parts' interval means (see the module's docstring)."""
        return 1.0 + cv * self.rng.standard_normal(n)

    @staticmethod
    def _ratios(times: np.ndarray, threshold: float) -> np.ndarray | None:
        """Each part's figure over its group's median; None when none can pass the threshold (the
        largest is within it of the smallest, which is at most the median: the common case, cheap)."""
        if times.max() <= threshold * times.min():
            return None
        n = len(times)
        k = n // 2
        part = np.partition(times, (k - 1, k) if n % 2 == 0 else k)      # np.median's value, cheaper
        return times / (part[k] if n % 2 else (part[k - 1] + part[k]) / 2)

    def _die_times(self, inst) -> np.ndarray:
        """Each die's step time relative to a healthy die's."""
        healthy, cv = self._own(inst, 1.0, 1.0)
        times = self._noise(cv, len(inst.dies))
        if inst.pm.health.die_slow:
            topo = self.eng.topo
            comp, hbm = topo.die_health("compute")[inst.dies], topo.die_health("hbm")[inst.dies]
            for i in np.flatnonzero((comp < 1.0) | (hbm < 1.0)):
                times[i] *= self._own(inst, float(comp[i]), float(hbm[i]))[0] / healthy
        return times

    def _own(self, inst, compute: float, hbm: float) -> tuple[float, float]:
        """A die's own step time (ms) at this health, at the instance's batch (its share, if slow),
        and the noise CV of its interval mean. Decode shapes on a coarse grid (BATCH_GRID steps per
        doubling of the batch, CTX_BUCKET tokens of context): a reading is a ratio of two dies at
        the same shape, and a fine grid would make a predictor call of most readings."""
        eng = self.eng
        load = inst.slow_load if (compute, hbm) != (1.0, 1.0) else 1.0
        if inst.kind == "decode":
            n = len(inst.ids)
            shape = (round(math.log2(max(n / inst.npus, 0.25)) * BATCH_GRID),
                     int(inst.ctx_sum / max(n, 1)) // CTX_BUCKET)
        else:
            shape = ()
        key = (inst.kind, compute, hbm, load, inst.pm.net, shape)
        out = self._memo.get(key)
        if out is None:
            if len(self._memo) > 4096:
                self._memo.clear()
            pm = eng.pm.with_net(inst.pm.net).with_health(Health(compute=compute, hbm=hbm, load=load)).alone()
            r = (pm.decode_step(2 ** (shape[0] / BATCH_GRID) * load, (shape[1] + 0.5) * CTX_BUCKET)
                 if inst.kind == "decode" else pm.prefill_batch())
            out = self._memo[key] = (r.step_ms, _cv(r, eng.pm.k, eng.scenario.interval_s))
        return out

    def _live_servers(self) -> np.ndarray:
        """The EMS servers in service (none without an EMS, or with fewer than two: no median to
        compare with); the first call also fixes the servers' noise CV."""
        eng = self.eng
        if eng.ems is None:
            return _NONE
        live = np.flatnonzero(eng.ems.live_mask())
        if len(live) < 2:
            return _NONE
        if self._server_cv is None:
            self._server_cv = _cv(eng.pm.prefill_batch(), eng.pm.k, eng.scenario.interval_s)
        return live

    def summary(self) -> dict:
        """Its flags, its false alarms, and the policy it flags by."""
        return {"flags": len(self.flags), "false_alarms": self.false_alarms,
                "threshold": self.eng.faults.policy.gray_threshold,
                "window_s": self.eng.faults.policy.gray_window_s}


@kernel
def _readings(z, scale, cv, ends, parts, threshold, ratio):
    """The healthy groups' readings: group i's parts are parts[ends[i-1]:ends[i]] and read
    (1 + cv[i] z) / scale over the same slice of the draws `z` and of `scale` (a slow server's
    health; 1, an exact division, elsewhere); a group whose largest reading is above `threshold`
    times its smallest gets each part's reading over the group's median (the middle one, or the
    mean of the middle two) in ratio[part]. One call for what cost a dozen numpy calls per group
    size, value for value."""
    start = 0
    for i in range(len(cv)):
        end = ends[i]
        times = (1.0 + cv[i] * z[start:end]) / scale[start:end]
        if times.max() > threshold * times.min():
            s = np.sort(times)
            n = end - start
            k = n // 2
            median = s[k] if n % 2 else (s[k - 1] + s[k]) / 2
            for j in range(n):
                ratio[parts[start + j]] = times[j] / median
        start = end


@kernel
def _track(ratio, threshold, since, flagged, now, window, out):
    """Each part above `threshold` now: since when (`since`, NaN below it, and `flagged` cleared);
    those above it for `window` seconds and not yet flagged are flagged and go in `out`, in part
    order. Returns how many."""
    n = 0
    for i in range(len(ratio)):
        if ratio[i] > threshold:
            if np.isnan(since[i]):
                since[i] = now
            if not flagged[i] and now - since[i] >= window:
                flagged[i] = True
                out[n] = i
                n += 1
        else:
            since[i] = np.nan
            flagged[i] = False
    return n


def _cv(r, k: dict, interval_s: float) -> float:
    """Noise CV of a die's interval-mean step time: load_cv x the experts' share of step `r`,
    over the square root of the steps in an interval."""
    if not (r.step_ms > 0 and math.isfinite(r.step_ms)):
        return 0.0
    share = r.breakdown.get("experts", 0.0) / r.step_ms
    return k["balance"]["load_cv"] * share / math.sqrt(max(1.0, interval_s * 1e3 / r.step_ms))
