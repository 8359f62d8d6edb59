"""Block stores of a data server: a mutable mapping ``(file id, block) -> bytes`` with in-place partial
writes; :class:`MemoryStore` keeps blocks in memory (this module), ``DirStore`` adds a backing directory
(:mod:`._dirstore`).

Every store keeps a per-file index so a file's blocks can be listed and dropped without a scan, and
counts the bytes it holds. Stores are not thread-safe: a data server owns its store from one thread.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from typing import Any

__all__ = ["BlockStore", "Key", "MemoryStore"]

Key = tuple[int, int]
"""``(file id, block index)``."""


class BlockStore(MutableMapping[Key, Any]):
    """Common behaviour: per-file index, byte count, partial writes, context manager and ``close``.

    Values are bytes-like (bytes, bytearray or memoryview). Subclasses override the ``_persist_*`` hooks
    to mirror changes elsewhere; the in-memory dict is always authoritative while the store is open.

    Invariant: ``self.nbytes == sum(len(v) for v in self.values())`` and ``self._index`` lists exactly
    the keys present, grouped by file id.
    """

    def __init__(self) -> None:
        self._data: dict[Key, Any] = {}
        self._index: dict[int, set[int]] = {}
        self.nbytes = 0
        self.closed = False

    # -- MutableMapping
    def __getitem__(self, key: Key) -> Any:
        return self._data[key]

    def __setitem__(self, key: Key, value: Any) -> None:
        self._set(key, value)
        self._persist_set(key, 0, value, whole=True)

    def __delitem__(self, key: Key) -> None:
        old = self._data.pop(key)
        self.nbytes -= len(old)
        blocks = self._index[key[0]]
        blocks.discard(key[1])
        if not blocks:
            del self._index[key[0]]
        self._persist_del(key)

    def __iter__(self) -> Iterator[Key]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    # -- block operations
    def write(self, key: Key, offset: int, data: Any) -> None:
        """Write ``data`` at ``offset`` of block ``key``, growing it (with zeros) as needed.

        A write that replaces the whole block keeps ``data`` itself (no copy): callers that reuse their
        buffer must pass a copy. A partial write builds a new buffer instead of changing the stored one
        in place (copy on write): :meth:`read` hands out views of stored blocks that zero-copy replies
        may still be sending, and those must keep the bytes they were read with.
        """
        n = len(data)
        cur = self._data.get(key)
        if offset == 0 and (cur is None or n >= len(cur)):
            self._set(key, data)
            self._persist_set(key, 0, data, whole=True)
            return
        old_len = 0 if cur is None else len(cur)
        buf = bytearray(max(old_len, offset + n))
        if cur is not None:
            buf[:old_len] = cur
        buf[offset : offset + n] = data
        self._data[key] = buf
        self.nbytes += len(buf) - old_len
        self._index.setdefault(key[0], set()).add(key[1])
        self._persist_set(key, offset, data, whole=False)

    def read(self, key: Key, offset: int, length: int) -> memoryview | None:
        """Up to ``length`` bytes at ``offset`` of block ``key`` (shorter at its end), or None if absent."""
        cur = self._data.get(key)
        if cur is None:
            return None
        return memoryview(cur)[offset : offset + length]

    def cut(self, key: Key, length: int) -> None:
        """Shorten block ``key`` to ``length`` bytes (no-op when absent or already shorter)."""
        cur = self._data.get(key)
        if cur is None or len(cur) <= length:
            return
        self._set(key, bytearray(memoryview(cur)[:length]))
        self._persist_cut(key, length)

    def blocks_of(self, fid: int) -> list[int]:
        """Sorted block indices held for file ``fid``."""
        return sorted(self._index.get(fid, ()))

    def files(self) -> list[int]:
        """File ids with at least one block here."""
        return sorted(self._index)

    def drop_file(self, fid: int) -> int:
        """Delete every block of ``fid``; returns how many were deleted."""
        blocks = self.blocks_of(fid)
        for b in blocks:
            del self[(fid, b)]
        return len(blocks)

    # -- lifecycle
    def close(self) -> None:
        """Release resources; the store must not be used afterwards."""
        self.closed = True

    def __enter__(self) -> BlockStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals and hooks
    def _set(self, key: Key, value: Any) -> None:
        old = self._data.get(key)
        if old is not None:
            self.nbytes -= len(old)
        self._data[key] = value
        self.nbytes += len(value)
        self._index.setdefault(key[0], set()).add(key[1])

    def _persist_set(self, key: Key, offset: int, data: Any, whole: bool) -> None:
        """Mirror a write (``whole``: ``data`` is the entire new block)."""

    def _persist_del(self, key: Key) -> None:
        """Mirror a deletion."""

    def _persist_cut(self, key: Key, length: int) -> None:
        """Mirror a truncation."""


class MemoryStore(BlockStore):
    """Blocks in memory only; everything is lost when the process ends.

    Examples:
        >>> s = MemoryStore()
        >>> s.write((1, 0), 2, b"ab")
        >>> bytes(s.read((1, 0), 0, 10))
        b'\\x00\\x00ab'
    """
