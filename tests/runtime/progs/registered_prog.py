"""Test program for registered data: random arrays (shapes, axes, distributions, block sizes from PROG_SEED) are
registered once; the plan resizes the job; after every adaptation rank 0 reassembles each array from the parts
(``mr.data``) and prints {"probe", "size", "ok"}, ``ok`` meaning every array equals its NumPy original."""

import json
import os
import sys

import numpy as np

from malleable import runtime as mr

rng = np.random.default_rng(int(os.environ.get("PROG_SEED", "1")))
ARRAYS = {}
for k in range(int(os.environ.get("PROG_ARRAYS", "4"))):
    ndim = int(rng.integers(1, 4))
    shape = tuple(int(x) for x in rng.integers(1, 9, size=ndim))
    axis = int(rng.integers(0, ndim))
    shape = tuple(int(rng.integers(0, 23)) if i == axis else s for i, s in enumerate(shape))  # may be 0 or < procs
    dist = "block-cyclic" if rng.random() < 0.5 else "block"
    block = int(rng.integers(1, 5))
    dtype = [np.float64, np.int32, np.complex64][k % 3]
    ARRAYS[f"a{k}"] = ((rng.standard_normal(shape) * 100).astype(dtype), axis, dist, block)


def part(name, size, rank):
    full, axis, dist, block = ARRAYS[name]
    idx = mr.indices(full.shape[axis], size, rank, dist, block)
    return np.take(full, idx, axis=axis)


def check():
    w = mr.world()
    ok = True
    for name, (full, axis, dist, block) in ARRAYS.items():
        parts = w.gather(mr.data(name))
        if w.rank == 0:
            got = np.zeros_like(full)
            for r, p in enumerate(parts):
                idx = mr.indices(full.shape[axis], w.size, r, dist, block)
                sl = [slice(None)] * full.ndim
                sl[axis] = idx
                got[tuple(sl)] = p
            ok = ok and np.array_equal(got, full) and all(p.dtype == full.dtype for p in parts)
    return ok


status = mr.init_adapt()
if status is mr.Status.NEW:
    w = mr.world()
    for name, (_, axis, dist, block) in ARRAYS.items():
        mr.register(name, part(name, w.size, w.rank), dist=dist, axis=axis, block=block)
else:
    mr.adapt_begin()
    mr.adapt_commit()
while mr.probe_count() < int(os.environ.get("PROG_ITERS", "8")):
    pending, st, info = mr.probe_adapt()
    if pending:
        mr.adapt_begin()
        mr.adapt_commit()  # no data code in the window: the runtime moves the registered arrays
        if st is mr.Status.LEAVING:
            sys.exit(0)
    ok = check()
    if mr.world().rank == 0:
        sys.stdout.write(json.dumps({"probe": mr.probe_count(), "size": mr.world().size, "ok": bool(ok)}) + "\n")
        sys.stdout.flush()
