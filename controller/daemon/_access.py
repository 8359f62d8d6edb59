"""Who may do what on the controller: pure rules over the requester (the key its message was authenticated with)
and the request. The daemon authenticates (finds the key a message is sealed with); these functions decide.

Three kinds of requester:

* the **operator** (the shared secret, ``MALLEABLE_TOKEN`` or its key file): everything;
* a **user** (a key made by ``malleable controller add-user NAME``): submit jobs as NAME, read the queue, the
  nodes, the history and any job's record, cancel NAME's own jobs;
* a **job** (the key the controller puts in a job's environment): speak for that job only (register, poll,
  acknowledge resizes, ask for a size, report progress, cancel itself) and read the queue, the nodes, the
  history and records.

Nobody but the operator shuts the daemon down or manages users; nobody but a job itself (or the operator) speaks
its runtime link, so a user cannot forge a resize acknowledgement either.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

from malleable.errors import Refusal

from . import _protocol as P
from ._fsrequest import StageOutAgain
from ._protocol import USER_NAME

__all__ = ["OPERATOR", "Principal", "USER_NAME", "authorize", "principal_of", "secret_looking", "submitter"]

_SECRET_NAME = re.compile(r"TOKEN|SECRET|KEY|PASSW(?:OR)?D|PASSPHRASE|CREDENTIAL|PGPASS", re.IGNORECASE)
_SECRET_PART = frozenset({"PAT", "PASS", "PWD", "PW", "AUTH"})
"""Short words that name a secret when they are a whole part of a name (``GH_PAT``, ``DB_PASS``, ``SMTP_PW``)."""
_NOT_SECRET = frozenset({"PWD", "OLDPWD"})        # the shell's working directories
_URL_PASSWORD = re.compile(r"://[^/\s:@]*:[^/\s@]+@")     # from each "://" only: linear in long values
"""A URL with a password in it (``postgres://u:pw@h/db``)."""


@dataclass(frozen=True, slots=True)
class Principal:
    """The requester of a message: ``kind`` is ``operator``, ``user`` or ``job``; ``name`` the user's name;
    ``job`` the job's id (jobs only)."""

    kind: str
    name: str = ""
    job: int = 0

    def __str__(self) -> str:
        return {"operator": "the operator", "user": f"user {self.name}"}.get(self.kind, f"the key of job {self.job}")


OPERATOR = Principal("operator")


@functools.lru_cache(maxsize=4096)
def principal_of(key_id: str) -> Principal:
    """The requester a key id stands for (``""``: the operator; ``user:NAME``; ``job:ID``).

    Raises:
        ValueError: not a key id of the controller.
    """
    if not key_id:
        return OPERATOR
    kind, _, name = key_id.partition(":")
    if kind == "user" and USER_NAME.fullmatch(name):
        return Principal("user", name)
    if kind == "job" and name.isdigit() and len(name) <= 10:
        return Principal("job", job=int(name))
    raise ValueError(f"not a controller key id: {key_id[:64]!r}")


def secret_looking(name: str, value: str = "") -> bool:
    """Whether an environment variable looks like it holds a secret: its name has TOKEN, SECRET, KEY, PASSWORD,
    PASSWD, PASSPHRASE, CREDENTIAL or PGPASS in it (any case), or a whole part (between underscores) that is PAT,
    PASS, PWD, PW or AUTH (``GH_PAT``; not ``PWD`` itself), or its value is a URL with a password
    (``DATABASE_URL=postgres://u:pw@h/db``). Such variables are neither stored nor passed to jobs."""
    if _SECRET_NAME.search(name) or ("://" in value and _URL_PASSWORD.search(value)):
        return True
    up = name.upper()
    return up not in _NOT_SECRET and not _SECRET_PART.isdisjoint(re.split(r"[_\W\d]+", up))


_READ = (P.Queue, P.Nodes, P.History, P.Info, P.Status)
_LINK = (P.Register, P.Poll, P.Committed, P.Refused, P.ResizeRequest, P.Progress)
_ADMIN = (P.Shutdown, P.AddUser, P.RemoveUser, P.Users)


def authorize(who: Principal, msg: Any, owner: str | None = None) -> None:
    """Refuse ``msg`` if ``who`` may not send it. ``owner`` is the user of the job a cancel names (None when
    there is no such active job: the caller then answers as for anyone).

    Raises:
        Refusal: not allowed; the message says who may.
    """
    if who.kind == "operator" or isinstance(msg, _READ):
        return
    t = type(msg)
    if isinstance(msg, _ADMIN):
        raise Refusal(f"{t.TYPE}: only the operator may do this ({who} may not)")
    if who.kind == "user":
        if isinstance(msg, P.Submit):
            return
        if isinstance(msg, (P.Cancel, P.Suspend, StageOutAgain)):
            if owner is not None and owner != who.name:
                verb = {P.Cancel: "cancel", P.Suspend: "suspend"}.get(t, "stage out or release")
                raise Refusal(f"job {msg.job_id} belongs to {owner or 'another user'}: {who} may {verb} only "
                              "their own jobs")
            return
        if isinstance(msg, _LINK):
            raise Refusal(f"{t.TYPE}: only job {msg.job_id}'s own key speaks for it ({who} may not)")
    elif who.kind == "job":
        if isinstance(msg, (*_LINK, P.Cancel, P.Suspend)):
            if msg.job_id != who.job:
                raise Refusal(f"{t.TYPE} for job {msg.job_id} refused: {who} speaks only for job {who.job}")
            return
        if isinstance(msg, P.Submit):
            raise Refusal(f"submit: {who} may not submit jobs (use a user's key)")
    raise Refusal(f"{t.TYPE}: not allowed for {who}")


def submitter(who: Principal, asked: str) -> str:
    """The user a submission is recorded under: a user's own name whatever the message says (a key cannot
    submit as someone else); the operator's choice (default: the login name the client sent)."""
    return who.name if who.kind == "user" else asked
