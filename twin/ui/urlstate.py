"""Shareable run state in the URL (issue 12): `?scenario=&deployment=&seed=&speed=&load=&demo=`
(with `lang`, which twin.ui.teach handles) reproduces a run. Reading a link sends the same
commands as the control bar (`Twin.control`: validation, instructor lock and sandbox ownership
apply); a bad value gives a one-line message naming the field, never a traceback. `link` writes
the current state of a twin back into a URL. Speed is in times real time, load in % of capacity
(as on the control bar)."""
from __future__ import annotations

from urllib.parse import parse_qs, urlencode

from twin.live.controls import ControlError

from twin.ui.faultview import demo_name

KEYS = ("scenario", "deployment", "seed", "speed", "load", "demo")
MAX_QUERY = 512                  # characters of a query string read (a link is far shorter)


def parse(search) -> dict:
    """The run-state fields of a URL query string ("?a=1&b=2"), first value of each; others ignored."""
    if not isinstance(search, str) or not search.strip("?"):
        return {}
    q = parse_qs(search[:MAX_QUERY].lstrip("?"), keep_blank_values=False)
    return {k: q[k][0] for k in KEYS if q.get(k)}


def apply(tw, fields: dict, **who) -> list[str]:
    """Bring twin `tw` to the state a link names: one reset if its scenario, deployment, seed or
    demo differ from what runs (with the link's load), else the load, then the speed. Returns what
    was done; raises ControlError (naming the field) at the first value refused."""
    done = []
    p = tw.params
    reset = {k: fields[k] for k in ("scenario", "deployment", "seed") if k in fields}
    if "demo" in fields:
        reset["faults"] = fields["demo"]
    current = {"scenario": p.scenario, "deployment": p.deployment or "", "seed": str(p.seed),
               "faults": demo_name(p.faults)}
    load = None
    if "load" in fields:
        try:
            load = float(fields["load"]) / 100.0
        except ValueError:
            raise ControlError(f"load = {fields['load'][:24]!r}: allowed a number, % of capacity") from None
    if any(str(v) != str(current[k]) for k, v in reset.items()):   # a new run, with its load
        done.append(tw.control("reset", {**reset, "load": load}, **who))
    elif load is not None:
        done.append(tw.control("load", load, **who))
    if "speed" in fields:
        done.append(tw.control("speed", fields["speed"], **who))
    return done


def differs(tw, fields: dict) -> bool:
    """Whether `apply` would change twin `tw`: a link copied from the run it shows changes nothing,
    so it needs neither a sandbox nor a confirm."""
    p, speed = tw.params, tw.speed
    now = {"scenario": p.scenario, "deployment": p.deployment or "", "seed": str(p.seed), "demo": demo_name(p.faults),
           "speed": speed if speed == "max" else f"{float(speed):g}",
           "load": "" if p.load is None else f"{p.load * 100:g}"}
    return any(str(v) != str(now[k] or "") for k, v in fields.items())


def summary(fields: dict) -> str:
    """A link's fields as one line ("scenario bursty-chat, seed 7, speed 50"), in KEYS order."""
    return ", ".join(f"{k} {fields[k]}" for k in KEYS if k in fields)


def link(base: str, path: str, tw, lang: str | None = None) -> str:
    """A URL that reproduces twin `tw`'s run on page `path` (base: scheme and host)."""
    p, st = tw.params, tw.status()
    q = {"scenario": p.scenario, "seed": p.seed}
    if p.deployment:
        q["deployment"] = p.deployment
    if demo_name(p.faults):
        q["demo"] = demo_name(p.faults)
    q["speed"] = st["speed"] if st["speed"] == "max" else f"{float(st['speed']):g}"
    if p.load is not None:
        q["load"] = f"{p.load * 100:g}"
    if lang:
        q["lang"] = lang
    return f"{base.rstrip('/')}{path or '/'}?{urlencode(q)}"
