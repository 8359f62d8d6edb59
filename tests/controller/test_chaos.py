"""Bounded chaos: a controller running malleable Jacobi jobs, jobs writing to a replicated adhocfs (R = 2) and
rigid sleepers, while a seeded schedule kills -9 the controller daemon (restarted), one data server (declared
lost) and a joiner of a malleable job. Every job ends exactly once, COMPLETED or with its reason recorded; every
byte written to the file system (before the chaos, and by every job that completed) reads back; no process of
any job or server is left; all within the test's time limit.

The seed is ``MALLEABLE_CHAOS_SEED`` (default below); a failure prints it, so a run can be repeated.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import sys
import time
from pathlib import Path

import psutil
import pytest

from malleable.controller.daemon import _protocol as P
from malleable.controller.daemon._client import Client
from malleable.controller.daemon._hostpool import scan_tagged
from malleable.controller.daemon._paths import addr_file
from tests._procs import kill9, running
from tests.controller._daemon_util import FINAL, HEAT, TOKEN, cli, kill_tagged, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(280)]

SEED = int(os.environ.get("MALLEABLE_CHAOS_SEED", "20261124"))
FS_TOKEN = "chaos-file-system-secret"  # another secret than the controller's: jobs get it as a file
WRITER = str(Path(__file__).parent / "progs" / "fs_writer.py")


def start_daemon(state: str) -> int:
    code, out, err = cli("controller", "start", "--local", "3", "--policy", "malleable-fill", "--state", state,
                         "--tick", "0.2", "--kill-wait", "3")
    assert code == 0, err
    return json.loads(addr_file(state).read_text())["pid"]


def joiners(cid: str, jid: int) -> list[psutil.Process]:
    """Processes a malleable job spawned (its python processes but the oldest, the anchor)."""
    procs = []
    for p in scan_tagged(f"{cid}.{jid}").get(f"{cid}.{jid}", []):
        with contextlib.suppress(psutil.Error):
            pr = psutil.Process(p.pid)
            if "heat_prog.py" in " ".join(pr.cmdline()):
                procs.append(pr)
    procs.sort(key=lambda pr: pr.create_time())
    return procs[1:]


def test_chaos(monkeypatch, tmp_path):
    from malleable.adhocfs import connect, start_fs
    from malleable.adhocfs._admin import check_fs, lose_fs
    from malleable.adhocfs._deploy import stop_fs

    rng = random.Random(SEED)
    for k in ("MALLEABLE_CONTROLLER", "MALLEABLE_KEY", "MALLEABLE_ENCRYPT", "MALLEABLE_KEY_FILE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.chdir(tmp_path)
    conf = tmp_path / "jobconf" / "malleable"                 # the jobs' key file for the file system
    conf.mkdir(parents=True)
    (conf / "token").write_text(FS_TOKEN + "\n")
    (conf / "token").chmod(0o600)
    monkeypatch.setenv("MALLEABLE_TOKEN", FS_TOKEN)           # the servers read their secret at start
    dep = start_fs("127.0.0.1", ["127.0.0.1"] * 3, state=str(tmp_path / "fs"), replicas=2)
    monkeypatch.setenv("MALLEABLE_TOKEN", TOKEN)
    fs = connect(dep.address, token=FS_TOKEN.encode(), timeout=2.0)
    state = str(tmp_path / "ctl.sqlite")
    marks = tmp_path / "marks.txt"
    pid, cid, c = 0, "", None
    events: list[str] = []
    try:
        before = {f"/pre{i}": rng.randbytes(rng.randrange(100_000, 1_500_000)) for i in range(4)}
        for path, data in before.items():
            with fs.open(path, "wb") as f:
                f.write(data)
        pid = start_daemon(state)
        c = Client(state=state, timeout=10)
        cid = c.status()["controller_id"]
        job_env = dict(os.environ, PROG_ITERS="150", PROG_SLEEP="0.05", MALLEABLE_ADAPT_TIMEOUT="20",
                       XDG_CONFIG_HOME=str(tmp_path / "jobconf"))
        heat = [c.submit([sys.executable, HEAT], 1, 1, 3, True, 60.0, name=f"heat{i}", out=str(tmp_path / f"h{i}.out"),
                         env=job_env) for i in range(2)]
        wait_for(lambda: any(joiners(cid, j) for j in heat), 40, "a malleable job to grow (spawned processes)")
        writes = {}
        jobs = list(heat)
        for i in range(3):
            path, size = f"/job{i}.bin", rng.randrange(200_000, 2_000_000)
            jid = c.submit([sys.executable, WRITER, dep.address, path, str(size), str(SEED + i), str(marks)], 1,
                           time_limit=60.0, name=f"write{i}", out=str(tmp_path / f"w{i}.out"), env=job_env)
            writes[jid] = (path, size, SEED + i)
            jobs.append(jid)
        jobs += [c.submit(["sleep", f"{rng.uniform(1, 4):.1f}"], 1, time_limit=60.0, name="sleep",
                          out=str(tmp_path / "s.out")) for _ in range(2)]
        c.close()
        c = None
        t0 = time.monotonic()
        plan = {"joiner": rng.uniform(0.5, 3), "server": rng.uniform(0.5, 4), "daemon": rng.uniform(1, 6)}
        restart_at = lose_at = None
        victim = rng.choice(sorted(dep.data))
        while plan or restart_at or lose_at:
            now = time.monotonic() - t0
            assert now < 60, f"chaos schedule stuck (seed {SEED}): {plan} {events}"
            if "joiner" in plan and now >= plan["joiner"]:
                grown = [(j, p) for j in heat for p in joiners(cid, j)]
                if grown or now > plan["joiner"] + 20:
                    plan.pop("joiner")
                    if grown:
                        j, p = grown[-1]
                        p.kill()
                        events.append(f"{now:.1f}s joiner {p.pid} of job {j}")
            if "server" in plan and now >= plan["server"]:
                plan.pop("server")
                spid = next(s["pid"] for s in fs.status().servers if s["sid"] == victim)
                os.kill(spid, signal.SIGKILL)
                events.append(f"{now:.1f}s data server {victim} (pid {spid})")
                lose_at = now + 1.5
            if lose_at and now >= lose_at:
                lose_at = None
                wait_for(lambda spid=spid: not running(spid), 5, "the data server to die")
                lose_fs(dep.address, [victim], wait=True, timeout=60, token=FS_TOKEN.encode())
                events.append(f"{time.monotonic() - t0:.1f}s server {victim} declared lost, copies made again")
            if "daemon" in plan and now >= plan["daemon"]:
                plan.pop("daemon")
                kill9(pid)
                events.append(f"{now:.1f}s controller daemon (pid {pid})")
                restart_at = now + rng.uniform(0.5, 1.5)
            if restart_at and now >= restart_at:
                restart_at = None
                pid = start_daemon(state)
                events.append(f"{time.monotonic() - t0:.1f}s controller restarted (pid {pid})")
            time.sleep(0.05)
        c = Client(state=state, timeout=10)

        def finals():
            rows = {r["id"]: r for r in c.rows(P.History(0))}
            return rows if all(rows[j]["state"] in FINAL for j in jobs) else None

        rows = wait_for(finals, 150, f"every job to end (seed {SEED}, chaos {events})")
        report = {j: (rows[j]["name"], rows[j]["state"], rows[j]["reason"]) for j in jobs}
        for j in jobs:                                             # ended exactly once, or failed saying why
            kinds = [e["kind"] for e in c.info(j).events]
            assert kinds.count("start") == 1 and kinds.count("end") == 1, (j, kinds, report, SEED)
            if rows[j]["state"] != "COMPLETED":
                assert rows[j]["reason"], (j, report, SEED)
        starts = marks.read_text().split()
        assert sorted(starts) == sorted(set(starts)) and set(starts) <= {p for p, _, _ in writes.values()}
        for j in heat:
            if rows[j]["state"] == "COMPLETED":
                done = [json.loads(x) for x in (tmp_path / f"h{heat.index(j)}.out").read_text().splitlines()
                        if '"done"' in x]
                assert done and done[-1]["ok"], (j, SEED)
        completed = {p: (n, s) for j, (p, n, s) in writes.items() if rows[j]["state"] == "COMPLETED"}
        assert completed, f"no writer completed (seed {SEED}): {report} {events}"
        for path, data in before.items():                         # no replicated byte lost
            with fs.open(path, "rb") as f:
                assert f.read() == data, (path, SEED)
        for path, (size, seed) in completed.items():
            with fs.open(path, "rb") as f:
                assert f.read() == random.Random(seed).randbytes(size), (path, SEED)
        assert check_fs(dep.address, token=FS_TOKEN.encode()).files == []   # two live copies of every block
        wait_for(lambda: all(r["state"] == "idle" for r in c.rows(P.Nodes())), 20, "every host checked and idle")
        assert not scan_tagged(cid + "."), "processes of the jobs left behind"
        print(f"chaos seed {SEED}: {events}; jobs {report}")
        c.close()
        c = None
        assert cli("controller", "stop", "--state", state)[0] == 0
        pid = 0
    finally:
        if c is not None:
            c.close()
        if pid and running(pid):
            os.kill(pid, signal.SIGKILL)
        if cid:
            kill_tagged(cid)
        fs.close()
        with contextlib.suppress(Exception):
            stop_fs(dep.address, token=FS_TOKEN.encode())
        dep.wait(5.0)
    assert not any(p.poll() is None for p in dep.procs.values()), "file system servers left running"
