"""The ledger's free nodes, at a cost that does not grow with the machine in the simulator.

Two stores share one interface (:class:`ListFree`, :class:`RunFree`): the free node ids in allocation order, taking
a decision's nodes (checked free, named once), giving nodes back, and the few per-node operations of failures and
of the live controller.

- :class:`ListFree` keeps a list and a set of node ids; ``rank`` keeps the list in the machine's node order (the
  live controller's ``order="pool"``). Every start and end costs time in proportion to the job's size.
- :class:`RunFree` (``order="release"``, the simulator) keeps node *indices* in an append-only array: the free
  nodes are the window ``[head, len)``, a start takes a prefix (``head += k``) and an end appends the job's nodes.
  The snapshot's ``free`` and a job's nodes are :class:`NodeRun` windows of such arrays, so a policy that takes
  ``free[a:b]`` and a ledger that checks it cost the same on 100 and on 100,000 nodes; node ids are looked up
  only when someone reads them.
"""

from __future__ import annotations

import builtins
from array import array
from collections.abc import Hashable, Iterable, Iterator, Sequence
from typing import Any

__all__ = ["Bad", "ListFree", "NodeRun", "RunFree"]


class Bad(Exception):
    """A decision that breaks an invariant (the ledger turns it into a PolicyError or a rejection)."""


class NodeRun(Sequence):
    """A read-only sequence of node ids that behaves as a tuple: a window ``[lo, hi)`` of an array of node indices
    (``ids[index]`` is the node id; ``ids`` None means the ids are the indices ``0..N-1``).

    Slicing with step 1 gives another window of the same array (no copy), ``+`` concatenates, and equality,
    hashing, ``repr`` and pickling are those of the tuple of ids (a pickled run loads as a plain tuple).
    """

    __slots__ = ("_a", "_hi", "_ids", "_lo")

    def __init__(self, a: array, lo: int, hi: int, ids: tuple | None) -> None:
        self._a = a
        self._lo = lo
        self._hi = hi
        self._ids = ids

    def __len__(self) -> int:
        return self._hi - self._lo

    def __getitem__(self, key):  # type: ignore[override]
        if type(key) is slice:
            start, stop, step = key.indices(self._hi - self._lo)
            if step == 1:
                lo = self._lo + start
                return NodeRun(self._a, lo, lo + stop - start if stop > start else lo, self._ids)
            return self.astuple()[key]
        n = self._hi - self._lo
        if key < 0:
            key += n
        if not 0 <= key < n:
            raise IndexError("NodeRun index out of range")
        x = self._a[self._lo + key]
        return x if self._ids is None else self._ids[x]

    def __iter__(self) -> Iterator[Hashable]:
        part = self._a[self._lo:self._hi]
        return iter(part) if self._ids is None else map(self._ids.__getitem__, part)

    def __contains__(self, x: object) -> bool:
        return x in self.astuple()

    def indices(self) -> array:
        """The node indices (a copy)."""
        return self._a[self._lo:self._hi]

    def astuple(self) -> tuple:
        """The node ids as a tuple."""
        part = self._a[self._lo:self._hi]
        return tuple(part) if self._ids is None else tuple(map(self._ids.__getitem__, part))

    def __eq__(self, other: object) -> bool:
        if type(other) is NodeRun:
            if other._a is self._a and other._lo == self._lo:
                return other._hi == self._hi
            if other._ids is self._ids:
                return self._a[self._lo:self._hi] == other._a[other._lo:other._hi]
            return self.astuple() == other.astuple()
        if isinstance(other, tuple):
            return self.astuple() == other
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __hash__(self) -> int:
        return hash(self.astuple())

    def __add__(self, other: object) -> Any:
        if type(other) is NodeRun and other._ids is self._ids:
            a = self._a[self._lo:self._hi]
            a += other._a[other._lo:other._hi]
            return NodeRun(a, 0, len(a), self._ids)
        if isinstance(other, NodeRun):
            return self.astuple() + other.astuple()
        if isinstance(other, tuple):
            return self.astuple() + other
        return NotImplemented

    def __radd__(self, other: object) -> Any:
        if isinstance(other, tuple):
            return other + self.astuple()
        return NotImplemented

    def __repr__(self) -> str:
        return repr(self.astuple())

    def __reduce__(self) -> tuple:
        return (tuple, (self.astuple(),))

    def __copy__(self) -> NodeRun:
        return self

    def __deepcopy__(self, memo: dict) -> NodeRun:
        return self


def is_run(nodes: object) -> bool:
    """Whether ``nodes`` is a tuple or a :class:`NodeRun` (what decisions may name)."""
    return type(nodes) is tuple or type(nodes) is NodeRun


class ListFree:
    """Free node ids as a list in allocation order (and a set for membership); with ``rank`` (node id -> position
    in the machine) the list stays in node order, lowest first."""

    __slots__ = ("free", "rank", "set")

    def __init__(self, nodes: Iterable[Hashable], rank: dict | None = None) -> None:
        self.free: list = list(nodes)
        self.set: set = set(self.free)
        self.rank = rank

    def __len__(self) -> int:
        return len(self.free)

    def __contains__(self, x: object) -> bool:
        return x in self.set

    def view(self, dirty: set) -> tuple:
        """The free nodes a policy may take (dirty ones left out)."""
        if not dirty:
            return tuple(self.free)
        return tuple(x for x in self.free if x not in dirty)

    def all_free(self, nodes: Iterable[Hashable]) -> bool:
        return self.set.issuperset(nodes)

    def missing(self, nodes: Iterable[Hashable]) -> list:
        """The nodes of ``nodes`` that are not free (for messages)."""
        return [x for x in nodes if x not in self.set]

    def take(self, nodes: Sequence[Hashable], released: set, dirty: set) -> None:
        """Remove ``nodes`` (free, distinct, clean unless released in this pass) from the free list.

        Raises:
            Bad: a node is not free, named twice, or not checked clean yet.
        """
        k = len(nodes)
        free = self.free
        if not dirty and free[:k] == list(nodes):
            del free[:k]
        else:
            fs = self.set
            if not fs.issuperset(nodes):
                raise Bad(f"nodes not free: {[x for x in nodes if x not in fs][:8]}")
            if len(set(nodes)) != k:
                raise Bad("a node is named twice")
            if dirty:
                bad = [x for x in nodes if x in dirty and x not in released]
                if bad:
                    raise Bad(f"nodes not checked clean yet: {bad[:8]}")
            drop = set(nodes)
            free[:] = [x for x in free if x not in drop]
        self.set.difference_update(nodes)

    def give(self, nodes: Iterable[Hashable]) -> None:
        """Nodes become free (appended, or in node order with ``rank``)."""
        if self.rank is None:
            self.free.extend(nodes)
            self.set.update(nodes)
        else:
            for x in nodes:
                self.add(x)

    def add(self, x: Hashable) -> None:
        if self.rank is None:
            self.free.append(x)
        else:
            from bisect import insort
            insort(self.free, x, key=self.rank.__getitem__)
        self.set.add(x)

    def own(self, nodes: Sequence[Hashable]) -> Sequence[Hashable]:
        """What a job holds after taking ``nodes``: the nodes as given."""
        return nodes

    def compact(self) -> None:
        """Nothing to drop (the list holds only free nodes)."""

    def remove(self, x: Hashable) -> bool:
        """Take ``x`` out if it is free; returns whether it was."""
        if x not in self.set:
            return False
        self.free.remove(x)
        self.set.discard(x)
        return True


class RunFree:
    """Free nodes as the window ``[head, len)`` of an append-only array of node indices (``order="release"``).

    Positions below ``len`` never change, so a :class:`NodeRun` over them stays valid; taking the first ``k``
    free nodes is ``head += k``, giving nodes back appends them. The array is replaced by its window when the
    consumed part grows large (:meth:`compact`, called between passes).
    """

    __slots__ = ("_index", "buf", "head", "ids", "n")

    def __init__(self, nodes: tuple) -> None:
        n = self.n = len(nodes)
        self.ids: tuple | None = None if nodes == tuple(range(n)) else nodes
        self.buf = array("q", range(n))
        self.head = 0
        self._index: dict | None = None

    def __len__(self) -> int:
        return len(self.buf) - self.head

    @property
    def free(self) -> list:
        """The free node ids in allocation order (a new list)."""
        return list(self.view())

    @property
    def set(self) -> set:
        """The free node ids (a new set)."""
        return set(self.view())

    def view(self, dirty: builtins.set | None = None) -> NodeRun:
        return NodeRun(self.buf, self.head, len(self.buf), self.ids)

    def compact(self) -> None:
        """Drop the consumed part of the array when it is more than half of it (old runs keep their array)."""
        if self.head > 4096 and self.head * 2 > len(self.buf):
            self.buf = self.buf[self.head:]
            self.head = 0

    def index_of(self, x: Hashable) -> int:
        """The index of node id ``x`` (-1 if it is not a node of the machine)."""
        if self.ids is None:
            return x if type(x) is int and 0 <= x < self.n else -1
        if self._index is None:
            self._index = {y: i for i, y in enumerate(self.ids)}
        return self._index.get(x, -1)

    def indices(self, nodes: Sequence[Hashable]) -> array:
        """The indices of ``nodes`` (-1 for ids that are not nodes of the machine)."""
        if type(nodes) is NodeRun and nodes._ids is self.ids:
            return nodes._a[nodes._lo:nodes._hi]
        if self.ids is None:
            n = self.n
            try:
                a = array("q", nodes)  # type: ignore[type-var]  # ids are ints here; else TypeError
            except (TypeError, OverflowError):
                a = None
            if a is not None and (not a or (min(a) >= 0 and max(a) < n)):  # type: ignore[type-var,operator]
                return a
            return array("q", [x if type(x) is int and 0 <= x < n else -1 for x in nodes])
        if self._index is None:
            self._index = {y: i for i, y in enumerate(self.ids)}
        get = self._index.get
        return array("q", [get(x, -1) for x in nodes])

    def run(self, idx: array) -> NodeRun:
        """A run over the indices ``idx`` (kept as they are)."""
        return NodeRun(idx, 0, len(idx), self.ids)

    def own(self, nodes: Sequence[Hashable]) -> Sequence[Hashable]:
        """What a job holds after taking ``nodes``: a run of its own (a copy of a window of the free array, so that
        the array can be dropped), or the tuple as given."""
        if type(nodes) is NodeRun and nodes._a is self.buf:
            a = nodes._a[nodes._lo:nodes._hi]
            return NodeRun(a, 0, len(a), self.ids)
        return nodes

    def all_free(self, nodes: Sequence[Hashable]) -> bool:
        return not self.missing(nodes)

    def missing(self, nodes: Sequence[Hashable]) -> list:
        idx = self.indices(nodes)
        fs = set(self.buf[self.head:])
        return [x for x, i in zip(nodes, idx, strict=True) if i not in fs]

    def __contains__(self, x: object) -> bool:
        i = self.index_of(x)  # type: ignore[arg-type]
        return i >= 0 and i in self.buf[self.head:]

    def take(self, nodes: Sequence[Hashable], released: builtins.set, dirty: builtins.set) -> None:
        """Remove ``nodes`` (free, distinct) from the free window; a prefix of it costs O(1) or one comparison.

        Raises:
            Bad: a node is not free or named twice.
        """
        buf, h = self.buf, self.head
        k = len(nodes)
        if type(nodes) is NodeRun and nodes._a is buf and nodes._lo == h:
            self.head = h + k                   # the usual start: the first k free nodes, as the snapshot showed
            return
        idx = self.indices(nodes)
        if buf[h:h + k] == idx and -1 not in idx:
            self.head = h + k
            return
        window = buf[h:]
        fs = set(window)
        if not fs.issuperset(idx):
            raise Bad(f"nodes not free: {[x for x, i in zip(nodes, idx, strict=True) if i not in fs][:8]}")
        drop = set(idx)
        if len(drop) != k:
            raise Bad("a node is named twice")
        self.buf = array("q", [i for i in window if i not in drop])
        self.head = 0

    def give(self, nodes: Sequence[Hashable]) -> None:
        """Nodes become free, appended in the order given."""
        if type(nodes) is NodeRun and nodes._ids is self.ids:
            self.buf += nodes._a[nodes._lo:nodes._hi]
        else:
            self.buf += self.indices(nodes)

    def add(self, x: Hashable) -> None:
        self.buf.append(self.index_of(x))

    def remove(self, x: Hashable) -> bool:
        i = self.index_of(x)
        window = self.buf[self.head:]
        if i < 0 or i not in window:
            return False
        window.remove(i)
        self.buf = window
        self.head = 0
        return True
