"""Helpers shared by the servers: binding, the readiness line, logging, answering one request."""

from __future__ import annotations

import logging
import os
import socket
import sys
from collections.abc import Callable
from typing import Any

import zmq

from malleable._sockets import limit_frames, secure_socket
from malleable.adhocfs._protocol import Error, Message, decode, encode
from malleable.adhocfs._rpc import MAX_FRAME, reply_error
from malleable.errors import AuthError

__all__ = ["READY", "announce", "bind_socket", "serve_one", "setup_logging"]

log = logging.getLogger(__name__)

READY = "READY"
LOCAL_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})


def bind_socket(
    ctx: zmq.Context[Any], kind: int, host: str, port: int = 0, token: bytes | None = None, max_frame: int = MAX_FRAME
) -> tuple[zmq.Socket[Any], str]:
    """Bind a ``kind`` socket on the address of ``host`` (a random port when ``port`` is 0).

    Frames above ``max_frame`` bytes make zmq drop the sender before the frame is buffered (before any
    authentication); with a ``token`` the socket is a CURVE server when encryption is on.

    Returns:
        ``(socket, "tcp://host:port")``: the advertised address uses the host name as given.
    """
    ip = "127.0.0.1" if host in LOCAL_NAMES else socket.gethostbyname(host)
    sock = ctx.socket(kind)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.setsockopt(zmq.RCVHWM, 0)
    limit_frames(sock, max_frame)
    if token is not None:
        secure_socket(sock, token, server=True)
    try:
        if port:
            sock.bind(f"tcp://{ip}:{port}")
        else:
            port = sock.bind_to_random_port(f"tcp://{ip}")
    except zmq.ZMQError:
        sock.close(linger=0)
        raise
    return sock, f"tcp://{host}:{port}"


def announce(addr: str) -> None:
    """Print the readiness line ``READY <addr>`` for the starter, then detach stdout (to /dev/null)."""
    sys.stdout.write(f"{READY} {addr}\n")
    sys.stdout.flush()
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)


def setup_logging(path: str | None, tag: str) -> None:
    """Log to ``path`` (or stderr) at ``MALLEABLE_LOG`` level (default INFO) with a server tag."""
    level = getattr(logging, os.environ.get("MALLEABLE_LOG", "INFO").upper(), logging.INFO)
    handler: logging.Handler = logging.FileHandler(path) if path else logging.StreamHandler()
    handler.setFormatter(
        logging.Formatter(f"%(asctime)s %(levelname)s [{tag}@{socket.gethostname()}] %(name)s: %(message)s")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


def serve_one(
    sock: zmq.Socket[Any],
    frames: list[Any],
    token: bytes,
    handle: Callable[[Message], Message],
    expected: tuple[type[BaseException], ...],
    quiet: tuple[type[BaseException], ...],
    who: str,
    level: int = logging.INFO,
) -> None:
    """Answer one request received on a ROUTER socket; never raises.

    A request that fails with one of the ``expected`` exceptions gets the matching error reply (logged
    unless it is one of the ``quiet`` ones, which are normal answers such as "busy"); an unauthenticated
    one is rejected; any other exception is a bug, logged with its traceback and reported as an internal
    error of ``who``, so that it never takes the server down.
    """
    rid = 0
    try:
        ident, body = frames[0], frames[2:] if len(frames) > 1 and len(frames[1]) == 0 else frames[1:]
    except (IndexError, TypeError):
        return  # nothing to answer to
    try:
        msg, rid = decode(body, token)
        reply = handle(msg)
    except AuthError as e:
        log.warning("rejected message: %s", e)
        reply = Error("AuthError", str(e))
    except expected as e:
        rid = getattr(e, "request_id", rid)        # a field refused after the request id was read
        if not isinstance(e, quiet):
            log.log(level, "request failed: %s", e)
        reply = reply_error(e)
    except Exception as e:  # a bug must not take the server down: report it and go on
        log.exception("internal error handling a request")
        reply = Error("FsError", f"internal error in {who}: {e!r}"[:2000])
    try:
        sock.send_multipart([ident, b"", *encode(reply, token, rid)], copy=False)
    except Exception:  # an unencodable reply or a socket error: logged, the server keeps serving
        log.exception("could not send the reply to request %d", rid)
