"""The runtime's link to the controller: a decision source (see ``_sources.DecisionSource``) on world rank 0.

It never blocks the application: every call sends without waiting (a zmq DEALER with a bounded queue) and
reads whatever replies have arrived. ``poll`` asks the controller for an order at each probe and returns the
order received for an earlier ask, so an order takes effect at most one probe after it is delivered.
Acknowledgements (``committed``, ``refused``) are repeated at each probe until the controller confirms them, so
one survives a controller restart; the controller ignores duplicates. The I/O the application measured
(:mod:`._iometer`) goes out as the ``"io"`` progress phase at a probe when a report is due, and a last time,
confirmed, when the link closes.

Environment: ``MALLEABLE_CONTROLLER`` (``tcp://host:port``), ``MALLEABLE_JOB`` (the job id) and the job's own
key (``MALLEABLE_KEY``, which speaks only for this job; see ``malleable._secret.load_credential``).
"""

from __future__ import annotations

import atexit
import itertools
import logging
import os
import socket
import time
from typing import Any

import zmq

from malleable._secret import load_credential
from malleable.controller.daemon import _protocol as P
from malleable.errors import ConfigError, MalleableError
from malleable.runtime import _iometer
from malleable.runtime._layout import GroupLayout
from malleable.runtime._requests import AdaptRequest, Refusal
from malleable.runtime._types import Pause, Resize, Resume

__all__ = ["ControllerSource"]

log = logging.getLogger(__name__)

POLL_EVERY = 0.05   # seconds: at most one outstanding poll, and not more often than this
RESEND_EVERY = 1.0  # seconds between repeats of an unconfirmed acknowledgement


class ControllerSource:
    """Decisions from the controller daemon for job ``job_id`` (rank 0 only; ``local`` is False).

    Args:
        address: the daemon's ``tcp://host:port``.
        job_id: the job's id.
        token: the job's key (a :class:`~malleable._secret.Credential`), or the operator's shared secret.
    """

    local = False

    def __init__(self, address: str, job_id: int, token: bytes) -> None:
        self.address, self.job_id, self.token = address, job_id, token
        self.ctx: zmq.Context[Any] = zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.SNDHWM, 100)
        self.sock.setsockopt(zmq.RECONNECT_IVL_MAX, 1000)
        P.prepare_socket(self.sock, token)  # frame limit; CURVE when MALLEABLE_ENCRYPT is on
        self.sock.connect(address)
        self._ids = itertools.count(1)
        self._poll_rid = 0            # id of the outstanding poll (0: none)
        self._poll_at = 0.0
        self._order: P.Order | None = None
        self._declined: str | None = None  # the controller refused the outstanding request
        self._pause: Pause | Resume | None = None  # a pause or resume reply not handed out yet
        self._done = 0                # highest order seq handed to the runtime
        self._unacked: dict[int, tuple[P.Message, float]] = {}   # rid -> (message, last sent)
        self._closed = False
        atexit.register(self.close)

    @classmethod
    def from_env(cls) -> ControllerSource:
        """Build from ``MALLEABLE_CONTROLLER``, ``MALLEABLE_JOB`` and the shared secret.

        Raises:
            ConfigError: a variable is missing or malformed.
        """
        addr = os.environ.get("MALLEABLE_CONTROLLER", "")
        job = os.environ.get("MALLEABLE_JOB", "")
        if not addr.startswith("tcp://"):
            raise ConfigError(f"MALLEABLE_CONTROLLER must be tcp://HOST:PORT, got {addr!r}")
        if not job.isdigit():
            raise ConfigError(f"MALLEABLE_JOB must be the job id (an integer), got {job!r}")
        return cls(addr, int(job), load_credential())

    # -- plumbing --------------------------------------------------------------------------------------------
    def _send(self, msg: P.Message, reliable: bool = False) -> int:
        rid = next(self._ids)
        if self._closed:
            return rid
        try:
            self.sock.send_multipart([b"", *P.encode(msg, self.token, rid)], zmq.NOBLOCK)
        except zmq.Again:
            log.debug("controller link: queue full, %s not sent now", msg.TYPE)
        if reliable:
            self._unacked[rid] = (msg, time.monotonic())
        return rid

    def _drain(self) -> None:
        """Read every reply that has arrived (never waits)."""
        while not self._closed:
            try:
                frames = self.sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            if frames and frames[0] == b"":
                frames = frames[1:]
            try:
                reply, rid = P.decode(frames, self.token)
            except MalleableError as e:
                log.warning("controller link: bad reply ignored: %s", e)
                continue
            if rid in self._unacked:
                msg = self._unacked.pop(rid)[0]
                if isinstance(reply, P.Error):
                    log.warning("controller refused %s: %s", msg.TYPE, reply.msg)
            if rid == self._poll_rid:
                self._poll_rid = 0
                if isinstance(reply, P.Order) and reply.seq > self._done:
                    self._order = reply
                elif isinstance(reply, P.Declined):
                    self._declined = reply.reason
                elif isinstance(reply, P.Pause):
                    self._pause = Pause(None)
                elif isinstance(reply, P.Resume):
                    self._pause = Resume()
                elif isinstance(reply, P.Error):
                    log.debug("controller: poll refused: %s", reply.msg)
            elif isinstance(reply, P.Error) and rid not in self._unacked:
                log.debug("controller: %s", reply.msg)

    def _resend(self, now: float) -> None:
        for rid, (msg, sent) in list(self._unacked.items()):
            if now - sent >= RESEND_EVERY:
                del self._unacked[rid]
                self._send(msg, reliable=True)

    # -- DecisionSource --------------------------------------------------------------------------------------
    def poll(self, probe: int) -> Resize | Refusal | Pause | Resume | None:
        """The controller's order (or refusal of the outstanding request) received so far, if any (asks for the
        next one; never blocks)."""
        self._drain()
        now = time.monotonic()
        self._resend(now)
        if self._poll_rid and now - self._poll_at > 5.0:
            self._poll_rid = 0  # lost (controller restarting): ask again
        if not self._poll_rid and now - self._poll_at >= POLL_EVERY:
            self._poll_rid = self._send(P.Poll(self.job_id, probe))
            self._poll_at = now
        if self._pause is not None:
            cmd, self._pause = self._pause, None
            return cmd
        stats = _iometer.meter().due()
        if stats is not None:
            self.progress(_iometer.IO_PHASE, stats.data())
        o, self._order = self._order, None
        if o is None and self._declined is not None:
            reason, self._declined = self._declined, None
            return Refusal(reason)
        if o is None or o.seq <= self._done:
            return None
        self._done = o.seq
        self._seq = o.seq
        return Resize(o.procs, tuple(o.hosts))

    def started(self, layout: GroupLayout) -> None:
        """Register the job (rank 0's pid and host, the host of every process)."""
        hosts = [h for g in layout.groups for h in g.hosts[:g.active]]
        self._send(P.Register(self.job_id, os.getpid(), socket.gethostname(), layout.world_size, hosts),
                   reliable=True)

    def committed(self, report: Any, layout: GroupLayout) -> None:
        """Acknowledge the current order with the measured time, new size and the hosts really freed."""
        hosts = [h for g in layout.groups for h in g.hosts[:g.active]]
        self._send(P.Committed(self.job_id, self._done, str(report.kind), int(report.old_size), int(report.new_size),
                               max(0.0, float(report.seconds)), list(report.freed_hosts), hosts, int(report.idle)),
                   reliable=True)
        self._drain()

    def refused(self, decision: Resize, reason: str) -> None:
        """Tell the controller the current order could not be carried out."""
        self._send(P.Refused(self.job_id, self._done, reason[:1000]), reliable=True)

    def request(self, req: AdaptRequest) -> None:
        """Forward an application's request (repeated until the controller confirms it)."""
        self._send(P.ResizeRequest(self.job_id, req.procs, req.min_procs, req.max_procs), reliable=True)

    def progress(self, phase: str, data: dict) -> None:
        """Per-phase data (MTCT, iteration time); dropped if the controller is not reachable."""
        clean = {str(k)[:64]: v for k, v in data.items() if isinstance(v, (int, float, str, bool)) or v is None}
        self._send(P.Progress(self.job_id, phase[:64], clean))

    def close(self) -> None:
        """Send the last I/O report, give it and unconfirmed acknowledgements a moment (at most 1 s), then close
        the socket."""
        if self._closed:
            return
        stats = _iometer.meter().due(force=True)
        if stats is not None:
            self._send(P.Progress(self.job_id, _iometer.IO_PHASE, stats.data()), reliable=True)
        deadline = time.monotonic() + 1.0
        while self._unacked and time.monotonic() < deadline:
            self._drain()
            if self._unacked:
                self.sock.poll(50)
        self._closed = True
        self.sock.close(0)
        self.ctx.term()
