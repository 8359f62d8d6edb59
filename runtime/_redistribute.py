"""Moving NumPy block distributions from one process count to another (pure plans + one Alltoallv).

A *block distribution* of ``n`` items over ``p`` parts gives part ``i`` the contiguous range
:func:`block_range` (the first ``n % p`` parts get one item more). Inside an adaptation window,
the communicator spanning every process (``new_world`` for an expansion, the old ``world()`` for
a shrink) orders the old owners as ranks ``0..old-1`` and the new owners as ``0..new-1``, so one
``Alltoallv`` over it moves every block straight to its new owner, whatever the two counts are.

Example (inside an adaptation window)::

    u = redistribute(u, (n, n), np.float64, old_parts=3, new_parts=5, comm=span, axis=0)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Transfer", "block_counts", "block_range", "plan_blocks", "redistribute", "span_comm"]


def block_range(n: int, parts: int, i: int) -> tuple[int, int]:
    """Half-open range ``[lo, hi)`` of items owned by part ``i`` of ``parts``.

    Raises:
        ValueError: ``parts`` < 1, ``n`` < 0 or ``i`` outside ``[0, parts)``.
    """
    if parts < 1 or n < 0 or not 0 <= i < parts:
        raise ValueError(f"bad block distribution: n={n}, parts={parts}, part={i}")
    q, r = divmod(n, parts)
    lo = i * q + min(i, r)
    return lo, lo + q + (1 if i < r else 0)


def block_counts(n: int, parts: int) -> list[int]:
    """Items per part for ``n`` items over ``parts`` parts."""
    return [hi - lo for lo, hi in (block_range(n, parts, i) for i in range(parts))]


@dataclass(frozen=True, slots=True)
class Transfer:
    """Items ``[lo, hi)`` (global indices) go from old part ``src`` to new part ``dst``."""

    src: int
    dst: int
    lo: int
    hi: int


def plan_blocks(n: int, old_parts: int, new_parts: int) -> tuple[Transfer, ...]:
    """Every non-empty transfer that turns the old block distribution into the new one, by (src, dst)."""
    out = []
    for s in range(old_parts):
        slo, shi = block_range(n, old_parts, s)
        for d in range(new_parts):
            dlo, dhi = block_range(n, new_parts, d)
            lo, hi = max(slo, dlo), min(shi, dhi)
            if lo < hi:
                out.append(Transfer(s, d, lo, hi))
    return tuple(out)


def _local_shape(global_shape: Sequence[int], axis: int, count: int) -> tuple[int, ...]:
    shape = list(global_shape)
    shape[axis] = count
    return tuple(shape)


def redistribute(
    local: np.ndarray | None,
    global_shape: Sequence[int],
    dtype: Any,
    old_parts: int,
    new_parts: int,
    comm: Any,
    axis: int = 0,
) -> np.ndarray:
    """Move a block distribution along ``axis`` from ``old_parts`` to ``new_parts`` owners.

    Args:
        local: this rank's old block (ranks >= ``old_parts``, e.g. joiners, pass None).
        global_shape: shape of the whole array.
        dtype: its NumPy dtype.
        old_parts: owners before (ranks 0..old_parts-1 of ``comm``).
        new_parts: owners after (ranks 0..new_parts-1 of ``comm``).
        comm: an intracommunicator containing every old and new owner (see :func:`span_comm`).
        axis: the distributed axis (0: block rows, 1: block columns, ...).

    Returns:
        This rank's new block; empty along ``axis`` on ranks >= ``new_parts`` (leaving ranks).

    Raises:
        ValueError: sizes do not fit the communicator, or ``local`` has the wrong shape.
    """
    from mpi4py import MPI

    dtype = np.dtype(dtype)
    rank, size = comm.Get_rank(), comm.Get_size()
    n = int(global_shape[axis])
    if max(old_parts, new_parts) > size:
        raise ValueError(f"{old_parts} -> {new_parts} parts do not fit a communicator of {size}")
    if rank < old_parts:
        lo, hi = block_range(n, old_parts, rank)
        want = _local_shape(global_shape, axis, hi - lo)
        if local is None or tuple(local.shape) != want:
            got = None if local is None else tuple(local.shape)
            raise ValueError(f"rank {rank}: local block has shape {got}, expected {want}")
        src = np.moveaxis(np.asarray(local, dtype=dtype), axis, 0)
        my_lo = lo
    else:
        src = np.empty((0, *(s for i, s in enumerate(global_shape) if i != axis)), dtype=dtype)
        my_lo = 0
    row_items = int(np.prod([s for i, s in enumerate(global_shape) if i != axis], dtype=np.int64))
    row_bytes = row_items * dtype.itemsize
    plan = plan_blocks(n, old_parts, new_parts)
    send_counts = [0] * size
    recv_counts = [0] * size
    pieces = []
    for t in plan:
        if t.src == rank:
            send_counts[t.dst] = (t.hi - t.lo) * row_bytes
            pieces.append(src[t.lo - my_lo:t.hi - my_lo])
        if t.dst == rank:
            recv_counts[t.src] = (t.hi - t.lo) * row_bytes
    sendbuf = np.ascontiguousarray(np.concatenate(pieces)) if pieces else np.empty(0, dtype=dtype)
    new_rows = block_range(n, new_parts, rank) if rank < new_parts else (0, 0)
    moved_shape = (new_rows[1] - new_rows[0],) + tuple(s for i, s in enumerate(global_shape) if i != axis)
    recvbuf = np.empty(moved_shape, dtype=dtype)
    sdispl = np.concatenate(([0], np.cumsum(send_counts)[:-1])).tolist()
    rdispl = np.concatenate(([0], np.cumsum(recv_counts)[:-1])).tolist()
    comm.Alltoallv([sendbuf.view(np.uint8).reshape(-1), (send_counts, sdispl), MPI.BYTE],
                   [recvbuf.view(np.uint8).reshape(-1), (recv_counts, rdispl), MPI.BYTE])
    return np.ascontiguousarray(np.moveaxis(recvbuf, 0, axis))


def span_comm(window: Any) -> Any:
    """The intracommunicator spanning old and new owners inside an adaptation window.

    For an expansion that is ``window.new_world``; for a shrink, the world before the shrink
    (``malleable.runtime.world()`` until ``adapt_commit``).
    """
    from malleable.runtime import world

    return window.new_world if window.joining else world()
