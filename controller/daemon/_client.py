"""Talking to the controller daemon: find its address, send one typed request, wait (bounded) for the reply."""

from __future__ import annotations

import getpass
import itertools
import json
import os
import time
from collections.abc import Sequence
from typing import Any

import zmq

from malleable._secret import KEY_ENV, Credential, load_credential, user_key_path
from malleable.errors import AuthError, ConfigError, MalleableError, ProtocolError, Refusal, ReplayError, UnknownJob

from . import _protocol as P
from ._access import secret_looking
from ._local import PEER_KEY
from ._munge import HELLO_KEY, MungeHello, new_session
from ._parts import join
from ._paths import addr_file, default_state
from ._protocol import SERVER_KEY_ENV, prepare_socket

__all__ = ["AUTH_ENV", "Client", "ControllerUnavailable", "find_address"]

AUTH_ENV = "MALLEABLE_AUTH"
"""``munge``: prove the Unix user with MUNGE over TCP (no key)."""

_ERRORS: dict[str, type[MalleableError]] = {
    "UnknownJob": UnknownJob,
    "Refused": Refusal,
    "AuthError": AuthError,
    "ReplayError": ReplayError,
    "ProtocolError": ProtocolError,
}

def _local_wanted(address: str | None, info: dict[str, Any]) -> bool:
    """Whether to speak on the daemon's local socket (the kernel proves who we are, no key needed): the address
    file names one that exists here, and no address, ``MALLEABLE_KEY`` or ``MALLEABLE_TOKEN`` was given."""
    path = str(info.get("local") or "").removeprefix("ipc://")
    return (not address and bool(path) and not os.environ.get(KEY_ENV) and not os.environ.get("MALLEABLE_TOKEN")
            and os.path.exists(path))


class ControllerUnavailable(MalleableError):
    """No controller answered (not started, wrong address, or stopped)."""


def find_address(address: str | None = None, state: str | None = None) -> str:
    """The daemon's address: ``address``, else ``MALLEABLE_CONTROLLER``, else the address file of ``state``.

    Raises:
        ControllerUnavailable: no address is known (no daemon was started with that state file).
    """
    return _locate(address, state)[0]


def _locate(address: str | None, state: str | None) -> tuple[str, dict[str, Any]]:
    """The address and what the daemon's address file says (its CURVE public key), if it was read."""
    if address:
        return (address if "://" in address else f"tcp://{address}"), {}
    env = os.environ.get("MALLEABLE_CONTROLLER")
    if env and not state:
        return env, {}
    st = state or default_state()
    af = addr_file(st)
    try:
        info = json.loads(af.read_text())
        return str(info["address"]), info
    except (OSError, ValueError, KeyError, TypeError):
        raise ControllerUnavailable(f"no controller running for state {st} (start one with 'malleable "
                                    "controller start', or give --controller ADDR)") from None


class Client:
    """One DEALER connection to the daemon (use as a context manager)::

        from malleable.controller import Client

        with Client(state="/tmp/ctl.sqlite") as c:
            jid = c.submit(["python", "prog.py"], min_nodes=1, max_nodes=4, malleable=True, time_limit=600)
            print(c.info(jid).job["state"], [r["id"] for r in c.history(states=["FAILED"])])

    Rows are the daemon's job records (as ``malleable queue --json`` prints them before its projection); errors
    the daemon sends back are raised as :mod:`malleable.errors` exceptions.

    Args:
        address: ``tcp://host:port`` (see :func:`find_address` for the default).
        state: the daemon's state file, to find its address.
        token: the operator's shared secret (speak as the operator).
        timeout: seconds to wait for each reply.
        munge: prove our Unix user with a MUNGE credential (:mod:`._munge`; default: ``MALLEABLE_AUTH=munge``
            when no key, token or local socket is used).
        key: a user's or job's key (default: ``token`` if given; else, on the daemon's host, its local socket,
            where the kernel proves our Unix user (see :mod:`._local`), unless ``MALLEABLE_KEY`` or
            ``MALLEABLE_TOKEN`` is set; else :func:`~malleable._secret.load_credential`: ``MALLEABLE_KEY``,
            ``MALLEABLE_TOKEN``, the user's key file, the shared secret's key file). An ``ipc://`` address is a
            local socket.
    """

    def __init__(self, address: str | None = None, state: str | None = None, token: bytes | None = None,
                 timeout: float = 10.0, key: Credential | None = None, munge: bool | None = None) -> None:
        if not 0 < timeout <= 86400:          # nan included
            raise ConfigError(f"--timeout must be a number of seconds between 0 and 86400, got {timeout}")
        self.address, info = _locate(address, state)
        local = self.address.startswith("ipc://")
        if key is None and token is None and not local and _local_wanted(address, info):
            self.address, local = info["local"], True
        if munge is None:
            munge = key is None and token is None and not local and os.environ.get(AUTH_ENV, "") == "munge"
        if munge:
            cred, key = new_session()
        elif key is None:
            key = PEER_KEY if local else Credential("", token) if token is not None else load_credential()
        self.key = key
        self.timeout = timeout
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        try:
            self.sock.setsockopt(zmq.LINGER, 0)
            prepare_socket(self.sock, key, None if local else info.get("curve") or None)
            self.sock.connect(self.address)
        except zmq.ZMQError as e:
            self.close()
            raise ConfigError(f"cannot connect to {self.address}: {e}") from None
        except BaseException:
            self.close()
            raise
        self._ids = itertools.count(1)
        if munge:
            self._open_munge(cred)

    def _open_munge(self, cred: str) -> None:
        """Send the MUNGE credential that opens this client's session (answered under the public hello seal)."""
        key, self.key = self.key, HELLO_KEY
        try:
            self.call(MungeHello(cred))
        except BaseException:
            self.close()
            raise
        finally:
            self.key = key

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
            AuthError: the daemon did not accept this key (its answer cannot be authenticated with it).
            ReplayError: the request or the reply was refused as replayed or sent outside the time window: the
                clocks of this host and the daemon's differ.
            UnknownJob, Refusal, ProtocolError: the daemon refused the request.
        """
        rid = next(self._ids)
        self.sock.send_multipart([b"", *P.encode(msg, self.key, rid)])
        wait = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + wait
        rows: list[dict[str, Any]] = []      # a long table comes in parts
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not self.sock.poll(int(left * 1000) + 1):
                raise ControllerUnavailable(f"the controller at {self.address} did not answer within {wait:g} s "
                                            "(is it running? 'malleable controller status')")
            frames = self.sock.recv_multipart()
            if frames and frames[0] == b"":
                frames = frames[1:]
            try:
                reply, got = P.decode(frames, self.key)
            except ReplayError as e:
                raise ReplayError(f"the controller's answer was refused here: {e}") from None
            except AuthError:
                raise AuthError(self._not_accepted()) from None
            if got != rid:
                continue
            if isinstance(reply, P.Table):
                rows += join(reply)
                if reply.more:
                    deadline = time.monotonic() + wait
                    continue
                reply = P.Table(rows)
            break
        if isinstance(reply, P.Error):
            if reply.kind == "ReplayError":
                raise ReplayError(f"the controller refused the request: {reply.msg}")
            cls = _ERRORS.get(reply.kind, MalleableError)
            raise cls(reply.msg)
        return reply

    def _not_accepted(self) -> str:
        if not self.key.key_id:
            return ("the controller did not accept the shared secret (it answered under another one): use the "
                    "daemon's MALLEABLE_TOKEN or key file")
        return (f"the controller did not accept the key {self.key.key_id} (a wrong or removed key, a job that "
                f"ended, or another controller): check MALLEABLE_KEY or {user_key_path()}")

    # -- conveniences ----------------------------------------------------------------------------------------
    def submit(self, cmd: list[str], nodes: int = 1, min_nodes: int = 0, max_nodes: int = 0,
               malleable: bool = False, time_limit: float = 0.0, name: str = "", out: str = "", err: str = "",
               cwd: str | None = None, env: dict[str, str] | None = None, speedup: str = "",
               constraint: str = "", user: str | None = None, unlimited: bool = False, bb: float = 0.0,
               fs_servers: int = 0, stage_in: Sequence[str] = (), stage_out: Sequence[str] = (), fs_min: int = 0,
               fs_max: int = 0, io_rate: float = 0.0, fs_replicas: int = 0,
               io_intensity: float = 0.0, dependency: str = "") -> int:
        """Submit a job; returns its id (see :class:`~._protocol.Submit`; ``nodes`` is the preferred size of a
        malleable job, ``user`` defaults to the login name (a user's key submits as that user whatever it says),
        ``env`` to this process's environment, without secret-looking variables, which are never sent;
        ``time_limit`` 0 is the controller's default, ``unlimited`` no limit; ``bb`` bytes of burst buffer give the
        job a file system of ``fs_servers`` data servers, with ``stage_in``/``stage_out`` as ``SRC:DST``, growing
        between ``fs_min`` and ``fs_max`` servers for ``io_rate`` bytes/s, keeping ``fs_replicas`` copies of each
        block; ``io_intensity`` the declared I/O time over run time, 0..1; ``dependency`` the jobs it waits for,
        as ``afterok:ID[:ID...]`` or ``afterany:ID[:ID...]``, several joined by ``,``)."""
        e = dict(os.environ) if env is None else dict(env)
        for k in ("MALLEABLE_JOB", "MALLEABLE_CONTROLLER", "MALLEABLE_JOB_TAG", SERVER_KEY_ENV):
            e.pop(k, None)
        e = {k: v for k, v in e.items() if not secret_looking(k, v)}
        m = P.Submit(name, list(cmd), nodes, min_nodes or nodes, max_nodes or nodes, malleable, float(time_limit),
                     out, err, cwd or os.getcwd(), e, speedup, constraint, _login() if user is None else user,
                     unlimited, float(bb), fs_servers, list(stage_in), list(stage_out), fs_min, fs_max,
                     float(io_rate), fs_replicas=fs_replicas, io_intensity=float(io_intensity),
                     dependency=dependency)
        reply = self.call(m)
        assert isinstance(reply, P.Submitted)
        return reply.job_id

    def rows(self, msg: P.Message) -> list[dict[str, Any]]:
        """Rows of a ``queue``/``nodes``/``history`` request."""
        reply = self.call(msg)
        if not isinstance(reply, P.Table):
            raise ProtocolError(f"expected a table, got {reply.TYPE}")
        return reply.rows

    def history(self, limit: int = 0, jobs: Sequence[int] = (), users: Sequence[str] = (),
                states: Sequence[str] = (), since: float = 0.0, until: float = 0.0) -> list[dict[str, Any]]:
        """Jobs of every state, newest first, filtered as sacct does (see :class:`~._protocol.History`)."""
        from ._store import history_match

        q = P.History(limit, list(jobs), list(users), list(states), since, until)
        rows = [r for r in self.rows(P.History(0, q.jobs, q.users, q.states, since, until)) if history_match(q, r)]
        return rows[:limit] if limit else rows

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

    # -- the operator's commands -------------------------------------------------------------------------------
    def add_user(self, name: str) -> Credential:
        """Give user ``name`` a key (a new one if they had one: the old key stops working); returns it. The key
        is derived here from the operator's secret and a fresh nonce; only the nonce goes to the daemon.

        Raises:
            Refusal: this client is not the operator.
        """
        from ._keys import new_nonce, user_credential

        if self.key.key_id:
            raise Refusal(f"only the operator may add users (this is the key {self.key.key_id})")
        nonce = new_nonce()
        self.call(P.AddUser(name, nonce))
        return user_credential(self.key.secret, name, nonce)

    def remove_user(self, name: str) -> None:
        """Revoke user ``name``'s key (their jobs go on)."""
        self.call(P.RemoveUser(name))

    def users(self) -> list[dict[str, Any]]:
        """``[{"name", "added"}]`` of every user."""
        return self.rows(P.Users())



def _login() -> str:
    """The login name (``LOGNAME``/``USER``, else the password database), or "" if there is none."""
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return ""
