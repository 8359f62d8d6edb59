"""Pure redistribution plans: which blocks move where when data servers leave (partial or total
redistribution) or when old blocks are spread onto new servers (rebalance), and the files' new layouts.

Only blocks that exist are moved: the caller passes an inventory (which blocks each server holds) and a
block counts only where the file's current layout says it lives (a copy found elsewhere is an orphan).

* **partial**: every interval whose server list loses a leaving server is re-bound to the list without
  it; by the rendezvous property only the blocks that were on leaving servers change owner.
* **total**: every affected file (one with blocks on a leaving server) is re-placed as one interval over
  the remaining servers of the current epoch; all its blocks whose owner changes move.
* **rebalance**: like total over the current list with nobody leaving; with rendezvous hashing only
  about ``added / total`` of the blocks move, all onto the new servers.

Files without blocks on leaving servers still get a new layout (their reserved, not yet written range
must not point at a leaving server) but are not blocked and move nothing.

With ``replicas`` R > 1 each block lives on the first R servers of its rendezvous order; a plan copies a block
from a live holder to every member of its new replica set that lacks it and drops copies that left the set.
A leaving server that is dead (``lose``) is absent from the inventory: its blocks are copied from the other
replicas, and written blocks with no live copy are reported ``damaged`` (:func:`plan_repair` does the same
without changing layouts).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from malleable.adhocfs._placement import UNALLOCATED, Epochs, FileLayout, in_ranges, intern_epoch
from malleable.errors import PlacementError

__all__ = ["FilePlan", "FileState", "Move", "Plan", "plan_rebalance", "plan_repair", "plan_shrink"]

Inventory = Mapping[int, Mapping[int, Iterable[int]]]
"""``{sid: {fid: blocks held}}``."""


@dataclass(frozen=True, slots=True)
class FileState:
    """What the planner needs to know of a file: its layout, allocation high-water mark and the ``[start, end)``
    block ranges known to hold data (``written``) or known lost (``damaged``)."""

    fid: int
    layout: FileLayout
    hw: int
    written: tuple[tuple[int, int], ...] = ()
    damaged: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True, slots=True)
class Move:
    """Copy block ``block`` of file ``fid`` from server ``src`` to server ``dst``."""

    fid: int
    block: int
    src: int
    dst: int


@dataclass(frozen=True, slots=True)
class FilePlan:
    """A file's new layout; ``affected`` files are blocked for writes while their ``moves`` run. ``drops`` are
    ``(server, block)`` copies to delete once the new layout is in force; ``damaged`` the written blocks that
    no live server holds."""

    fid: int
    layout: FileLayout
    affected: bool
    moves: tuple[Move, ...] = ()
    drops: tuple[tuple[int, int], ...] = ()
    damaged: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Plan:
    """A whole redistribution.

    Attributes:
        epochs: every epoch after the change (old ones kept; new ones added).
        current: the epoch new blocks use after the change.
        files: per-file plans (files whose layout does not change are absent).
        on_leaving: how many existing blocks sat on the leaving servers (the ideal minimum to move).
    """

    epochs: dict[int, tuple[int, ...]]
    current: int
    files: dict[int, FilePlan] = field(default_factory=dict)
    on_leaving: int = 0

    @property
    def moves(self) -> list[Move]:
        """Every move of the plan."""
        return [m for fp in self.files.values() for m in fp.moves]

    @property
    def damaged(self) -> dict[int, tuple[int, ...]]:
        """Blocks lost for good, by file."""
        return {fid: fp.damaged for fid, fp in self.files.items() if fp.damaged}


def _held(inventory: Inventory) -> dict[tuple[int, int], set[int]]:
    out: dict[tuple[int, int], set[int]] = {}
    for sid, files in inventory.items():
        for fid, blocks in files.items():
            for b in blocks:
                out.setdefault((fid, b), set()).add(sid)
    return out


def _blocks_by_file(held: Mapping[tuple[int, int], set[int]]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for fid, b in sorted(held):
        out.setdefault(fid, []).append(b)
    return out


@dataclass
class _Copies:
    """Where the copies of one file's blocks are now: ``holders[b]`` the servers of the block's replica set
    that hold it (rank order); ``damaged`` written blocks none holds."""

    holders: dict[int, list[int]]
    damaged: list[int]


def _copies(
    f: FileState, epochs: Epochs, held: Mapping[tuple[int, int], set[int]], blocks: Iterable[int], r: int
) -> _Copies:
    """The copies of ``f``'s blocks that count: on a server of the block's replica set (others are orphans)."""
    holders: dict[int, list[int]] = {}
    damaged = []
    known_lost = {b for s, e in f.damaged for b in range(s, e)}
    candidates = set(blocks) | {b for s, e in f.written for b in range(s, e)}
    for b in sorted(candidates):
        if not f.layout.allocated(b) or b in known_lost:
            continue
        have = held.get((f.fid, b), set())
        hs = [s for s in f.layout.replicas(epochs, f.fid, b, r) if s in have]
        if hs:
            holders[b] = hs
        elif in_ranges(f.written, b):
            damaged.append(b)
    return _Copies(holders, damaged)


def _relayout(
    f: FileState, copies: _Copies, new: FileLayout, epochs: Epochs, r: int, gone: set[int]
) -> tuple[tuple[Move, ...], tuple[tuple[int, int], ...]]:
    """Copies to make and copies to drop so every held block sits on its replica set under ``new``."""
    moves, drops = [], []
    for b, hs in copies.holders.items():
        want = new.replicas(epochs, f.fid, b, r)
        for dst in want:
            if dst not in hs:
                moves.append(Move(f.fid, b, hs[0], dst))
        drops += [(s, b) for s in hs if s not in want and s not in gone]
    return tuple(moves), tuple(drops)


def plan_shrink(
    files: Iterable[FileState],
    epochs: Epochs,
    current: int,
    leaving: Iterable[int],
    inventory: Inventory,
    mode: str = "partial",
    replicas: int = 1,
) -> Plan:
    """Plan the decommissioning of ``leaving`` servers (alive, or dead and absent from the inventory: then the
    copies come from the other replicas, and written blocks with no other copy are ``damaged``).

    Args:
        files: every regular file.
        epochs: all epochs.
        current: the current epoch.
        leaving: server ids that leave.
        inventory: blocks held per live server and file.
        mode: ``partial`` or ``total``.
        replicas: copies kept of each block.

    Raises:
        ValueError: unknown mode.
        PlacementError: no server would remain, or a leaving server is not in the current epoch.
    """
    if mode not in ("partial", "total"):
        raise ValueError(f"mode must be 'partial' or 'total', got {mode!r}")
    gone = set(leaving)
    cur_list = set(epochs[current])
    if not gone or not gone <= cur_list:
        raise PlacementError(
            f"servers {sorted(gone - cur_list) or '[]'} are not in the current epoch {current}"
        )
    remaining = sorted(cur_list - gone)
    if not remaining:
        raise PlacementError("cannot remove every data server")
    new_epochs = dict(epochs)
    new_current, new_epochs = intern_epoch(new_epochs, remaining)
    held = _held(inventory)
    by_file = _blocks_by_file(held)
    plan_files: dict[int, FilePlan] = {}
    on_leaving = 0
    for f in files:
        if not (f.layout.servers(epochs) & gone):
            continue
        copies = _copies(f, epochs, held, by_file.get(f.fid, ()), replicas)
        on_gone = sum(1 for hs in copies.holders.values() for s in hs if s in gone)
        on_leaving += on_gone
        if mode == "total" and on_gone:
            new = f.layout.remap(lambda e: new_current)
        else:
            pairs = []
            for iv in f.layout.intervals:
                if iv.epoch == UNALLOCATED:
                    pairs.append([iv.start, iv.epoch])
                    continue
                lst = [s for s in epochs[iv.epoch] if s not in gone] or remaining
                eid, new_epochs = intern_epoch(new_epochs, lst)
                pairs.append([iv.start, eid])
            new = FileLayout.from_pairs(pairs)
        moves, drops = _relayout(f, copies, new, new_epochs, replicas, gone)
        plan_files[f.fid] = FilePlan(f.fid, new, bool(on_gone or moves), moves, drops, tuple(copies.damaged))
    return Plan(new_epochs, new_current, plan_files, on_leaving)


def plan_rebalance(
    files: Iterable[FileState], epochs: Epochs, current: int, inventory: Inventory, replicas: int = 1
) -> Plan:
    """Plan spreading existing blocks over the current epoch's servers (after an expansion).

    Files already placed entirely in the current epoch are left alone.
    """
    held = _held(inventory)
    by_file = _blocks_by_file(held)
    plan_files: dict[int, FilePlan] = {}
    for f in files:
        if all(iv.epoch in (current, UNALLOCATED) for iv in f.layout.intervals):
            continue
        new = f.layout.remap(lambda e: current)
        copies = _copies(f, epochs, held, by_file.get(f.fid, ()), replicas)
        moves, drops = _relayout(f, copies, new, epochs, replicas, set())
        plan_files[f.fid] = FilePlan(f.fid, new, bool(moves), moves, drops)
    return Plan(dict(epochs), current, plan_files, 0)


def plan_repair(files: Iterable[FileState], epochs: Epochs, current: int, inventory: Inventory, replicas: int) -> Plan:
    """Plan re-copying blocks that have fewer live copies than their replica set (layouts do not change), and
    find written blocks that no live server holds (``damaged``)."""
    held = _held(inventory)
    by_file = _blocks_by_file(held)
    plan_files: dict[int, FilePlan] = {}
    for f in files:
        copies = _copies(f, epochs, held, by_file.get(f.fid, ()), replicas)
        moves, _ = _relayout(f, copies, f.layout, epochs, replicas, set())
        if moves or copies.damaged:
            plan_files[f.fid] = FilePlan(f.fid, f.layout, bool(moves), moves, (), tuple(copies.damaged))
    return Plan(dict(epochs), current, plan_files, 0)
