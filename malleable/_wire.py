"""Authenticated, replay-proof, versioned message envelope shared by the protocol modules of the controller and
adhocfs.

A message is a list of zmq frames ``[MAGIC, header, seal, *payloads]``:

* ``header`` is UTF-8 JSON, an object with at least ``v`` (int version) and ``type`` (str); it lists the
  payload sizes under ``sizes``;
* ``seal`` is 56 bytes or more: the sender's session id (8 random bytes per thread and process), a per-session
  counter (8 bytes), the send time (8-byte float, seconds since the epoch), the sender's key id (0 to 64 ASCII
  bytes: none for the shared secret, e.g. ``user:ann`` or ``job:12`` for a personal key) and an HMAC-SHA256
  (32 bytes) over ``MAGIC``, everything in the seal before the MAC, the header and every payload frame, each
  with its length (payloads over 64 KiB in all enter the HMAC as their GMAC tags, see :meth:`Wire._mac`: the
  same guarantee at a tenth of SHA-256's cost);
* ``payloads`` are raw bytes (block data of adhocfs).

A receiver holding several keys (:class:`Keyring`: the controller, which knows the key of every user and job)
reads the key id first and checks the message with that key; a receiver of one key (:class:`Wire`) refuses any
other key id. Peers that share one secret send no key id, so their seals are the 56 bytes of the first version.

The receiver checks, in this order: frame count, magic, header size and seal size (before any hashing), the MAC
(constant-time compare), then that the send time is within ``MALLEABLE_WIRE_WINDOW`` seconds (default 120) of
its own clock and not older than its own start (less a 30 s skew allowance), then that the (session, counter)
pair was never accepted before (a sliding window of :data:`REPLAY_SPAN` counters per session), then the JSON
nesting depth (before parsing), and last the JSON itself, version, type and payload sizes. Nothing from the
network is ever unpickled. Each part's protocol module defines its message types and fields and calls
:func:`check_fields` on receipt.

Notes:
    The sender and receiver state (session, counter, accepted counters) lives in one :class:`Wire` per thread
    and key (:func:`shared`): a process-wide cache like ``zmq.Context.instance()``, because replay
    memory belongs to the receiving process and the call-compatible :func:`pack`/:func:`unpack` carry no
    other handle. A thread that only receives still gets its own session. A forked child starts fresh.

    Encryption is ZeroMQ's CURVE (:func:`secure_socket`): the server's key pair is derived from the shared
    secret, so only holders of the secret can complete a handshake with a server.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import os
import re
import secrets
import struct
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, dataclass_transform

import zmq
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from malleable.errors import AuthError, ConfigError, ProtocolError, ReplayError

__all__ = [
    "MAGIC",
    "MAX_DEPTH",
    "MAX_FRAMES",
    "MAX_HEADER",
    "MAX_KEY_ID",
    "REPLAY_SPAN",
    "SEAL_SIZE",
    "Keyring",
    "MessageTypes",
    "ReplayGuard",
    "Wire",
    "check_fields",
    "key_id_of",
    "pack",
    "pack_raw",
    "peek_id",
    "shared",
    "unpack",
]

MAGIC = b"MLB4"
MAX_HEADER = 4 << 20  # bytes of JSON header (a job's environment may hold 1 MiB; long answers come in parts)
MAX_DEPTH = 64  # nesting of JSON arrays and objects in a header
MAX_FRAMES = 4096 + 3  # frames of one message (adhocfs replies carry up to 1024 blocks)
REPLAY_SPAN = 1 << 14  # counters remembered per session (messages may arrive this much out of order)
START_SKEW = 30.0  # seconds before its own start a receiver still accepts a message from
BULK = 1 << 16  # payload bytes above which each payload enters the HMAC as its GMAC tag
MAX_KEY_ID = 64  # bytes of a key id in the seal

_SEAL = struct.Struct("!8sQd")
_MAC = 32
SEAL_SIZE = _SEAL.size + _MAC  # a seal without key id (the shared secret)
_KEY_ID = re.compile(r"[A-Za-z0-9_.:@+-]{1,64}")
_LEN4 = struct.Struct("!I")
_LEN8 = struct.Struct("!Q")
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)  # unrolled: one step per run of plain bytes
_NOT_BRACKETS = bytes(c for c in range(256) if c not in b"[]{}")
_GCM_NONCE = bytes(12)  # payload tags never leave the HMAC (hash, then MAC): a fixed key and nonce are safe


def _window() -> float:
    raw = os.environ.get("MALLEABLE_WIRE_WINDOW", "")
    try:
        w = float(raw) if raw else 120.0
    except ValueError:
        raise ConfigError(f"MALLEABLE_WIRE_WINDOW must be a number of seconds, got {raw!r}") from None
    if not w > 0:
        raise ConfigError(f"MALLEABLE_WIRE_WINDOW must be > 0, got {raw!r}")
    return w


def _derive(token: bytes, label: bytes) -> bytes:
    return hmac.new(token, b"malleable wire v2 " + label, hashlib.sha256).digest()


class ReplayGuard:
    """Which (session, counter) pairs a receiver has accepted: refuses repeats and stale messages.

    Per session it keeps the highest counter seen and a bitmap of the :data:`REPLAY_SPAN` counters below it,
    plus the newest send time; a session silent for longer than the window is forgotten (any message of it is
    then too old anyway). Mutated only by :meth:`check`.

    Args:
        window: seconds a message's send time may differ from this receiver's clock.
        clock: wall-clock time source (seconds since the epoch).
    """

    def __init__(self, window: float, clock: Callable[[], float] = time.time) -> None:
        self.window, self.clock = window, clock
        self.floor = clock() - min(START_SKEW, window)
        self._sessions: dict[bytes, list[Any]] = {}  # session -> [max counter, bitmap, newest send time]
        self._checks = 0

    def check(self, session: bytes, counter: int, sent: float) -> None:
        """Accept (and remember) one message, or raise.

        Raises:
            ReplayError: already accepted, too far out of order, or sent outside the time window.
        """
        now = self.clock()
        if not abs(now - sent) <= self.window:
            raise ReplayError(
                f"message sent {now - sent:+.1f} s from this receiver's clock (window {self.window:g} s): "
                "clocks differ between hosts, or the message is replayed"
            )
        if sent < self.floor:
            raise ReplayError("message sent before this receiver started (replayed?)")
        self._checks += 1
        if self._checks % 4096 == 0:
            self._forget(now)
        st = self._sessions.get(session)
        if st is None:
            self._sessions[session] = [counter, 1, sent]
            return
        top, bits, newest = st
        if counter > top:
            shift = counter - top
            st[0] = counter
            st[1] = ((bits << shift) | 1) & ((1 << REPLAY_SPAN) - 1) if shift < REPLAY_SPAN else 1
        else:
            back = top - counter
            if back >= REPLAY_SPAN:
                raise ReplayError(f"message {back} behind its sender's newest: too old to check, refused")
            if bits >> back & 1:
                raise ReplayError("replayed message refused (this counter was already accepted)")
            st[1] = bits | (1 << back)
        if sent > newest:
            st[2] = sent

    def _forget(self, now: float) -> None:
        old = [s for s, st in self._sessions.items() if now - st[2] > self.window]
        for s in old:
            del self._sessions[s]

    def __len__(self) -> int:
        return len(self._sessions)


class Wire:
    """Packs and checks messages for one shared secret: a sender session with its counter, and a receiver's
    :class:`ReplayGuard`. Use :func:`shared` for the per-thread instance; build your own to act as a separate
    peer (tests, tools).

    Args:
        token: the shared secret (or a personal key's secret).
        window: the replay window in seconds (default ``MALLEABLE_WIRE_WINDOW`` or 120).
        clock: wall-clock time source.
        key_id: the key's id, sent in every seal ("" for the shared secret: no id, the first version's seal);
            a message sealed under another key id is refused.
    """

    def __init__(self, token: bytes, window: float | None = None, clock: Callable[[], float] = time.time,
                 key_id: str = "") -> None:
        if key_id and not _KEY_ID.fullmatch(key_id):
            raise ConfigError(f"bad key id {key_id[:80]!r}: up to {MAX_KEY_ID} of A-Z a-z 0-9 _ . : @ + -")
        self.key_id = key_id
        self._kid = key_id.encode()
        self.key = _derive(token, b"mac")
        self.bulk_key = _derive(token, b"bulk mac")
        self._gcm = AESGCM(self.bulk_key)
        self._tags: weakref.WeakKeyDictionary[zmq.Frame, bytes] | None = None
        self.session = secrets.token_bytes(8)
        self._counter = itertools.count(1)
        self.clock = clock
        self.guard = ReplayGuard(window if window is not None else _window(), clock)
        self.pid = os.getpid()

    def _mac(self, seal: bytes, header: bytes, payloads: Sequence[Any]) -> bytes:
        """HMAC-SHA256 of MAGIC, seal, header length and header, the payload lengths, then the payloads.

        Bulk payloads (over :data:`BULK` bytes in all) enter it as their tags instead: each one's GMAC (AES-256-GCM,
        the payload as associated data read in place) under one key derived from the secret (not the HMAC's), ten
        times cheaper than SHA-256. A tag is never sent: GHASH under a secret key is an almost-universal hash (two
        payloads of n 16-byte blocks share a tag with probability below (n + 1) / 2^128), and the HMAC over the
        tags is the MAC, so one fixed key and nonce serve every payload (hash, then MAC). A tag depends on the
        payload alone, so a data server keeps the tag of each block it received and reuses it when it sends the
        block back (:attr:`keep_tags`)."""
        sizes = [memoryview(p).nbytes for p in payloads]
        prefix = b"".join((MAGIC, seal, _LEN4.pack(len(header)), header, *(_LEN8.pack(n) for n in sizes)))
        if sum(sizes) <= BULK:  # small: one C call over one buffer
            return hmac.digest(self.key, b"".join((prefix, *payloads)) if payloads else prefix, "sha256")
        return hmac.digest(self.key, b"".join((prefix, *map(self._tag, payloads))), "sha256")

    def _tag(self, payload: Any) -> bytes:
        """The GMAC tag of one payload (kept with its frame when :attr:`keep_tags`)."""
        memo = self._tags
        frame = _whole_frame(payload) if memo is not None else None
        if memo is None or frame is None:
            return self._gcm.encrypt(_GCM_NONCE, b"", payload)  # nothing encrypted: the associated data's tag
        tag = memo.get(frame)
        if tag is None:
            tag = memo[frame] = self._gcm.encrypt(_GCM_NONCE, b"", payload)
        return tag

    @property
    def keep_tags(self) -> bool:
        """Whether the tag of every whole received frame is kept (weakly, with the frame) and reused when that
        frame is sent again. Only for a process that never changes a received frame in place (a data server: its
        store keeps blocks as received and copies on write); a frame changed after its tag was kept would be sent
        under the old tag and refused by its receiver."""
        return self._tags is not None

    @keep_tags.setter
    def keep_tags(self, on: bool) -> None:
        self._tags = weakref.WeakKeyDictionary() if on else None

    def pack(self, header: Mapping[str, Any], payloads: Sequence[bytes | memoryview] = ()) -> list[Any]:
        """Frames for ``header`` (a JSON-able mapping with ``v`` and ``type``) and raw ``payloads``."""
        body = dict(header)
        body["sizes"] = [memoryview(p).nbytes for p in payloads]
        return self.pack_raw(json.dumps(body, separators=(",", ":")).encode(), payloads)

    def pack_raw(self, raw: bytes, payloads: Sequence[Any] = ()) -> list[Any]:
        """Frames for an already encoded header ``raw`` (sealed as is; for tools and tests).

        Raises:
            ProtocolError: ``raw`` is larger than any receiver accepts (:data:`MAX_HEADER`): refused here, at once,
                rather than dropped by the receiver.
        """
        if len(raw) > MAX_HEADER:
            raise ProtocolError(f"message too large to send ({len(raw)} > {MAX_HEADER} bytes of header)")
        seal = _SEAL.pack(self.session, next(self._counter), self.clock()) + self._kid
        return [MAGIC, raw, seal + self._mac(seal, raw, payloads), *map(_sendable, payloads)]

    def unpack(self, frames: Sequence[Any], versions: tuple[int, ...]) -> tuple[dict[str, Any], list[Any]]:
        """Check and decode frames into ``(header, payloads)``.

        Raises:
            AuthError: the MAC does not match the key, or the message names another key id.
            ReplayError: a replayed message, or one sent outside the time window.
            ProtocolError: wrong magic, frame count, sizes, nesting, JSON, version or payload sizes.
        """
        kid = _key_id_bytes(frames)
        if kid != self._kid:
            raise AuthError(f"message sealed with key {_show(kid)}, this side holds {_show(self._kid)}")
        raw, sealed = bytes(frames[1]), bytes(frames[2])
        # zmq.Frame payloads (recv with copy=False) are handed out as memoryviews: a Frame assigned directly
        # into a memoryview slice crashes the interpreter (pyzmq 27 buffer export), a memoryview of it does not.
        payloads = [p if isinstance(p, (bytes, bytearray, memoryview)) else memoryview(p) for p in frames[3:]]
        seal, mac = sealed[:-_MAC], sealed[-_MAC:]
        if not hmac.compare_digest(mac, self._mac(seal, raw, payloads)):
            what = f"key {self.key_id}" if self.key_id else "shared secret (MALLEABLE_TOKEN)"
            raise AuthError(f"message not authenticated: wrong or missing {what}, or the message was altered")
        session, counter, sent = _SEAL.unpack(seal[: _SEAL.size])
        self.guard.check(session, counter, sent)
        _check_depth(raw)
        try:
            header = json.loads(raw)
        except (UnicodeDecodeError, ValueError, RecursionError) as e:
            raise ProtocolError(f"header is not JSON: {str(e)[:200]}") from None
        if not isinstance(header, dict):
            raise ProtocolError("header is not a JSON object")
        v = header.get("v")
        if type(v) is not int or v not in versions:
            raise ProtocolError(f"unsupported protocol version {str(v)[:20]!r}; this side speaks {list(versions)}")
        if not isinstance(header.get("type"), str):
            raise ProtocolError("header has no message type")
        sizes = header.get("sizes")
        if not isinstance(sizes, list) or [memoryview(p).nbytes for p in payloads] != sizes:
            raise ProtocolError("payload frames do not match the sizes in the header")
        return header, payloads


def _whole_frame(payload: Any) -> zmq.Frame | None:
    """The zmq frame ``payload`` views all of (a block stored as received), else None."""
    if type(payload) is memoryview and type(payload.obj) is zmq.Frame and payload.nbytes == len(payload.obj):
        return payload.obj
    return payload if type(payload) is zmq.Frame else None


def _sendable(payload: Any) -> Any:
    """The zmq frame itself when ``payload`` views all of one: resent without a copy."""
    frame = _whole_frame(payload)
    return payload if frame is None else frame


def _nbytes(frame: Any) -> int:
    return memoryview(frame).nbytes if not isinstance(frame, bytes) else len(frame)


def _key_id_bytes(frames: Sequence[Any]) -> bytes:
    """The key id in a message's seal, after the checks that need no key: frame count, magic, header and seal
    sizes (nothing is hashed or parsed yet)."""
    n = len(frames)
    if n < 3:
        raise ProtocolError(f"truncated message: {n} frame(s), need at least 3")
    if n > MAX_FRAMES:
        raise ProtocolError(f"too many frames ({n} > {MAX_FRAMES})")
    if _nbytes(frames[0]) != len(MAGIC) or bytes(frames[0]) != MAGIC:
        raise ProtocolError("not a malleable message (bad magic; an older or foreign peer?)")
    if _nbytes(frames[1]) > MAX_HEADER:
        raise ProtocolError(f"header too large ({_nbytes(frames[1])} > {MAX_HEADER} bytes)")
    if not SEAL_SIZE <= _nbytes(frames[2]) <= SEAL_SIZE + MAX_KEY_ID:
        raise AuthError("message not authenticated: no valid seal")
    return bytes(frames[2])[_SEAL.size:-_MAC]


def _show(kid: bytes) -> str:
    return repr(kid.decode("ascii", "replace")[:MAX_KEY_ID]) if kid else "the shared secret (no key id)"


def key_id_of(frames: Sequence[Any]) -> str:
    """The key id a message claims (not yet verified: the MAC is checked with that key afterwards); "" for the
    shared secret.

    Raises:
        ProtocolError: wrong frame count, magic or header size.
        AuthError: no valid seal, or a key id that is not a key id.
    """
    kid = _key_id_bytes(frames)
    if not kid:
        return ""
    text = kid.decode("ascii", "replace")
    if not _KEY_ID.fullmatch(text):
        raise AuthError("message not authenticated: malformed key id in the seal")
    return text


def peek_id(frames: Sequence[Any]) -> int:
    """The request id ``id`` of a message's header, read without authenticating it (0 if there is none): for
    answering an authentic message that was refused after its MAC passed (a replay, a clock out of the window),
    so the sender can match the refusal to its request."""
    try:
        raw = bytes(frames[1])
        if len(raw) > MAX_HEADER:
            return 0
        _check_depth(raw)
        rid = json.loads(raw).get("id", 0)
    except (IndexError, TypeError, ValueError, AttributeError, ProtocolError, RecursionError):
        return 0
    return rid if type(rid) is int and 0 <= rid < (1 << 63) else 0


class Keyring:
    """A receiver holding several keys, told apart by the key id of each message (the controller daemon: the
    operator's shared secret, each user's key, each running job's key).

    ``lookup(key_id)`` returns the secret of a key id, or None when there is no such key (never issued, revoked,
    or its job ended); it is asked at every message, so revoking a key takes effect at once. Each key has its own
    :class:`Wire` (its sender session, and its replay memory, so one key cannot disturb another's); the Wire of a
    key that disappears is dropped, and a new secret under the same id gets a fresh one.

    Args:
        lookup: key id -> secret or None.
        window: the replay window (default ``MALLEABLE_WIRE_WINDOW`` or 120).
        clock: wall-clock time source.
    """

    def __init__(self, lookup: Callable[[str], bytes | None], window: float | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.lookup, self.window, self.clock = lookup, window, clock
        self._wires: dict[str, tuple[bytes, Wire]] = {}

    def wire(self, key_id: str) -> Wire | None:
        """The Wire of ``key_id`` (None if the key does not exist)."""
        secret = self.lookup(key_id)
        held = self._wires.get(key_id)
        if secret is None:
            if held is not None:
                del self._wires[key_id]
            return None
        if held is None or not hmac.compare_digest(held[0], secret):
            held = self._wires[key_id] = (secret, Wire(secret, self.window, self.clock, key_id))
        return held[1]

    def unpack(self, frames: Sequence[Any], versions: tuple[int, ...]) -> tuple[str, dict[str, Any], list[Any]]:
        """Check frames with the key they name: ``(key id, header, payloads)``.

        Raises:
            AuthError: an unknown key id, or the MAC does not match that key.
            ReplayError, ProtocolError: as :meth:`Wire.unpack`.
        """
        kid = key_id_of(frames)
        w = self.wire(kid)
        if w is None:
            raise AuthError(f"message not authenticated: unknown key {kid!r} (never issued, removed, or its job "
                            "has ended)")
        header, payloads = w.unpack(frames, versions)
        return kid, header, payloads

    def pack(self, key_id: str, header: Mapping[str, Any], payloads: Sequence[bytes | memoryview] = ()) -> list[Any]:
        """Frames for ``header`` sealed with the key ``key_id`` (a reply goes back under the request's key).

        Raises:
            AuthError: no such key.
        """
        w = self.wire(key_id)
        if w is None:
            raise AuthError(f"no key {key_id!r}")
        return w.pack(header, payloads)

    def prune(self) -> int:
        """Drop the Wires of keys that no longer exist; returns how many are kept."""
        for kid in list(self._wires):
            self.wire(kid)
        return len(self._wires)

    def __len__(self) -> int:
        return len(self._wires)


def _check_depth(raw: bytes) -> None:
    """Refuse a header nested deeper than :data:`MAX_DEPTH` before ``json.loads`` recurses into it."""
    if raw.count(b"[") + raw.count(b"{") <= MAX_DEPTH:
        return
    rest = _STRING.sub(b"", raw).translate(None, _NOT_BRACKETS)
    for _ in range(MAX_DEPTH):
        if not rest:
            return
        shorter = rest.replace(b"[]", b"").replace(b"{}", b"")
        if shorter == rest:
            break
        rest = shorter
    if rest:
        raise ProtocolError(f"header nested deeper than {MAX_DEPTH} levels (or unbalanced brackets)")


@dataclass
class _Shared:
    wires: dict[tuple[bytes, str], Wire]
    pid: int


_local = threading.local()


def shared(token: bytes, key_id: str = "") -> Wire:
    """This thread's :class:`Wire` for ``token`` under ``key_id`` (made on first use; new in a forked child)."""
    st: _Shared | None = getattr(_local, "st", None)
    pid = os.getpid()
    if st is None or st.pid != pid:
        st = _local.st = _Shared({}, pid)
    w = st.wires.get((token, key_id))
    if w is None:
        w = st.wires[(token, key_id)] = Wire(token, key_id=key_id)
    return w


def pack(header: Mapping[str, Any], token: bytes, payloads: Sequence[bytes | memoryview] = (),
         key_id: str = "") -> list[Any]:
    """Frames for ``header`` and ``payloads``, sealed with this thread's session for ``token`` (and ``key_id``)."""
    return shared(token, key_id).pack(header, payloads)


def pack_raw(raw: bytes, token: bytes, payloads: Sequence[Any] = (), key_id: str = "") -> list[Any]:
    """Frames for an encoded header ``raw`` sealed as is (a valid MAC over any bytes: for tests and tools)."""
    return shared(token, key_id).pack_raw(raw, payloads)


def unpack(frames: Sequence[Any], token: bytes, versions: tuple[int, ...],
           key_id: str = "") -> tuple[dict[str, Any], list[Any]]:
    """Check frames with this thread's receiver state for ``token`` (and ``key_id``); see :meth:`Wire.unpack`."""
    return shared(token, key_id).unpack(frames, versions)


# ------------------------------------------------------------------------------------------- message types
_T = TypeVar("_T")


class MessageTypes:
    """The message classes of one protocol, by their wire ``type`` name.

    ``@types.message("name")`` turns a class into a frozen, slotted dataclass with ``TYPE = "name"``
    and registers it; a second class with the same name is an error at import time.
    """

    def __init__(self) -> None:
        self._by_name: dict[str, type] = {}

    @dataclass_transform(frozen_default=True)
    def message(self, type_: str) -> Callable[[type[_T]], type[_T]]:
        """Class decorator registering a message class under ``type_`` (it becomes a frozen, slotted dataclass:
        type checkers are told so)."""

        def deco(cls: type[_T]) -> type[_T]:
            if type_ in self._by_name:
                raise TypeError(f"duplicate message type {type_!r}")
            cls.TYPE = type_  # type: ignore[attr-defined]
            new = dataclass(frozen=True, slots=True)(cls)  # slotted dataclasses are new classes
            self._by_name[type_] = new
            return new  # type: ignore[no-any-return]

        return deco

    def get(self, type_: str) -> type[Any] | None:
        """The class registered under ``type_``, or None."""
        return self._by_name.get(type_)

    def names(self) -> list[str]:
        """Every registered type name."""
        return list(self._by_name)


def check_fields(msg: Mapping[str, Any], spec: Mapping[str, Any], where: str = "") -> None:
    """Validate ``msg`` against ``spec`` ({field: type or tuple of types}); extra keys are an error.

    ``bool`` is never accepted where ``int`` is asked (JSON ``true`` is not a count). Keys ``v``,
    ``type``, ``sizes`` and ``id`` belong to the envelope and are always allowed.

    Raises:
        ProtocolError: a field is missing, of the wrong type, or unknown.
    """
    label = f"{where or str(msg.get('type', '?'))[:64]}: "
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
        raise ProtocolError(f"{label}unknown field(s) {sorted(str(x)[:64] for x in extra)[:10]}")


def _names(types: tuple[type, ...]) -> str:
    return " or ".join(t.__name__ for t in types)
