"""The adhocfs messages: one typed class per request and reply (the codec is :mod:`._protocol`).

A message travels as ``[MAGIC, header, mac, *payloads]``; the header holds the message type, the protocol
version, a request id (``id``) and the JSON fields of the class. Messages that carry bytes (``Put``,
``Data``, ``Copy``) have one payload frame, declared by a ``data`` field. Numbers must be non-negative
unless a field is listed in ``SIGNED``. Nothing received is unpickled. The messages of bulk transfers (many
small files per request) are in :mod:`._bulk_messages`, registered in the same :data:`TYPES`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar, dataclass_transform

from malleable._wire import MessageTypes

__all__ = [
    "MAX_PARTS",
    "AddServers",
    "BlockData",
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
    "GetLayout",
    "Inventory",
    "InventoryReply",
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
    "SCALARS",
    "ServerIds",
    "SetSize",
    "Shrink",
    "Shutdown",
    "Stat",
    "StatReply",
    "Stats",
    "StatsReply",
    "Status",
    "StopServers",
    "TYPES",
    "VERSION",
    "VERSIONS",
]

VERSION = 1
VERSIONS = (VERSION,)

TYPES = MessageTypes()
"""Every adhocfs message class by its wire type name."""

SCALARS: dict[str, Any] = {
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
    PAIRED: ClassVar[tuple[str, ...]] = ()  # list fields of one entry per file each (at most _bulk_messages.MAX_FILES)


_M = TypeVar("_M")


@dataclass_transform(frozen_default=True)
def _msg(type_: str) -> Callable[[type[_M]], type[_M]]:
    """Register a message class under its wire type name (it becomes a frozen, slotted dataclass)."""
    return TYPES.message(type_)


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
    keep: bool = True           # metadata server: keep a state directory it was told it owns


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
    mtime: float = 0.0          # last change of the size, the blocks written or creation (seconds since the epoch)


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
    paths of files with lost blocks; ``state`` the metadata server's state directory (on its own host)."""

    servers: list[dict]
    epoch: int
    epochs: dict
    files: int
    change: dict | None
    rio: float
    history: list[dict]
    damaged: list[str] = dataclasses.field(default_factory=list)
    replicas: int = 1
    state: str = ""


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
