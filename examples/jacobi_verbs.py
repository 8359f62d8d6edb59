"""Malleable Jacobi with the four verbs and no driver: init_adapt, probe_adapt, adapt_begin, adapt_commit.

    malleable run -n 1 --plan '[{"at_probe": 20, "procs": 2}, {"at_probe": 60, "procs": 1}]' -- \\
        python examples/jacobi_verbs.py 64 100 u.npy
"""

import sys

import numpy as np
from mpi4py import MPI

from malleable import runtime as mr

if len(sys.argv) != 4 or not (sys.argv[1].isdigit() and sys.argv[2].isdigit()) or int(sys.argv[1]) < 3:
    sys.exit("usage: python examples/jacobi_verbs.py N ITERATIONS OUT.npy  (an N x N grid, N >= 3)")
n, iters, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]  # grid size, iterations, output .npy
shape = (n - 2, n)  # the interior rows (all n columns) are distributed in blocks


def with_halos(rows, world):
    """This rank's rows plus one halo row above and below (the top boundary row is 1.0)."""
    u = np.zeros((rows.shape[0] + 2, n))
    u[1:-1] = rows
    if mr.block_range(n - 2, world.size, world.rank)[0] == 0:
        u[0] = 1.0
    return u


status = mr.init_adapt()                        # NEW, or JOINING for processes an expansion spawned
it = 0
if status is mr.Status.JOINING:
    win = mr.adapt_begin()                      # joiners open the window at once ...
    it = win.new_world.bcast(None, root=0)      # ... learn where the job is ...
    rows = mr.redistribute(None, shape, float, win.staying, win.staying + win.joining, win.new_world)
    mr.adapt_commit()                           # ... take their rows and commit
else:
    w = mr.world()
    lo, hi = mr.block_range(n - 2, w.size, w.rank)
    rows = np.zeros((hi - lo, n))
u = with_halos(rows, mr.world())
while it < iters:
    # probe at every iteration boundary (a joiner's first probe stands for the one its parents just made)
    pending, status, info = mr.probe_adapt()
    if pending:                                 # same answer on every rank
        win = mr.adapt_begin()
        span = mr.span_comm(win)                # old and new owners in one intracommunicator
        if win.joining:
            span.bcast(it, root=0)
        old = win.staying + win.leaving
        rows = mr.redistribute(u[1:-1], shape, float, old, win.staying + win.joining, span)
        mr.adapt_commit()
        if status is mr.Status.LEAVING:
            sys.exit(0)                         # released by the shrink: MPI is finalized, just leave
        u = with_halos(rows, mr.world())
    w = mr.world()
    active = min(w.size, n - 2)                 # ranks beyond n - 2 own no rows
    up = w.rank - 1 if 0 < w.rank < active else MPI.PROC_NULL
    down = w.rank + 1 if w.rank + 1 < active else MPI.PROC_NULL
    if u.shape[0] > 2:
        w.Sendrecv(u[1], dest=up, recvbuf=u[-1], source=down)
        w.Sendrecv(u[-2], dest=down, recvbuf=u[0], source=up)
        v = u.copy()
        v[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
        u = v
    it += 1
w = mr.world()
parts = w.gather(u[1:-1], root=0)
if w.rank == 0:
    grid = np.zeros((n, n))
    grid[0] = 1.0
    grid[1:-1] = np.concatenate(parts)
    np.save(out, grid)
    print(f"jacobi_verbs: n={n} iterations={iters} procs={w.size}")
