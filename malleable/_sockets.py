"""Socket settings every malleable endpoint shares: a frame-size limit checked as frames arrive, and CURVE
encryption whose server key pair derives from the shared secret (see docs/security.md for its measured cost)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import zmq
from zmq.utils import z85

from malleable._wire import _derive
from malleable.errors import ConfigError

__all__ = ["encryption_wanted", "limit_frames", "secure_socket", "server_public_key"]

def limit_frames(sock: zmq.Socket[Any], nbytes: int) -> None:
    """Make zmq drop any peer that sends a frame larger than ``nbytes`` before it is buffered whole
    (``ZMQ_MAXMSGSIZE``: checked as the frame arrives, before any authentication)."""
    sock.setsockopt(zmq.MAXMSGSIZE, int(nbytes))


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def encryption_wanted(env: Mapping[str, str] | None = None) -> bool:
    """Whether sockets use CURVE encryption: ``MALLEABLE_ENCRYPT`` (1/true/yes/on or 0/false/no/off; default off,
    see docs/security.md for the measured cost). Every peer of a file system or controller must agree.

    Raises:
        ConfigError: an unrecognised value.
    """
    raw = (os.environ if env is None else env).get("MALLEABLE_ENCRYPT", "").strip().lower()
    if raw in _TRUE:
        return True
    if raw in _FALSE or raw == "":
        return False
    raise ConfigError(f"MALLEABLE_ENCRYPT must be 1 or 0 (or true/false), got {raw!r}")


def _server_keys(token: bytes) -> tuple[bytes, bytes]:
    secret = z85.encode(_derive(token, b"curve server"))
    return zmq.curve_public(secret), secret


def server_public_key(token: bytes) -> str:
    """The CURVE public key (Z85 text) of a server whose key pair derives from ``token``: not secret; a client
    without the token (a user or job key) needs it to talk to that server encrypted."""
    return _server_keys(token)[0].decode()


def secure_socket(sock: zmq.Socket[Any], token: bytes | None, server: bool, encrypt: bool | None = None,
                  server_key: str | bytes | None = None) -> bool:
    """Turn on CURVE encryption on ``sock`` (before bind/connect) when wanted; returns whether it did.

    The server's key pair is derived from the shared secret, so a client holding the secret can complete the
    handshake; a client holding only a personal key gives the server's public key (``server_key``) instead.
    A client uses a fresh key pair per socket.

    Args:
        sock: a socket not yet bound or connected.
        token: the shared secret (may be None on a client that gives ``server_key``).
        server: True on the binding side.
        encrypt: force on or off (default :func:`encryption_wanted`).
        server_key: the server's public key (Z85), clients only; default: derived from ``token``.

    Raises:
        ConfigError: a client with neither ``token`` nor ``server_key``.
    """
    if not (encryption_wanted() if encrypt is None else encrypt):
        return False
    if server:
        if token is None:
            raise ConfigError("an encrypted server needs the shared secret")
        sock.curve_server = True
        sock.curve_secretkey = _server_keys(token)[1]
        return True
    if server_key is None:
        if token is None:
            raise ConfigError("encryption is on (MALLEABLE_ENCRYPT) but the server's public key is unknown")
        server_key = _server_keys(token)[0]
    cpub, csec = zmq.curve_keypair()
    sock.curve_serverkey = server_key.encode() if isinstance(server_key, str) else server_key
    sock.curve_publickey = cpub
    sock.curve_secretkey = csec
    return True
