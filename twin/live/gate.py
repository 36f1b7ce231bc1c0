"""The one place instructor authority is checked (issue 22).

The instructor token is compared only in `Gate.unlock`, and every comparison is throttled: per
browser, per remote address and in total. A correct token buys the browser tab a *credential*: a
random 256-bit value kept here with an expiry. Controls present the credential, never the token,
and `Gate.check` looks it up; a value that cannot be guessed is not a token oracle however often it
is checked. Failed unlocks (wrong or refused unchecked) are logged one line each, with running
totals, at most LOG_LINES_PER_MIN lines a minute.

Bounds on guesses compared, per minute: UNLOCK_PER_MIN per browser; from browsers that never held a
credential, also UNLOCK_PER_MIN_ADDRESS per address and UNLOCK_PER_MIN_TOTAL in all. A browser that
held a credential this process ("proven") skips the address and total buckets, so strangers failing
never lock out an instructor who unlocked once; it still has its own bucket. Residual limit: an
instructor whose browser has never unlocked waits (at most a minute) if others have used up its
address's or the total budget.

A credential ends at its expiry, when its tab signs out (`revoke`), or when the token changes:
assigning `Gate.token` (the one way the token changes in a running process; the environment's
TWIN_INSTRUCTOR_TOKEN is read once, when the process builds its gate) revokes every credential and
forgets the proven browsers, which proved only that they knew the old token. A new gate starts with
none. The module never imports dash.
"""
from __future__ import annotations

import hmac
import logging
import math
import secrets
import threading
import time
from collections import OrderedDict
from typing import Callable

from twin.live.budget import LogBudget, RateLimit
from twin.live.controls import ControlError

log = logging.getLogger(__name__)

UNLOCK_PER_MIN = 5              # tokens compared per browser per minute (an instructor mistypes a few)
UNLOCK_PER_MIN_ADDRESS = 20     # ... per remote address, for browsers not yet proven (a room behind one NAT)
UNLOCK_PER_MIN_TOTAL = 60       # ... in all, for browsers not yet proven (assumption: a handful of instructors)
CREDENTIAL_TTL_S = 12 * 3600.0  # a credential outlives a teaching day, not a week (assumption)
MAX_CREDENTIALS = 256           # tabs unlocked at once; the oldest is forgotten first
MAX_PROVEN = 1024               # browsers remembered as proven; the least recent is forgotten first
LOG_LINES_PER_MIN = 20          # failed-unlock log lines a minute; the rest are counted


class Gate:
    """Instructor authority: `unlock(token, client, addr)` -> credential or None; `check(credential)`."""

    def __init__(self, token: str | None, *, ttl_s: float = CREDENTIAL_TTL_S,
                 max_credentials: int = MAX_CREDENTIALS, clock: Callable[[], float] = time.monotonic):
        self._token = token or None
        self.ttl_s, self.max_credentials, self._clock = ttl_s, max_credentials, clock
        self._per_client = RateLimit(UNLOCK_PER_MIN, clock=clock)
        self._per_addr = RateLimit(UNLOCK_PER_MIN_ADDRESS, clock=clock)
        self._total = RateLimit(UNLOCK_PER_MIN_TOTAL, clock=clock)
        self._credentials: OrderedDict[str, float] = OrderedDict()     # credential -> expiry
        self._proven: OrderedDict[str, None] = OrderedDict()           # client ids that unlocked
        self._lock = threading.Lock()
        self._wrong = self._refused = 0
        self._log = LogBudget(log, LOG_LINES_PER_MIN)

    @property
    def token(self) -> str | None:
        return self._token

    @token.setter
    def token(self, value: str | None) -> None:
        """A different token revokes every credential (and the proven browsers); the same one keeps them."""
        value = value or None
        with self._lock:
            changed, self._token = value != self._token, value
            if changed:
                self._credentials.clear()
                self._proven.clear()
        if changed:
            log.info("instructor token %s: every credential revoked", "changed" if value else "removed")

    @property
    def locked(self) -> bool:
        return bool(self._token)

    def unlock(self, token, client: str, addr: str | None) -> str | None:
        """A new credential if `token` is the instructor's, None if it is not; ControlError (naming
        the wait) when this browser, its address or everyone together is over budget: the token is
        then not compared at all."""
        self._throttle(client, addr)
        right = self._token
        if not (isinstance(token, str) and right and hmac.compare_digest(token.encode(), right.encode())):
            with self._lock:
                self._wrong += 1
            self._failed("wrong token", client, addr)
            return None
        return self._issue(client, right)

    def check(self, credential) -> bool:
        """Whether `credential` was issued by `unlock` and has not expired (or nothing is locked)."""
        if not self.locked:
            return True
        if not isinstance(credential, str):
            return False
        with self._lock:
            expiry = self._credentials.get(credential)
            if expiry is not None and expiry <= self._clock():
                del self._credentials[credential]
                expiry = None
        return expiry is not None

    def revoke(self, credential) -> bool:
        """Sign a tab out: its credential no longer opens anything. True if it was valid."""
        if not isinstance(credential, str):
            return False
        with self._lock:
            expiry = self._credentials.pop(credential, None)
        if expiry is not None:
            log.info("instructor signed out")
        return expiry is not None and expiry > self._clock()

    def _throttle(self, client: str, addr: str | None) -> None:
        """Count the attempt against the browser's bucket, and, for a browser not yet proven, its
        address's and the total one; refuse it (logged) if any is full."""
        with self._lock:
            proven = client in self._proven
        checks = [(self._per_client, "unlock attempts", client)]
        if not proven:
            checks += [(self._per_addr, "unlock attempts from this address", f"addr:{addr}"),
                       (self._total, "unlock attempts on this server", "all")]
        for limit, what, key in checks:
            wait = limit.wait_s(key)
            if wait:
                with self._lock:
                    self._refused += 1
                self._failed(f"refused unchecked ({what})", client, addr)
                raise ControlError(f"{what}: at most {limit.n} per minute; try again in {math.ceil(wait)} s")

    def _issue(self, client: str, token: str) -> str | None:
        """A credential for `client`, unless the token changed since it was compared to `token`."""
        credential = secrets.token_urlsafe(32)
        with self._lock:
            if token != self._token:
                return None
            self._credentials[credential] = self._clock() + self.ttl_s
            while len(self._credentials) > self.max_credentials:
                self._credentials.popitem(last=False)
            self._proven[client] = None
            self._proven.move_to_end(client)
            while len(self._proven) > MAX_PROVEN:
                self._proven.popitem(last=False)
        log.info("instructor unlock by client %s", client[:14])
        return credential

    def _failed(self, why: str, client: str, addr: str | None) -> None:
        self._log(logging.WARNING, "failed unlock: %s, client %s, address %s (totals: %d wrong, %d refused "
                  "unchecked)", why, client[:14], addr, self._wrong, self._refused)
