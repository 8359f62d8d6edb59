"""Across hosts a request proves its sender's Unix user with MUNGE, as Slurm's do: the client's ``munged`` vouches
for the uid of the process that asked it, in a credential only the ``munged`` daemons sharing the cluster's MUNGE
key can make or read (encrypted, with a time to live, and decoded once: ``munged`` refuses a replayed one).

A MUNGE session: the client draws a session id and a 32-byte session key, puts both in a credential and sends it
once (``munge_hello``, sealed with a public constant: the credential is the proof). The daemon decodes it with its
own ``munged``, which gives the sender's uid, and from then on accepts messages sealed with that session key under
the key id ``munge:SID`` as that Unix user (the usual envelope: MAC, replay window). So each request costs what a
user key costs; MUNGE is asked once per session.

``libmunge`` (Debian's ``libmunge2``, through ctypes) talks to ``munged`` over its socket:
``MALLEABLE_MUNGE_SOCKET``, else MUNGE's default (``/run/munge/munge.socket.2``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any

from malleable._secret import Credential
from malleable.errors import AuthError, ConfigError

from . import _protocol as P

__all__ = ["HELLO_KEY", "HELLO_KID", "MUNGE_SOCKET_ENV", "MungeHello", "MungeSessions", "decode", "encode",
           "new_session"]

MUNGE_SOCKET_ENV = "MALLEABLE_MUNGE_SOCKET"
HELLO_KID = "munge"
HELLO_KEY = Credential(HELLO_KID, b"malleable munge hello: the credential inside proves the sender, not this")
"""The seal of a ``munge_hello`` (public: it authenticates nothing)."""

@P._msg("munge_hello")
class MungeHello(P.Message):
    """Open a MUNGE session: ``cred`` carries the session's id and key, and proves the sender's Unix user (a
    message of the controller's protocol, registered there; defined here with what reads it)."""

    cred: str


_OPT_SOCKET = 8          # MUNGE_OPT_SOCKET of munge.h
_SESSION_IDLE = 3600.0   # a session unused this long is forgotten
_MAX_SESSIONS = 10000

_lock = threading.Lock()
_lib: Any = None


def _munge() -> tuple[Any, Any]:
    global _lib
    with _lock:
        if _lib is None:
            name = ctypes.util.find_library("munge") or "libmunge.so.2"
            try:
                lib = ctypes.CDLL(name)
            except OSError:
                raise ConfigError("MUNGE is not installed (libmunge2: apt-get install munge)") from None
            lib.munge_ctx_create.restype = ctypes.c_void_p
            lib.munge_ctx_destroy.argtypes = [ctypes.c_void_p]
            lib.munge_strerror.restype = ctypes.c_char_p
            _lib = (lib, ctypes.CDLL(None))
        return _lib


def _ctx(lib: Any) -> ctypes.c_void_p:
    ctx = ctypes.c_void_p(lib.munge_ctx_create())
    path = os.environ.get(MUNGE_SOCKET_ENV)
    if path:
        lib.munge_ctx_set(ctx, ctypes.c_int(_OPT_SOCKET), ctypes.c_char_p(path.encode()))
    return ctx


def encode(payload: bytes) -> str:
    """A MUNGE credential for this process's uid carrying ``payload``.

    Raises:
        ConfigError: MUNGE is missing or its daemon does not answer (one line).
    """
    lib, libc = _munge()
    ctx = _ctx(lib)
    cred = ctypes.c_void_p()
    try:
        err = lib.munge_encode(ctypes.byref(cred), ctx, payload, len(payload))
        if err:
            raise ConfigError(f"MUNGE could not make a credential: {lib.munge_strerror(err).decode()} (is munged "
                              f"running? socket: {os.environ.get(MUNGE_SOCKET_ENV) or 'the default'})")
        return ctypes.string_at(cred).decode()
    finally:
        if cred.value:
            libc.free(cred)
        lib.munge_ctx_destroy(ctx)


def decode(cred: str) -> tuple[bytes, int, int]:
    """``(payload, uid, gid)`` of a MUNGE credential, as this host's ``munged`` vouches for them.

    Raises:
        AuthError: not a valid credential (forged, expired, replayed, another cluster's key).
    """
    lib, libc = _munge()
    ctx = _ctx(lib)
    buf, n, uid, gid = ctypes.c_void_p(), ctypes.c_int(), ctypes.c_uint(), ctypes.c_uint()
    try:
        err = lib.munge_decode(cred.encode(), ctx, ctypes.byref(buf), ctypes.byref(n), ctypes.byref(uid),
                               ctypes.byref(gid))
        if err:
            raise AuthError(f"MUNGE credential refused: {lib.munge_strerror(err).decode()}")
        return ctypes.string_at(buf, n.value), uid.value, gid.value
    finally:
        if buf.value:
            libc.free(buf)
        lib.munge_ctx_destroy(ctx)


def new_session() -> tuple[str, Credential]:
    """A client's MUNGE session: the credential to send in ``munge_hello`` and the key to seal the rest with."""
    sid, key = secrets.token_hex(8), secrets.token_bytes(32)
    return encode(f"{sid}:{key.hex()}".encode()), Credential(f"{HELLO_KID}:{sid}", key)


@dataclass
class _Session:
    key: bytes
    uid: int
    used: float


class MungeSessions:
    """The daemon's MUNGE sessions: ``hello`` decodes a credential and opens one; ``secret`` and ``uid`` answer for
    a key id ``munge:SID``."""

    def __init__(self) -> None:
        self.sessions: dict[str, _Session] = {}

    def hello(self, cred: str, now: float | None = None) -> int:
        """Open the session a credential carries; returns the sender's uid.

        Raises:
            AuthError: the credential is not valid, or does not carry a session.
        """
        payload, uid, _ = decode(cred)
        sid, _, hexkey = payload.decode("ascii", "replace").partition(":")
        if len(sid) != 16 or len(hexkey) != 64:
            raise AuthError("MUNGE credential refused: it carries no malleable session")
        now = time.time() if now is None else now
        if len(self.sessions) >= _MAX_SESSIONS:
            self.prune(now)
        self.sessions[sid] = _Session(bytes.fromhex(hexkey), uid, now)
        return uid

    def secret(self, key_id: str) -> bytes | None:
        """The session key of ``munge:SID`` (None: no such session)."""
        s = self.sessions.get(key_id.removeprefix(f"{HELLO_KID}:"))
        if s is None:
            return None
        s.used = time.time()
        return s.key

    def uid(self, key_id: str) -> int:
        """The Unix uid the session ``munge:SID`` speaks for.

        Raises:
            AuthError: no such session.
        """
        s = self.sessions.get(key_id.removeprefix(f"{HELLO_KID}:"))
        if s is None:
            raise AuthError(f"no MUNGE session {key_id[:40]}")
        return s.uid

    def prune(self, now: float) -> None:
        """Forget sessions idle for an hour (and the oldest half if still full)."""
        self.sessions = {k: s for k, s in self.sessions.items() if now - s.used < _SESSION_IDLE}
        if len(self.sessions) >= _MAX_SESSIONS:
            keep = sorted(self.sessions.items(), key=lambda kv: kv[1].used)[_MAX_SESSIONS // 2:]
            self.sessions = dict(keep)
