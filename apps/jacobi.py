"""2-D Jacobi heat equation as a malleable EPOP program (block rows, halo exchange, adapts between sweeps).

The grid is ``n × n``; the whole top row (corners included) is held at 1.0, the rest of the
boundary at 0.0, the interior starts at 0.0. Each iteration sets every interior point to
``0.25 * (u[i-1,j] + u[i+1,j] + u[i,j-1] + u[i,j+1])``, summed in that order, so the result is
bit-for-bit the serial NumPy one (:func:`reference`) whatever the process counts were.

Run it::

    mpiexec -n 2 python -m malleable.apps.jacobi --n 512 --iters 200 --out u.npy
    malleable run -n 1 --plan '[{"at_probe": 50, "procs": 2}]' -- python -m malleable.apps.jacobi --n 512

Phases: ``init`` (zero block rows; nothing on joiners) → ``solve`` (elastic: halo exchange +
sweep; ``setup`` builds a 1-D Cartesian communicator and the halos; the adaptation block moves
the interior rows with :meth:`Adaptation.move`) → ``output`` (branch) → ``write`` (rigid:
Gatherv to rank 0, ``np.save``) → ``summary`` (rigid: rank 0 prints one line).

Checkpoints (``--checkpoint-every K --checkpoint-dir DIR``): after every K-th iteration the grid is gathered on
rank 0, which writes it with h5py into DIR (in the job's adhocfs when ``MALLEABLE_FS`` is set, see
:mod:`malleable.apps._checkpoint`). ``--restart`` makes ``init`` load the newest complete one on rank 0 and
scatter its rows, and ``solve`` go on from its iteration, so the result is bit for bit the uninterrupted run's
at any process count.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from malleable.apps._args import at_least, refused, size_arg
from malleable.errors import ConfigError

__all__ = ["CheckpointOptions", "JacobiBlock", "build_program", "initial_grid", "main", "parse_args", "reference", "sweep"]

log = logging.getLogger(__name__)

CACHE_BYTES = 1 << 20  # rows per sweep chunk are chosen so one temporary chunk stays in cache (L2)


def initial_grid(n: int) -> np.ndarray:
    """The ``n × n`` starting grid: top row (corners included) 1.0, everything else 0.0."""
    u = np.zeros((n, n))
    u[0, :] = 1.0
    return u


def reference(n: int, iters: int, tol: float | None = None, check_every: int = 100) -> np.ndarray:
    """The serial NumPy computation the app must reproduce bit for bit (plain whole-array loop).

    Args:
        n: grid size (including the boundary).
        iters: iterations.
        tol: stop after a residual check finding ``max|u_new - u| < tol``.
        check_every: residual check period (the last iteration is always checked).

    Returns:
        The final ``n × n`` grid.
    """
    u = initial_grid(n)
    unew = u.copy()
    for it in range(iters):
        unew[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
        u, unew = unew, u
        if tol is not None and ((it + 1) % check_every == 0 or it + 1 == iters):
            if float(np.max(np.abs(u - unew))) < tol:
                break
    return u


def sweep(u: np.ndarray, unew: np.ndarray, tmp: np.ndarray, residual: bool = False) -> float:
    """One Jacobi sweep of ``u``'s inner rows into ``unew``, in row chunks that keep ``tmp`` in cache.

    Args:
        u: local rows with one halo row above and below, shape ``(rows + 2, n)``.
        unew: same shape; its interior ``[1:-1, 1:-1]`` is overwritten.
        tmp: scratch of at least ``(chunk, n - 2)`` (its first dimension sets the chunk size).
        residual: also compute ``max|unew - u|`` over the updated points.

    Returns:
        The local residual (0.0 when not requested).
    """
    rows = u.shape[0] - 2
    chunk = tmp.shape[0]
    res = 0.0
    for r0 in range(1, rows + 1, chunk):
        r1 = min(r0 + chunk, rows + 1)
        t = tmp[: r1 - r0]
        np.add(u[r0 - 1:r1 - 1, 1:-1], u[r0 + 1:r1 + 1, 1:-1], out=t)
        t += u[r0:r1, :-2]
        t += u[r0:r1, 2:]
        np.multiply(t, 0.25, out=unew[r0:r1, 1:-1])
        if residual:
            np.subtract(unew[r0:r1, 1:-1], u[r0:r1, 1:-1], out=t)
            np.abs(t, out=t)
            res = max(res, float(t.max()))
    return res


@dataclass
class CheckpointOptions:
    """What ``--checkpoint-*`` and ``--restart`` asked for."""

    dir: str
    every: int = 0  # iterations between checkpoints (0: none, only a restart)
    pad: int = 0  # filler bytes per checkpoint
    keep: int = 2  # newest checkpoints kept (0: all)
    restart: bool = False


@dataclass
class JacobiBlock:
    """The data block: this rank's rows (with halos) and what the phases need; owned by the phases."""

    n: int
    iters: int
    check_every: int
    tol: float | None
    out: str | None
    incoming: np.ndarray | None = None  # owned interior rows waiting for setup() to add halos
    u: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    unew: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    tmp: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    cart: Any = None
    up: int = -1
    down: int = -1
    lo: int = 0
    residual: float = float("nan")
    iterations: int = 0
    hosts: list[str] = field(default_factory=list)  # hosts of the final world's ranks (rank 0 only)
    registered: bool = False  # the interior rows are registered data: the runtime moves them at each commit
    ckpt: CheckpointOptions | None = None  # checkpointing and restart, when asked for
    start: int = 0  # iterations already done when the run began (from a checkpoint); joiners read ctx.shared
    failed: str | None = None  # a checkpoint or restart error that ended the run (same on every rank)
    checkpoints: list[dict[str, Any]] = field(default_factory=list)  # written by this run (rank 0)
    store: Any = None  # rank 0's open checkpoint Store

    @property
    def rows(self) -> int:
        """Interior rows this rank owns."""
        return max(0, self.u.shape[0] - 2)


def _block_rows(d: JacobiBlock, size: int, rank: int) -> tuple[int, int]:
    from malleable.runtime import block_range

    return block_range(d.n - 2, size, rank)


def _init(ctx: Any) -> None:
    d: JacobiBlock = ctx.data
    if ctx.status.name == "JOINING":  # rows arrive in the adaptation block
        return
    lo, hi = _block_rows(d, ctx.size, ctx.rank)
    if d.ckpt is not None and d.ckpt.restart:
        _restart(ctx, lo, hi)
    else:
        d.incoming = np.zeros((hi - lo, d.n))
    ctx.shared["start"] = d.start


def _store(d: JacobiBlock) -> Any:
    from malleable.apps import _checkpoint

    if d.store is None and d.ckpt is not None:
        d.store = _checkpoint.open_store(d.ckpt.dir)
    return d.store


def _restart(ctx: Any, lo: int, hi: int) -> None:
    """Rank 0 loads the newest complete checkpoint; every rank gets its iteration and its rows."""
    from malleable.apps import _checkpoint
    from malleable.runtime import block_counts

    d: JacobiBlock = ctx.data
    grid, head = None, (0, None)
    if ctx.rank == 0:
        try:
            ck = _checkpoint.latest(_store(d), d.n)
            if ck is None:
                log.warning("--restart: no complete checkpoint in %s; starting from iteration 0", d.store.where)
            elif ck.iteration > d.iters:
                raise _checkpoint.CheckpointError(f"checkpoint {d.store.where}/{ck.name} is at iteration "
                                                  f"{ck.iteration}, past --iters {d.iters}")
            else:
                log.info("restarting from %s/%s (iteration %d)", d.store.where, ck.name, ck.iteration)
                grid, head = ck.grid, (ck.iteration, None)
        except (_checkpoint.CheckpointError, OSError) as e:
            head = (0, f"--restart: {e}")
    d.start, d.failed = ctx.comm.bcast(head, root=0)
    d.iterations = d.start
    rows = np.zeros((hi - lo, d.n))
    if grid is not None or d.start:
        counts = [c * d.n for c in block_counts(d.n - 2, ctx.size)]
        send = [np.ascontiguousarray(grid[1:-1]), counts] if grid is not None else None
        ctx.comm.Scatterv(send, rows, root=0)
    d.incoming = rows


def _setup(ctx: Any) -> None:
    from mpi4py import MPI

    d: JacobiBlock = ctx.data
    size, rank = ctx.size, ctx.rank
    d.cart = ctx.comm.Create_cart([size], periods=[False], reorder=False)  # freed by the driver
    up, down = d.cart.Shift(0, 1)
    active = min(size, d.n - 2)  # ranks beyond n - 2 own no rows
    d.up = up if rank < active else MPI.PROC_NULL
    d.down = down if rank + 1 < active else MPI.PROC_NULL
    lo, hi = _block_rows(d, size, rank)
    d.lo = lo
    if d.registered and d.incoming is None:
        from malleable.runtime import data

        rows = data("u")
        if not np.shares_memory(rows, d.u):  # the runtime moved the rows at the commit
            d.incoming = rows
    if d.incoming is not None:
        rows = d.incoming
        d.u = np.zeros((rows.shape[0] + 2, d.n))
        d.u[1:-1] = rows
        if lo == 0:
            d.u[0, :] = 1.0
        d.unew = d.u.copy()
        d.incoming = None
        if d.registered:
            _register(d)
    chunk = max(1, min(hi - lo, CACHE_BYTES // (8 * d.n)))
    if d.tmp.shape != (chunk, d.n - 2):
        d.tmp = np.empty((chunk, d.n - 2))


def _step(ctx: Any, i: int) -> bool:
    from mpi4py import MPI

    d: JacobiBlock = ctx.data
    it = ctx.shared.get("start", 0) + i + 1  # iterations done after this one, counted from the very start
    check = it % d.check_every == 0 or it == d.iters
    res = 0.0
    if d.rows:
        u = d.u
        d.cart.Sendrecv(u[1], dest=d.up, sendtag=1, recvbuf=u[-1], source=d.down, recvtag=1)
        d.cart.Sendrecv(u[-2], dest=d.down, sendtag=2, recvbuf=u[0], source=d.up, recvtag=2)
        res = sweep(u, d.unew, d.tmp, residual=check)
        d.u, d.unew = d.unew, u
        if d.registered:
            _register(d)
    d.iterations = it
    if check:
        buf = np.array([res])
        ctx.comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.MAX)
        d.residual = float(buf[0])
    if d.ckpt is not None and d.ckpt.every and it % d.ckpt.every == 0:
        _write_checkpoint(ctx, it)
        if d.failed:
            return True
    return check and d.tol is not None and d.residual < d.tol


def _write_checkpoint(ctx: Any, it: int) -> None:
    """Gather the grid on rank 0, which writes it (and drops old ones); a failure ends the run on every rank."""
    import time

    from malleable.apps import _checkpoint

    d: JacobiBlock = ctx.data
    assert d.ckpt is not None
    full = _gather(ctx)
    err = None
    if full is not None:
        t0 = time.perf_counter()
        try:
            size = _checkpoint.write(_store(d), full, it, d.ckpt.pad, ctx.size)
            _checkpoint.prune(d.store, d.ckpt.keep)
            d.checkpoints.append({"iteration": it, "bytes": size, "seconds": time.perf_counter() - t0,
                                  "procs": ctx.size})
        except (OSError, _checkpoint.CheckpointError) as e:
            err = f"checkpoint at iteration {it}: {e}"
    d.failed = ctx.comm.bcast(err, root=0)


def _register(d: JacobiBlock) -> None:
    from malleable.runtime import register

    register("u", d.u[1:-1])  # the current buffer's interior rows (a view: registering again is a dict update)


def _move(ctx: Any, a: Any) -> None:
    d: JacobiBlock = ctx.data
    old = d.u[1:-1] if d.u.shape[0] else None
    d.incoming = a.move(old, (d.n - 2, d.n), np.float64)
    d.u = d.unew = np.zeros((0, 0))


def _output(ctx: Any) -> str | None:
    if ctx.data.failed:
        return None
    return "write" if ctx.data.out else "summary"


def _gather(ctx: Any) -> np.ndarray | None:
    """The whole grid, boundary included, on rank 0 (None elsewhere)."""
    from malleable.runtime import block_counts

    d: JacobiBlock = ctx.data
    counts = [c * d.n for c in block_counts(d.n - 2, ctx.size)]
    full = initial_grid(d.n) if ctx.rank == 0 else None
    mine = np.ascontiguousarray(d.u[1:-1]) if d.rows else np.zeros((0, d.n))
    recv = [full[1:-1], counts] if full is not None else None
    ctx.comm.Gatherv(mine, recv, root=0)
    return full


def _write(ctx: Any) -> None:
    full = _gather(ctx)
    if full is not None:
        np.save(ctx.data.out, full)


def _summary(ctx: Any) -> None:
    import socket

    d: JacobiBlock = ctx.data
    d.hosts = ctx.comm.gather(socket.gethostname(), root=0) or []
    if ctx.rank == 0:
        solve = [s for s in ctx.stats if s.phase == "solve"]
        seconds = sum(s.seconds for s in solve)
        ck = "" if d.ckpt is None else (f" restarted_from={d.start} checkpoints={len(d.checkpoints)} "
                                        f"checkpoint_bytes={sum(c['bytes'] for c in d.checkpoints)}")
        sys.stdout.write(f"jacobi: n={d.n} iterations={d.iterations} procs={ctx.size} "
                         f"residual={d.residual:.6e} "
                         f"solve_seconds={seconds:.4f} adaptations={len(ctx.adaptations)}{ck}\n")
        sys.stdout.flush()


def _remaining(ctx: Any) -> int:
    d: JacobiBlock = ctx.data
    return 0 if d.failed else max(0, d.iters - d.start)


def build_program(probe_every: int = 1, registered: bool = False) -> Any:
    """The Jacobi EPOP program (phases init, solve, output, write, summary).

    With ``registered`` the rows are registered data and the program has no adaptation block at all.
    """
    from malleable.runtime import epop

    return epop.Program([
        epop.Init("init", _init),
        epop.Elastic("solve", body=_step, iters=_remaining, setup=_setup,
                     adapt=None if registered else _move, probe_every=probe_every),
        epop.Branch("output", _output),
        epop.Rigid("write", _write),
        epop.Rigid("summary", _summary),
    ])


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line options (argparse exits with a usage error on bad values)."""
    p = argparse.ArgumentParser(
        prog="python -m malleable.apps.jacobi",
        description="Malleable 2-D Jacobi heat equation (top row 1.0, other boundaries 0.0), block rows over "
                    "the job's processes; adapts between iterations when the runtime (MALLEABLE_PLAN or a "
                    "controller) asks.",
        epilog="example: mpiexec -n 2 python -m malleable.apps.jacobi --n 512 --iters 200 --out u.npy")
    p.add_argument("--n", type=at_least(int, 3), default=256, help="grid size including the boundary (>= 3)")
    p.add_argument("--iters", type=at_least(int, 0), default=100, help="iterations (default 100)")
    p.add_argument("--check-every", type=at_least(int, 1), default=100,
                   help="compute the residual every K iterations (and at the last one)")
    p.add_argument("--tol", type=at_least(float, 0.0), help="stop once the residual is below TOL")
    p.add_argument("--probe-every", type=at_least(int, 1), default=1,
                   help="probe for adaptations every K iterations (default 1)")
    p.add_argument("--registered", action="store_true",
                   help="register the rows with the runtime (mr.register), which moves them at each adaptation")
    p.add_argument("--out", help="write the final n×n grid (boundary included) to this .npy file")
    p.add_argument("--stats", help="write per-phase stats and adaptations as JSON to this file (rank 0)")
    c = p.add_argument_group("checkpoints (h5py files; in the job's file system when MALLEABLE_FS is set)")
    c.add_argument("--checkpoint-every", type=at_least(int, 1), metavar="K",
                   help="write a checkpoint after every K-th iteration (needs --checkpoint-dir)")
    c.add_argument("--checkpoint-dir", metavar="DIR",
                   help="where checkpoints go: an absolute path in the job's adhocfs if MALLEABLE_FS is set, "
                        "else a local directory")
    c.add_argument("--checkpoint-pad", type=size_arg, default=0, metavar="BYTES",
                   help="filler bytes added to each checkpoint (e.g. 64M) to give it a realistic volume")
    c.add_argument("--checkpoint-keep", type=at_least(int, 0), default=2, metavar="N",
                   help="keep the N newest checkpoints, remove older ones (0: keep all; default 2)")
    c.add_argument("--restart", action="store_true",
                   help="resume from the newest complete checkpoint in --checkpoint-dir (from iteration 0 if none)")
    p.add_argument("-v", "--verbose", action="count", default=0, help="log more (-vv for debug)")
    args = p.parse_args(argv)
    if args.tol is not None and args.tol <= 0:
        p.error("argument --tol: must be > 0")
    if not args.checkpoint_dir:
        used = [f for f, v in (("--checkpoint-every", args.checkpoint_every), ("--restart", args.restart),
                               ("--checkpoint-pad", args.checkpoint_pad)) if v]
        if used:
            p.error(f"{used[0]} needs --checkpoint-dir DIR")
    elif not args.checkpoint_every and not args.restart:
        p.error("--checkpoint-dir needs --checkpoint-every K or --restart")
    if args.checkpoint_pad and not args.checkpoint_every:
        p.error("--checkpoint-pad needs --checkpoint-every K")
    if args.checkpoint_dir and os.environ.get("MALLEABLE_FS") and not args.checkpoint_dir.startswith("/"):
        p.error(f"--checkpoint-dir {args.checkpoint_dir!r}: with MALLEABLE_FS set it is a path in the job's file "
                "system and must be absolute")
    return args


def run(args: argparse.Namespace) -> Any:
    """Run the app with parsed options; returns the driver's RunResult."""
    from malleable.runtime import epop

    block = JacobiBlock(args.n, args.iters, args.check_every, args.tol, args.out, registered=args.registered)
    if args.checkpoint_dir:
        block.ckpt = CheckpointOptions(args.checkpoint_dir, args.checkpoint_every or 0, args.checkpoint_pad,
                                       args.checkpoint_keep, args.restart)
    return epop.run_program(build_program(args.probe_every, args.registered), block)


def write_stats(path: str, result: Any, extra: dict[str, Any]) -> None:
    """Write a RunResult summary (plus ``extra``) as JSON."""
    with open(path, "w") as f:
        json.dump(dict(result.as_dict(), **extra), f, indent=1)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m malleable.apps.jacobi``; returns the exit code."""
    args = parse_args(argv)
    from malleable._log import configure

    configure(args.verbose)
    try:
        result = run(args)
    except ConfigError as e:   # a plan or size the runtime refuses before starting anything
        return refused("jacobi", e)
    if result.left:
        return 0
    d = result.data
    if d.store is not None:
        d.store.close()
    if d.failed:
        if result.rank == 0:
            sys.stderr.write(f"jacobi: error: {d.failed}\n")
        return 1
    if result.rank == 0 and args.stats:
        write_stats(args.stats, result, {"app": "jacobi", "n": args.n, "iters": args.iters,
                                         "iterations": d.iterations, "residual": d.residual,
                                         "hosts": d.hosts, "start": d.start, "checkpoints": d.checkpoints})
    return 0


if __name__ == "__main__":
    sys.exit(main())
