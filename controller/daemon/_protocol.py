"""The controller's wire protocol: one typed, versioned message class per request and reply.

Messages travel on the authenticated envelope of :mod:`malleable._wire` (``[MAGIC, header, seal]``): the header
holds ``v`` (the version), ``type``, a request id ``id`` and the fields of the class. :func:`decode` checks the MAC,
the version, the type, that every field is present with the right JSON type and no unknown field is there, and the
value limits (non-negative counts, bounded strings and lists), so a message that gets past it is well formed (fields
that have a default, added to a message after its first version, may be left out); whether it makes sense (a known
job, the current order) is the daemon's business. Nothing received is unpickled.

Three kinds of peers talk to the daemon, over one ROUTER socket: the command line (``submit``, ``queue``, ...), the
runtime link inside rank 0 of a malleable job (``register``, ``poll``, ``committed``, ``refused``, ``progress``),
and the operator's commands (``shutdown``, ``add_user``, ``remove_user``, ``users``).

Who speaks is the key a message is sealed with (its key id is in the seal; see :mod:`malleable._wire`): the
operator's shared secret, a user's key or a job's key. The daemon answers under the same key, so only the holder of
that key can read a reply as authentic; what each requester may send is decided by :func:`~._access.authorize`. A
refusal comes back as an ``error`` whose ``kind`` names it: ``AuthError`` (no such key, or a wrong secret: the
daemon then answers under the operator's key, which the client cannot check), ``ReplayError`` (authentic but
replayed, or sent outside the time window: the clocks differ), ``ProtocolError``, ``UnknownJob``, ``Refused``, or
``InternalError`` (a bug: the daemon logged it and goes on serving).

Every socket limits frames (zmq ``MAXMSGSIZE``) before anything is authenticated, and uses CURVE encryption when
``MALLEABLE_ENCRYPT`` is on (the daemon's public key is in its address file, its status and each job's environment).
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar, dataclass_transform

import zmq

from malleable._secret import Credential
from malleable._sockets import encryption_wanted, limit_frames, secure_socket
from malleable._wire import Keyring, MessageTypes, Wire, check_fields, pack, unpack
from malleable.controller.sched._depend import parse_dependency
from malleable.controller.sched._speedup import SPEEDUP_MODELS, parse_speedup
from malleable.errors import ConfigError, ProtocolError, Rejected

from ._fsspec import MAX_FS_SERVERS, check_fs_bounds, check_fs_replicas, format_size, parse_stage

__all__ = [
    "AddUser", "CONSTRAINTS", "Cancel", "Committed", "Error", "History", "Info", "JobInfo", "MAX_ENV_BYTES",
    "MAX_FRAME", "MAX_FS_SERVERS", "Message", "Nodes", "Ok", "Order", "Poll", "Progress", "Queue", "Refused",
    "Register", "RemoveUser", "SERVER_KEY_ENV", "SPEEDUP_MODELS", "STATES", "Shutdown", "Status", "StatusReply",
    "Submit", "Submitted", "Table", "USER_NAME", "Users", "VERSION", "check_fs_bounds", "check_fs_replicas", "decode",
    "decode_keyed", "encode", "encode_keyed", "format_size", "parse_speedup", "parse_stage", "prepare_socket",
]

VERSION = 2             # 2: submit carries speedup, constraint and user; history carries filters
VERSIONS = (VERSION,)   # the command line, the runtime link and the daemon ship together

MAX_INT = (1 << 31) - 1
MAX_STR = 4096          # one string field (a command word, a path, a reason)
MAX_LIST = 4096         # items of a list field (command words, hosts, rows)
MAX_ENV = 4096          # entries of a job's environment
MAX_ENV_BYTES = 1 << 20  # characters of a job's environment, names and values (Lmod and Spack make long ones)

STATES = ("PENDING", "STARTING", "RUNNING", "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")
"""Every state a job can be in (``submit`` → PENDING → STARTING → RUNNING → one of the last four)."""

"""Speedup declarations of ``submit --speedup``: ``linear``, ``amdahl:F`` (serial fraction F), ``rho:R``."""

CONSTRAINTS = ("pof2", "even", "odd")
"""Node-count constraints of ``submit --constraint`` (the sizes a malleable job may take)."""

USER_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}")
"""A user name of ``add-user`` (a POSIX login name, as Slurm's accounts use)."""

_TYPES = MessageTypes()


@dataclass(frozen=True, slots=True)
class Message:
    """Base of all controller messages; subclasses set ``TYPE`` and declare their fields."""

    TYPE: ClassVar[str] = ""


_M = TypeVar("_M")


@dataclass_transform(frozen_default=True)
def _msg(type_: str) -> Callable[[type[_M]], type[_M]]:
    """Register a message class under its wire type name (it becomes a frozen, slotted dataclass)."""
    return _TYPES.message(type_)


# ------------------------------------------------------------------------------------------- replies
@_msg("ok")
class Ok(Message):
    """Success with nothing to return (also: no pending order for a ``poll``)."""


@_msg("error")
class Error(Message):
    """A refused request: ``kind`` names the reason class (``ProtocolError``, ``UnknownJob``, ``Refused``...)."""

    kind: str
    msg: str


@_msg("submitted")
class Submitted(Message):
    """A job was accepted and queued with this id."""

    job_id: int


@_msg("table")
class Table(Message):
    """Rows of ``queue``, ``history`` or ``nodes``: JSON objects (``rows``), or value lists (``vals``) under the
    column names ``cols``, each column named in ``same`` left out of every value list (its value is the same in
    each row). :func:`~._parts.join` turns either form into objects."""

    rows: list[dict]
    more: bool = False  # a long table comes in parts under one request id; the last has more False
    same: dict = field(default_factory=dict)  # with rows: a full first row; a row leaves out each field equal to it
    cols: list[str] = field(default_factory=list, metadata={"optional": ()})
    vals: list[list] = field(default_factory=list, metadata={"optional": ()})


@_msg("job_info")
class JobInfo(Message):
    """One job: its record, its size history (one step per start or resize, with hosts) and its events."""

    job: dict
    steps: list[dict]
    events: list[dict]


@_msg("status_reply")
class StatusReply(Message):
    """The daemon's identity and counters."""

    info: dict


@_msg("order")
class Order(Message):
    """A resize order for a malleable job: go to ``procs`` processes; new ones on ``hosts``."""

    seq: int
    procs: int
    hosts: list[str]


# ------------------------------------------------------------------------------------------- command line
@_msg("submit")
class Submit(Message):
    """Queue a job. Rigid: ``nodes`` hosts, ``min_nodes == max_nodes == nodes``. Malleable: starts between
    ``min_nodes`` and ``max_nodes`` (preferring ``nodes``) and may be resized within those bounds. ``speedup``
    declares how the job scales (``linear``, ``amdahl:F``, ``rho:R``), ``constraint`` the node counts it can run
    on (``""``, ``pof2``, ``even``, ``odd``): what the policies read."""

    name: str
    cmd: list[str]
    nodes: int
    min_nodes: int
    max_nodes: int
    malleable: bool
    time_limit: float
    out: str
    err: str
    cwd: str
    env: dict
    speedup: str = ""       # "" (not declared), "linear", "amdahl:F" or "rho:R" (see parse_speedup)
    constraint: str = ""    # "" or one of CONSTRAINTS
    user: str = ""          # who submitted (shown and filtered by history -u); a user's key decides it
    unlimited: bool = False  # no time limit (-t 0 or UNLIMITED); time_limit 0 alone means the default
    bb: float = 0.0          # burst buffer in bytes: the job gets a file system of its own for its run
    fs_servers: int = 0      # data servers of that file system (0: one)
    stage_in: list[str] = field(default_factory=list, metadata={"optional": ()})   # "LOCAL:/FS/PATH" copied in
    stage_out: list[str] = field(default_factory=list, metadata={"optional": ()})  # "/FS/PATH:LOCAL" copied out
    fs_min: int = 0          # fewest data servers the file system may shrink to (0: fs_servers)
    fs_max: int = 0          # most data servers it may grow to (0: fs_servers)
    io_rate: float = 0.0     # requested I/O rate (RIO) in bytes/s: what the file system grows for (0: none)
    fs_replicas: int = 0     # copies of each block in that file system (0: one)
    io_intensity: float = 0.0  # declared I/O intensity (I/O time over run time, 0..1) for the io-aware policy
    dependency: str = ""     # "afterok:ID[:ID...][,afterany:ID...]": the job waits for these jobs to end
    uid: int = 0             # the Unix user and group the job runs as: set by the daemon from the proven
    gid: int = 0             # requester (what a client sends is replaced)


@_msg("queue")
class Queue(Message):
    """Pending and running jobs."""


@_msg("history")
class History(Message):
    """Jobs of every state, newest first, at most ``limit`` (0: all), as sacct selects them: only ``jobs``,
    ``users`` and ``states`` if given (empty: all), and only jobs that existed between ``since`` and ``until``
    (submitted at or before ``until`` and not ended before ``since``; 0: no bound)."""

    limit: int
    jobs: list[int] = field(default_factory=list)
    users: list[str] = field(default_factory=list)
    states: list[str] = field(default_factory=list)
    since: float = 0.0
    until: float = 0.0


@_msg("cancel")
class Cancel(Message):
    """Cancel a pending or running job."""

    job_id: int


@_msg("suspend")
class Suspend(Message):
    """Pause a running malleable job at its next safe point, keeping its hosts (``resume`` False), or let a paused
    one go on (``resume`` True), as ``scontrol suspend``/``resume``."""

    job_id: int
    resume: bool = False


@_msg("nodes")
class Nodes(Message):
    """The hosts and who holds them."""


@_msg("info")
class Info(Message):
    """One job's record, size history and events."""

    job_id: int


@_msg("status")
class Status(Message):
    """Is the daemon there, and what does it run."""


@_msg("shutdown")
class Shutdown(Message):
    """Stop the daemon; running jobs keep running (they are re-attached at the next start) unless
    ``cancel_jobs``."""

    cancel_jobs: bool


@_msg("add_user")
class AddUser(Message):
    """Operator: accept the key of user ``name`` made from ``nonce`` (the command line derives the key from the
    operator's secret and the nonce, so no key crosses the network); a user added again gets a new key and the
    old one stops working."""

    name: str
    nonce: str


@_msg("remove_user")
class RemoveUser(Message):
    """Operator: revoke user ``name``'s key (their jobs are left alone)."""

    name: str


@_msg("users")
class Users(Message):
    """Operator: the users and when each was added."""


# ------------------------------------------------------------------------------------------- runtime link
@_msg("register")
class Register(Message):
    """Rank 0 of a malleable job is up: its pid and host, and the host of every process."""

    job_id: int
    pid: int
    host: str
    size: int
    hosts: list[str]


@_msg("poll")
class Poll(Message):
    """Is there an order for the job (asked at a probe, never waited for)."""

    job_id: int
    probe: int


@_msg("committed")
class Committed(Message):
    """Order ``seq`` was carried out: measured reconfiguration ``seconds``, new size, the hosts of every process
    now, and ``freed`` = hosts the job's leaving processes have really left."""

    job_id: int
    seq: int
    kind: str
    old_size: int
    new_size: int
    seconds: float
    freed: list[str]
    hosts: list[str]
    idle: int


@_msg("refused")
class Refused(Message):
    """Order ``seq`` could not be carried out; the job goes on at its old size."""

    job_id: int
    seq: int
    reason: str


@_msg("request")
class ResizeRequest(Message):
    """The application asks for a new size (``request_adapt``): exactly ``procs``, or within ``[min_procs,
    max_procs]`` (0: not given). A newer request of the job replaces an older one. The policy answers at any later
    time: a grant is an ordinary ``order`` (the reply to a later ``poll``), a refusal a ``declined`` reply."""

    job_id: int
    procs: int
    min_procs: int
    max_procs: int


@_msg("declined")
class Declined(Message):
    """Reply to a ``poll``: the policy refused the job's outstanding request (the job goes on at its size)."""

    reason: str


@_msg("pause")
class Pause(Message):
    """Reply to a ``poll``: stop the job at this safe point, keeping its hosts, until a ``resume`` reply."""


@_msg("resume")
class Resume(Message):
    """Reply to a ``poll`` of a paused job: go on."""


@_msg("progress")
class Progress(Message):
    """Per-phase performance data (MTCT, iteration time) from the EPOP driver; phase ``"io"``: the I/O the job
    measured, ``{"io_seconds", "seconds", "bytes", ...}`` (numbers >= 0), its I/O intensity."""

    job_id: int
    phase: str
    data: dict


# ------------------------------------------------------------------------------------------- sockets
SERVER_KEY_ENV = "MALLEABLE_CONTROLLER_CURVE"
"""The daemon's CURVE public key (Z85), for clients without the operator's secret when encryption is on."""

MAX_FRAME = 5 << 20
"""Largest frame a controller socket accepts (zmq ``MAXMSGSIZE``, before authentication): a header is at most
4 MiB (``malleable._wire.MAX_HEADER``), so 5 MiB leaves slack and stops a peer from making a socket buffer more."""


def prepare_socket(sock: zmq.Socket[Any], key: Credential | bytes, server_key: str | None = None) -> None:
    """Set up a client socket to the daemon before it connects: the frame limit, and CURVE encryption when
    ``MALLEABLE_ENCRYPT`` is on (the daemon's public key: ``server_key``, else ``MALLEABLE_CONTROLLER_CURVE``,
    else derived from the operator's secret).

    Raises:
        ConfigError: encryption is on and a user's or job's key does not know the daemon's public key.
    """
    if isinstance(key, bytes):
        key = Credential("", key)
    limit_frames(sock, MAX_FRAME)
    if not encryption_wanted():
        return
    server_key = server_key or os.environ.get(SERVER_KEY_ENV) or None
    if server_key is None and key.key_id:
        raise ConfigError(f"encryption is on (MALLEABLE_ENCRYPT) but the controller's public key is unknown: set "
                          f"{SERVER_KEY_ENV} (shown by 'malleable controller status' as 'curve')")
    secure_socket(sock, None if key.key_id else key.secret, server=False, encrypt=True, server_key=server_key)


# ------------------------------------------------------------------------------------------- codec
_JSON = {"int": int, "str": str, "float": float, "bool": bool, "dict": dict, "list[str]": list, "list[dict]": list,
         "list[int]": list, "list[list]": list}
_ITEM = {"list[str]": str, "list[dict]": dict, "list[int]": int, "list[list]": list}


def _spec(cls: type[Message]) -> dict[str, Any]:
    return {f.name: _JSON[f.type] for f in dataclasses.fields(cls)}  # type: ignore[index]


def _check_str(where: str, name: str, val: str) -> None:
    if len(val) > MAX_STR:
        raise ProtocolError(f"{where}: field {name!r} longer than {MAX_STR} characters")
    if "\x00" in val:
        raise ProtocolError(f"{where}: field {name!r} contains a NUL character")


def _check_value(where: str, name: str, typ: str, val: Any) -> None:
    if typ == "int":
        if not 0 <= val <= MAX_INT:
            raise ProtocolError(f"{where}: field {name!r} must be in 0..{MAX_INT}, got {val}")
    elif typ == "float":
        if not math.isfinite(val) or val < 0:
            raise ProtocolError(f"{where}: field {name!r} must be a finite number >= 0, got {val}")
    elif typ == "str":
        _check_str(where, name, val)
    elif typ in _ITEM:
        if len(val) > MAX_LIST:
            raise ProtocolError(f"{where}: field {name!r} has more than {MAX_LIST} items")
        want = _ITEM[typ]
        for x in val:
            if not isinstance(x, want) or isinstance(x, bool):
                raise ProtocolError(f"{where}: field {name!r} must hold only {want.__name__}s")
            if isinstance(x, str):
                _check_str(where, name, x)
            elif isinstance(x, int) and not 0 <= x <= MAX_INT:
                raise ProtocolError(f"{where}: field {name!r} must hold ints in 0..{MAX_INT}")
    elif typ == "dict" and len(val) > MAX_ENV:
        raise ProtocolError(f"{where}: field {name!r} has more than {MAX_ENV} entries")


def _check_columns(m: Table) -> None:
    if m.rows:
        raise ProtocolError("table: rows come as objects or as value lists, not both")
    if len(set(m.cols)) != len(m.cols) or not m.same.keys() <= set(m.cols):
        raise ProtocolError("table: columns must be distinct and name every field of 'same'")
    width = len(m.cols) - len(m.same)
    if any(len(r) != width for r in m.vals):
        raise ProtocolError(f"table: every value list must hold {width} values")


def _check_submit(m: Submit) -> None:
    if not m.cmd or not m.cmd[0]:
        raise ProtocolError("submit: empty command")
    for k, v in m.env.items():
        if not isinstance(v, str) or not k or "=" in k or "\x00" in k or "\x00" in v:
            raise ProtocolError("submit: env must map variable names to strings without NUL")
    if (total := sum(len(k) + len(v) + 2 for k, v in m.env.items())) > MAX_ENV_BYTES:
        raise ProtocolError(f"submit: the environment holds {total} characters, more than {MAX_ENV_BYTES} (1 MiB): "
                            "unset what the job does not need")
    if m.speedup:
        try:
            parse_speedup(m.speedup)
        except ValueError as e:
            raise ProtocolError(f"submit: {e}") from None
    if m.constraint and m.constraint not in CONSTRAINTS:
        raise ProtocolError(f"submit: bad constraint {m.constraint[:64]!r}: use one of {', '.join(CONSTRAINTS)}")
    if not m.bb and (m.fs_servers or m.stage_in or m.stage_out or m.fs_min or m.fs_max or m.io_rate
                     or m.fs_replicas):
        raise ProtocolError("submit: --fs-servers, --fs-min, --fs-max, --io-rate, --fs-replicas, --stage-in and "
                            "--stage-out need a burst buffer (--bb SIZE)")
    why = check_fs_bounds(m.fs_servers or 1, m.fs_min, m.fs_max) or \
        check_fs_replicas(m.fs_replicas or 1, m.fs_max or m.fs_servers or 1)
    if why:
        raise ProtocolError(f"submit: {why}")
    if m.io_intensity > 1.0:
        raise ProtocolError(f"submit: io_intensity must be between 0 and 1, got {m.io_intensity}")
    try:
        parse_dependency(m.dependency)
    except ValueError as e:
        raise ProtocolError(f"submit: {e}") from None
    for direction, specs in (("in", m.stage_in), ("out", m.stage_out)):
        for spec in specs:
            try:
                src, dst = parse_stage(spec, direction)
            except ValueError as e:
                raise ProtocolError(f"submit: {e}") from None
            local = src if direction == "in" else dst
            if not local.startswith("/"):
                raise ProtocolError(f"submit: --stage-{direction} {spec[:200]!r}: the local path must be absolute")


def _check_user(m: AddUser | RemoveUser) -> None:
    if not USER_NAME.fullmatch(m.name):
        raise ProtocolError(f"{m.TYPE}: bad user name {m.name[:64]!r}: a login name (letters, digits, _ . -; "
                            "at most 32, not starting with a digit, dot or dash)")
    if isinstance(m, AddUser) and not (16 <= len(m.nonce) <= 64 and m.nonce.isalnum()):
        raise ProtocolError("add_user: the nonce must be 16 to 64 letters or digits")


def _check_history(m: History) -> None:
    bad = [s for s in m.states if s not in STATES]
    if bad:
        raise ProtocolError(f"history: unknown state {bad[0][:64]!r}")


def _header(msg: Message, rid: int) -> dict[str, Any]:
    header: dict[str, Any] = {"v": VERSION, "type": msg.TYPE, "id": rid}
    for f in dataclasses.fields(msg):
        header[f.name] = getattr(msg, f.name)
    return header


def encode(msg: Message, key: bytes | Credential, rid: int = 0) -> list[Any]:
    """Frames of ``msg`` with request id ``rid``, sealed with ``key`` (the shared secret, or a credential: its key
    id goes in the seal)."""
    if isinstance(key, Credential) and key.key_id:
        return pack(_header(msg, rid), key.secret, key_id=key.key_id)
    return pack(_header(msg, rid), key.secret if isinstance(key, Credential) else key)


def encode_keyed(msg: Message, wire: Wire, rid: int = 0) -> list[Any]:
    """Frames of ``msg`` sealed by ``wire`` (a key of the daemon's :class:`~malleable._wire.Keyring`: a reply goes
    back under the key of its request)."""
    return wire.pack(_header(msg, rid))


def decode(frames: Sequence[Any], key: bytes | Credential) -> tuple[Message, int]:
    """Authenticate, check and decode frames into ``(message, request id)``.

    Raises:
        AuthError: the message is not authenticated with ``key`` (or is sealed under another key id).
        ReplayError: a replayed message, or one sent outside the time window.
        ProtocolError: wrong magic, version, type, a missing, extra or ill-typed field, a value out of range,
            or payload frames (the controller's messages have none).
    """
    if isinstance(key, Credential) and key.key_id:
        header, payloads = unpack(frames, key.secret, VERSIONS, key.key_id)
    else:
        header, payloads = unpack(frames, key.secret if isinstance(key, Credential) else key, VERSIONS)
    return _message(header, payloads)


def decode_keyed(frames: Sequence[Any], keyring: Keyring) -> tuple[Message, int, str]:
    """As :func:`decode`, with the key of the seal: ``(message, request id, key id)``; field checks raise Rejected."""
    kid, header, payloads = keyring.unpack(frames, VERSIONS)
    try:
        msg, rid = _message(header, payloads)
    except ProtocolError as e:
        raise Rejected(str(e), kid, header.get("id")) from None
    return msg, rid, kid


def _message(header: dict[str, Any], payloads: list[Any]) -> tuple[Message, int]:
    if payloads:
        raise ProtocolError("controller messages carry no payload frames")
    cls = _TYPES.get(header["type"])
    if cls is None:
        raise ProtocolError(f"unknown message type {header['type'][:64]!r}")
    rid = header.get("id", 0)
    if type(rid) is not int or not 0 <= rid < (1 << 63):
        raise ProtocolError(f"{cls.TYPE}: request id must be a non-negative int")
    spec = _spec(cls)
    for f in dataclasses.fields(cls):      # fields with a default (added later) may be left out
        if f.name not in header and f.default is not dataclasses.MISSING:
            header[f.name] = f.default
        elif f.name not in header and "optional" in f.metadata:      # a list added later: may be left out
            header[f.name] = list(f.metadata["optional"])
    check_fields(header, spec, cls.TYPE)
    kwargs = {}
    for f in dataclasses.fields(cls):
        val = header[f.name]
        _check_value(cls.TYPE, f.name, f.type, val)  # type: ignore[arg-type]
        kwargs[f.name] = float(val) if f.type == "float" else val
    msg = cls(**kwargs)
    if isinstance(msg, Submit):
        _check_submit(msg)
    elif isinstance(msg, History):
        _check_history(msg)
    elif isinstance(msg, (AddUser, RemoveUser)):
        _check_user(msg)
    elif isinstance(msg, Table) and (msg.cols or msg.vals):
        _check_columns(msg)
    return msg, rid
