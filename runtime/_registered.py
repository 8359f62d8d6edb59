"""Registered data (FlexMPI's and MaM's registered buffers): arrays the runtime moves by itself at every commit.

An application registers its part of each distributed array once (``mr.register(name, local, dist, axis)``; again
whenever the array object changes, which costs a dict update) and reads it back with ``mr.data(name)`` after an
adaptation. At ``adapt_commit`` the runtime redistributes every registered array over the communicator spanning
old and new owners, in name order, and joiners receive theirs, so the adaptation window needs no data code.

Distributions along ``axis`` over ``p`` parts: ``block`` (part ``i`` owns one contiguous range, the first
``n % p`` parts one item more) and ``block-cyclic`` (blocks of ``block`` items dealt round robin).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

# NumPy (and the redistribution module) load on first use: every process of a job imports this module, a
# joiner before it can answer its parents, and a job that registers nothing must not pay for them

__all__ = ["DISTS", "Registered", "indices", "metadata", "move_all", "moved"]

DISTS = ("block", "block-cyclic")


class Registered:
    """One registered array on this process: its local part (replaced by ``register`` and at every commit) and
    how the whole is distributed."""

    __slots__ = ("local", "dist", "axis", "block")

    def __init__(self, local: Any, dist: str, axis: int, block: int) -> None:
        self.local, self.dist, self.axis, self.block = local, dist, axis, block


def indices(n: int, parts: int, part: int, dist: str, block: int = 1) -> np.ndarray:
    """Global indices (increasing) that ``part`` of ``parts`` owns along an axis of length ``n``.

    Raises:
        ValueError: unknown distribution, bad part or block size.
    """
    import numpy as np

    from malleable.runtime._redistribute import block_range

    if dist == "block":
        lo, hi = block_range(n, parts, part)
        return np.arange(lo, hi)
    if dist == "block-cyclic":
        if block < 1 or not 0 <= part < parts:
            raise ValueError(f"bad block-cyclic distribution: block={block}, part={part} of {parts}")
        starts = np.arange(part * block, n, parts * block)
        idx = (starts[:, None] + np.arange(block)[None, :]).ravel()
        return idx[idx < n]
    raise ValueError(f"unknown distribution {dist!r}; known: {', '.join(DISTS)}")


def _owner(n: int, parts: int, dist: str, block: int) -> np.ndarray:
    import numpy as np

    own = np.empty(n, dtype=np.int64)
    for p in range(parts):
        own[indices(n, parts, p, dist, block)] = p
    return own


def moved(local: np.ndarray | None, n: int, meta: dict, old: int, new: int, comm: Any) -> np.ndarray:
    """Move one array from ``old`` to ``new`` owners (ranks ``0..old-1`` / ``0..new-1`` of ``comm``); collective.

    ``meta`` has ``dtype``, ``shape`` (the local shape with the distributed axis first, its length ignored),
    ``dist``, ``axis`` and ``block``. Returns this rank's new part (empty along the axis past ``new``).
    """
    import numpy as np
    from mpi4py import MPI

    rank, size = comm.Get_rank(), comm.Get_size()
    dtype, axis, dist, block = np.dtype(meta["dtype"]), meta["axis"], meta["dist"], meta["block"]
    rest = tuple(meta["rest"])
    row = int(np.prod(rest, dtype=np.int64)) * dtype.itemsize
    own_new = _owner(n, new, dist, block)
    send_counts, recv_counts = [0] * size, [0] * size
    if rank < old and local is not None:
        mine = indices(n, old, rank, dist, block)
        src = np.moveaxis(np.asarray(local, dtype=dtype), axis, 0)
        dest = own_new[mine]
        order = np.argsort(dest, kind="stable")
        sendbuf = np.ascontiguousarray(src[order])
        for d, c in zip(*np.unique(dest, return_counts=True), strict=True):
            send_counts[int(d)] = int(c) * row
    else:
        sendbuf = np.empty((0, *rest), dtype=dtype)
    want = indices(n, new, rank, dist, block) if rank < new else np.arange(0)
    own_old = _owner(n, old, dist, block)
    src_of = own_old[want]
    for s, c in zip(*np.unique(src_of, return_counts=True), strict=True):
        recv_counts[int(s)] = int(c) * row
    recvbuf = np.empty((len(want), *rest), dtype=dtype)
    sdispl = np.concatenate(([0], np.cumsum(send_counts)[:-1])).tolist()
    rdispl = np.concatenate(([0], np.cumsum(recv_counts)[:-1])).tolist()
    comm.Alltoallv([sendbuf.view(np.uint8).reshape(-1), (send_counts, sdispl), MPI.BYTE],
                   [recvbuf.view(np.uint8).reshape(-1), (recv_counts, rdispl), MPI.BYTE])
    # rows arrived grouped by source, each group in increasing global index: put them in index order
    out = np.empty_like(recvbuf)
    out[np.argsort(src_of, kind="stable")] = recvbuf
    return np.ascontiguousarray(np.moveaxis(out, 0, axis))


def metadata(registry: dict[str, Registered]) -> dict[str, dict]:
    """What every rank needs to move the registered arrays (rank 0's view): dtype, distribution, axis, block and
    the other dimensions, per name."""
    if not registry:
        return {}
    import numpy as np

    return {name: {"dtype": np.asarray(r.local).dtype.str, "dist": r.dist, "axis": r.axis, "block": r.block,
                   "rest": [s for i, s in enumerate(np.shape(r.local)) if i != r.axis]}
            for name, r in sorted(registry.items())}


def move_all(registry: dict[str, Registered], old: int, new: int, comm: Any, metas: dict | None = None) -> None:
    """Redistribute every registered array (collective over ``comm``; joiners' registries start empty).

    ``metas`` is rank 0's :func:`metadata` when every rank has it already (an expansion broadcasts it with the
    merge); else it is gathered here from rank 0.
    """
    if metas is None:
        metas = comm.allgather(metadata(registry) if comm.Get_rank() == 0 else None)[0]
    if not metas:
        return
    import numpy as np

    for name, meta in metas.items():
        r = registry.get(name)
        count = np.shape(r.local)[meta["axis"]] if r is not None and comm.Get_rank() < old else 0
        n = comm.allreduce(count)
        local = moved(r.local if r is not None else None, n, meta, old, new, comm)
        registry[name] = Registered(local, meta["dist"], meta["axis"], meta["block"])
