"""Authenticated, versioned message envelope shared by the protocol modules of the controller and adhocfs.

A message is a list of zmq frames ``[MAGIC, header, mac, *payloads]``: ``header`` is UTF-8 JSON
(an object with at least ``v`` (int version) and ``type`` (str)), ``mac`` is HMAC-SHA256 of
``MAGIC + header`` under the shared secret, and ``payloads`` are raw bytes whose lengths the header
lists under ``sizes``. Nothing from the network is ever unpickled. Each part's protocol module
defines its message types and their fields and calls :func:`check_fields` on receipt.

Notes:
    The MAC covers the header, which records the payload sizes; payload bytes themselves are not
    MACed (bulk data would pay for it twice). A peer without the secret cannot forge a request.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from malleable.errors import AuthError, ProtocolError

__all__ = ["MAGIC", "MAX_HEADER", "MessageTypes", "check_fields", "pack", "unpack"]

MAGIC = b"MLB1"
MAX_HEADER = 1 << 20


def _mac(token: bytes, header: bytes) -> bytes:
    return hmac.new(token, MAGIC + header, hashlib.sha256).digest()


def pack(header: Mapping[str, Any], token: bytes, payloads: Sequence[bytes | memoryview] = ()) -> list[Any]:
    """Frames for ``header`` (a JSON-able mapping with ``v`` and ``type``) and raw ``payloads``."""
    body = dict(header)
    body["sizes"] = [len(memoryview(p).cast("B")) for p in payloads]
    raw = json.dumps(body, separators=(",", ":")).encode()
    return [MAGIC, raw, _mac(token, raw), *payloads]


def unpack(frames: Sequence[Any], token: bytes, versions: tuple[int, ...]) -> tuple[dict[str, Any], list[Any]]:
    """Check and decode frames into ``(header, payloads)``.

    Raises:
        AuthError: the MAC does not match the shared secret.
        ProtocolError: wrong magic, frame count, JSON, version or payload sizes.
    """
    if len(frames) < 3:
        raise ProtocolError(f"truncated message: {len(frames)} frame(s), need at least 3")
    magic, raw, mac = (bytes(f) for f in frames[:3])
    if magic != MAGIC:
        raise ProtocolError("not a malleable message (bad magic)")
    if len(raw) > MAX_HEADER:
        raise ProtocolError(f"header too large ({len(raw)} bytes)")
    if not hmac.compare_digest(mac, _mac(token, raw)):
        raise AuthError("message not authenticated: wrong or missing shared secret (MALLEABLE_TOKEN)")
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ProtocolError(f"header is not JSON: {e}") from None
    if not isinstance(header, dict):
        raise ProtocolError("header is not a JSON object")
    v = header.get("v")
    if type(v) is not int or v not in versions:
        raise ProtocolError(f"unsupported protocol version {v!r}; this side speaks {list(versions)}")
    if not isinstance(header.get("type"), str):
        raise ProtocolError("header has no message type")
    # zmq.Frame payloads (recv with copy=False) are handed out as memoryviews: a Frame assigned directly
    # into a memoryview slice crashes the interpreter (pyzmq 27 buffer export), a memoryview of it does not.
    payloads = [p if isinstance(p, (bytes, bytearray, memoryview)) else memoryview(p) for p in frames[3:]]
    sizes = header.get("sizes")
    if not isinstance(sizes, list) or [len(memoryview(p)) for p in payloads] != sizes:
        raise ProtocolError("payload frames do not match the sizes in the header")
    return header, payloads


class MessageTypes:
    """The message classes of one protocol, by their wire ``type`` name.

    ``@types.message("name")`` turns a class into a frozen, slotted dataclass with ``TYPE = "name"``
    and registers it; a second class with the same name is an error at import time.
    """

    def __init__(self) -> None:
        self._by_name: dict[str, type] = {}

    def message(self, type_: str) -> Any:
        """Class decorator registering a message class under ``type_``."""

        def deco(cls: type) -> type:
            if type_ in self._by_name:
                raise TypeError(f"duplicate message type {type_!r}")
            cls.TYPE = type_  # type: ignore[attr-defined]
            new = dataclass(frozen=True, slots=True)(cls)  # slotted dataclasses are new classes
            self._by_name[type_] = new
            return new

        return deco

    def get(self, type_: str) -> type | None:
        """The class registered under ``type_``, or None."""
        return self._by_name.get(type_)

    def names(self) -> list[str]:
        """Every registered type name."""
        return list(self._by_name)


_JSON_TYPES = {int, float, str, bool, list, dict, type(None)}


def check_fields(msg: Mapping[str, Any], spec: Mapping[str, Any], where: str = "") -> None:
    """Validate ``msg`` against ``spec`` ({field: type or tuple of types}); extra keys are an error.

    ``bool`` is never accepted where ``int`` is asked (JSON ``true`` is not a count). Keys ``v``,
    ``type``, ``sizes`` and ``id`` belong to the envelope and are always allowed.

    Raises:
        ProtocolError: a field is missing, of the wrong type, or unknown.
    """
    label = f"{where or msg.get('type', '?')}: "
    for name, typ in spec.items():
        if name not in msg:
            raise ProtocolError(f"{label}missing field {name!r}")
        val = msg[name]
        types = typ if isinstance(typ, tuple) else (typ,)
        if isinstance(val, bool) and bool not in types:
            raise ProtocolError(f"{label}field {name!r} must be {_names(types)}, got a boolean")
        if float in types and int not in types and type(val) is int:
            continue
        if not isinstance(val, types):
            raise ProtocolError(f"{label}field {name!r} must be {_names(types)}, got {type(val).__name__}")
    extra = set(msg) - set(spec) - {"v", "type", "sizes", "id"}
    if extra:
        raise ProtocolError(f"{label}unknown field(s) {sorted(extra)}")


def _names(types: tuple[type, ...]) -> str:
    return " or ".join(t.__name__ for t in types)
