"""Changes the store could not commit (a full disk) and the actions behind them, in order.

The daemon acts on a change only once it is committed. When a commit fails, the actions wait here, in order, and
everything the core decides afterwards waits behind them; :meth:`Backlog.retry` (every tick) commits them once the
store writes again and only then carries them out. Meanwhile :attr:`Backlog.error` says why, so new work can be
refused with the reason.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable
from typing import Any

from ._events import PERSIST
from ._store import Store

__all__ = ["Backlog"]

log = logging.getLogger(__name__)


class Backlog:
    """Persist-then-act for the daemon, holding what a failed commit left.

    Args:
        store: the state.
        carry_out: carries out one action that is not persistence (a launch, a stop...).
    """

    def __init__(self, store: Store, carry_out: Callable[[Any], None]) -> None:
        self.store, self.carry_out = store, carry_out
        self.held: list[Any] = []     # actions waiting for the store, oldest first
        self.error = ""               # why the store last failed to write ("" when it writes)

    def run(self, actions: list[Any]) -> None:
        """Commit the persistence actions, then carry out the others; or hold them all behind what waits."""
        if self.held:
            self.held += actions
            return
        persist = [a for a in actions if type(a) in PERSIST]
        if persist:
            try:
                self.store.apply(persist)
            except sqlite3.Error as e:
                self._failed(e)
                self.held = list(actions)
                return
        for a in actions:
            if type(a) not in PERSIST:
                self.carry_out(a)

    def retry(self) -> bool:
        """Commit what waits (or, when nothing does, check that a write passes again) and carry it out; whether
        the store writes again."""
        held, self.held = self.held, []
        try:
            if held:
                self.store.apply([a for a in held if type(a) in PERSIST])
            else:
                with self.store.tx():
                    self.store.set_meta("written", str(time.time()))
        except sqlite3.Error as e:
            self.held = held
            self._failed(e)
            return False
        log.warning("the state %s can be written again (%d change(s) saved); accepting new work", self.store.path,
                    sum(type(a) in PERSIST for a in held))
        self.error = ""
        for a in held:
            if type(a) not in PERSIST:
                self.carry_out(a)
        return True

    def _failed(self, e: Exception) -> None:
        if not self.error:
            log.error("cannot write the state %s: %s; no new work is accepted until it can",  # noqa: TRY400
                      self.store.path, e)
        self.error = str(e)
