"""Test program for job mounts on a growing job: a malleable job that writes and reads through
``$MALLEABLE_FS_MOUNT`` on every host it runs on.

Usage: mount_grow_prog.py OUT. Rank 0 writes ``from-<host>.bin`` (3 MiB and a bit of ``random.Random(host)``) in the
mount at the start; a process that joins in an expansion writes its own ``from-<host>.bin`` there, reads it and
every other ``from-*.bin`` back, and reports in ``OUT/joiner-<host>.json`` (``mine``, ``others``: equal to what was
written; ``mounts``: the adhocfs mount points its mount namespace has; ``pid``). The job runs until ``OUT/stop``
exists; rank 0 then reads every ``from-*.bin`` in the mount again and reports in ``OUT/end.json``.
"""

import json
import os
import random
import socket
import sys
import time

from malleable import runtime as mr

out, mnt, me = sys.argv[1], os.environ["MALLEABLE_FS_MOUNT"], socket.gethostname()


def body(host):
    return random.Random(host).randbytes(3 * 2**20 + 12345)


def report(name, obj):
    with open(f"{out}/{name}.tmp", "w") as f:
        json.dump(obj, f)
    os.replace(f"{out}/{name}.tmp", f"{out}/{name}.json")


def read_all():
    """Every from-<host>.bin in the mount: equal to what that host wrote?"""
    seen = {}
    for name in sorted(os.listdir(mnt)):
        if name.startswith("from-") and name.endswith(".bin"):
            with open(f"{mnt}/{name}", "rb") as f:
                seen[name] = f.read() == body(name[5:-4])
    return seen


def mounts():
    with open("/proc/self/mountinfo") as f:
        return [ln.split()[4] for ln in f if " fuse.adhocfs " in ln]


status = mr.init_adapt()
if status is mr.Status.NEW and mr.world().rank == 0:
    with open(f"{mnt}/from-{me}.bin", "wb") as f:
        f.write(body(me))
elif status is mr.Status.JOINING:
    mr.adapt_begin()
    mr.adapt_commit()
    with open(f"{mnt}/from-{me}.bin", "wb") as f:
        f.write(body(me))
    with open(f"{mnt}/from-{me}.bin", "rb") as f:
        mine = f.read() == body(me)
    report(f"joiner-{me}", {"mine": mine, "others": read_all(), "mounts": mounts(), "pid": os.getpid()})
while True:
    pending, st, info = mr.probe_adapt()
    if pending:
        mr.adapt_begin()
        mr.adapt_commit()
        if st is mr.Status.LEAVING:
            sys.exit(0)
    w = mr.world()
    stop = w.bcast(os.path.exists(f"{out}/stop") if w.rank == 0 else None, 0)
    if stop:
        break
    time.sleep(0.1)
if mr.world().rank == 0:
    report("end", {"seen": read_all(), "mounts": mounts(), "size": mr.world().size})
