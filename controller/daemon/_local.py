"""The daemon's local socket: on its own host a request proves its sender's Unix identity, as Slurm's do with MUNGE,
without any key.

The daemon also listens on a ZeroMQ ``ipc://`` socket beside its state file (``STATE.sock``, mode 0666). For
every connection libzmq reads the peer's credentials from the kernel (``SO_PEERCRED``: uid, gid, pid of the
process that connected) and hands them with each message as its ``Peer-Address`` property,
``host:UID:GID:PID``. The kernel sets them; a client cannot choose them. The daemon maps the uid to a requester:
root or the daemon's own account is the operator, the Unix user of a controller user (``add-user``) is that
user, anyone else is refused.

Messages on this socket use the usual envelope (:mod:`malleable._wire`) sealed with a public constant
(:data:`PEER_SECRET`): the seal keeps its framing, limits and replay checks, and proves nothing; the identity
is the socket's. The socket is never reachable from another host.
"""

from __future__ import annotations

import logging
import os
import pwd
import socket
from pathlib import Path
from typing import Any

import zmq

from malleable._secret import Credential
from malleable._sockets import limit_frames
from malleable.errors import AuthError

from . import _protocol as P
from ._access import OPERATOR, Principal

__all__ = ["PEER_KEY", "PEER_SECRET", "bind_local", "local_path", "peer_principal", "peer_uid"]

log = logging.getLogger(__name__)

PEER_SECRET = b"malleable local socket: the sender is proven by SO_PEERCRED, not by this"
"""The seal of messages on the local socket (public: it authenticates nothing)."""

PEER_KEY = Credential("", PEER_SECRET)
"""What a client seals its messages with on the local socket."""

MAX_IPC_PATH = 107     # sun_path holds 108 bytes with the NUL


def local_path(state: str) -> Path:
    """The daemon's local socket (beside the state file)."""
    return Path(state + ".sock")


def bind_local(ctx: zmq.Context[Any], state: str) -> tuple[zmq.Socket[Any] | None, str]:
    """A ROUTER on the local socket of ``state`` and its address, or ``(None, "")`` when the path is too long
    for a Unix socket or cannot be bound (the daemon then takes keys only, and logs why)."""
    path = local_path(state)
    if len(str(path).encode()) > MAX_IPC_PATH:
        log.warning("no local socket: %s is longer than a Unix socket path may be", path)
        return None, ""
    if path.is_socket():
        if _listening(path):
            log.warning("no local socket: another process listens on %s", path)
            return None, ""
        path.unlink(missing_ok=True)     # left by a daemon that died
    s = ctx.socket(zmq.ROUTER)
    s.setsockopt(zmq.LINGER, 0)
    limit_frames(s, P.MAX_FRAME)
    address = f"ipc://{path}"
    try:
        s.bind(address)
        os.chmod(path, 0o666)        # every local user may connect: the kernel says who they are
    except (zmq.ZMQError, OSError) as e:
        s.close(0)
        log.warning("no local socket at %s: %s", path, e)
        return None, ""
    return s, address


def _listening(path: Path) -> bool:
    """Whether a process accepts connections on the Unix socket ``path``."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(1.0)
        try:
            s.connect(str(path))
        except OSError:
            return False
        return True


def peer_uid(frame: Any) -> int:
    """The uid of the process that sent ``frame`` on the local socket (libzmq's ``Peer-Address`` property,
    ``host:UID:GID:PID``, read from the kernel by SO_PEERCRED).

    Raises:
        AuthError: the property is missing or not in that form (libzmq built without SO_PEERCRED).
    """
    try:
        parts = frame.get("Peer-Address").rsplit(":", 3)
        return int(parts[1])
    except (zmq.ZMQError, AttributeError, ValueError, IndexError):
        raise AuthError("the local socket did not give the sender's credentials (SO_PEERCRED)") from None


def peer_principal(uid: int, users: dict[str, Any]) -> Principal:
    """The requester a local peer with Unix ``uid`` stands for: root and the daemon's own account are the operator;
    the Unix user of a controller user is that user.

    Raises:
        AuthError: a Unix user the operator did not add.
    """
    if uid in (0, os.geteuid()):
        return OPERATOR
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        name = ""
    if name in users:
        return Principal("user", name)
    raise AuthError(f"Unix user {name or '?'} (uid {uid}) is not a user of this controller: the operator adds "
                    f"users with 'malleable controller add-user {name or 'NAME'}'")
