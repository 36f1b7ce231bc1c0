"""The two helpers every page's callbacks share: twin.ui.jobform (a background job: start, follow,
cancel, its progress and its end) and twin.ui.command (a command: who acts, a refusal, the send and
its answer), called as the pages call them."""
from dash import no_update

from twin.live import jobs
from twin.ui import command, jobform

SECRET = "h" * 32


def _queue(viewer, addr=None) -> dict:
    """A page's submit that keeps its job as a dict, as Cloud and the what-if do."""
    return {"job": jobs.pool().submit("cloud", len, ((),), total=3, cost_s=1.0, client=viewer, addr=addr),
            "day": 30}


def test_a_job_kept_as_a_dict_is_followed_and_cancelled_by_its_browser_only(dash_app, idle_pool):
    store, msg, cls, tick = jobform.start(_queue, (), SECRET, lambda s: f"queued, day {s['day']}")
    assert (msg, cls, tick) == ("queued, day 30", "ctl-msg msg-ok", False)
    assert jobform.view(store, SECRET)["state"] == "queued" and jobform.view(store["job"], SECRET)["total"] == 3
    for forged in ({"job": ["x"]}, {"job": "../x"}, {"nojob": 1}, None, 5):
        assert jobform.view(forged, SECRET) is None
    assert jobform.view(store, "o" * 32) is None                                   # another browser's
    assert jobform.cancel(store, "o" * 32, "gone", "none") == ("none", "ctl-msg msg-error")
    assert jobform.cancel(store, SECRET, "gone", "none") == ("gone", "ctl-msg msg-ok")
    assert jobform.view(store, SECRET)["state"] == "cancelled"


def test_a_refused_form_reads_as_one_bounded_line_and_starts_nothing(dash_app, idle_pool):
    def refuse(_viewer, _addr):
        raise ValueError("Seeds:\n allowed   1 to 5 " + "x" * 400)
    store, msg, cls, tick = jobform.start(refuse, (), SECRET, "queued")
    assert store is no_update and tick is no_update and cls == "ctl-msg msg-error"
    assert msg.startswith("Seeds: allowed 1 to 5 x") and len(msg) == jobform.MAX_MESSAGE
    assert jobform.refusal(ValueError("Day:\n allowed  30 to 600")) == ("Day: allowed 30 to 600", "ctl-msg msg-error")


JOB = {"total": 8, "done": 3, "position": 2, "wait_s": 1234.4, "cost_s": 56.0, "cpu_s": 7.6, "ceiling_s": 90.0,
       "message": "worker died"}


def test_progress_and_end_of_a_job(dash_app):
    with dash_app.server.test_request_context("/"):
        assert jobform.progress({**JOB, "state": "queued"}, "3 of 8 runs") == (
            "0", "8", "queued: 2 in line, about 1,234 s of work ahead; estimated 56 CPU-s")
        assert jobform.progress({**JOB, "state": "running"}, "3 of 8 runs") == (
            "3", "8", "3 of 8 runs · 8 of at most 90 CPU-s")
        assert jobform.progress({**JOB, "state": "done"}, "8 of 8 runs") == ("8", "8", "8 of 8 runs — done")
        assert jobform.progress({**JOB, "state": "error"}, "3 of 8 runs") == ("3", "8", "3 of 8 runs")
        assert jobform.ended({**JOB, "state": "cancelled"}, "Stopped.", "Failed: %(why)s") == (
            "Stopped.", "ctl-msg msg-ok")
        assert jobform.ended({**JOB, "state": "error"}, "Stopped.", "Failed: %(why)s") == (
            "Failed: worker died", "ctl-msg msg-error")


def test_a_command_names_its_actor_and_reads_the_refusal_and_the_answer(dash_app, twin_registry):
    with dash_app.server.test_request_context("/"):
        by = command.Actor("shared", None, "v42", SECRET)
        assert by.twin is twin_registry.shared() and by.who["who"] == "viewer v42" and by.ticket is None
        assert command.refused(ValueError("speed = 0: allowed 1 to 1000")) == (
            "Not applied: speed = 0: allowed 1 to 1000", "ctl-msg msg-error")
        assert by.send("speed", 0, "x-ticket") == by.answer("x-ticket")
        assert by.ticket.refused and by.answer("x-ticket")[1] == "ctl-msg msg-error"
        assert by.send("speed", 5, "x-ticket", what=lambda t: f"said: {t.said}") == (
            "said: speed 5x — applied to the shared twin at t = "
            f"{by.ticket.t:,.1f} s", "ctl-msg msg-ok")
