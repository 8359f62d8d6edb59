"""The daemon with real processes on a --local pool: rigid jobs, the Slurm-like command line, refusals."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from malleable.controller.daemon import _protocol as P
from malleable.controller.daemon._hostpool import HostPool
from tests.controller._daemon_util import TOKEN, cli, daemon_thread, states, wait_final, wait_for

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def env(monkeypatch, tmp_path):
    monkeypatch.setenv("MALLEABLE_TOKEN", TOKEN)
    monkeypatch.delenv("MALLEABLE_CONTROLLER", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_rigid_jobs_queue_in_order_with_outputs_and_exit_codes(env):
    state = env / "ctl.sqlite"
    prog = ("from mpi4py import MPI; c = MPI.COMM_WORLD; r = c.gather(c.rank)\n"
            "if c.rank == 0: print(*r, c.size, flush=True)")
    with daemon_thread(state, HostPool.local(3)) as (d, c):
        a = c.submit([sys.executable, "-c", prog + "; import time; time.sleep(1.0)"], nodes=2, out=str(env / "a.out"))
        b = c.submit(["sh", "-c", "echo err >&2; exit 3"], nodes=3, out=str(env / "b.out"), err=str(env / "b.err"))
        wait_for(lambda: [(r["id"], r["state"]) for r in c.rows(P.Queue())] == [(a, "RUNNING"), (b, "PENDING")],
                 10, "a running and b queued")
        st = wait_final(c, [a, b], 60)
        assert st == {a: "COMPLETED", b: "FAILED"}
        hist = {r["id"]: r for r in c.rows(P.History(0))}
        assert hist[a]["exit_code"] == 0 and hist[b]["exit_code"] == 3
        assert hist[b]["start"] >= hist[a]["end"]          # FCFS: b waited for a's hosts
        assert (env / "a.out").read_text() == "0 1 2\n"
        assert (env / "b.err").read_text() == "err\n" * 3
        wait_for(lambda: all(r["state"] == "idle" for r in c.rows(P.Nodes())), 10, "hosts checked and idle")



def sig_ignored(status: str, signum: int) -> bool:
    """Whether ``signum`` is in the SigIgn mask of a /proc/PID/status text."""
    mask = next(int(line.split()[1], 16) for line in status.splitlines() if line.startswith("SigIgn:"))
    return bool(mask >> (signum - 1) & 1)


def test_mpiexec_ignores_sigpipe_and_the_job_keeps_its_default(env):
    # hydra's mpiexec writes to the proxy of a host whose processes ended; dying of SIGPIPE there turned a job's
    # exit code 3 into 141. The job's own processes keep the default action (a shell pipeline ends as usual).
    import signal

    import psutil
    marker = env / "mask.txt"
    with daemon_thread(env / "ctl.sqlite", HostPool.local(1)) as (d, c):
        a = c.submit(["sh", "-c", f"cat /proc/self/status > {marker}; exec sleep 60"], nodes=1)
        wait_for(lambda: marker.exists() and "SigIgn" in marker.read_text(), 30, "the job's mask")
        hydra = [p for p in psutil.process_iter(["name", "cmdline"])
                 if (p.info["name"] or "").startswith("mpiexec") and str(marker) in " ".join(p.info["cmdline"] or ())]
        assert len(hydra) == 1
        assert sig_ignored(Path(f"/proc/{hydra[0].pid}/status").read_text(), signal.SIGPIPE)
        assert not sig_ignored(marker.read_text(), signal.SIGPIPE)
        c.call(P.Cancel(a))
        assert wait_final(c, [a], 30) == {a: "CANCELLED"}

def test_command_line(env):
    state = str(env / "ctl.sqlite")
    with daemon_thread(env / "ctl.sqlite", HostPool.local(2)) as (d, c):
        code, out, err = cli("submit", "--state", state, "-N", "1", "-J", "sleepy", "-t", "1:00", "-o",
                             str(env / "s-%j.out"), "--", "sh", "-c", "sleep 30")
        assert code == 0 and out.startswith("Submitted batch job "), err
        jid = int(out.split()[-1])
        code, out, _ = cli("submit", "--state", state, "--parsable", "--min", "1", "--max", "2", "--", "true")
        assert code == 0 and out.strip() == str(jid + 1)
        code, out, _ = cli("queue", "--state", state)
        assert code == 0 and "sleepy" in out and " R " in out and "JOBID" in out
        code, out, _ = cli("nodes", "--state", state)
        assert "local1" in out and "alloc" in out
        code, out, _ = cli("controller", "status", "--state", state)
        assert code == 0 and "pool: local, 2 hosts" in out
        # refusals: clear message, non-zero exit
        assert cli("submit", "--state", state, "-N", "3", "--", "true")[0:1] == (1,)
        code, _, err = cli("submit", "--state", state, "-N", "3", "--", "true")
        assert code == 1 and "only 2" in err
        code, _, err = cli("submit", "--state", state, "-t", "5 minutes", "--", "true")
        assert code == 1 and "bad time limit" in err
        code, _, err = cli("cancel", "--state", state, "999")
        assert code == 1 and "no job 999" in err
        code, _, err = cli("info", "--state", state, "999")
        assert code == 1 and "no job 999" in err
        assert cli("cancel", "--state", state, str(jid))[0] == 0
        wait_for(lambda: states(c).get(jid) == "CANCELLED", 20, "the cancel")
        code, out, _ = cli("info", "--state", state, str(jid))
        assert code == 0 and "State=CANCELLED" in out and "start" in out and "local1" in out
        code, out, _ = cli("history", "--state", state, "--json")
        rows = json.loads(out)["jobs"]
        assert {r["id"]: r["state"] for r in rows}[jid] == "CANCELLED"
        assert "MALLEABLE_TOKEN" not in out
    code, _, err = cli("queue", "--state", state, "--timeout", "1")
    assert code == 1 and "controller" in err          # no daemon: a clear error


def test_time_limit_kills_the_job(env):
    with daemon_thread(env / "ctl.sqlite", HostPool.local(1)) as (d, c):
        jid = c.submit(["sleep", "60"], nodes=1, time_limit=1.0, out=str(env / "t.out"))
        assert wait_final(c, [jid], 30)[jid] == "TIMEOUT"
        assert not d.procs


def test_wrong_secret_is_refused(env):
    from malleable.controller.daemon._client import Client
    from malleable.errors import AuthError

    with daemon_thread(env / "ctl.sqlite", HostPool.local(1)) as (d, c):
        with Client(c.address, token=b"wrong", timeout=5) as bad:
            with pytest.raises(AuthError):
                bad.call(P.Queue())
        assert c.rows(P.Queue()) == []
