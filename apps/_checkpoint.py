"""Checkpoints of the Jacobi app: HDF5 files (h5py) in a local directory or in the job's adhocfs.

A checkpoint is the whole ``n × n`` grid (boundary included) and the iteration count after which it was taken,
so a restart may run on any number of processes: each rank takes its block of rows from the global grid.
``pad`` bytes of filler can be added to make a checkpoint as large as a real application's, large enough that
the file system's size matters.

Why the file protocol: a checkpoint is written under a temporary name (``.jacobi-ITER.h5.tmp``) and renamed to
``jacobi-ITER.h5`` only once h5py has closed it, so a file under the final name is complete. A crash in the middle
leaves only a temporary file, which :func:`latest` never looks at; a final-name file that still fails to read
(damaged storage) is skipped with a warning and the next older one is used.

The storage is reached through a :class:`Store`: :class:`LocalStore` (a directory) or :class:`AdhocStore` (a
directory of an adhocfs, whose file objects h5py accepts). :func:`open_store` picks the adhocfs one when
``MALLEABLE_FS`` is set, as it is in a job the controller gave a file system.

Writing and reading checkpoints is the app's I/O: its wall time and bytes go to the runtime's I/O meter
(:func:`malleable.runtime.report_io`), so a run under the controller reports its measured I/O intensity.
"""

from __future__ import annotations

import logging
import os
import re
import time
from pathlib import Path
from typing import IO

import numpy as np

from malleable.runtime._iometer import report_io

__all__ = ["FORMAT", "AdhocStore", "Checkpoint", "CheckpointError", "LocalStore", "Store", "checkpoint_name",
           "latest", "list_checkpoints", "open_store", "prune", "write"]

log = logging.getLogger(__name__)

FORMAT = "malleable-jacobi-checkpoint-1"  # the file's ``format`` attribute; other files are not checkpoints
_NAME = re.compile(r"^jacobi-(\d{8,})\.h5$")


class CheckpointError(Exception):
    """A checkpoint that exists but does not fit the run (another grid size, past the last iteration)."""


def checkpoint_name(iteration: int) -> str:
    """The final file name of the checkpoint taken after ``iteration`` iterations (sorts by iteration)."""
    return f"jacobi-{iteration:08d}.h5"


class Store:
    """A flat directory of checkpoint files; subclasses reach a local directory or an adhocfs directory."""

    where: str

    def names(self) -> list[str]:
        """File names in the directory (empty if it does not exist)."""
        raise NotImplementedError

    def open(self, name: str, mode: str) -> IO[bytes]:
        """A binary file object (``rb`` or ``w+b``) that h5py can use."""
        raise NotImplementedError

    def rename(self, src: str, dst: str) -> None:
        """Rename ``src`` to ``dst`` in the directory (replacing it)."""
        raise NotImplementedError

    def remove(self, name: str) -> None:
        """Remove a file of the directory."""
        raise NotImplementedError

    def size(self, name: str) -> int:
        """Bytes of a file of the directory."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the connection, if any."""


class LocalStore(Store):
    """A directory of the local (or a shared) file system, created on first use."""

    def __init__(self, path: str) -> None:
        self.root = Path(path)
        self.where = str(self.root)

    def names(self) -> list[str]:
        return sorted(os.listdir(self.root)) if self.root.is_dir() else []

    def open(self, name: str, mode: str) -> IO[bytes]:
        if "w" in mode:
            self.root.mkdir(parents=True, exist_ok=True)
        return open(self.root / name, mode)  # noqa: SIM115 - the caller closes it

    def rename(self, src: str, dst: str) -> None:
        os.replace(self.root / src, self.root / dst)

    def remove(self, name: str) -> None:
        (self.root / name).unlink()

    def size(self, name: str) -> int:
        return (self.root / name).stat().st_size


class AdhocStore(Store):
    """A directory of an adhocfs (``addr`` its metadata address), created on first use."""

    def __init__(self, addr: str, path: str) -> None:
        from malleable.adhocfs import connect

        if not path.startswith("/"):
            raise CheckpointError(f"--checkpoint-dir {path!r}: a path in the job's file system must be absolute")
        self.fs = connect(addr)
        self.root = path.rstrip("/") or "/"
        self.where = f"{addr}:{self.root}"
        self._made = False

    def _path(self, name: str) -> str:
        return f"{self.root.rstrip('/')}/{name}"

    def names(self) -> list[str]:
        return sorted(self.fs.listdir(self.root)) if self.fs.exists(self.root) else []

    def open(self, name: str, mode: str) -> IO[bytes]:
        if "w" in mode and not self._made:
            self.fs.makedirs(self.root, exist_ok=True)
            self._made = True
        return self.fs.open(self._path(name), mode)  # type: ignore[return-value]

    def rename(self, src: str, dst: str) -> None:
        self.fs.rename(self._path(src), self._path(dst))

    def remove(self, name: str) -> None:
        self.fs.remove(self._path(name))

    def size(self, name: str) -> int:
        return int(self.fs.stat(self._path(name)).size)

    def close(self) -> None:
        self.fs.close()


def open_store(path: str, fs_addr: str | None = None) -> Store:
    """The store for ``--checkpoint-dir PATH``: a local directory when ``PATH`` is under the job's mount
    (``MALLEABLE_FS_MOUNT``: plain h5py through the mount), else in the adhocfs at ``fs_addr`` (default
    ``MALLEABLE_FS``) if there is one, else a local directory."""
    mount = os.environ.get("MALLEABLE_FS_MOUNT", "")
    if mount and os.path.abspath(path).startswith(mount.rstrip("/") + "/"):
        return LocalStore(path)
    addr = fs_addr if fs_addr is not None else os.environ.get("MALLEABLE_FS", "")
    return AdhocStore(addr, path) if addr else LocalStore(path)


class Checkpoint:
    """A checkpoint read back: the grid and the iterations done, and the file it came from."""

    def __init__(self, grid: np.ndarray, iteration: int, name: str) -> None:
        self.grid, self.iteration, self.name = grid, iteration, name


_PAD_CHUNK = 1 << 22


def write(store: Store, grid: np.ndarray, iteration: int, pad: int = 0, procs: int = 0) -> int:
    """Write the checkpoint of ``grid`` after ``iteration`` iterations, with ``pad`` filler bytes; returns its size.

    The file is complete under its final name or absent: it is written as a temporary file and renamed. Its
    wall time and size are reported as I/O (:func:`malleable.runtime.report_io`).
    """
    import h5py

    t0 = time.monotonic()
    final = checkpoint_name(iteration)
    tmp = f".{final}.tmp"
    with store.open(tmp, "w+b") as f:
        with h5py.File(f, "w") as h:
            h.create_dataset("u", data=grid)
            if pad:
                d = h.create_dataset("pad", shape=(pad,), dtype=np.uint8)
                block = (np.arange(min(pad, _PAD_CHUNK), dtype=np.uint64) * 2654435761 >> 24).astype(np.uint8)
                for lo in range(0, pad, _PAD_CHUNK):  # real bytes (not a sparse hole): the volume is stored
                    hi = min(pad, lo + _PAD_CHUNK)
                    d[lo:hi] = block[: hi - lo]
            h.attrs.update({"format": FORMAT, "iteration": iteration, "n": grid.shape[0], "procs": procs})
        f.flush()
    store.rename(tmp, final)
    size = store.size(final)
    report_io(time.monotonic() - t0, size)
    log.info("checkpoint %s/%s: iteration %d, %d bytes", store.where, final, iteration, size)
    return size


def list_checkpoints(store: Store) -> list[tuple[int, str]]:
    """``(iteration, name)`` of the files under a final checkpoint name, oldest first (temporaries excluded)."""
    out = [(int(m.group(1)), name) for name in store.names() if (m := _NAME.match(name))]
    return sorted(out)


def _read(store: Store, name: str) -> Checkpoint:
    import h5py

    t0 = time.monotonic()
    try:
        with store.open(name, "rb") as f, h5py.File(f, "r") as h:
            if h.attrs.get("format") != FORMAT:
                raise ValueError(f"not a Jacobi checkpoint (format {h.attrs.get('format')!r})")
            grid = np.array(h["u"])
            return Checkpoint(grid, int(h.attrs["iteration"]), name)
    finally:
        report_io(time.monotonic() - t0)


def latest(store: Store, n: int | None = None) -> Checkpoint | None:
    """The newest checkpoint that reads back whole, or None; damaged ones are skipped with a warning.

    Raises:
        CheckpointError: the newest readable checkpoint is of another grid size than ``n``.
    """
    for iteration, name in reversed(list_checkpoints(store)):
        try:
            ck = _read(store, name)
        except (OSError, KeyError, ValueError) as e:
            log.warning("checkpoint %s/%s is damaged, trying an older one: %s", store.where, name, e)
            continue
        if ck.iteration != iteration or ck.grid.ndim != 2 or ck.grid.shape[0] != ck.grid.shape[1]:
            log.warning("checkpoint %s/%s is inconsistent (iteration %d, shape %s), trying an older one",
                        store.where, name, ck.iteration, ck.grid.shape)
            continue
        if n is not None and ck.grid.shape[0] != n:
            raise CheckpointError(f"checkpoint {store.where}/{name} is of a {ck.grid.shape[0]}x{ck.grid.shape[0]} "
                                  f"grid, not {n}x{n} (--n)")
        return ck
    return None


def prune(store: Store, keep: int) -> list[str]:
    """Remove all but the ``keep`` newest checkpoints (``keep`` 0 keeps all), and stale temporaries; returns
    the names removed."""
    gone: list[str] = []
    done = list_checkpoints(store)
    victims = [name for _, name in done[:-keep]] if keep > 0 else []
    newest = done[-1][0] if done else -1
    for name in store.names():  # temporaries of checkpoints older than the newest: a crash left them
        m = re.match(r"^\.jacobi-(\d{8,})\.h5\.tmp$", name)
        if m and int(m.group(1)) < newest:
            victims.append(name)
    for name in victims:
        try:
            store.remove(name)
            gone.append(name)
        except OSError as e:
            log.warning("could not remove old checkpoint %s/%s: %s", store.where, name, e)
    return gone

