"""A block store mirrored to a directory (one file per block), so a data server restarted with the same
``--dir`` serves the same blocks.

Notes:
    Writes go to the page cache (no fsync): data survives a process crash or restart, not a power loss,
    which matches an ad-hoc file system's job-lifetime guarantees. The directory must not be shared by two
    live servers. Blocks are loaded into memory when the store opens.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from malleable.adhocfs._store import BlockStore, Key

__all__ = ["DirStore"]

log = logging.getLogger(__name__)


class DirStore(BlockStore):
    """Blocks in memory plus a write-through copy under ``root/<fid>/<block>``.

    Args:
        root: the backing directory (created if missing).
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        super().__init__()
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._load()

    def _path(self, key: Key) -> Path:
        return self.root / str(key[0]) / str(key[1])

    def _load(self) -> None:
        for fdir in self.root.iterdir():
            if not (fdir.is_dir() and fdir.name.isdigit()):
                continue
            for bfile in fdir.iterdir():
                if bfile.name.isdigit():
                    self._set((int(fdir.name), int(bfile.name)), bytearray(bfile.read_bytes()))
        log.info("loaded %d blocks (%d bytes) from %s", len(self), self.nbytes, self.root)

    def _persist_set(self, key: Key, offset: int, data: Any, whole: bool) -> None:
        path = self._path(key)
        path.parent.mkdir(exist_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if whole else 0)
        fd = os.open(path, flags, 0o600)
        try:
            os.pwrite(fd, data, offset)
        finally:
            os.close(fd)

    def _persist_del(self, key: Key) -> None:
        path = self._path(key)
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        try:
            path.parent.rmdir()
        except OSError:
            pass

    def _persist_cut(self, key: Key, length: int) -> None:
        os.truncate(self._path(key), length)
