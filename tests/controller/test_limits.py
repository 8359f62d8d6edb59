"""Limits enforced like Slurm: SIGTERM at the time limit (or cancel), SIGKILL of whatever is left after the kill
wait, every process of the job gone (in its cgroup even when it left the process group and cleared its
environment), the host checked clean and idle; ``-t 0`` and ``UNLIMITED`` mean no limit."""

from __future__ import annotations

import time

import psutil
import pytest

from malleable.controller import StartJob
from malleable.controller.daemon import _protocol as P
from malleable.controller.daemon._cgroup import JobCgroups
from malleable.controller.daemon._events import Stop
from malleable.controller.daemon._hostpool import HostPool, scan_tagged
from malleable.controller.daemon._state import UNLIMITED_ESTIMATE
from tests._procs import running
from tests.controller._core_shell import Shell
from tests.controller._daemon_util import cli, daemon_thread, isolate, wait_final, wait_for

pytestmark = pytest.mark.timeout(120)

KILL_WAIT = 2.0
# ignores SIGTERM; with ESCAPE it also starts a process in a new session with an empty environment (no tag, not in
# the job's process group): only the job's cgroup still knows it
STUBBORN = "trap '' TERM; {escape} while :; do sleep 0.2; done"
ESCAPE = "(setsid sh -c 'exec env -i sh -c \"trap \\\"\\\" TERM; while :; do sleep 0.2; done\"' &);"


@pytest.fixture
def env(monkeypatch, tmp_path):
    return isolate(monkeypatch, tmp_path)


def cgroups_here() -> bool:
    cg = JobCgroups("probe-limits")
    ok = cg.root is not None
    cg.close()
    return ok


@pytest.mark.parametrize("how", ["timeout", "cancel", "escaped"])
def test_a_job_ignoring_sigterm_is_gone_within_the_kill_wait(env, how):
    if how == "escaped" and not cgroups_here():
        pytest.skip("no writable cgroup v2 hierarchy here: an escaped process is found by its tag only")
    script = STUBBORN.format(escape=ESCAPE if how == "escaped" else "")
    with daemon_thread(env / "ctl.sqlite", HostPool.local(1), kill_wait=KILL_WAIT) as (d, c):
        jid = c.submit(["sh", "-c", script], 1, time_limit=1.0 if how == "timeout" else 600.0,
                       out=str(env / "o.out"))
        want = 5 if how == "escaped" else 4            # shepherd, mpiexec, proxy, sh (+ the escaped one), sleeps
        wait_for(lambda: len(d.cgroups.pids(jid) or scan_tagged(d.tag(jid)).get(d.tag(jid), [])) >= want, 20,
                 "the job's processes")
        pids = set(d.cgroups.pids(jid)) | {p.pid for p in scan_tagged(d.tag(jid)).get(d.tag(jid), [])}
        if how == "escaped":
            assert any(not psutil.Process(p).environ().get("MALLEABLE_JOB_TAG") for p in pids)   # untagged
        if how != "timeout":
            c.call(P.Cancel(jid))
        stopped = wait_for(lambda: next((e["t"] for e in c.info(jid).events if e["kind"] in ("timeout", "cancel")),
                                        None), 20, "the stop")

        def gone() -> bool:
            return not any(running(p) for p in pids) and not d.cgroups.pids(jid)

        wait_for(gone, KILL_WAIT + 5 + 5, "every process of the job to be gone")
        took = time.time() - stopped
        assert took <= KILL_WAIT + 5, f"gone {took:.1f} s after the SIGTERM (kill wait {KILL_WAIT} s)"
        final = wait_final(c, [jid], 10)[jid]
        row = c.info(jid).job
        assert final == ("TIMEOUT" if how == "timeout" else "CANCELLED")
        assert row["exit_code"] == 128 + 9                    # the shepherd too was killed: sacct's 0:9
        kinds = [e["kind"] for e in c.info(jid).events]
        assert "kill" in kinds and kinds.index("kill") < kinds.index("end")
        wait_for(lambda: [r["state"] for r in c.rows(P.Nodes())] == ["idle"], 10, "the host checked and idle")
        assert not scan_tagged(d.tag(jid)) and not d.cgroups.pids(jid)


def test_a_job_that_ends_on_sigterm_is_not_killed(env):
    with daemon_thread(env / "ctl.sqlite", HostPool.local(1), kill_wait=30.0) as (d, c):
        jid = c.submit(["sh", "-c", "trap 'echo bye; exit 3' TERM; while :; do sleep 0.2; done"], 1, time_limit=1.0,
                       out=str(env / "o.out"))
        assert wait_final(c, [jid], 20)[jid] == "TIMEOUT"
        info = c.info(jid)
        assert info.job["exit_code"] == 3 and "kill" not in [e["kind"] for e in info.events]
        assert "bye" in (env / "o.out").read_text()
        assert info.job["end"] - info.job["start"] < 10


def test_escalation_in_the_core_and_no_limit(tmp_path):
    """The core's clock: SIGTERM at the limit, SIGKILL once the kill wait is over and again every 5 s while the
    job is there; a job without a limit is never stopped and the policies see a year."""
    sh = Shell(str(tmp_path / "s.sqlite"), ("h1", "h2"), lambda s, t: [], kill_wait=30.0, default_time=0.0)
    limited = sh.submit(P.Submit("a", ["x"], 1, 1, 1, False, 60.0, "", "", "/", {}), 0.0)
    free = sh.submit(P.Submit("b", ["x"], 1, 1, 1, False, 0.0, "", "", "/", {}), 0.0)           # default: none
    asked = sh.submit(P.Submit("c", ["x"], 1, 1, 1, False, 0.0, "", "", "/", {}, unlimited=True), 0.0)
    assert [sh.jobs[j].time_limit for j in (limited, free, asked)] == [60.0, 0.0, 0.0]
    assert sh.core.to_job(sh.jobs[free]).estimate == UNLIMITED_ESTIMATE
    sh.policy = lambda s, t: [StartJob(limited, ("h1",)), StartJob(free, ("h2",))]
    sh.schedule(1.0)
    sh.policy = lambda s, t: []
    sh.launched(limited, 10, 1.0, 1.0)
    sh.launched(free, 11, 1.0, 1.0)

    def stops(t):
        return [(a.job_id, a.hard) for a in sh.tick(t) if isinstance(a, Stop)]

    assert stops(60.0) == []
    assert stops(61.5) == [(limited, False)]                   # SIGTERM at the limit
    assert stops(80.0) == []
    assert stops(91.5) == [(limited, True)]                    # kill wait (30 s) over: SIGKILL
    assert stops(93.0) == []
    assert stops(96.6) == [(limited, True)]                    # still there: again
    assert stops(10 * 86400.0) == [(limited, True)]            # the unlimited job is never stopped
    sh.exited(limited, 137, 10 * 86400.0 + 1)
    assert sh.core.ended[limited] == "TIMEOUT"


def test_time_limit_words_on_the_command_line(env):
    state = str(env / "ctl.sqlite")
    with daemon_thread(env / "ctl.sqlite", HostPool.local(2)) as (d, c):
        ids = []
        for t in ("0", "UNLIMITED", "infinite", "1:00"):
            code, out, err = cli("submit", "--state", state, "--parsable", "-t", t, "--", "sleep", "30")
            assert code == 0, err
            ids.append(int(out))
        limits = {r["id"]: r["time_limit"] for r in c.rows(P.Queue())}
        assert [limits[i] for i in ids] == [0.0, 0.0, 0.0, 60.0]
        code, out, _ = cli("info", "--state", state, str(ids[0]))
        assert code == 0 and "TimeLimit=UNLIMITED" in out
        assert cli("submit", "--state", state, "-t", "-5", "--", "true")[0] == 1
    for bad, msg in ((["--kill-wait", "-1"], "--kill-wait must be between 0 and 86400 seconds, got -1"),
                     (["--host-check", "-2"], "--host-check must be between 0 and 86400 seconds, got -2"),
                     (["--default-time", "forever"], "bad time limit 'forever'")):
        code, _, err = cli("controller", "start", "--local", "1", "--state", str(env / "x.sqlite"), *bad)
        assert code == 1 and msg in err and err.count("\n") == 1
