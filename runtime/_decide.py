"""What a probe hears: the decision source's answer, with the application's size requests and a plan's answers.

:func:`poll` runs at every ``probe_adapt`` on every rank of the world and gives either a resize (with whether it
answers the outstanding request) or a finished probe result (a pause, a refused or deferred request). Rank 0 reads
other ranks' requests here (see ``_requests``) and hands the outstanding one to the decision source; a plan is read
on every rank (no communication), a controller on rank 0 and broadcast.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from malleable.runtime import _lifecycle, _requests
from malleable.runtime._plan import PlanStep
from malleable.runtime._record import get_logger
from malleable.runtime._types import Pause, ProbeResult, Resize, Status

if TYPE_CHECKING:
    from malleable.runtime._requests import AdaptRequest

__all__ = ["poll", "take_request"]

log = get_logger(__name__)


def poll(rt: Any) -> tuple[Resize | None, bool] | ProbeResult:
    """The decision due at this probe (``rt.probes`` already counts it): ``(resize or None, answers the
    outstanding request)``, or the probe's whole result when the answer is not a resize."""
    planned = rt.source.poll(rt.probes) if rt.source.local else None
    if rt.requests is None:   # the first probe after an adaptation (every rank makes the same probes)
        if isinstance(planned, Resize) and planned.procs != rt.layout.world_size:
            # the plan adapts again at once: the channel would be closed unused (requests wait in their queue)
            return planned, False
        rt.requests, rt.queued_requests = _requests.Channel(rt.world, rt.queued_requests), []
    channel = rt.requests
    if rt.world.rank == 0 and rt.world.size > 1:
        now = time.monotonic()
        # a probe stays cheap: look for requests now and then (at every probe under a plan, so that its answer
        # steps see every request made at an earlier probe)
        if rt.source.local or now - rt.drained_at >= _requests.DRAIN_EVERY:
            rt.drained_at = now
            for req in channel.drain():
                take_request(rt, req)
    if rt.source.local:
        d = planned
    else:
        d = rt.world.bcast(_poll_rank0(rt) if rt.world.rank == 0 else None, root=0)
    granted = False
    if isinstance(d, PlanStep):  # a plan's answer step: every rank learns the outstanding request from rank 0
        sent = rt.world.reduce(channel.sent if rt.world.rank else 0, root=0)   # requests made at earlier probes
        if rt.world.rank == 0 and sent > channel.got:
            for req in channel.drain(sent - channel.got):
                take_request(rt, req)
        req = rt.world.bcast(rt.outstanding, root=0)
        if req is None or d.answer == "defer":
            return ProbeResult(False, Status.STAYING, {})
        rt.outstanding = None
        d = _requests.Refusal("refused by the plan") if d.answer == "refuse" else (_requests.grant(req), True)
    if isinstance(d, tuple):  # (decision, answers the outstanding request)
        d, granted = d
    if isinstance(d, Pause):
        return _lifecycle.pause(rt, d)
    if isinstance(d, _requests.Refusal):
        rt.outstanding = None
        return ProbeResult(False, Status.STAYING, {"request": "refused", "reason": d.reason, "probe": rt.probes})
    return d, granted


def _poll_rank0(rt: Any) -> Any:
    """A controller's answer on rank 0: a decision (with whether it answers the outstanding request) or a refusal."""
    d = rt.source.poll(rt.probes)
    if isinstance(d, Resize):
        granted, rt.outstanding = rt.outstanding is not None, None
        return d, granted
    return d


def take_request(rt: Any, req: AdaptRequest) -> None:
    """Rank 0: ``req`` is the outstanding request now; the decision source hears of it."""
    rt.outstanding = req
    log.info("application asks for %s", req.as_dict())
    rt.source.request(req)
