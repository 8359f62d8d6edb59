"""Stage-in while the job waits, with a real daemon, real adhocfs servers and real files on a local pool: a job
whose start is planned stages in on the storage hosts while its hosts still run another job, and starts with its
data in place; ``queue`` shows Slurm's reasons (``BurstBufferStageIn``, ``BurstBufferResources``); a cancel during
the early stage-in leaves no server and no buffer held."""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import sys

import psutil
import pytest

from malleable.controller.daemon import _protocol as P
from malleable.controller.daemon._hostpool import HostPool, scan_tagged
from tests._procs import cmdline
from tests.controller._daemon_util import cli, daemon_thread, isolate, kill_tagged, wait_final, wait_for

M = 1 << 20
G = 1 << 30
PY = sys.executable


@pytest.fixture
def env(monkeypatch, tmp_path):
    isolate(monkeypatch, tmp_path)
    monkeypatch.setenv("MALLEABLE_CONTROLLER_STATE", str(tmp_path / "ctl.sqlite"))
    return dict(os.environ)


@contextlib.contextmanager
def daemon(tmp_path, capacity):
    """A daemon on a local pool of two hosts (both storage hosts: ``2 * capacity`` of buffer)."""
    with daemon_thread(tmp_path / "ctl.sqlite", HostPool.local(2), "fcfs-bb", bb_capacity=capacity) as (d, c):
        try:
            yield d, c
        finally:
            kill_tagged(d.fs.cid)


def stagers():
    """This process's staging children (the daemon runs in a thread of it)."""
    return [p for p in psutil.Process().children(recursive=True)
            if "malleable.controller.daemon._stager" in " ".join(cmdline(p.pid))]


def queue_rows():
    code, out, err = cli("queue")
    assert code == 0, err
    return {int(line.split()[0]): line for line in out.splitlines()[1:]}


def event_times(c, jid):
    return {e["kind"]: e["t"] for e in reversed(c.info(jid).events)}       # the first of each kind


@pytest.mark.timeout(240)
def test_a_planned_job_stages_in_while_its_hosts_run_another_job_and_starts_with_its_data_in_place(env, tmp_path):
    data = os.urandom(24 * M + 5)
    (tmp_path / "in.bin").write_bytes(data)
    flag = tmp_path / "go"
    hold = ["sh", "-c", f"while [ ! -e {flag} ]; do sleep 0.05; done"]      # runs until the test lets it end
    reader = ["sh", "-c", f"{PY} -m malleable fs get /in/in.bin {tmp_path}/got.bin"]
    with daemon(tmp_path, 64 * M) as (d, c):
        a = c.submit(hold, 2, env=env)                                      # both hosts
        wait_for(lambda: c.info(a).job["state"] == "RUNNING", 60, "job a to run")
        b = c.submit(reader, 2, env=env, bb=100 * M, stage_in=[f"{tmp_path}/in.bin:/in/in.bin"])
        other = c.submit(["true"], 1, env=env, bb=64 * M, stage_in=[f"{tmp_path}/in.bin:/x"])
        # b's stage-in runs while it waits: frozen here, so that what queue shows then is seen for sure
        (stager,) = wait_for(stagers, 60, "b's early stage-in to copy")
        stager.send_signal(signal.SIGSTOP)
        try:
            rows = queue_rows()
            assert rows[a].split()[4] == "R" and rows[b].split()[4] == "PD", rows
            assert rows[b].endswith("(BurstBufferStageIn)"), rows
            assert rows[other].endswith("(BurstBufferResources)"), rows       # 64M do not fit beside b's 100M
            assert d.core.status()["bb_free"] == 28 * M                     # b's buffer held before its start
        finally:
            stager.send_signal(signal.SIGCONT)
        wait_for(lambda: "fs-ready" in event_times(c, b), 60, "b's data to be in place")
        assert c.info(a).job["state"] == "RUNNING" and c.info(b).job["state"] == "PENDING"
        assert queue_rows()[b].endswith("(Resources)")                      # now it waits only for hosts
        flag.touch()
        states = wait_final(c, [a, b, other], 120)
        assert states == {a: "COMPLETED", b: "COMPLETED", other: "COMPLETED"}, states
        ta, tb = event_times(c, a), event_times(c, b)
        kinds_b = [e["kind"] for e in c.info(b).events]
    assert (tmp_path / "got.bin").read_bytes() == data                      # what b read at its start
    # b's copy ran while a held the hosts: the stage-in began and ended before a ended, and b started after
    assert ta["start"] < tb["fs-start"] < tb["stage-in"] <= tb["fs-ready"] < ta["end"] <= tb["start"], (ta, tb)
    assert kinds_b.count("fs-start") == 1 and kinds_b.count("stage-in") == 1   # staged once, not again at its start


@pytest.mark.timeout(180)
def test_cancel_during_an_early_stage_in_leaves_no_server_and_no_buffer_held(env, tmp_path):
    with open(tmp_path / "big", "wb") as f:
        f.truncate(100 * G)                                                 # read as zeros: a copy takes minutes
    flag = tmp_path / "go"
    with daemon(tmp_path, 64 * G) as (d, c):
        a = c.submit(["sh", "-c", f"while [ ! -e {flag} ]; do sleep 0.05; done"], 2, env=env)
        wait_for(lambda: c.info(a).job["state"] == "RUNNING", 60, "job a to run")
        b = c.submit(["true"], 1, env=env, bb=110 * G, stage_in=[f"{tmp_path}/big:/big"])
        wait_for(stagers, 60, "b's early stage-in to copy")
        assert c.info(b).job["state"] == "PENDING" and d.core.status()["bb_free"] == 18 * G
        c.call(P.Cancel(b))
        assert wait_final(c, [b], 30)[b] == "CANCELLED"
        wait_for(lambda: d.core.status()["bb_free"] == 128 * G, 30, "the buffer to be free")
        wait_for(lambda: not scan_tagged(d.fs.tag(b)), 30, "the servers to stop")
        wait_for(lambda: not stagers(), 30, "the stager to be gone")
        assert c.info(a).job["state"] == "RUNNING"                         # the other job was not touched
        flag.touch()
        assert wait_final(c, [a], 60)[a] == "COMPLETED"
        assert d.core.ledger.bb_used == 0 and not d.core.ledger.queued
