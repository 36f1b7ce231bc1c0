"""Control errors in the viewer's language, translated at the UI boundary.

The engine, the session and the CLI raise English messages (`ControlError`: the field and what is
allowed). `explain(exc)` matches a message against the known forms below and returns the catalog's
translation with the same values; a message of an unknown form is shown as it is (in English),
never dropped. The msgids are the English forms themselves, so English passes through unchanged."""
from __future__ import annotations

import re

from twin.engine.faults.spec import PART_LABEL

from twin.ui.lang import N_, _, request_lang

# the English forms, each its catalog msgid: the values are %(name)s, matched by a pattern made from the
# msgid itself; a form whose English text differs from its msgid is a (regular expression, msgid) pair
FORMS = (
    N_("speed = %(v)s: allowed %(lo)s to %(hi)s (times real time) or 'max'"),
    N_("speed: allowed %(lo)s to %(hi)s (times real time)"),
    N_("load: allowed %(lo)s to %(hi)s %% of capacity"),
    N_("load = %(v)s: allowed 0 < load <= %(hi)s (fraction of capacity; 1 = 100 %%)"),
    N_("seed = %(v)s: allowed a whole number %(lo)s to %(hi)s"),
    N_("seed: allowed a whole number %(lo)s to %(hi)s"),
    N_("scenario and deployment: allowed one of the names in their lists"),
    N_("%(what)s: at most %(n)s per minute; try again in %(s)s s"),
    N_("the shared twin is locked by the instructor: enter the instructor token, or open a private "
       "sandbox to experiment"),
    N_("sandbox %(key)s belongs to another browser: only the browser that opened it "
       "can control or close it (open your own sandbox)"),
    N_("%(action)s: a trace replays its own arrival times; pick a synthetic scenario (e.g. bursty-chat or "
       "diurnal) to set the load, or change the speed"),
    N_("this browser already has %(n)s private sandbox(es), the most allowed: go back to it, or close it first"),
    N_("%(n)s private sandboxes are already open from your network address, the most allowed: close one first"),
    N_("all %(n)s private sandboxes are in use; idle ones are freed after %(min)s min. Watch the "
       "shared twin meanwhile."),
    N_("fault at_s = %(at)s: allowed up to %(s)s s after now (t = %(now)s s)"),
    N_("fault at_s = %(at)s: in the past (now %(now)s s)"),
    N_("fault duration_s = %(v)s: allowed 0 < duration_s <= %(hi)s s"),
    N_("fault factor = %(v)s: allowed 0 <= factor < 1 (fraction of capacity kept)"),
    N_("fault: %(n)s scheduled faults are already waiting on this twin (the most allowed); "
       "wait for them to strike or reset"),
    N_("detect after: allowed a number of seconds 0 to 86,400"),
    N_("random failures: rate = %(v)s: allowed 0 < x <= %(hi)s failure-clock hours per sim second "
       "(switch off to stop)"),
    N_("%(name)s: allowed a number"),
    # a fault's target (twin.engine.faults.spec, twin.topology): {why} and the part names are translated too
    N_("fault target = %(t)s: unknown topology element %(e)s in %(sys)s (%(why)s); valid ids look like: %(ids)s"),
    N_("fault target = %(t)s: unknown topology element %(e)s in %(sys)s; valid ids look like: %(ids)s"),
    N_("not a well-formed id"),
    N_("%(part)s index %(i)s out of range %(lo)s..%(hi)s"),
    N_("edge index out of range %(lo)s..%(hi)s"),
    N_("these two elements are not directly linked"),
    N_("no %(part)s with this id in a %(where)s"),
    N_("fault target = %(t)s is %(what)s; fault kind %(kind)s breaks %(wanted)s (e.g. %(ex)s)"),
    N_("fault target = %(t)s is %(what)s; fault kind %(kind)s slows %(wanted)s (e.g. %(ex)s)"),
    N_("fault target = %(t)s: required, e.g. %(ex)s"),
    N_("fault kind = %(v)s: allowed %(kinds)s"),
    # what the engine decides when a command lands (twin.engine.faults.manager, twin.live.actions)
    N_("fault target = %(t)s is already down: fault #%(id)s (%(k)s) struck it at t = %(at)s s and it is not "
       "repaired yet"),
    N_("the twin was reset before this command landed; send it again"),
    N_("a later reset replaced this one before it took effect"),
    N_("the twin was stopped before this reset took effect"),
    # a reset's choices (normally picked from lists)
    N_("%(field)s = %(v)s: unknown (allowed: %(names)s)"),
    N_("trace = %(v)s: not a trace this dashboard offers (allowed: %(names)s, empty for the scenario's own "
       "workload, or upload a trace file of at most %(mb)s MB)"),
    N_("faults = %(v)s: not a demo (allowed: %(names)s)"),
    # the Cloud page (twin.cloud.live)
    N_("copool: this twin does not run a co-pool day; load scenario copool-day first"),
    N_("copool.%(knob)s = %(v)s: allowed %(lo)s..%(hi)s (%(n)s %(kind)s groups, %(m)s must serve)"),
    N_("copool.%(knob)s = %(v)s: must differ from %(other)s (an empty training window; use policy inference-only)"),
    (r"copool\.{knob} = {v}: Input should be {rule} \(allowed: {allowed}\)",
     N_("copool.%(knob)s = %(v)s: not allowed (allowed: %(allowed)s)")),
    N_("%(name)s = %(v)s: not a number"),
    # sweeps (twin.explore: the Explorer page's values and limits)
    N_("values of %(key)s=%(v)s: not allowed (allowed: %(allowed)s)"),
    N_("values of %(key)s=%(v)s: step must be > 0"),
    N_("values of %(key)s=%(v)s: inverted range (LO %(lo)s > HI %(hi)s; allowed LO <= HI)"),
    N_("values of %(key)s=%(v)s: %(n)s values (allowed at most %(max)s per key)"),
    N_("values of %(key)s: empty value list (allowed: %(allowed)s)"),
    N_("values of %(key)s=%(v)s: a value is repeated (allowed: distinct values)"),
    N_("--vary %(key)s: given twice (allowed: each key once, with a list of values)"),
    N_("--vary: %(n)s grid points (allowed at most %(max)s per sweep)"),
    N_("sweep: %(p)s points x %(s)s seeds = %(r)s runs (allowed at most %(max)s; fewer values or seeds)"),
    N_("sweep: %(r)s runs x %(d)s s = %(t)s simulated seconds (allowed at most %(max)s; shorter "
       "--duration or fewer points)"),
    # heavy jobs (twin.live.jobs: sweeps, Cloud comparisons)
    N_("this job would take about %(cost)s CPU-seconds (allowed at most %(max)s): fewer "
       "points, seeds or simulated seconds, or a lower rate"),
    N_("a job of yours is still queued or running (allowed: %(n)s at a time per browser); wait for it or cancel it"),
    N_("%(n)s jobs are already queued or running from your network address (the most allowed); wait for one to "
       "end"),
    N_("%(n)s jobs are waiting (the most allowed); try again in a few minutes"),
    N_("your network address asked for %(used)s CPU-seconds of jobs this hour; this one needs "
       "about %(cost)s (allowed %(max)s an hour)"),
    N_("stopped after %(cpu)s CPU-seconds, its ceiling (estimated %(cost)s); make it smaller"),
    N_("stopped at %(rss)s MB of memory, more than the %(max)s MB a job may hold; make it smaller"),
    N_("the job's process ended without a result"),
    # the class (twin.live.classroom) and the lesson timeline's hold (twin.live.actions)
    N_("you already answered this step: one answer per browser"),
    N_("the answer is already revealed: answers to this step are closed"),
    N_("this step is not the one the lecturer is on: answer the current step"),
    N_("this step asks no question"),
    N_("this step asks no question: nothing to reveal"),
    N_("this browser does not follow the class: press Follow the lecturer, then answer the next question"),
    N_("this browser joined the class after this question was asked: answer the next one"),
    N_("answer = %(v)s: allowed a number from %(lo)s to %(hi)s"),
    N_("answer: allowed one of the %(n)s choices"),
    N_("no lesson step is published: lead the class on a lesson step first"),
    N_("page = %(v)s: allowed a page path such as /traffic"),
    N_("hold = %(v)s: allowed 0 < seconds <= %(hi)s (simulated)"),
)


def _pattern(form) -> re.Pattern:
    """The regular expression of a form: its msgid's text, each %(name)s a named value."""
    if isinstance(form, tuple):
        return re.compile(re.sub(r"\{(\w+)\}", r"(?P<\1>.+?)", form[0]))
    parts = re.split(r"(%\(\w+\)s|%%)", form)
    return re.compile("".join("%" if p == "%%" else f"(?P<{p[2:-2]}>.+?)" if p.startswith("%(") else re.escape(p)
                              for p in parts))


_COMPILED = tuple((_pattern(f), f[1] if isinstance(f, tuple) else f) for f in FORMS)


# values that are words, by their name in the forms above
WORDS = {"field": {"scenario": N_("scenario"), "deployment": N_("deployment")},
         "kind": {"prefill": N_("prefill"), "decode": N_("decode")},
         "part": {"node": N_("node"), "npu": N_("NPU"), "die": N_("NPU die"), "cpu": N_("Kunpeng CPU")},
         "where": {"supernode": N_("supernode"), "cluster": N_("cluster")}, "t": {"None": N_("(none)")},
         "what": {"answers": N_("answers"), "answers from this address": N_("answers from this address"),
                  "joining the class": N_("joining the class"),
                  "browsers joining the class from this address": N_("browsers joining the class from this address")}}
_ARTICLE = re.compile(r"^an? ")


def _word(name: str, v: str) -> str:
    """A value in the viewer's language: a known word, part names ("an NPU or a node"), a nested form."""
    if v in WORDS.get(name, {}):
        return _(WORDS[name][v])
    if name in ("what", "wanted"):
        labels = {lbl: lbl for lbl in PART_LABEL.values()}
        parts = [_ARTICLE.sub("", x) for x in v.split(" or ")]
        if all(p in labels for p in parts):
            return _(" or ").join(_(p) for p in parts)
    if name == "why":
        return explain(v)
    if name == "allowed":                       # a range such as "> 0 and <= 1"
        return v.replace(" and ", _(" and "))
    if name == "ids":                           # the topology's id examples (twin.topology.static)
        return v.replace(" (group)", _(" (group)")).replace("a link as eid", _("a link as eid")).replace(
            " or ", _(" or "))
    return v


def explain(exc) -> str:
    """The message of a refused control in the viewer's language (English forms pass through)."""
    text = str(exc)
    if request_lang() == "en":
        return text
    for rx, msg in _COMPILED:
        m = rx.fullmatch(text)
        if m:
            return _(msg) % {k: _word(k, v) for k, v in m.groupdict().items()}
    return text
