"""Test program for the EPOP driver under MPI: sleep-based phases whose MPI and compute times are known.

Every process prints one JSON line at the end: {"pid", "left", "events", "rank", "size"}; world rank 0
also adds "result" (the RunResult summary). Phases: init -> work (elastic, 4 iterations: 40 ms compute,
20 ms in ctx.mpi()) -> again (branch, twice) -> final (rigid: 50 ms MPI, 50 ms compute).
"""

import json
import os
import sys
import time

from malleable.runtime import epop

events = []


def init(ctx):
    events.append(["init", ctx.status.name])
    if ctx.status.name == "NEW":
        ctx.shared["loops"] = 0


def setup(ctx):
    events.append(["setup", ctx.size])


def body(ctx, i):
    events.append(["work", i, ctx.size])
    time.sleep(0.04)
    with ctx.mpi():  # no collective here: waiting for slower ranks would add unknown MPI time
        time.sleep(0.02)


def adapt(ctx, a):
    events.append([a.role.name.lower(), a.kind, a.old_size, a.new_size])


def again(ctx):
    ctx.shared["loops"] += 1
    events.append(["again", ctx.shared["loops"]])
    return "work" if ctx.shared["loops"] < 2 else "final"


def final(ctx):
    events.append(["final", ctx.size])
    with ctx.mpi():
        time.sleep(0.05)
    time.sleep(0.05)


prog = epop.Program([
    epop.Init("init", init),
    epop.Elastic("work", body=body, iters=4, setup=setup, adapt=adapt),
    epop.Branch("again", again),
    epop.Rigid("final", final),
])
res = epop.run_program(prog)
line = {"pid": os.getpid(), "left": res.left, "events": events, "rank": res.rank, "size": res.size}
if res.rank == 0:
    line["result"] = res.as_dict()
sys.stdout.write(json.dumps(line) + "\n")
sys.stdout.flush()
