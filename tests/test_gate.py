"""Issue 22, the outside audit: instructor authority through one throttled, logged gate; a correct
token never refused because others failed; sandbox slots reserved atomically; X-Forwarded-For
believed only from a trusted proxy; security headers and one bounded log line per framework error."""
from __future__ import annotations

import json
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from twin.ui import runcontrols
from twin.live import session
from twin.live.runner import default_factory

from test_callbacks import triggered

TOKEN = "s3cret-instructor-token"
ME = "I" * 32                       # the instructor's browser secret
ROOM = "10.0.0.1"                   # a classroom behind one address


@pytest.fixture
def locked(dash_app):
    reg = session.configure(wall_dt=0.05, token=TOKEN)
    reg.shared()
    yield reg
    reg.shutdown()


def _at(dash_app, addr: str | None, headers: dict | None = None):
    env = {"REMOTE_ADDR": addr} if addr else {}
    return dash_app.server.test_request_context("/", environ_base=env, headers=headers or {})


def unlock(dash_app, value, secret, addr=ROOM):
    with _at(dash_app, addr):
        return triggered(runcontrols.on_unlock, "ctl-unlock.n_clicks", 1, None, value, secret)


def play(dash_app, store, secret=ME, addr=ROOM):
    with _at(dash_app, addr):
        return triggered(runcontrols.on_control, "ctl-play.n_clicks", 1, [0] * 6, None, [0] * 7, None, 0,
                         "shared", store, "v1", "default", "", None, 0, secret)


def checked(reply) -> bool:
    """Whether an unlock reply says the token was compared (right or wrong), not refused unchecked."""
    return "Wrong instructor token" in reply[1] or "unlocked" in reply[1]


# ---- 1. no control is a token oracle ----------------------------------------------------------------

def test_a_control_is_not_a_token_oracle(dash_app, locked):
    tw = locked.shared()
    for guess in [f"guess-{i}" for i in range(200)] + [TOKEN]:
        msg, cls = play(dash_app, {"token": guess, "ok": True})
        assert "msg-error" in cls and "locked by the instructor" in msg, guess
    assert not tw.paused                          # the raw token in the store is not a credential


def test_unlock_hands_the_browser_a_random_credential_never_the_token(dash_app, locked):
    store, msg, cls = unlock(dash_app, TOKEN, ME)
    assert "msg-ok" in cls and TOKEN not in json.dumps(store)
    other, *_ = unlock(dash_app, TOKEN, ME)
    assert store["ok"] is True and len(store["credential"]) >= 43 and other["credential"] != store["credential"]
    assert "msg-ok" in play(dash_app, store)[1] and locked.shared().paused
    forged = {"credential": store["credential"][:-2] + "xx", "ok": True}
    assert "locked by the instructor" in play(dash_app, forged)[0]


def test_a_credential_expires_and_their_number_is_bounded():
    from twin.live.gate import Gate
    now = [0.0]
    g = Gate(TOKEN, ttl_s=100, max_credentials=3, clock=lambda: now[0])
    creds = [g.unlock(TOKEN, f"c{i}", f"a{i}") for i in range(4)]
    assert all(creds) and not g.check(creds[0]) and all(map(g.check, creds[1:]))   # the oldest dropped
    now[0] = 101
    assert not any(map(g.check, creds)) and not g.check(None) and not g.check(TOKEN)


def test_sign_out_revokes_only_this_tabs_credential(dash_app, locked):
    """Issue 34: the tab's Sign out revokes its credential at the gate (a copy kept elsewhere opens
    nothing any more) and stops it leading; another tab stays signed in."""
    store, *_ = unlock(dash_app, TOKEN, ME)
    other, *_ = unlock(dash_app, TOKEN, ME)
    with _at(dash_app, ROOM):
        out = triggered(runcontrols.on_signout, "ctl-signout.n_clicks", 1, store)
    assert out == (None, "Signed out: this tab's instructor credential is revoked.", "ctl-msg msg-ok", {"on": False})
    assert "locked by the instructor" in play(dash_app, store)[0]            # the old copy is dead
    assert "msg-ok" in play(dash_app, other)[1]
    assert not locked.gate.revoke(store["credential"]) and not locked.gate.revoke(None)


def test_a_changed_token_revokes_every_credential_and_who_proved_the_old_one():
    from twin.live.gate import Gate
    g = Gate(TOKEN)
    creds = [g.unlock(TOKEN, f"c{i}", "10.0.0.1") for i in range(3)]
    g.token = TOKEN                                         # the same token: nothing changes
    assert all(map(g.check, creds))
    g.token = "a-new-token"
    assert not any(map(g.check, creds)) and g.unlock(TOKEN, "c0", "10.0.0.1") is None
    for i in range(session.UNLOCK_PER_MIN_ADDRESS - 1 - 3):     # c0 is a stranger again: its address counts
        g.unlock("guess", f"x{i}", "10.0.0.1")
    with pytest.raises(session.ControlError, match="unlock attempts from this address"):
        g.unlock("a-new-token", "c0", "10.0.0.1")
    cred = g.unlock("a-new-token", "c9", "10.0.0.2")
    assert g.check(cred)
    g.token = None                                          # unlocked: nothing to check, and nothing kept
    g.token = "a-third-token"
    assert not g.check(cred)
    assert not Gate("a-third-token").check(g.unlock("a-third-token", "c9", "10.0.0.2"))    # a new gate: none


def test_failed_unlocks_are_logged_one_line_each_with_totals_and_bounded(dash_app, locked, caplog):
    from twin.live import gate
    caplog.set_level(logging.INFO, logger="twin.live.gate")
    for i in range(3):
        unlock(dash_app, "wrong", "W" * 32)
    lines = [r.getMessage() for r in caplog.records if r.name == "twin.live.gate"]
    assert len(lines) == 3 and all("\n" not in s for s in lines)
    assert "3 wrong" in lines[-1] and "10.0.0.1" in lines[-1] and TOKEN not in " ".join(lines)
    for a in range(50):                            # a flood from many addresses: the log stays bounded
        for s in range(5):
            unlock(dash_app, "wrong", f"{a:02d}{s:030d}", addr=f"10.9.{a}.1")
    lines = [r for r in caplog.records if r.name == "twin.live.gate"]
    assert len(lines) <= gate.LOG_LINES_PER_MIN + 1 and all(r.exc_info is None for r in lines)


# ---- 2. others cannot lock the instructor out; stated bounds on guesses checked -----------------------

def test_others_failing_never_lock_out_an_instructor_who_unlocked(dash_app, locked):
    store, *_ = unlock(dash_app, TOKEN, ME)
    for i in range(40):                            # fresh secrets, the instructor's own address
        unlock(dash_app, f"guess-{i}", f"{i:032d}")
    assert "try again" in unlock(dash_app, TOKEN, "N" * 32)[1]       # a newcomer from there waits ...
    assert "msg-ok" in play(dash_app, store)[1]                      # ... the instructor keeps working
    again, msg, cls = unlock(dash_app, TOKEN, ME)                    # and a second tab of that browser
    assert "msg-ok" in cls and again["credential"] != store["credential"]
    for _ in range(session.UNLOCK_PER_MIN):                                # its own bucket still holds
        unlock(dash_app, "typo", ME)
    assert "try again" in unlock(dash_app, TOKEN, ME)[1]


def test_guesses_checked_stay_within_the_stated_bounds(dash_app, locked):
    assert (session.UNLOCK_PER_MIN, session.UNLOCK_PER_MIN_ADDRESS, session.UNLOCK_PER_MIN_TOTAL) == (5, 20, 60)
    per_client, per_addr, total = {}, {}, 0
    for a in range(12):                            # 12 addresses x 10 browsers x 3 guesses in one minute
        addr = f"10.1.{a}.1"
        for s in range(10):
            secret = f"{a:02d}{s:02d}" + "g" * 28
            for _ in range(3):
                if checked(unlock(dash_app, "guess", secret, addr)):
                    per_client[secret] = per_client.get(secret, 0) + 1
                    per_addr[addr] = per_addr.get(addr, 0) + 1
                    total += 1
    assert max(per_client.values()) <= 5 and max(per_addr.values()) <= 20 and total == 60
    assert "try again" in unlock(dash_app, TOKEN, ME, addr="10.2.0.1")[1]    # the residual limit (README)


# ---- 3. sandbox slots are reserved atomically ------------------------------------------------------

def _slow_factory(**params):
    time.sleep(0.3)
    return default_factory(**params)


@pytest.mark.parametrize("secrets_,allowed", [(["A" * 32] * 6, 1), ([f"{i:032d}" for i in range(6)], 2)])
def test_simultaneous_opens_respect_the_per_browser_and_per_address_caps(dash_app, secrets_, allowed):
    reg = session.configure(wall_dt=0.05, max_sandboxes=4, token=None, factory=_slow_factory)
    reg.shared()
    start = threading.Barrier(len(secrets_))

    def open_one(secret):
        start.wait()
        try:
            return reg.open_sandbox(client=session.client_id(secret, ROOM), addr=ROOM)
        except session.SandboxLimit:
            return None
    try:
        with ThreadPoolExecutor(len(secrets_)) as ex:
            opened = [t for t in ex.map(open_one, secrets_) if t is not None]
        assert len(opened) == allowed and len(reg.sandboxes()) == allowed
    finally:
        reg.shutdown()


# ---- 4. X-Forwarded-For only from a trusted proxy ---------------------------------------------------

@pytest.mark.parametrize("trusted,peer,xff,seen,hops", [
    (None, "127.0.0.1", "1.2.3.4", "127.0.0.1", None),                    # no proxy named: ignored
    ("127.0.0.1", "127.0.0.1", "1.2.3.4", "1.2.3.4", None),
    ("127.0.0.1", "127.0.0.1", "6.6.6.6, 1.2.3.4", "1.2.3.4", None),     # a viewer's own entry is not believed
    ("127.0.0.1,10.0.0.0/8", "127.0.0.1", "6.6.6.6, 1.2.3.4, 10.2.3.4", "1.2.3.4", "2"),   # two proxies in a row
    ("127.0.0.1", "5.5.5.5", "1.2.3.4", "5.5.5.5", None),                 # not from the proxy: ignored
    ("127.0.0.1", "127.0.0.1", "not-an-address", "127.0.0.1", None),
    ("127.0.0.1", "127.0.0.1", "", "127.0.0.1", None),
    # issue 34: a viewer whose own address lies in the trusted range, through the one proxy, with a
    # forged entry of its own: its address is the one the proxy saw, never the forged entry
    ("127.0.0.1,10.0.0.0/8", "127.0.0.1", "6.6.6.6, 10.2.3.4", "10.2.3.4", None),
    ("127.0.0.1,10.0.0.0/8", "127.0.0.1", "6.6.6.6, 10.2.3.4", "10.2.3.4", "1"),
    ("127.0.0.1,10.0.0.0/8", "127.0.0.1", "6.6.6.6, 1.2.3.4, 10.2.3.4", "10.2.3.4", "junk"),   # bad hops: 1
    ("127.0.0.1", "127.0.0.1", "6.6.6.6, 1.2.3.4", "1.2.3.4", "2"),       # 1.2.3.4 is no proxy: the walk stops
])
def test_forwarded_for_is_believed_only_from_a_trusted_proxy(dash_app, monkeypatch, trusted, peer, xff, seen, hops):
    from twin.ui import guard
    if trusted is None:
        monkeypatch.delenv("TWIN_TRUSTED_PROXIES", raising=False)
    else:
        monkeypatch.setenv("TWIN_TRUSTED_PROXIES", trusted)
    if hops is None:
        monkeypatch.delenv("TWIN_PROXY_HOPS", raising=False)
    else:
        monkeypatch.setenv("TWIN_PROXY_HOPS", hops)
    with _at(dash_app, peer, {"X-Forwarded-For": xff}):
        assert guard.client("A" * 32)[1] == seen


def test_a_room_behind_one_proxy_keeps_per_browser_budgets(dash_app, locked, monkeypatch):
    monkeypatch.setenv("TWIN_TRUSTED_PROXIES", "127.0.0.1")

    def via_proxy(value, secret):
        with _at(dash_app, "127.0.0.1", {"X-Forwarded-For": ROOM}):
            return triggered(runcontrols.on_unlock, "ctl-unlock.n_clicks", 1, None, value, secret)
    for _ in range(session.UNLOCK_PER_MIN + 1):
        via_proxy("typo", "T" * 32)
    assert "try again" in via_proxy(TOKEN, "T" * 32)[1]
    assert via_proxy(TOKEN, ME)[0]["ok"] is True                    # a neighbour is not slowed
