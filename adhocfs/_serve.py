"""Start-up helpers shared by the server entry points: binding, the readiness line, logging."""

from __future__ import annotations

import logging
import os
import socket
import sys
from typing import Any

import zmq

__all__ = ["READY", "announce", "bind_socket", "setup_logging"]

READY = "READY"
LOCAL_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})


def bind_socket(ctx: zmq.Context[Any], kind: int, host: str, port: int = 0) -> tuple[zmq.Socket[Any], str]:
    """Bind a ``kind`` socket on the address of ``host`` (a random port when ``port`` is 0).

    Returns:
        ``(socket, "tcp://host:port")``: the advertised address uses the host name as given.
    """
    ip = "127.0.0.1" if host in LOCAL_NAMES else socket.gethostbyname(host)
    sock = ctx.socket(kind)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.setsockopt(zmq.RCVHWM, 0)
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
