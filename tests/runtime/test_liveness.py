"""Rank 0's liveness listener: a shrink returns only once the leavers' processes have ended, not when their
sockets close; a pid that now names another process is not waited for."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import psutil

from malleable.runtime._liveness import Listener

# a spawned process's side: report in, close the socket (the EOF rank 0 sees), then live on for a while
CHILD = """
import json, os, sys, time
from malleable.runtime._liveness import connect_back, own_start_ticks
endpoint, ticks, linger = json.loads(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
if ticks < 0:
    fd = connect_back(endpoint, 7, 0, 10.0)
else:   # report another start than its own: the pid then names some other process for rank 0
    import socket
    s = socket.create_connection((endpoint["addresses"][0], endpoint["port"]), timeout=10)
    s.sendall(f"7 0 {os.getpid()} {socket.gethostname()} {ticks}\\n".encode())
    fd = s.detach()
os.close(fd)
print("closed", flush=True)
time.sleep(linger)
"""


def _state(pid: int) -> str:
    try:
        return psutil.Process(pid).status()
    except psutil.NoSuchProcess:
        return "gone"


def _child(listener: Listener, ticks: int, linger: float) -> subprocess.Popen:
    ep = dict(listener.endpoint(), addresses=["127.0.0.1"])
    proc = subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(ep), str(ticks), str(linger)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "closed"
    return proc


def test_wait_gone_waits_for_the_process_not_its_socket():
    listener = Listener()
    proc = _child(listener, -1, 1.0)
    try:
        listener.accept([(7, 0)], 10.0)
        t0 = time.monotonic()
        listener.wait_gone([7], 10.0)
        # the socket hit EOF a second before the process ended: the wait lasted until its end
        assert _state(proc.pid) in (psutil.STATUS_ZOMBIE, "gone")
        assert time.monotonic() - t0 > 0.5
    finally:
        proc.kill()
        proc.wait(10)
        listener.close()


def test_a_pid_with_another_start_is_not_waited_for():
    listener = Listener()
    proc = _child(listener, 1, 30.0)   # started 1 tick after boot: not this process
    try:
        listener.accept([(7, 0)], 10.0)
        t0 = time.monotonic()
        listener.wait_gone([7], 10.0)
        assert time.monotonic() - t0 < 5.0 and proc.poll() is None   # returned at the EOF; the process lives on
    finally:
        proc.kill()
        proc.wait(10)
        listener.close()


def test_start_ticks_match_what_rank_0_reads():
    from malleable.runtime._liveness import _proc_stat, own_start_ticks

    ticks = own_start_ticks()
    me = _proc_stat(os.getpid())
    assert me is not None and me[0] == "R" and ticks == me[1] > 0
    # the start psutil turns into a wall-clock time (to within the whole second of its boot time)
    assert abs(ticks / os.sysconf("SC_CLK_TCK") + psutil.boot_time() - psutil.Process().create_time()) < 1.5
