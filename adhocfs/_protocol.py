"""The adhocfs wire protocol: the typed messages of :mod:`._messages`, encoded on the shared authenticated
envelope of :mod:`malleable._wire` and validated field by field on receipt.

A message travels as ``[MAGIC, header, seal, *payloads]``; the header holds the message type, the protocol
version, a request id (``id``) and the JSON fields of the class. Messages that carry bytes (``Put``,
``Data``, ``Copy``) have one payload frame, declared by a ``data`` field. Numbers must be non-negative
unless a field is listed in ``SIGNED``. Nothing received is unpickled.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from malleable._wire import check_fields, pack, unpack
from malleable.errors import ProtocolError

from ._bulk_messages import MAX_FILES, Created, CreateFiles, Entries, GetFiles, Opened, OpenFiles, Publish, ScanDir
from ._messages import (
    MAX_PARTS,
    VERSION,
    VERSIONS,
    AddServers,
    BlockData,
    Blocks,
    Change,
    Check,
    CheckReply,
    Copy,
    Data,
    DeclareRio,
    DropBlocks,
    DropFile,
    Error,
    Expand,
    Extend,
    Fence,
    FileInfo,
    FsStatus,
    Get,
    GetBlocks,
    GetLayout,
    Inventory,
    InventoryReply,
    ListBlocks,
    ListDir,
    Lose,
    Message,
    Mkdir,
    Names,
    Ok,
    Open,
    Put,
    PutBlocks,
    Register,
    Registered,
    Remove,
    Rename,
    ServerIds,
    SetSize,
    Shrink,
    Shutdown,
    Stat,
    StatReply,
    Stats,
    StatsReply,
    Status,
    StopServers,
)
from ._messages import SCALARS as _SCALARS
from ._messages import TYPES as _TYPES

__all__ = [
    "VERSION",
    "AddServers",
    "Blocks",
    "Change",
    "Check",
    "CheckReply",
    "Copy",
    "Created",
    "CreateFiles",
    "Data",
    "DeclareRio",
    "DropBlocks",
    "DropFile",
    "Entries",
    "Error",
    "Expand",
    "Extend",
    "Fence",
    "FileInfo",
    "FsStatus",
    "Get",
    "GetBlocks",
    "GetFiles",
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
    "OpenFiles",
    "Opened",
    "Publish",
    "Put",
    "PutBlocks",
    "Register",
    "Registered",
    "Remove",
    "Rename",
    "ScanDir",
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

# ---------------------------------------------------------------- encode / decode
_SPECS: dict[str, tuple[dict[str, Any], dict[str, str], bool]] = {}
_DEFAULTS: dict[str, dict[str, Any]] = {}
_ENVELOPE = frozenset({"v", "type", "id", "sizes"})  # header keys of the envelope, not a message's fields


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
        if f.name in _ENVELOPE:  # pragma: no cover - a programming error in _messages
            raise AssertionError(f"{cls.TYPE}: field name {f.name!r} is the envelope's")
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
    rid = header.get("id", 0)
    if type(rid) is not int:
        raise ProtocolError(f"{cls.TYPE}: request id must be an int")
    try:
        return _build(cls, header, payloads), rid
    except ProtocolError as e:
        e.request_id = rid   # authenticated: the refusal is answered to this request, not left to time out
        raise


def _build(cls: type[Message], header: dict[str, Any], payloads: list[Any]) -> Message:
    """The message of an authenticated ``header`` and its payload frames, every field checked."""
    spec, lists, has_data = _spec(cls)
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
    if cls.PAIRED:
        lengths = {len(kwargs[name]) for name in cls.PAIRED}
        if len(lengths) != 1:
            raise ProtocolError(f"{cls.TYPE}: fields {' and '.join(cls.PAIRED)} must have one entry per file each")
        if lengths.pop() > MAX_FILES:
            raise ProtocolError(f"{cls.TYPE}: more than {MAX_FILES} files")
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
    return cls(**kwargs)


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
