"""Elasticity of the metadata server: commissioning (expand) data servers into a new placement epoch.

Mixed into :class:`~._meta.MetaServer`; everything runs on the metadata server's loop.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from malleable.adhocfs._placement import intern_epoch
from malleable.adhocfs._protocol import Change, Expand, Message, Shrink

from malleable.errors import FsError

__all__ = ["ElasticMixin"]

log = logging.getLogger(__name__)


class ElasticMixin:
    """Expand/shrink handling for the metadata server (needs ``self.ns``)."""

    ns: Any

    def init_elastic(self) -> None:
        """Set up job state."""
        self.job: Any = None

    def job_active(self) -> bool:
        """Whether a redistribution job is running."""
        return self.job is not None

    def step_job(self) -> None:
        """Advance the running job by one batch."""

    def change_info(self) -> dict[str, Any] | None:
        """The change in progress (None when idle)."""
        return None

    def recover(self) -> None:
        """Finish or roll back a change interrupted by a crash (called at start-up)."""

    def expand(self, msg: Expand) -> Message:
        """Commission registered servers: the current epoch becomes the old list plus ``msg.sids``."""
        ns = self.ns
        rows = {r["sid"]: r for r in ns.servers()}
        for sid in msg.sids:
            r = rows.get(sid)
            if r is None or r["state"] not in ("up", "active"):
                raise FsError(f"data server {sid} is not registered and idle "
                              f"(state {r['state'] if r else 'unknown'})")
        ns.db.execute("BEGIN IMMEDIATE")
        try:
            cur = ns.current_epoch()
            epochs = ns.epochs()
            old = epochs.get(cur, ()) if cur is not None else ()
            eid, epochs = intern_epoch(epochs, [*old, *msg.sids])
            ns.set_epochs(epochs, eid)
            for sid in msg.sids:
                ns.db.execute("UPDATE servers SET state='active' WHERE sid=?", (sid,))
            ns.history({"kind": "expand", "sids": list(msg.sids), "epoch": eid, "servers": list(epochs[eid])},
                       time.time())
            ns.db.execute("COMMIT")
        except BaseException:
            ns.db.execute("ROLLBACK")
            raise
        log.info("commissioned servers %s: epoch %d = %s", msg.sids, eid, epochs[eid])
        return Change({"kind": "expand", "state": "done", "epoch": eid, "servers": list(epochs[eid])})

    def shrink(self, msg: Shrink) -> Message:
        """Decommission servers (implemented with redistribution in a later step)."""
        raise FsError("shrink is not supported yet")
