"""The process-wide registry of live twins (twin.live.runner.Twin), and the public face of the live
session for the app: `sessions()`, `configure()`, and the controls' names re-exported.

`Sessions` holds a shared default twin that every viewer sees, started lazily and idempotently
behind a lock (never at import, so gunicorn forks safely), plus a bounded number of private sandbox
twins keyed by a random id; idle sandboxes (no *action* for a TTL; polls do not count) are stopped
and freed. If ``TWIN_INSTRUCTOR_TOKEN`` is set, controlling the shared twin needs that token.
Actions on the shared twin are logged (who, what, when) for everyone to see.

Budgets (the constants here, in twin.live.controls and twin.live.actions; listed in the README): every
viewer-controlled resource is bounded server-side. A *client* is a browser's secret (a random
string kept in its local storage, sent with each action, stored only as a hash), or its remote
address when it sends none. A sandbox belongs to the client that opened it: its id alone neither
controls nor closes it. Because a browser can mint new secrets but not new addresses, sandboxes and
unlock attempts are also capped per remote address. Instructor authority is checked in one place,
`twin.live.gate.Gate` (throttled, logged; controls present a random credential, never the token). The
module never imports dash.
"""
from __future__ import annotations

import logging
import os
import secrets
import threading
from dataclasses import dataclass
from typing import Any, Callable

from twin.live.actions import FAULT_HORIZON_S, FAULTS_PER_MIN, MAX_PENDING_FAULTS
from twin.live.budget import RateLimit
from twin.live.classroom import Classroom
from twin.i18n import N_, said
from twin.live.controls import (ControlError, _throttled, client_id, fault_command, parse_load, parse_random, parse_rate,
                       parse_seed, parse_speed)
from twin.live.gate import UNLOCK_PER_MIN, UNLOCK_PER_MIN_ADDRESS, UNLOCK_PER_MIN_TOTAL, Gate
from twin.live.runner import WALL_DT, Twin, default_factory

__all__ = ["FAULT_HORIZON_S", "FAULTS_PER_MIN", "MAX_PENDING_FAULTS", "UNLOCK_PER_MIN", "UNLOCK_PER_MIN_ADDRESS",
           "UNLOCK_PER_MIN_TOTAL", "ControlError", "Gate", "SandboxLimit", "Sessions", "Twin", "client_id", "fault_command", "configure", "parse_load", "parse_random", "parse_rate",
           "parse_seed", "parse_speed", "sessions"]

log = logging.getLogger(__name__)

TOKEN_ENV = "TWIN_INSTRUCTOR_TOKEN"
SHARED = "shared"
MAX_SANDBOXES = 4                     # private sandboxes in total (each is an engine thread)
MAX_SANDBOXES_PER_CLIENT = 1
MAX_SANDBOXES_PER_ADDRESS = 2         # a browser can mint secrets, not addresses
SANDBOX_TTL_S = 600.0                 # sandboxes with no action for this long are stopped and freed
UNVIEWED_S = 90.0                     # ... and those no tab has polled for this long (every tab showing it closed):
                                      # a hidden tab still polls at least once a minute (Chrome's intensive timer
                                      # throttling: https://developer.chrome.com/blog/timer-throttling-in-chrome-88)
UPLOADS_PER_MIN = 6                   # trace uploads per client per minute (each is parsed here)
UPLOADS_PER_MIN_ADDRESS = 12          # ... and per remote address (a browser can mint secrets, not addresses)


class SandboxLimit(ControlError):
    pass


@dataclass(frozen=True)
class _Reservation:
    """A sandbox slot taken while its engine builds (outside the registry lock): it already counts
    against the browser and address that asked, so simultaneous opens cannot all pass the caps."""
    owner: str | None
    addr: str | None


class Sessions:
    """Registry of live twins: one shared default twin plus at most `max_sandboxes` private ones."""

    def __init__(self, *, factory: Callable[..., Any] = default_factory, params: dict | None = None,
                 max_sandboxes: int = MAX_SANDBOXES, ttl_s: float = SANDBOX_TTL_S,
                 wall_dt: float = WALL_DT, speed: float | str = 1.0, token: str | None = None,
                 per_client: int = MAX_SANDBOXES_PER_CLIENT, per_address: int = MAX_SANDBOXES_PER_ADDRESS):
        self.factory = factory
        self.params = dict(params or {})
        self.max_sandboxes = max_sandboxes
        self.per_client, self.per_address = per_client, per_address
        self._uploads = RateLimit(UPLOADS_PER_MIN)
        self._uploads_addr = RateLimit(UPLOADS_PER_MIN_ADDRESS)
        self.ttl_s = ttl_s
        self.wall_dt = wall_dt
        self.speed = speed
        self.gate = Gate(token if token is not None else os.environ.get(TOKEN_ENV))
        self._lock = threading.Lock()
        self._shared: Twin | None = None
        self._sandboxes: dict[str, Twin | _Reservation] = {}
        self.classroom = Classroom()          # the shared twin's class: lesson state and predictions

    @property
    def locked(self) -> bool:
        return self.gate.locked

    def shared(self) -> Twin:
        """The shared default twin, created and started on first use (idempotent, thread-safe)."""
        t = self._shared
        if t is not None:
            return t
        with self._lock:
            if self._shared is None:
                tw = Twin(SHARED, shared=True, params=self.params, factory=self.factory,
                          wall_dt=self.wall_dt, speed=self.speed, gate=self.gate)
                tw._note("system", said(N_("shared twin started: scenario %(name)s"), name=tw.params.scenario))
                self._shared = tw.start()
            return self._shared

    def get(self, key: str | None) -> Twin | None:
        """The twin a viewer asked for: the shared one, a live sandbox, or None if it is gone."""
        self.reap()
        if not key or key == SHARED:
            return self.shared()
        if not isinstance(key, str):
            return None
        with self._lock:
            tw = self._sandboxes.get(key)        # viewing is not an action: no touch
        if not isinstance(tw, Twin):
            return None
        tw.viewed()
        return tw

    def unlock(self, token, client: str, addr: str | None) -> str | None:
        """A credential for the shared twin's controls if `token` is the instructor's, else None;
        ControlError when over the unlock budgets (twin.live.gate)."""
        return self.gate.unlock(token, client, addr)

    def allow_upload(self, client: str, addr: str | None = None) -> None:
        """At most UPLOADS_PER_MIN uploads per client and UPLOADS_PER_MIN_ADDRESS per address a
        minute (fresh secrets from one address share its budget); ControlError when over."""
        _throttled(self._uploads, "trace uploads", client)
        _throttled(self._uploads_addr, "trace uploads from this address", f"addr:{addr}")

    def open_sandbox(self, params: dict | None = None, *, client: str | None = None,
                     addr: str | None = None) -> Twin:
        """Start a private twin (same settings as the shared one unless given), owned by `client`."""
        self.reap()
        with self._lock:
            live = list(self._sandboxes.values())          # reservations count too
            if client is not None and sum(t.owner == client for t in live) >= self.per_client:
                raise SandboxLimit(f"this browser already has {self.per_client} private sandbox(es), the "
                                   "most allowed: go back to it, or close it first")
            if addr is not None and sum(t.addr == addr for t in live) >= self.per_address:
                raise SandboxLimit(f"{self.per_address} private sandboxes are already open from your network "
                                   "address, the most allowed: close one first")
            if len(self._sandboxes) >= self.max_sandboxes:
                raise SandboxLimit(f"all {self.max_sandboxes} private sandboxes are in use; idle ones "
                                   f"are freed after {self.ttl_s / 60:.0f} min. Watch the shared twin "
                                   "meanwhile.")
            key = "sb-" + secrets.token_hex(8)
            self._sandboxes[key] = _Reservation(client, addr)
        base, speed = params, self.speed
        if base is None:          # a copy of the shared twin: scenario, deployment, seed, trace, load, speed
            shared = self._shared
            base = dict(vars(shared.params)) if shared else dict(self.params)
            speed = shared.speed if shared else speed
        try:
            tw = Twin(key, shared=False, params=base, factory=self.factory, wall_dt=self.wall_dt,
                      speed=speed, ttl_s=self.ttl_s, owner=client, addr=addr)
        except Exception as exc:
            with self._lock:
                self._sandboxes.pop(key, None)
            if isinstance(exc, (ValueError, KeyError, OSError)):   # e.g. an upload no longer kept
                log.warning("sandbox could not start: %s", exc)
                raise ControlError("a sandbox could not start with the shared twin's settings; reset "
                                   "the shared twin or try again") from None
            raise
        with self._lock:
            self._sandboxes[key] = tw
        return tw.start()

    def close(self, key: str, client: str | None = None) -> bool:
        """Stop a sandbox; ControlError if `client` is not its owner."""
        with self._lock:
            tw = self._sandboxes.get(key) if isinstance(key, str) else None
            if not isinstance(tw, Twin):      # gone, or still starting (its opener keeps it)
                return False
            if tw.owner is not None and client != tw.owner:
                raise ControlError(f"sandbox {key} belongs to another browser: only the browser that "
                                   "opened it can close it")
            del self._sandboxes[key]
        tw.stop(timeout=2.0)
        return True

    def reap(self) -> list[str]:
        """Stop and free sandboxes idle for longer than the TTL, those no tab has shown for
        UNVIEWED_S (a visitor who left, an attacker's included: their engines' memory goes back),
        and those whose thread has ended."""
        gone = []
        with self._lock:
            for key, tw in list(self._sandboxes.items()):
                if not isinstance(tw, Twin):
                    continue
                if (tw.idle_s() > self.ttl_s or tw.unviewed_s() > UNVIEWED_S
                        or tw.ended):
                    gone.append(self._sandboxes.pop(key))
        for tw in gone:
            tw.stop(timeout=0.5)
        return [tw.key for tw in gone]

    def sandboxes(self) -> list[str]:
        with self._lock:
            return [k for k, v in self._sandboxes.items() if isinstance(v, Twin)]

    def shutdown(self) -> None:
        with self._lock:
            twins = [t for t in self._sandboxes.values() if isinstance(t, Twin)]
            if self._shared is not None:
                twins.append(self._shared)
            self._sandboxes.clear()
            self._shared = None
        for tw in twins:
            tw.stop(timeout=2.0)


_registry: Sessions | None = None
_registry_lock = threading.Lock()


def sessions() -> Sessions:
    """The process-wide registry, created on first call (never at import)."""
    global _registry
    if _registry is None:
        with _registry_lock:
            if _registry is None:
                _registry = Sessions()
    return _registry


def configure(**kwargs) -> Sessions:
    """Replace the process-wide registry (tests, benchmarks); stops the old one's twins."""
    global _registry
    with _registry_lock:
        old, _registry = _registry, Sessions(**kwargs)
    if old is not None:
        old.shutdown()
    return _registry
