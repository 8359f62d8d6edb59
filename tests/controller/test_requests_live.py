"""Jobs' size requests and suspend/resume through a real daemon: a malleable heat solver (real MPI processes)
asks for more hosts (deferred until a rigid job ends, then granted), for fewer (granted at once, and kept:
the idle host is not given back to it), for more than it may have (declined, with the reason); a suspended job
uses no CPU and makes no progress until resumed, and ends with the serial reference's result."""

from __future__ import annotations

import json
import os
import sys
import time

import psutil
import pytest

from malleable.controller.daemon import _protocol as P
from malleable.controller.daemon._hostpool import HostPool
from tests.controller._daemon_util import HEAT, cli, daemon_thread, isolate, states, wait_final, wait_for


@pytest.fixture
def env(monkeypatch, tmp_path):
    isolate(monkeypatch, tmp_path)
    return dict(os.environ, MALLEABLE_ADAPT_TIMEOUT="40")


def lines(path):
    return [json.loads(x) for x in path.read_text().splitlines() if x.startswith("{")] if path.exists() else []


def test_requests_granted_deferred_declined(env, tmp_path):
    out = tmp_path / "m.out"
    with daemon_thread(tmp_path / "ctl.sqlite", HostPool.local(3), "malleable-fill") as (d, c):
        r = c.submit(["sleep", "2"], 2, name="rigid", out=str(tmp_path / "r.out"))
        wait_for(lambda: states(c).get(r) == "RUNNING", 20, "the rigid job to start")
        m = c.submit([sys.executable, HEAT], 1, 1, 3, True, 120.0, name="heat", out=str(out),
                     env=dict(env, PROG_ITERS="120", PROG_SLEEP="0.08", PROG_REQUEST="5:3:0:0;80:2:0:0;95:5:0:0"))
        final = wait_final(c, [r, m], 90)
        info = c.info(m)
        rinfo = c.info(r)
    assert final == {r: "COMPLETED", m: "COMPLETED"}
    rows = lines(out)
    done = [x for x in rows if x.get("done")]
    assert done and done[0]["ok"] and done[0]["sizes"] == [1, 3, 2]
    answers = [(x["answer"], x["at"]) for x in rows if "answer" in x]
    assert [a for a, _ in answers] == ["granted", "granted", "refused"]
    assert answers[0][1] > 5 + 5                      # deferred: the rigid job held the hosts for seconds
    refused = [x for x in rows if x.get("answer") == "refused"][0]
    assert "within the job's 1..3 nodes" in refused["reason"]
    kinds = [(s["kind"], s["size"]) for s in info.steps]
    assert kinds == [("start", 1), ("expand", 3), ("shrink", 2)]
    assert info.steps[1]["t"] >= rinfo.job["end"]     # granted only once the rigid job's hosts were free
    texts = [e["text"] for e in info.events if e["kind"] == "request"]
    assert texts[:2] == ["asks for 3 nodes", "asks for 2 nodes"] and "declined" in texts[2]


def _cpu(procs):
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


def test_suspend_and_resume(env, tmp_path):
    out, status = tmp_path / "m.out", tmp_path / "status"
    state = str(tmp_path / "ctl.sqlite")
    with daemon_thread(tmp_path / "ctl.sqlite", HostPool.local(2)) as (d, c):
        rigid = c.submit(["sleep", "30"], 1, name="rigid", out=str(tmp_path / "r.out"))
        m = c.submit([sys.executable, HEAT, str(tmp_path)], 1, 1, 1, True, 120.0, name="heat", out=str(out),
                     env=dict(env, PROG_ITERS="60", PROG_SLEEP="0.05", PROG_STATUS=str(status)))
        wait_for(lambda: status.exists() and int(status.read_text() or 0) >= 5, 30, "the job to iterate")
        code, _, err = cli("suspend", "--state", state, str(rigid))
        assert code == 1 and "not a running malleable job" in err and err.count("\n") == 1
        code, _, err = cli("suspend", "--state", state, str(m))
        assert code == 0, err
        wait_for(lambda: any(e["kind"] == "suspend" and "told" in e["text"] for e in c.info(m).events), 10,
                 "the job to be told")
        time.sleep(0.5)                              # it reaches its safe point
        procs = [p for p in psutil.process_iter(["cmdline"]) if str(tmp_path) in " ".join(p.info["cmdline"] or [])]
        assert procs
        it0, cpu0 = int(status.read_text()), _cpu(procs)
        time.sleep(1.5)
        it1, cpu1 = int(status.read_text()), _cpu(procs)
        assert it1 == it0                            # no progress while suspended
        assert cpu1 - cpu0 < 0.15                    # and (nearly) no CPU: polls every 50 ms, no busy wait
        assert cli("suspend", "--state", state, str(m))[0] == 1          # already suspended
        code, _, err = cli("resume", "--state", state, str(m))
        assert code == 0, err
        final = wait_final(c, [m], 60)
        assert states(c)[rigid] == "RUNNING"
        c.call(P.Cancel(rigid))
    assert final[m] == "COMPLETED"
    done = [x for x in lines(out) if x.get("done")]
    assert done and done[0]["ok"]
