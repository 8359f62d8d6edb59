"""Request/reply over zmq DEALER sockets with request ids, timeouts and reconnection (Lazy Pirate),
shared by the client, the metadata server (talking to data servers) and the command line.
"""

from __future__ import annotations

import errno
import itertools
import logging
import re
import time
from collections.abc import Sequence
from typing import Any

import zmq

from malleable._wire import limit_frames, secure_socket
from malleable.adhocfs._protocol import Error, Message, decode, encode
from malleable.errors import AuthError, FsError, PlacementError, ProtocolError, ReplayError, ServerUnavailable

__all__ = ["ADDRESS", "MAX_FRAME", "Busy", "Peer", "StaleLayout", "raise_remote", "reply_error"]

ADDRESS = re.compile(r"^tcp://[^\s:/]+:\d{1,5}$")
"""A server address as clients give it: ``tcp://HOST:PORT``."""

MAX_FRAME = (64 << 20) + (1 << 20)
"""Largest frame any adhocfs socket accepts (a 64 MiB block plus slack): zmq drops a peer sending more."""

log = logging.getLogger(__name__)


class StaleLayout(FsError):
    """A data server refused a request made with an old layout version: refresh the layout and retry."""


class Busy(FsError):
    """The file is being redistributed (decommissioning): writes must wait until it is ready again."""


_KINDS: dict[str, type[BaseException]] = {
    "FileNotFoundError": FileNotFoundError,
    "FileExistsError": FileExistsError,
    "IsADirectoryError": IsADirectoryError,
    "NotADirectoryError": NotADirectoryError,
    "PermissionError": PermissionError,
    "ValueError": ValueError,
    "OSError": OSError,
    "FsError": FsError,
    "PlacementError": PlacementError,
    "ProtocolError": ProtocolError,
    "AuthError": AuthError,
    "stale": StaleLayout,
    "busy": Busy,
}


def reply_error(exc: BaseException) -> Error:
    """The :class:`Error` reply describing ``exc`` (its class name when the client knows it)."""
    kind = type(exc).__name__
    if isinstance(exc, StaleLayout):
        kind = "stale"
    elif isinstance(exc, Busy):
        kind = "busy"
    elif isinstance(exc, OSError) and type(exc) in (OSError, FsError) and exc.errno in errno.errorcode:
        kind = f"OSError:{errno.errorcode[exc.errno]}"  # ENOSPC, EIO...: the client raises the same errno
    elif kind not in _KINDS:
        kind = "ValueError" if isinstance(exc, ValueError) else "FsError"
    msg = exc.args[-1] if isinstance(exc, OSError) and len(exc.args) > 1 else str(exc)
    return Error(kind, str(msg))


def raise_remote(err: Error, where: str) -> None:
    """Raise the local exception for an :class:`Error` reply received from ``where``."""
    if err.kind.startswith("OSError:"):
        code = getattr(errno, err.kind[8:], errno.EIO)
        raise (OSError if code == errno.ENOSPC else FsError)(code, f"{err.msg} ({where})")
    cls = _KINDS.get(err.kind, FsError)
    if issubclass(cls, OSError) and cls not in (FsError, StaleLayout, Busy):
        raise cls(_errno(cls), err.msg)
    raise cls(f"{err.msg} ({where})")


def _errno(cls: type[BaseException]) -> int:
    import errno

    return {
        FileNotFoundError: errno.ENOENT,
        FileExistsError: errno.EEXIST,
        IsADirectoryError: errno.EISDIR,
        NotADirectoryError: errno.ENOTDIR,
        PermissionError: errno.EACCES,
    }.get(cls, errno.EIO)


class Peer:
    """A DEALER connection to one server, with numbered requests.

    Several requests may be outstanding (pipelining): :meth:`send` returns the request id and
    :meth:`recv` returns replies in arrival order. After a timeout the socket is replaced so a late
    reply can never be taken for the answer to a newer request.

    Args:
        ctx: the zmq context.
        addr: ``tcp://host:port`` of the server.
        token: the shared secret.
        name: how errors name the server (e.g. ``data server 2 (tcp://node1:5555)``).
        timeout: default seconds to wait for a reply.
    """

    def __init__(
        self, ctx: zmq.Context[Any], addr: str, token: bytes, name: str, timeout: float = 5.0
    ) -> None:
        self.ctx, self.addr, self.token, self.name, self.timeout = ctx, addr, token, name, timeout
        self._ids = itertools.count(1)
        self.sock: zmq.Socket[Any] = self._open()
        self.pending: set[int] = set()
        # replies received while waiting for other requests of this connection (several open files share
        # it): kept by request id until their owner collects them
        self.stash: dict[int, Message] = {}

    def _open(self) -> zmq.Socket[Any]:
        s = self.ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.SNDHWM, 0)
        s.setsockopt(zmq.RCVHWM, 0)
        limit_frames(s, MAX_FRAME)
        secure_socket(s, self.token, server=False)
        s.connect(self.addr)
        return s

    def reset(self) -> None:
        """Replace the socket (after a timeout) and forget outstanding requests."""
        self.sock.close(linger=0)
        self.sock = self._open()
        self.pending.clear()
        self.stash.clear()

    def forget(self, rid: int) -> None:
        """Drop request ``rid``: its reply, when it comes, is skipped."""
        self.pending.discard(rid)
        self.stash.pop(rid, None)

    def close(self) -> None:
        """Close the socket."""
        self.sock.close(linger=0)

    def send(self, msg: Message) -> int:
        """Send ``msg`` without waiting; returns its request id."""
        rid = next(self._ids)
        self.sock.send_multipart([b"", *encode(msg, self.token, rid)], copy=False)
        self.pending.add(rid)
        return rid

    def recv(self, timeout: float | None = None, what: str = "") -> tuple[Message, int]:
        """The next reply as ``(message, request id)``; replies to forgotten requests are skipped.

        Raises:
            ServerUnavailable: nothing arrived within ``timeout`` (the socket is reset).
            AuthError: the reply is not authenticated (the server has a different secret).
        """
        wait = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + wait
        while True:
            got = self.try_recv()  # a reply already queued is taken even if the deadline has passed
            if got is not None:
                return got
            left = deadline - time.monotonic()
            if left <= 0:
                self.reset()
                for_ = f" for {what}" if what else ""
                raise ServerUnavailable(f"{self.name} did not answer within {wait:g} s{for_}")
            self.sock.poll(int(left * 1000) + 1, zmq.POLLIN)

    def try_recv(self) -> tuple[Message, int] | None:
        """A reply already received, as ``(message, request id)``, or None (never waits)."""
        while True:
            try:
                frames = self.sock.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return None
            msg, rid = self._decode(frames[1:] if frames and len(frames[0]) == 0 else frames)
            if rid in self.pending:
                self.pending.discard(rid)
                return msg, rid

    def _decode(self, frames: Sequence[Any]) -> tuple[Message, int]:
        try:
            return decode(frames, self.token)
        except ReplayError as e:
            raise ReplayError(f"{self.name}: {e}") from None
        except AuthError:
            raise AuthError(
                f"{self.name} refused the request or answered with another shared secret: "
                "set the same MALLEABLE_TOKEN (or key file) on clients and servers"
            ) from None

    def call(self, msg: Message, timeout: float | None = None, what: str = "") -> Message:
        """Send ``msg`` and wait for its reply; :class:`Error` replies are raised as local exceptions."""
        rid = self.send(msg)
        while True:
            reply, got = self.recv(timeout, what)
            if got == rid:
                break
        if isinstance(reply, Error):
            raise_remote(reply, f"{self.name}{', ' + what if what else ''}")
        return reply
