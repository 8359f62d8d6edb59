"""Malleable matrix multiply as an EPOP program: a sequence of C = A·B over block rows of A.

A and B (``n × n``) are generated from ``--seed``; every rank holds all of B (regenerated from the
seed, so joiners need nothing but their rows of A) and a block of rows of A. Each of the
``--reps`` products computes its rows of ``C = A·B``; C scaled by its largest magnitude
(``max|C|``, an exact Allreduce) becomes the next A. ``--out`` writes the last C (unscaled).

Run it::

    mpiexec -n 2 python -m malleable.apps.matmul --n 512 --reps 10 --out c.npy
    malleable run -n 1 --plan '[{"at_probe": 4, "procs": 3}]' -- python -m malleable.apps.matmul --reps 8
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from malleable.apps._args import at_least, refused
from malleable.errors import ConfigError

__all__ = ["MatmulBlock", "build_program", "inputs", "main", "parse_args", "reference"]

log = logging.getLogger(__name__)


def inputs(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A and B: standard normal ``n × n`` matrices from independent streams of ``seed``."""
    a = np.random.default_rng([seed, 0]).standard_normal((n, n))
    b = np.random.default_rng([seed, 1]).standard_normal((n, n))
    return a, b


def reference(n: int, reps: int, seed: int) -> np.ndarray:
    """The serial NumPy computation: the last C of ``reps`` products (C / max|C| becomes the next A)."""
    a, b = inputs(n, seed)
    c = a
    for _ in range(reps):
        c = a @ b
        a = c / np.max(np.abs(c))
    return c


@dataclass
class MatmulBlock:
    """The data block: this rank's rows of A (and of the last C) and the whole B; owned by the phases."""

    n: int
    reps: int
    seed: int
    out: str | None
    a: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    b: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    c: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    done: int = 0


def _init(ctx: Any) -> None:
    from malleable.runtime import block_range

    d: MatmulBlock = ctx.data
    a, d.b = inputs(d.n, d.seed)
    if ctx.status.name != "JOINING":  # joiners get their rows of A in the adaptation block
        lo, hi = block_range(d.n, ctx.size, ctx.rank)
        d.a = np.ascontiguousarray(a[lo:hi])
    d.c = np.zeros((0, d.n))


def _multiply(ctx: Any, i: int) -> None:
    from mpi4py import MPI

    d: MatmulBlock = ctx.data
    d.c = d.a @ d.b
    m = np.array([np.max(np.abs(d.c)) if d.c.size else 0.0])
    ctx.comm.Allreduce(MPI.IN_PLACE, m, op=MPI.MAX)
    d.a = d.c / m[0]
    d.done = i + 1


def _move(ctx: Any, a: Any) -> None:
    d: MatmulBlock = ctx.data
    d.a = a.move(d.a if ctx.status.name != "JOINING" else None, (d.n, d.n), np.float64)
    d.c = np.zeros((d.a.shape[0], d.n))  # only valid after the next product


def _write(ctx: Any) -> None:
    from malleable.runtime import block_counts

    d: MatmulBlock = ctx.data
    counts = [c * d.n for c in block_counts(d.n, ctx.size)]
    full = np.empty((d.n, d.n)) if ctx.rank == 0 else None
    ctx.comm.Gatherv(np.ascontiguousarray(d.c), [full, counts] if full is not None else None, root=0)
    if full is not None:
        np.save(d.out, full)


def _summary(ctx: Any) -> None:
    d: MatmulBlock = ctx.data
    if ctx.rank == 0:
        seconds = sum(s.seconds for s in ctx.stats if s.phase == "multiply")
        sys.stdout.write(f"matmul: n={d.n} reps={d.done} procs={ctx.size} multiply_seconds={seconds:.4f} "
                         f"adaptations={len(ctx.adaptations)}\n")
        sys.stdout.flush()


def build_program(probe_every: int = 1) -> Any:
    """The matmul EPOP program (phases init, multiply, output, write, summary)."""
    from malleable.runtime import epop

    return epop.Program([
        epop.Init("init", _init),
        epop.Elastic("multiply", body=_multiply, iters=lambda ctx: ctx.data.reps, adapt=_move,
                     probe_every=probe_every),
        epop.Branch("output", lambda ctx: "write" if ctx.data.out else "summary"),
        epop.Rigid("write", _write),
        epop.Rigid("summary", _summary),
    ])


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line options (argparse exits with a usage error on bad values)."""
    p = argparse.ArgumentParser(
        prog="python -m malleable.apps.matmul",
        description="Malleable sequence of matrix products C = A·B (block rows of A; C/max|C| becomes the "
                    "next A); adapts between products when the runtime (MALLEABLE_PLAN or a controller) "
                    "asks.",
        epilog="example: mpiexec -n 2 python -m malleable.apps.matmul --n 512 --reps 10 --out c.npy")
    p.add_argument("--n", type=at_least(int, 1), default=256, help="matrix size (default 256)")
    p.add_argument("--reps", type=at_least(int, 1), default=10, help="number of products (default 10)")
    p.add_argument("--seed", type=at_least(int, 0), default=0, help="seed of A and B (default 0)")
    p.add_argument("--probe-every", type=at_least(int, 1), default=1,
                   help="probe every K products (default 1)")
    p.add_argument("--out", help="write the last C (n×n) to this .npy file")
    p.add_argument("--stats", help="write per-phase stats and adaptations as JSON to this file (rank 0)")
    p.add_argument("-v", "--verbose", action="count", default=0, help="log more (-vv for debug)")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m malleable.apps.matmul``; returns the exit code."""
    args = parse_args(argv)
    from malleable._log import configure
    from malleable.runtime import epop

    configure(args.verbose)
    block = MatmulBlock(args.n, args.reps, args.seed, args.out)
    try:
        result = epop.run_program(build_program(args.probe_every), block)
    except ConfigError as e:   # a plan or size the runtime refuses before starting anything
        return refused("matmul", e)
    if not result.left and result.rank == 0 and args.stats:
        with open(args.stats, "w") as f:
            json.dump(dict(result.as_dict(), app="matmul", n=args.n, reps=args.reps), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
