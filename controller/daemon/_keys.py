"""The controller's keys: the operator's shared secret, and the users' and jobs' keys derived from it.

A user's key is ``HMAC(operator secret, "user" NAME NONCE)``, a job's key ``HMAC(operator secret, "job"
CONTROLLER-ID JOB-ID)``. The controller stores only the users' names and nonces (not secret without the operator's
secret), never a key: it derives a key when a message names it. Adding a user again draws a new nonce, so the old
key stops working; a job's key works while the job is queued or running (the controller id, random per state
file, keeps job 12 of one controller from speaking to another).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable, Mapping

from malleable._secret import Credential

from ._access import principal_of

__all__ = ["KeyBook", "job_credential", "new_nonce", "user_credential"]


def _derive(admin: bytes, *parts: str) -> bytes:
    return hmac.new(admin, "\0".join(("malleable controller key v1", *parts)).encode(), hashlib.sha256).hexdigest() \
        .encode()


def user_credential(admin: bytes, name: str, nonce: str) -> Credential:
    """The key of user ``name`` added with ``nonce``."""
    return Credential(f"user:{name}", _derive(admin, "user", name, nonce))


def job_credential(admin: bytes, controller_id: str, job_id: int) -> Credential:
    """The key of job ``job_id`` of controller ``controller_id``."""
    return Credential(f"job:{job_id}", _derive(admin, "job", controller_id, str(job_id)))


def new_nonce() -> str:
    """A fresh nonce for a user's key."""
    return secrets.token_hex(16)


class KeyBook:
    """The secret of each key id the daemon accepts (the lookup of its :class:`~malleable._wire.Keyring`).

    Args:
        admin: the operator's shared secret.
        controller_id: the controller's id (from its state file).
        users: user name -> nonce (the daemon's live registry, read at each lookup).
        job_active: whether a job id is queued or running.
    """

    def __init__(self, admin: bytes, controller_id: str, users: Mapping[str, str],
                 job_active: Callable[[int], bool]) -> None:
        self.admin, self.cid, self.users, self.job_active = admin, controller_id, users, job_active
        self._derived: dict[str, tuple[str, bytes]] = {}    # key id -> (nonce or job id, secret)

    def secret(self, key_id: str) -> bytes | None:
        """The secret of ``key_id``, or None if no such key is valid now (asked for every message: derived keys
        are remembered, validity is checked each time)."""
        if not key_id:
            return self.admin
        try:
            who = principal_of(key_id)
        except ValueError:
            return None
        if who.kind == "user":
            salt = self.users.get(who.name)
        else:
            salt = str(who.job) if self.job_active(who.job) else None
        if salt is None:
            self._derived.pop(key_id, None)
            return None
        held = self._derived.get(key_id)
        if held is None or held[0] != salt:
            key = (user_credential(self.admin, who.name, salt) if who.kind == "user" else
                   job_credential(self.admin, self.cid, who.job))
            held = self._derived[key_id] = (salt, key.secret)
        return held[1]
