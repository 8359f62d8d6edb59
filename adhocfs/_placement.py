"""Pure block placement: rendezvous (highest-random-weight) hashing over stable server ids, and per-file
interval maps that bind ranges of blocks to the server list (epoch) that was current when they were created.

Nothing here touches sockets, clocks or files; the metadata server, the client and the redistribution
planner all call these functions.

Notes:
    Rendezvous hashing is used instead of ``hash % n`` (GekkoFS, Hercules) because removing a server only
    re-places the blocks that were on it, and adding one only takes about ``1/(n+1)`` of the blocks; any
    server (not only the highest-numbered, as with jump hashing) may leave. Lookups cost O(n) per block,
    which is negligible next to a 512 KiB transfer for the tens of servers an ad-hoc file system has.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from malleable.errors import PlacementError

__all__ = [
    "UNALLOCATED",
    "Epochs",
    "Interval",
    "FileLayout",
    "block_range",
    "in_ranges",
    "merge_ranges",
    "clip_ranges",
    "ranges_of",
    "intern_epoch",
    "owner",
    "owners",
    "score",
]

_MASK = (1 << 64) - 1

UNALLOCATED = 0x7FFFFFFF
"""Epoch marker of blocks never written: they get the epoch that is current when first written."""

Epochs = Mapping[int, tuple[int, ...]]
"""Epoch id -> the ordered tuple of stable server ids active in that epoch."""


def _mix(x: int) -> int:
    """The splitmix64 finalizer: a fast, well-spread 64-bit integer hash."""
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9 & _MASK
    x = (x ^ (x >> 27)) * 0x94D049BB133111EB & _MASK
    return x ^ (x >> 31)


def score(sid: int, fid: int, block: int) -> int:
    """Rendezvous weight of server ``sid`` for block ``block`` of file ``fid`` (stable across runs)."""
    key = _mix((fid * 0x9E3779B97F4A7C15 + block) & _MASK)
    return _mix(key ^ ((sid + 1) * 0xD6E8FEB86659FD93 & _MASK))


def owner(sids: Sequence[int], fid: int, block: int) -> int:
    """The server of ``sids`` that holds ``(fid, block)``: the highest rendezvous weight.

    Raises:
        PlacementError: ``sids`` is empty.
    """
    if len(sids) == 1:
        return sids[0]
    if not sids:
        raise PlacementError(f"no servers to place block {block} of file {fid}")
    best, best_score = -1, -1
    for s in sids:
        sc = score(s, fid, block)
        if sc > best_score or (sc == best_score and s < best):
            best, best_score = s, sc
    return best


def owners(sids: Sequence[int], fid: int, block: int, r: int) -> tuple[int, ...]:
    """The ``r`` servers of ``sids`` holding copies of ``(fid, block)``, in rendezvous order (the first is
    :func:`owner`, the primary; the others are the next ones, so removing a server keeps the survivors' order).

    Raises:
        PlacementError: ``sids`` is empty.
    """
    if r <= 1:
        return (owner(sids, fid, block),)
    if not sids:
        raise PlacementError(f"no servers to place block {block} of file {fid}")
    ranked = sorted(sids, key=lambda s: (-score(s, fid, block), s))
    return tuple(ranked[:r])


def intern_epoch(epochs: Epochs, sids: Iterable[int]) -> tuple[int, dict[int, tuple[int, ...]]]:
    """The epoch id for server list ``sids``, reusing an existing epoch with the same (sorted) list.

    Returns:
        ``(eid, epochs')`` where ``epochs'`` is a new dict (``epochs`` is not modified).

    Raises:
        PlacementError: ``sids`` is empty.
    """
    key = tuple(sorted(set(sids)))
    if not key:
        raise PlacementError("an epoch needs at least one server")
    new = dict(epochs)
    for eid, lst in epochs.items():
        if tuple(lst) == key:
            return eid, new
    eid = max(epochs, default=-1) + 1
    new[eid] = key
    return eid, new


@dataclass(frozen=True, slots=True)
class Interval:
    """Blocks from ``start`` up to the next interval's start are placed over the servers of ``epoch``."""

    start: int
    epoch: int


@dataclass(frozen=True, slots=True)
class FileLayout:
    """A file's interval map. Invariants: the first interval starts at block 0, starts strictly increase,
    adjacent intervals have different epochs, and the last interval is open-ended.
    """

    intervals: tuple[Interval, ...]

    def __post_init__(self) -> None:
        iv = self.intervals
        if not iv or iv[0].start != 0:
            raise PlacementError("a layout must have an interval starting at block 0")
        for a, b in zip(iv, iv[1:], strict=False):
            if b.start <= a.start:
                raise PlacementError(f"layout interval starts must increase: {a.start} then {b.start}")
            if a.epoch == b.epoch:
                raise PlacementError(f"adjacent layout intervals share epoch {a.epoch}")

    @classmethod
    def single(cls, epoch: int) -> FileLayout:
        """A layout placing every block over one epoch."""
        return cls((Interval(0, epoch),))

    @classmethod
    def from_pairs(cls, pairs: Iterable[Sequence[int]]) -> FileLayout:
        """Build from ``[[start, epoch], ...]`` (the wire and database form); merges equal neighbours."""
        out: list[Interval] = []
        for start, epoch in pairs:
            if out and out[-1].epoch == epoch:
                continue
            out.append(Interval(int(start), int(epoch)))
        return cls(tuple(out))

    def to_pairs(self) -> list[list[int]]:
        """The ``[[start, epoch], ...]`` form."""
        return [[i.start, i.epoch] for i in self.intervals]

    @classmethod
    def empty(cls) -> FileLayout:
        """The layout of a new file: no block allocated yet."""
        return cls.single(UNALLOCATED)

    def allocated(self, block: int) -> bool:
        """Whether ``block`` has been placed in an epoch."""
        return self.epoch_of(block) != UNALLOCATED

    def any_unallocated(self, first: int, end: int) -> bool:
        """Whether a block of ``[first, end)`` is not allocated yet."""
        for k, iv in enumerate(self.intervals):
            stop = self.intervals[k + 1].start if k + 1 < len(self.intervals) else end
            if iv.epoch == UNALLOCATED and iv.start < end and stop > first:
                return True
        return False

    def allocate(self, first: int, end: int, epoch: int) -> FileLayout:
        """FileLayout after the unallocated blocks of ``[first, end)`` are placed in ``epoch``; allocated blocks
        keep their epoch (nothing moves)."""
        if end <= first:
            return self
        segs: list[list[int]] = []
        for k, iv in enumerate(self.intervals):
            stop = self.intervals[k + 1].start if k + 1 < len(self.intervals) else 1 << 62
            for a, b in (
                (iv.start, min(stop, first)),
                (max(iv.start, first), min(stop, end)),
                (max(iv.start, end), stop),
            ):
                if a < b:
                    inside = first <= a and b <= end
                    segs.append([a, epoch if inside and iv.epoch == UNALLOCATED else iv.epoch])
        return FileLayout.from_pairs(segs)

    def remap(self, fn: Callable[[int], int]) -> FileLayout:
        """FileLayout with every allocated interval's epoch replaced by ``fn(epoch)``."""
        return FileLayout.from_pairs(
            [[iv.start, iv.epoch if iv.epoch == UNALLOCATED else fn(iv.epoch)] for iv in self.intervals]
        )

    def epoch_of(self, block: int) -> int:
        """Epoch of the interval holding ``block``."""
        if block < 0:
            raise PlacementError(f"negative block index {block}")
        starts = [i.start for i in self.intervals]
        return self.intervals[bisect.bisect_right(starts, block) - 1].epoch

    def _sids(self, epochs: Epochs, fid: int, block: int) -> tuple[int, ...]:
        eid = self.epoch_of(block)
        if eid == UNALLOCATED:
            raise PlacementError(f"file {fid}: block {block} is not allocated")
        try:
            return tuple(epochs[eid])
        except KeyError:
            raise PlacementError(f"file {fid}: layout refers to unknown epoch {eid}") from None

    def server(self, epochs: Epochs, fid: int, block: int) -> int:
        """Server id holding ``block`` of file ``fid`` (its primary copy).

        Raises:
            PlacementError: the block is not allocated or the layout names an unknown epoch.
        """
        return owner(self._sids(epochs, fid, block), fid, block)

    def replicas(self, epochs: Epochs, fid: int, block: int, r: int) -> tuple[int, ...]:
        """The servers holding the ``r`` copies of ``block`` (primary first; fewer if the epoch is smaller).

        Raises:
            PlacementError: the block is not allocated or the layout names an unknown epoch.
        """
        return owners(self._sids(epochs, fid, block), fid, block, r)

    def extend(self, hw: int, epoch: int) -> FileLayout:
        """FileLayout after the blocks from ``hw`` on are placed in ``epoch`` (no block below ``hw`` moves)."""
        last = self.intervals[-1]
        if last.epoch == epoch:
            return self
        if hw <= last.start:
            kept = tuple(i for i in self.intervals if i.start < hw)
            pairs = [[i.start, i.epoch] for i in kept] + [[hw, epoch]]
            return FileLayout.from_pairs(pairs) if kept else FileLayout.single(epoch)
        return FileLayout((*self.intervals, Interval(hw, epoch)))

    def servers(self, epochs: Epochs) -> set[int]:
        """Every server id any interval of this layout may place blocks on."""
        return {s for i in self.intervals if i.epoch != UNALLOCATED for s in epochs.get(i.epoch, ())}

    def spans(self, nblocks: int) -> list[tuple[int, int, int]]:
        """``(first, end, epoch)`` for the intervals clipped to blocks ``[0, nblocks)``."""
        out = []
        for k, i in enumerate(self.intervals):
            end = self.intervals[k + 1].start if k + 1 < len(self.intervals) else nblocks
            end = min(end, nblocks)
            if i.start < end:
                out.append((i.start, end, i.epoch))
        return out


def block_range(offset: int, length: int, block_size: int) -> list[tuple[int, int, int]]:
    """Split a byte range into ``(block, offset_in_block, length)`` pieces.

    Raises:
        ValueError: negative offset or length, or a block size below 1.
    """
    if offset < 0 or length < 0:
        raise ValueError(f"negative offset or length ({offset}, {length})")
    if block_size < 1:
        raise ValueError(f"block size must be >= 1, got {block_size}")
    out = []
    pos, end = offset, offset + length
    while pos < end:
        b, off = divmod(pos, block_size)
        n = min(block_size - off, end - pos)
        out.append((b, off, n))
        pos += n
    return out


# ---------------------------------------------------------------- sets of blocks as sorted [start, end) ranges
Ranges = list[list[int]]


def ranges_of(blocks: Iterable[int]) -> Ranges:
    """Sorted, merged ``[start, end)`` ranges covering ``blocks``."""
    out: Ranges = []
    for b in sorted(set(blocks)):
        if out and out[-1][1] == b:
            out[-1][1] = b + 1
        else:
            out.append([b, b + 1])
    return out


def merge_ranges(a: Iterable[Sequence[int]], b: Iterable[Sequence[int]]) -> Ranges:
    """The union of two range lists, sorted and merged (touching ranges join)."""
    out: Ranges = []
    for s, e in sorted([int(x), int(y)] for x, y in [*a, *b] if int(y) > int(x)):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def clip_ranges(ranges: Iterable[Sequence[int]], end: int) -> Ranges:
    """The part of ``ranges`` below block ``end``."""
    return [[s, min(e, end)] for s, e in ranges if s < end]


def in_ranges(ranges: Sequence[Sequence[int]], block: int) -> bool:
    """Whether ``block`` lies in one of the sorted ``ranges``."""
    i = bisect.bisect_right([r[0] for r in ranges], block) - 1
    return i >= 0 and block < ranges[i][1]
