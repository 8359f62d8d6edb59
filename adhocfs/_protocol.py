"""The adhocfs wire protocol: one typed message class per request and reply, encoded on the shared
authenticated envelope of :mod:`malleable._wire` and validated field by field on receipt.

A message travels as ``[MAGIC, header, mac, *payloads]``; the header holds the message type, the protocol
version, a request id (``id``) and the JSON fields of the class. Messages that carry bytes (``Put``,
``Data``, ``Copy``) have one payload frame, declared by a ``data`` field. Numbers must be non-negative
unless a field is listed in ``SIGNED``. Nothing received is unpickled.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from malleable._wire import MessageTypes, check_fields, pack, unpack
from malleable.errors import ProtocolError

__all__ = [
    "VERSION",
    "AddServers",
    "Blocks",
    "Change",
    "Check",
    "CheckReply",
    "Copy",
    "Data",
    "DeclareRio",
    "DropBlocks",
    "DropFile",
    "Error",
    "Expand",
    "Extend",
    "Fence",
    "FileInfo",
    "FsStatus",
    "Get",
    "GetBlocks",
    "BlockData",
    "Inventory",
    "InventoryReply",
    "GetLayout",
    "ListBlocks",
    "ListDir",
    "Lose",
    "Message",
    "Mkdir",
    "Names",
    "Ok",
    "Open",
    "Put",
    "PutBlocks",
    "Register",
    "Registered",
    "Remove",
    "Rename",
    "ServerIds",
    "SetSize",
    "Shrink",
    "Shutdown",
    "Stat",
    "StatReply",
    "Stats",
    "StatsReply",
    "StopServers",
    "Status",
    "decode",
    "encode",
]

VERSION = 1
VERSIONS = (VERSION,)

_TYPES = MessageTypes()

_SCALARS: dict[str, Any] = {
    "int": int,
    "str": str,
    "float": float,
    "bool": bool,
    "dict": dict,
    "int | None": (int, type(None)),
    "str | None": (str, type(None)),
    "dict | None": (dict, type(None)),
    "float | None": (float, int, type(None)),
}


@dataclass(frozen=True, slots=True)
class Message:
    """Base of all adhocfs messages. Subclasses set ``TYPE`` and declare their fields as dataclass fields.

    ``list[int]``, ``list[str]`` and ``list[list[int]]`` fields are checked element by element; a ``data``
    field (``bytes``) is carried as the payload frame, a ``parts`` field (``list[bytes]``) as payload frames.
    """

    TYPE: ClassVar[str] = ""
    SIGNED: ClassVar[frozenset[str]] = frozenset()
    PARTS_OF: ClassVar[str] = ""  # with a ``parts`` field: the list field with one entry per payload frame


_msg = _TYPES.message


# ---------------------------------------------------------------- generic replies
@_msg("ok")
class Ok(Message):
    """Success with nothing to return."""


@_msg("error")
class Error(Message):
    """A failed request. ``kind`` is an exception name the client maps to a class (or ``stale``, ``auth``)."""

    kind: str
    msg: str


# ---------------------------------------------------------------- data server
@_msg("put")
class Put(Message):
    """Write ``data`` at ``offset`` inside block ``block`` of file ``fid`` (layout version ``version``)."""

    fid: int
    block: int
    offset: int
    version: int
    data: bytes = b""


@_msg("put_blocks")
class PutBlocks(Message):
    """Write ``parts[i]`` at ``offsets[i]`` inside block ``blocks[i]`` of file ``fid``, in order (several
    blocks of a sequential writer in one request and one acknowledgement)."""

    PARTS_OF: ClassVar[str] = "blocks"

    fid: int
    blocks: list[int]
    offsets: list[int]
    version: int
    parts: list[bytes] = dataclasses.field(default_factory=list)


@_msg("get")
class Get(Message):
    """Read up to ``length`` bytes at ``offset`` of a block."""

    fid: int
    block: int
    offset: int
    length: int
    version: int


@_msg("get_blocks")
class GetBlocks(Message):
    """Read up to ``length`` bytes at offset 0 of each of ``blocks`` (sequential read-ahead: one request
    and one reply for several blocks)."""

    fid: int
    blocks: list[int]
    length: int
    version: int


@_msg("block_data")
class BlockData(Message):
    """Answer to :class:`GetBlocks`: ``found[i]`` (1 or 0) and one payload frame ``parts[i]`` per block
    asked, in order (possibly shorter than asked: the rest is a hole; empty when absent)."""

    PARTS_OF: ClassVar[str] = "found"

    found: list[int]
    parts: list[bytes] = dataclasses.field(default_factory=list)


MAX_PARTS = 1024  # most blocks in one GetBlocks / BlockData


@_msg("data")
class Data(Message):
    """Bytes of a block (possibly shorter than asked: the rest is a hole); ``found`` is False when absent."""

    found: bool
    data: bytes = b""


@_msg("copy")
class Copy(Message):
    """Store a whole block moved by a redistribution (bypasses fences; sent by the metadata server)."""

    fid: int
    block: int
    data: bytes = b""


@_msg("drop_file")
class DropFile(Message):
    """Forget every block of a file."""

    fid: int


@_msg("drop_blocks")
class DropBlocks(Message):
    """Forget blocks ``>= from_block`` (when ``from_block`` is set) and the listed ``blocks``; cut
    block ``cut_block`` to ``cut_len`` bytes (when ``cut_block`` is set)."""

    fid: int
    blocks: list[int]
    from_block: int | None = None
    cut_block: int | None = None
    cut_len: int = 0
    version: int = 0


@_msg("fence")
class Fence(Message):
    """Refuse (with a ``stale`` error) writes of layout versions below ``wmin`` and reads below ``rmin``."""

    fid: int
    wmin: int
    rmin: int


@_msg("list_blocks")
class ListBlocks(Message):
    """Which blocks of ``fid`` this server holds."""

    fid: int


@_msg("blocks")
class Blocks(Message):
    """Reply to :class:`ListBlocks`."""

    blocks: list[int]


@_msg("inventory")
class Inventory(Message):
    """Which blocks of which files this server holds."""


@_msg("inventory_reply")
class InventoryReply(Message):
    """Reply to :class:`Inventory`: ``{str(fid): [blocks]}``."""

    files: dict


@_msg("stats")
class Stats(Message):
    """Ask a data server for its counters (also used as a ping)."""


@_msg("stats_reply")
class StatsReply(Message):
    """Counters of a data server; ``aio`` is the achieved MB/s of the last complete time step; ``capacity`` the
    most bytes it may hold (0: no limit)."""

    sid: int
    blocks: int
    bytes: int
    reads: int
    writes: int
    read_bytes: int
    write_bytes: int
    aio: float
    req_rate: float
    samples: list[float]
    capacity: int = 0


@_msg("shutdown")
class Shutdown(Message):
    """Stop a server (the metadata server also stops every data server when ``everything``); a data server told
    to ``wipe`` first deletes every block it holds (from its ``--dir`` too)."""

    everything: bool = False
    wipe: bool = False


# ---------------------------------------------------------------- metadata server
@_msg("stop_servers")
class StopServers(Message):
    """Stop registered data servers that hold no data yet (not commissioned); they become ``gone``."""

    sids: list[int]


@_msg("open")
class Open(Message):
    """Open ``path`` with ``mode`` (one of r, r+, w, w+, a, a+, x, x+); ``block_size`` 0 means default."""

    path: str
    mode: str
    block_size: int = 0


@_msg("file_info")
class FileInfo(Message):
    """A file's metadata and everything a client needs to place its blocks: ``written`` and ``damaged`` are
    ``[start, end)`` block ranges (data published by flushes; blocks lost with every copy), ``replicas`` the
    number of copies of each block."""

    fid: int
    path: str
    size: int
    block_size: int
    hw: int
    layout: list[list[int]]
    status: str
    version: int
    epochs: dict
    servers: dict
    written: list[list[int]] = dataclasses.field(default_factory=list)
    damaged: list[list[int]] = dataclasses.field(default_factory=list)
    replicas: int = 1


@_msg("get_layout")
class GetLayout(Message):
    """Fresh :class:`FileInfo` of an open file (after a ``stale`` error, or to wait for ``ready``)."""

    fid: int


@_msg("extend")
class Extend(Message):
    """Allocate blocks ``[first, blocks)`` not allocated yet in the current epoch and raise the size to at
    least ``size``; ``written`` adds ``[start, end)`` ranges of blocks the client wrote (published with the
    size, so a reader can tell a hole from a lost block)."""

    fid: int
    size: int
    blocks: int
    first: int = 0
    written: list[list[int]] = dataclasses.field(default_factory=list)


@_msg("set_size")
class SetSize(Message):
    """Set the size exactly (truncate); the metadata server also cuts blocks on the data servers."""

    fid: int
    size: int


@_msg("stat")
class Stat(Message):
    """Metadata of a path."""

    path: str


@_msg("stat_reply")
class StatReply(Message):
    """Reply to :class:`Stat`."""

    path: str
    is_dir: bool
    size: int
    block_size: int
    fid: int
    status: str
    nblocks: int


@_msg("listdir")
class ListDir(Message):
    """Names in a directory."""

    path: str


@_msg("names")
class Names(Message):
    """Reply to :class:`ListDir`."""

    names: list[str]


@_msg("mkdir")
class Mkdir(Message):
    """Create a directory (its parent must exist)."""

    path: str
    exist_ok: bool = False


@_msg("remove")
class Remove(Message):
    """Remove a file or an empty directory."""

    path: str


@_msg("rename")
class Rename(Message):
    """Rename a file or directory (blocks do not move: placement keys on the file id)."""

    src: str
    dst: str


@_msg("register")
class Register(Message):
    """A data server announces itself (stable id ``sid``) and where it listens."""

    sid: int
    addr: str
    host: str
    pid: int


@_msg("registered")
class Registered(Message):
    """Reply to :class:`Register`: fences the server must apply (``[[fid, wmin, rmin], ...]``)."""

    fences: list[list[int]]


@_msg("add_servers")
class AddServers(Message):
    """Reserve stable ids for data servers about to be started on ``hosts``."""

    hosts: list[str]


@_msg("server_ids")
class ServerIds(Message):
    """Reply to :class:`AddServers`."""

    sids: list[int]


@_msg("status")
class Status(Message):
    """File-system status: servers with their counters, epochs, any change in progress."""


@_msg("fs_status")
class FsStatus(Message):
    """Reply to :class:`Status`. ``servers`` are dicts with sid, addr, host, state and counters; ``damaged`` the
    paths of files with lost blocks."""

    servers: list[dict]
    epoch: int
    epochs: dict
    files: int
    change: dict | None
    rio: float
    history: list[dict]
    damaged: list[str] = dataclasses.field(default_factory=list)
    replicas: int = 1


@_msg("expand")
class Expand(Message):
    """Make the registered servers ``sids`` part of the current epoch (commissioning); optionally move old
    blocks onto them (``rebalance``, at most ``rate`` MB/s). Empty ``sids`` cancels a commissioning."""

    sids: list[int]
    rebalance: bool = False
    rate: float = 0.0


@_msg("shrink")
class Shrink(Message):
    """Decommission servers ``sids`` with ``mode`` partial or total redistribution; ``rate`` caps the
    bandwidth of block moves (MB/s, 0: unlimited)."""

    sids: list[int]
    mode: str = "partial"
    rate: float = 0.0


@_msg("lose")
class Lose(Message):
    """Declare dead data servers ``sids`` lost: they leave every layout; blocks with a copy elsewhere are copied
    again (in the background), files whose blocks had no other copy are marked damaged."""

    sids: list[int]


@_msg("check")
class Check(Message):
    """Compare what the servers hold with what files need; ``repair`` also re-copies under-replicated blocks
    and marks blocks that no live server holds as damaged."""

    repair: bool = False


@_msg("check_reply")
class CheckReply(Message):
    """Reply to :class:`Check`: ``files`` lists problem files (path, damaged and missing byte ranges,
    under-replicated blocks); ``change`` is the repair started, if any."""

    files: list[dict]
    checked: int
    change: dict | None


@_msg("change")
class Change(Message):
    """Progress of an expand or shrink (``state`` running, done, failed, rolled_back)."""

    info: dict


@_msg("declare_rio")
class DeclareRio(Message):
    """Declare the requested I/O rate (MB/s) of job ``job``; 0 withdraws it."""

    job: str
    rio: float


# ---------------------------------------------------------------- encode / decode
_SPECS: dict[str, tuple[dict[str, Any], dict[str, str], bool]] = {}
_DEFAULTS: dict[str, dict[str, Any]] = {}


def _defaults(cls: type[Message]) -> dict[str, Any]:
    """Default values of the optional JSON fields of ``cls``."""
    d = _DEFAULTS.get(cls.TYPE)
    if d is None:
        d = _DEFAULTS[cls.TYPE] = {
            f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
            for f in dataclasses.fields(cls)
            if (f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING)
            and f.name not in ("data", "parts")
        }
    return d


def _spec(cls: type[Message]) -> tuple[dict[str, Any], dict[str, str], bool]:
    cached = _SPECS.get(cls.TYPE)
    if cached:
        return cached
    spec: dict[str, Any] = {}
    lists: dict[str, str] = {}
    has_data = False
    for f in dataclasses.fields(cls):
        ann = str(f.type)
        if f.name in ("data", "parts"):
            has_data = True
            continue
        if ann.startswith("list["):
            spec[f.name] = list
            lists[f.name] = ann
        else:
            spec[f.name] = _SCALARS[ann]
    _SPECS[cls.TYPE] = (spec, lists, has_data)
    return _SPECS[cls.TYPE]


def encode(msg: Message, token: bytes, rid: int = 0) -> list[Any]:
    """Frames of ``msg`` with request id ``rid``."""
    spec, _, has_data = _spec(type(msg))
    header: dict[str, Any] = {"v": VERSION, "type": msg.TYPE, "id": rid}
    for name in spec:
        header[name] = getattr(msg, name)
    if not has_data:
        payloads = []
    elif msg.PARTS_OF:
        payloads = list(msg.parts)  # type: ignore[attr-defined]
    else:
        payloads = [msg.data]  # type: ignore[attr-defined]
    return pack(header, token, payloads)


def decode(
    frames: Sequence[Any], token: bytes, expect: tuple[type[Message], ...] = ()
) -> tuple[Message, int]:
    """Check, authenticate and decode frames into ``(message, request id)``.

    Args:
        frames: the zmq frames (bytes or zmq.Frame).
        token: the shared secret.
        expect: accepted message classes (empty: any).

    Raises:
        AuthError: the message is not authenticated with ``token``.
        ProtocolError: malformed, unknown or unexpected message, or a field fails validation.
    """
    header, payloads = unpack(frames, token, VERSIONS)
    cls = _TYPES.get(header["type"])
    if cls is None or (expect and cls not in expect):
        raise ProtocolError(f"unexpected message type {header['type']!r}")
    spec, lists, has_data = _spec(cls)
    rid = header.get("id", 0)
    if type(rid) is not int:
        raise ProtocolError(f"{cls.TYPE}: request id must be an int")
    if cls.PARTS_OF:
        count = header.get(cls.PARTS_OF)
        if not isinstance(count, list) or len(count) != len(payloads):
            raise ProtocolError(f"{cls.TYPE}: one payload frame per entry of {cls.PARTS_OF!r} expected")
        if len(payloads) > MAX_PARTS:
            raise ProtocolError(f"{cls.TYPE}: more than {MAX_PARTS} blocks")
    for name, default in _defaults(cls).items():  # optional fields may be omitted by older senders
        if name not in header:
            header[name] = list(default) if isinstance(default, list) else default
    check_fields(header, spec, cls.TYPE)
    kwargs: dict[str, Any] = {}
    for name in spec:
        val = header[name]
        if name in lists:
            _check_list(cls.TYPE, name, lists[name], val)
        elif type(val) is int and val < 0 and name not in cls.SIGNED:
            raise ProtocolError(f"{cls.TYPE}: field {name!r} must be >= 0, got {val}")
        elif type(val) is float and (val != val or val < 0):
            raise ProtocolError(f"{cls.TYPE}: field {name!r} must be a non-negative number")
        kwargs[name] = val
    if cls.PARTS_OF:
        kwargs["parts"] = list(payloads)
        if cls is PutBlocks and len(kwargs["offsets"]) != len(payloads):
            raise ProtocolError("put_blocks: one offset per block expected")
    elif cls is GetBlocks and len(kwargs["blocks"]) > MAX_PARTS:
        raise ProtocolError(f"get_blocks: more than {MAX_PARTS} blocks")
    elif has_data:
        if len(payloads) != 1:
            raise ProtocolError(f"{cls.TYPE}: expected one data frame, got {len(payloads)}")
        kwargs["data"] = payloads[0]
    elif payloads:
        raise ProtocolError(f"{cls.TYPE}: unexpected data frames")
    return cls(**kwargs), rid


def _check_list(where: str, name: str, ann: str, val: list[Any]) -> None:
    if len(val) > 10_000_000:
        raise ProtocolError(f"{where}: field {name!r} too long")
    if ann == "list[int]":
        ok = all(type(x) is int and x >= 0 for x in val)
    elif ann == "list[str]":
        ok = all(isinstance(x, str) for x in val)
    elif ann == "list[float]":
        ok = all(type(x) in (int, float) for x in val)
    elif ann == "list[list[int]]":
        ok = all(isinstance(x, list) and all(type(y) is int and y >= 0 for y in x) for x in val)
    elif ann == "list[dict]":
        ok = all(isinstance(x, dict) for x in val)
    else:  # pragma: no cover - a programming error in this module
        raise AssertionError(f"unsupported list annotation {ann}")
    if not ok:
        raise ProtocolError(f"{where}: field {name!r} must be {ann} of non-negative values")


def field_names(cls: type[Message]) -> list[str]:
    """Names of the JSON fields of a message class (for tests and docs)."""
    return list(_spec(cls)[0])
