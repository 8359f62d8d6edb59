"""The daemon's door: who sent each message. Three ways in, one answer (a :class:`~._access.Principal`):

* TCP with a key: the key id in the seal names the operator's secret, a user's or a job's key (:mod:`._keys`);
* TCP with MUNGE: ``munge_hello`` opens a session whose key then seals the messages of one Unix user
  (:mod:`._munge`);
* the local socket: the kernel gives each message's sender uid (:mod:`._local`).

The gate authenticates and names the requester; the access rules (:mod:`._access`) decide what it may do.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import zmq

from malleable._wire import Keyring, Wire, key_id_of, peek_id
from malleable.errors import AuthError, ProtocolError

from . import _protocol as P
from ._access import Principal, principal_of
from ._keys import KeyBook
from ._local import PEER_SECRET, bind_local, local_path, peer_principal, peer_uid
from ._munge import HELLO_KEY, HELLO_KID, MungeHello, MungeSessions

__all__ = ["Gate"]


class Gate:
    """Keys, MUNGE sessions and the local socket of one daemon.

    Args:
        token: the operator's shared secret.
        cid: the controller id (job keys are derived with it).
        users: the controller users' names and nonces (the daemon's dict, kept current by it).
        job_active: whether a job id's key is valid now.
    """

    def __init__(self, token: bytes, cid: str, users: dict[str, str], job_active: Callable[[int], bool]) -> None:
        self.users = users
        self.munge = MungeSessions()
        self.book = KeyBook(token, cid, users, job_active)
        self.keyring = Keyring(self._secret)
        self.local_ring = Keyring(lambda kid: PEER_SECRET if kid == "" else None)
        self.local: zmq.Socket[Any] | None = None
        self.local_address = ""

    def _secret(self, kid: str) -> bytes | None:
        if kid.startswith(HELLO_KID + ":"):
            return self.munge.secret(kid)
        return HELLO_KEY.secret if kid == HELLO_KID else self.book.secret(kid)

    # -- the local socket ------------------------------------------------------------------------------------
    def bind_local(self, ctx: zmq.Context[Any], state: str) -> None:
        """Listen on the local socket of ``state`` (if it can be bound: see :func:`._local.bind_local`)."""
        self.local, self.local_address = bind_local(ctx, state)

    def close_local(self, state: str) -> None:
        """Stop listening on the local socket and remove it."""
        if self.local is not None:
            self.local.close(0)
            self.local = None
            local_path(state).unlink(missing_ok=True)

    def drain_local(self, budget: int = 1000) -> Iterator[tuple[list[bytes], int | None]]:
        """The messages waiting on the local socket (at most ``budget``), each with its sender's uid (None: its
        credentials were missing)."""
        for _ in range(budget if self.local is not None else 0):
            assert self.local is not None
            try:
                frames = self.local.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            try:
                uid: int | None = peer_uid(frames[-1])
            except AuthError:
                uid = None
            yield [f.bytes for f in frames], uid

    # -- messages --------------------------------------------------------------------------------------------
    def ring(self, local: bool) -> Keyring:
        """The keys of one way in."""
        return self.local_ring if local else self.keyring

    def replayed(self, body: list[bytes], local: bool) -> tuple[Wire | None, int]:
        """The key and request id to answer an authentic but replayed message with."""
        return self.ring(local).wire(key_id_of(body)), peek_id(body)

    def open(self, body: list[bytes], local: bool) -> tuple[P.Message, int, Wire | None, str]:
        """Authenticate one message: ``(message, request id, key to answer with, key id)``.

        Raises:
            AuthError: not authenticated.
            ReplayError: authentic but replayed (answer with :meth:`replayed`).
            ProtocolError: a malformed message.
        """
        ring = self.ring(local)
        msg, rid, kid = P.decode_keyed(body, ring)
        return msg, rid, ring.wire(kid), kid     # the key held now: a job that ends meanwhile gets its answer

    def requester(self, msg: P.Message, kid: str, local: bool, peer: int | None) -> Principal | None:
        """Who sent an authenticated message (None: a ``munge_hello``, already carried out: answer ``ok``).
        ``peer``: the sender's uid on the local socket.

        Raises:
            AuthError: a requester the controller does not know.
            ProtocolError: a ``munge_hello`` where it does not belong.
        """
        if local:
            if type(msg) is MungeHello:
                raise ProtocolError("munge_hello is sent over TCP only")
            if peer is None:
                raise AuthError("the local socket did not give the sender's credentials (SO_PEERCRED)")
            return peer_principal(peer, self.users)
        if kid == HELLO_KID:                     # a MUNGE session opens: the credential is the proof
            if type(msg) is not MungeHello:
                raise AuthError(f"{msg.TYPE}: only munge_hello may use the key id {HELLO_KID}")
            peer_principal(self.munge.hello(msg.cred), self.users)
            return None
        if type(msg) is MungeHello:
            raise ProtocolError(f"munge_hello is sent under the key id {HELLO_KID} only")
        if kid.startswith(HELLO_KID + ":"):
            return peer_principal(self.munge.uid(kid), self.users)
        return principal_of(kid)
