"""Fingerprints of what fixed-seed runs produce, so a change meant only for speed can show it
changes nothing: hashes of every request row (those the window dropped, via its sink, and those
left), the summary and the event log, and the count of SimPy events, for runs that cover the
pipeline (prefill, EMS, KV transfer, decode; decode-only; a trace) and two under full-rate random
faults. `python -m twin bench --fingerprint` prints them; compare two checkouts' output."""
from __future__ import annotations

import hashlib
import json

from twin.engine import Engine
from twin.engine.faults import RANDOM_MAX

RUNS = (("diurnal", 300, {}), ("default", 120, {}), ("peak-384", 60, {}),
        ("peak-384", 60, {"deployment": "cloudmatrix-infer-paper"}), ("mooncake-live", 120, {}),
        ("default", 200, {"random_faults": True}), ("diurnal", 150, {"random_faults": True}))


def _hash(data: bytes) -> str:
    return hashlib.sha1(data).hexdigest()[:12]


def fingerprint(name: str, duration: float, seed: int = 0, random_faults: bool = False, **overrides) -> dict:
    """One run's fingerprint."""
    import pandas as pd
    eng = Engine(name, seed=seed, duration_s=duration, **overrides)
    if random_faults:
        eng.faults.set_random(RANDOM_MAX)
    parts = []
    eng.req.sink = parts.append
    eng.run(duration, step=30.0)
    rows = pd.concat(parts + [eng.req.frame()], ignore_index=True).astype({"state": str, "reason": str})
    return {"run": f"{name} {duration:g} s" + "".join(f" {k}={v}" for k, v in overrides.items())
            + (" random faults" if random_faults else ""),
            "rows": _hash(pd.util.hash_pandas_object(rows, index=False).values.tobytes()),
            "summary": _hash(json.dumps(eng.summary(), sort_keys=True, default=str).encode()),
            "events": _hash(json.dumps([(e["t"], e["message"]) for e in eng.events]).encode()),
            "simpy_events": eng.env.processed, "request_rows": len(rows)}


def fingerprints(seed: int = 0) -> list[dict]:
    return [fingerprint(name, duration, seed, **kw) for name, duration, kw in RUNS]
