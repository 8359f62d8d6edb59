"""Talking to the controller daemon: find its address, send one typed request, wait (bounded) for the reply."""

from __future__ import annotations

import itertools
import json
import os
import time
from typing import Any

import zmq

from malleable._secret import load_token
from malleable.errors import AuthError, MalleableError, ProtocolError, Refusal, UnknownJob

from . import _protocol as P
from ._paths import addr_file, default_state

__all__ = ["Client", "ControllerUnavailable", "find_address"]

_ERRORS: dict[str, type[MalleableError]] = {
    "UnknownJob": UnknownJob,
    "Refused": Refusal,
    "AuthError": AuthError,
    "ProtocolError": ProtocolError,
}


class ControllerUnavailable(MalleableError):
    """No controller answered (not started, wrong address, or stopped)."""


def find_address(address: str | None = None, state: str | None = None) -> str:
    """The daemon's address: ``address``, else ``MALLEABLE_CONTROLLER``, else the address file of ``state``.

    Raises:
        ControllerUnavailable: no address is known (no daemon was started with that state file).
    """
    if address:
        return address if "://" in address else f"tcp://{address}"
    env = os.environ.get("MALLEABLE_CONTROLLER")
    if env and not state:
        return env
    st = state or default_state()
    af = addr_file(st)
    try:
        return str(json.loads(af.read_text())["address"])
    except (OSError, ValueError, KeyError):
        raise ControllerUnavailable(f"no controller running for state {st} (start one with 'malleable "
                                    "controller start', or give --controller ADDR)") from None


class Client:
    """One DEALER connection to the daemon (use as a context manager).

    Args:
        address: ``tcp://host:port`` (see :func:`find_address` for the default).
        state: the daemon's state file, to find its address.
        token: the shared secret (default ``MALLEABLE_TOKEN`` or the key file).
        timeout: seconds to wait for each reply.
    """

    def __init__(self, address: str | None = None, state: str | None = None, token: bytes | None = None,
                 timeout: float = 10.0) -> None:
        self.address = find_address(address, state)
        self.token = token if token is not None else load_token(create=False)
        self.timeout = timeout
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(self.address)
        self._ids = itertools.count(1)

    def close(self) -> None:
        """Close the socket."""
        self.sock.close(0)
        self.ctx.term()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, msg: P.Message, timeout: float | None = None) -> P.Message:
        """Send ``msg`` and return the reply; error replies are raised.

        Raises:
            ControllerUnavailable: no reply within the timeout.
            UnknownJob, Refusal, AuthError, ProtocolError: the daemon refused the request.
        """
        rid = next(self._ids)
        self.sock.send_multipart([b"", *P.encode(msg, self.token, rid)])
        wait = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + wait
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not self.sock.poll(int(left * 1000) + 1):
                raise ControllerUnavailable(f"the controller at {self.address} did not answer within {wait:g} s "
                                            "(is it running? 'malleable controller status')")
            frames = self.sock.recv_multipart()
            if frames and frames[0] == b"":
                frames = frames[1:]
            try:
                reply, got = P.decode(frames, self.token)
            except AuthError:
                raise AuthError("the controller answered with another shared secret: use the same "
                                "MALLEABLE_TOKEN (or key file) as the daemon") from None
            if got == rid:
                break
        if isinstance(reply, P.Error):
            cls = _ERRORS.get(reply.kind, MalleableError)
            raise cls(reply.msg)
        return reply

    # -- conveniences ----------------------------------------------------------------------------------------
    def submit(self, cmd: list[str], nodes: int = 1, min_nodes: int = 0, max_nodes: int = 0,
               malleable: bool = False, time_limit: float = 0.0, name: str = "", out: str = "", err: str = "",
               cwd: str | None = None, env: dict[str, str] | None = None, speedup: str = "linear",
               constraint: str = "") -> int:
        """Submit a job; returns its id (see :class:`~._protocol.Submit`)."""
        e = dict(os.environ) if env is None else dict(env)
        for k in ("MALLEABLE_TOKEN", "MALLEABLE_JOB", "MALLEABLE_CONTROLLER"):
            e.pop(k, None)
        m = P.Submit(name, list(cmd), nodes, min_nodes or nodes, max_nodes or nodes, malleable, float(time_limit),
                     out, err, cwd or os.getcwd(), e, speedup, constraint)
        reply = self.call(m)
        assert isinstance(reply, P.Submitted)
        return reply.job_id

    def rows(self, msg: P.Message) -> list[dict[str, Any]]:
        """Rows of a ``queue``/``nodes``/``history`` request."""
        reply = self.call(msg)
        if not isinstance(reply, P.Table):
            raise ProtocolError(f"expected a table, got {reply.TYPE}")
        return reply.rows

    def info(self, job_id: int) -> P.JobInfo:
        """One job's record, steps and events."""
        reply = self.call(P.Info(job_id))
        if not isinstance(reply, P.JobInfo):
            raise ProtocolError(f"expected job_info, got {reply.TYPE}")
        return reply

    def status(self, timeout: float | None = None) -> dict[str, Any]:
        """The daemon's status."""
        reply = self.call(P.Status(), timeout)
        if not isinstance(reply, P.StatusReply):
            raise ProtocolError(f"expected status_reply, got {reply.TYPE}")
        return reply.info

