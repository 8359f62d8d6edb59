"""The adhocfs messages of bulk transfers: many small files created, published, listed, opened and read with one
request each instead of one per file (a stage-in or a stage-out of a tree; :mod:`._bulk`).

They register in the same table as every other message (:data:`._messages.TYPES`) and are checked by the same
field validator (:func:`._protocol.decode`): ``PAIRED`` fields hold one entry per file, at most :data:`MAX_FILES`.
"""

from __future__ import annotations

from typing import ClassVar

from malleable.adhocfs._messages import Message, _msg

__all__ = ["MAX_FILES", "CreateFiles", "Created", "Entries", "GetFiles", "OpenFiles", "Opened", "Publish",
           "ScanDir"]

MAX_FILES = 1024  # most files in one CreateFiles, Publish, OpenFiles or GetFiles


@_msg("create_files")
class CreateFiles(Message):
    """Create (or replace, as ``open(path, "w")``) each of ``paths`` with its blocks for ``lengths[i]`` bytes
    allocated in the current epoch, in one transaction: a bulk writer of many small files (the stager) then
    sends every block at once and publishes them all with :class:`Publish`."""

    PAIRED: ClassVar[tuple[str, ...]] = ("paths", "lengths")

    paths: list[str]
    lengths: list[int]  # (``sizes`` is the envelope's)


@_msg("created")
class Created(Message):
    """Reply to :class:`CreateFiles`: the new files' ids and layout versions, in order, and where their blocks
    go (every block of them in epoch ``epoch`` of servers ``sids``, at ``servers`` addresses, ``replicas``
    copies, ``block_size`` bytes each)."""

    fids: list[int]
    versions: list[int]
    block_size: int
    epoch: int
    sids: list[int]
    servers: dict
    replicas: int = 1


@_msg("publish")
class Publish(Message):
    """Raise the size of each file ``fids[i]`` to ``lengths[i]`` and mark its blocks ``[0, ceil(size / block
    size))`` written (what :class:`Extend` does for one file on its flush), once a bulk writer's blocks are
    acknowledged."""

    PAIRED: ClassVar[tuple[str, ...]] = ("fids", "lengths")

    fids: list[int]
    lengths: list[int]


@_msg("scandir")
class ScanDir(Message):
    """The entries of a directory with their kinds and sizes (a tree walked with one request per folder)."""

    path: str


@_msg("entries")
class Entries(Message):
    """Reply to :class:`ScanDir`: ``dirs[i]`` is 1 when ``names[i]`` is a folder, ``lengths[i]`` a file's size."""

    names: list[str]
    dirs: list[int]
    lengths: list[int]


@_msg("open_files")
class OpenFiles(Message):
    """Open each of ``paths`` for reading, as :class:`~._messages.Open` with mode ``r`` does one file: a bulk
    reader of many small files (a stage-out) then asks every block at once with :class:`GetFiles`."""

    PAIRED: ClassVar[tuple[str, ...]] = ("paths",)

    paths: list[str]


@_msg("opened")
class Opened(Message):
    """Reply to :class:`OpenFiles`, one entry per path in order: the file's id, layout version, size and block
    size, and ``broken[i]`` 1 when it has blocks lost with every copy. ``layout`` rows are ``[i, start, epoch]``:
    the ``[start, epoch]`` pairs of file ``i``'s interval map (:class:`~._messages.FileInfo`'s ``layout``);
    ``epochs``, ``servers`` and ``replicas`` are shared by all."""

    PAIRED: ClassVar[tuple[str, ...]] = ("fids", "versions", "lengths", "block_sizes", "broken")

    fids: list[int]
    versions: list[int]
    lengths: list[int]
    block_sizes: list[int]
    broken: list[int]
    layout: list[list[int]]
    epochs: dict
    servers: dict
    replicas: int = 1


@_msg("get_files")
class GetFiles(Message):
    """Read up to ``lengths[i]`` bytes at offset 0 of block ``blocks[i]`` of file ``fids[i]`` (layout version
    ``versions[i]``), for every ``i``: the blocks of many small files in one request. Answered by one
    :class:`~._messages.BlockData` in the same order; refused whole (``stale``) when one file's version is."""

    PAIRED: ClassVar[tuple[str, ...]] = ("fids", "blocks", "versions", "lengths")

    fids: list[int]
    blocks: list[int]
    versions: list[int]
    lengths: list[int]
