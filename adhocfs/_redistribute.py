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
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from malleable.adhocfs._placement import UNALLOCATED, Epochs, Layout, intern_epoch
from malleable.errors import PlacementError

__all__ = ["FilePlan", "FileState", "Move", "Plan", "plan_rebalance", "plan_shrink"]

Inventory = Mapping[int, Mapping[int, Iterable[int]]]
"""``{sid: {fid: blocks held}}``."""


@dataclass(frozen=True, slots=True)
class FileState:
    """What the planner needs to know of a file."""

    fid: int
    layout: Layout
    hw: int


@dataclass(frozen=True, slots=True)
class Move:
    """Copy block ``block`` of file ``fid`` from server ``src`` to server ``dst``."""

    fid: int
    block: int
    src: int
    dst: int


@dataclass(frozen=True, slots=True)
class FilePlan:
    """A file's new layout; ``affected`` files are blocked for writes while their ``moves`` run."""

    fid: int
    layout: Layout
    affected: bool
    moves: tuple[Move, ...] = ()


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


def _held(inventory: Inventory) -> dict[tuple[int, int], set[int]]:
    out: dict[tuple[int, int], set[int]] = {}
    for sid, files in inventory.items():
        for fid, blocks in files.items():
            for b in blocks:
                out.setdefault((fid, b), set()).add(sid)
    return out


def _existing(
    f: FileState,
    layout_epochs: Epochs,
    held: Mapping[tuple[int, int], set[int]],
    blocks_by_file: Mapping[int, list[int]],
) -> list[tuple[int, int]]:
    """``(block, owner)`` of the file's blocks that exist on their owner (orphan copies ignored)."""
    out = []
    for b in blocks_by_file.get(f.fid, ()):
        if not f.layout.allocated(b):
            continue
        src = f.layout.server(layout_epochs, f.fid, b)
        if src in held.get((f.fid, b), ()):
            out.append((b, src))
    return out


def _moves(f: FileState, new: Layout, epochs: Epochs, existing: list[tuple[int, int]]) -> tuple[Move, ...]:
    out = []
    for b, src in existing:
        dst = new.server(epochs, f.fid, b)
        if dst != src:
            out.append(Move(f.fid, b, src, dst))
    return tuple(out)


def _blocks_by_file(held: Mapping[tuple[int, int], set[int]]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for fid, b in sorted(held):
        out.setdefault(fid, []).append(b)
    return out


def plan_shrink(
    files: Iterable[FileState],
    epochs: Epochs,
    current: int,
    leaving: Iterable[int],
    inventory: Inventory,
    mode: str = "partial",
) -> Plan:
    """Plan the decommissioning of ``leaving`` servers.

    Args:
        files: every regular file.
        epochs: all epochs.
        current: the current epoch.
        leaving: server ids that leave.
        inventory: blocks held per server and file.
        mode: ``partial`` or ``total``.

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
        existing = _existing(f, epochs, held, by_file)
        affected = any(src in gone for _, src in existing)
        on_leaving += sum(1 for _, src in existing if src in gone)
        if not (f.layout.servers(epochs) & gone):
            continue
        if mode == "total" and affected:
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
            new = Layout.from_pairs(pairs)
        moves = _moves(f, new, new_epochs, existing) if affected else ()
        plan_files[f.fid] = FilePlan(f.fid, new, affected, moves)
    return Plan(new_epochs, new_current, plan_files, on_leaving)


def plan_rebalance(files: Iterable[FileState], epochs: Epochs, current: int, inventory: Inventory) -> Plan:
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
        moves = _moves(f, new, epochs, _existing(f, epochs, held, by_file))
        plan_files[f.fid] = FilePlan(f.fid, new, bool(moves), moves)
    return Plan(dict(epochs), current, plan_files, 0)
