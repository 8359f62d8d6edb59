"""``malleable history`` as sacct: read from the state file a real daemon wrote (the daemon stopped, or killed),
with sacct's filters, ``ExitCode`` as ``N:S`` and ``Elapsed`` as ``HH:MM:SS``; the file is never changed."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import time

import pytest

from malleable.controller.daemon import _protocol as P
from malleable.controller.daemon._hostpool import HostPool, scan_tagged
from tests._procs import running
from tests.controller._cli_util import cli_env
from tests.controller._daemon_util import cli, daemon_thread, wait_final, wait_for

pytestmark = pytest.mark.timeout(120)
env = pytest.fixture(cli_env, name="env")



def _ids(*argv: str) -> list[int]:
    code, out, err = cli("history", *argv, "--json")
    assert code == 0, err
    return [j["id"] for j in json.loads(out)["jobs"]]


def _files(folder) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def test_history_offline_from_a_real_daemons_state(env):
    state = str(env / "ctl.sqlite")
    t0 = time.time()
    with daemon_thread(env / "ctl.sqlite", HostPool.local(2)) as (d, c):
        ok = c.submit(["sleep", "1.2"], nodes=1, name="ok", cwd=str(env))
        bad = c.submit(["sh", "-c", "exit 3"], nodes=1, name="bad", cwd=str(env))
        gone = c.submit(["sleep", "300"], nodes=1, name="gone", cwd=str(env))
        # 3 s: the limit counts from the launch, and the job's sleep must run by then (mpiexec starts slowly under
        # load) for SIGTERM, not the kill wait's SIGKILL, to end it
        slow = c.submit(["sleep", "300"], nodes=1, name="slow", time_limit=3.0, cwd=str(env))
        other = c.submit(["true"], nodes=2, name="theirs", user="bo", cwd=str(env))
        # cancelled once its program runs (not while mpiexec still starts it): SIGTERM ends it, 0:15
        wait_for(lambda: any(p.name == "sleep" for p in scan_tagged(d.tag(gone)).get(d.tag(gone), [])), 60,
                 "gone's sleep to run")
        c.call(P.Cancel(gone))
        wait_final(c, [ok, bad, gone, slow, other], 60)
        t_mid = time.time()
        online = cli("history", "--controller", c.address, "--json")[1]
    before = _files(env)
    code, out, err = cli("history", "--state", state)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == (" JOBID NAME           USER     KIND      STATE      EXITCODE    ELAPSED     NODES  START")
    want = [(other, "theirs", "bo", "COMPLETED", "0:0"), (slow, "slow", "ann", "TIMEOUT", "0:15"),
            (gone, "gone", "ann", "CANCELLED", "0:15"), (bad, "bad", "ann", "FAILED", "3:0"),
            (ok, "ok", "ann", "COMPLETED", "0:0")]
    assert len(lines) == 1 + len(want)
    for line, (jid, name, user, st, code_) in zip(lines[1:], want, strict=True):
        nodes = 2 if jid == other else 1
        m = re.fullmatch(rf"{jid:>6} {name:<14} {user:<8} rigid     {st:<10} {code_:>8}   (\d\d:\d\d:\d\d) "
                         rf"{nodes:>9}  \d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\d", line)
        assert m, line
        if jid == ok:
            h, mi, sec = map(int, m.group(1).split(":"))        # sleep 1.2, rounded down as sacct does, and no
            assert 1 <= h * 3600 + mi * 60 + sec <= t_mid - t0     # longer than the daemon ran (a loaded machine)
    after = _files(env)
    assert {k: v for k, v in after.items() if k in before} == before          # reading changed nothing
    assert set(after) - set(before) <= {"ctl.sqlite-wal", "ctl.sqlite-shm"}  # SQLite's own (empty) log files
    assert not (env / "ctl.sqlite-wal").exists() or (env / "ctl.sqlite-wal").stat().st_size == 0
    offline = json.loads(cli("history", "--state", state, "--json")[1])
    assert offline == {**json.loads(online), "jobs": [
        {**j, "expected_start": None} for j in json.loads(online)["jobs"]]}   # same rows as the daemon gave

    # sacct's filters
    assert _ids("--state", state, "-s", "F,to") == [slow, bad]
    assert _ids("--state", state, "-s", "completed") == [other, ok]
    assert _ids("--state", state, "-j", f"{ok},{gone}") == [gone, ok]
    assert _ids("--state", state, "-u", "bo") == [other]
    assert _ids("--state", state, "-u", "ann,bo", "--limit", "2") == [other, slow]
    assert _ids("--state", state, "-S", "now") == []                       # all ended before now
    assert _ids("--state", state, "-S", time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t0 - 2))) == \
        [other, slow, gone, bad, ok]
    assert _ids("--state", state, "-E", time.strftime("%H:%M:%S", time.localtime(t0 - 2))) == []
    assert _ids("--state", state, "-E", "now", "-s", "CA") == [gone]
    assert t_mid > t0
    # one-line errors
    for argv, msg in (
        (("-s", "done"), "unknown job state 'done': use PENDING, STARTING, RUNNING, COMPLETED, FAILED, CANCELLED, "
                         "TIMEOUT or PD, CF, R, CD, F, CA, TO"),
        (("-j", "1,x"), "-j wants job ids separated by commas, got '1,x'"),
        (("-S", "now", "-E", "now-1hours"), "--endtime is before --starttime"),
        (("-S", "last week"), "bad time 'last week': use YYYY-MM-DD[THH:MM[:SS]], HH:MM[:SS], MM/DD[/YY], MMDD[YY], "
                              "today, midnight, noon or now[-N[seconds|minutes|hours|days|weeks]]"),
    ):
        assert cli("history", "--state", state, *argv) == (1, "", f"malleable history: error: {msg}\n")
    assert cli("history", "--state", str(env / "nope.sqlite")) == (
        1, "", f"malleable history: error: no controller state file {env}/nope.sqlite\n")
    (env / "text.sqlite").write_text("hello\n" * 200)
    assert cli("history", "--state", str(env / "text.sqlite")) == (
        1, "", f"malleable history: error: {env}/text.sqlite is not a controller state file (file is not a "
               "database)\n")


def test_history_after_the_daemon_was_killed(env):
    """kill -9 of the daemon: the state file (with its write-ahead log) still answers, showing the job running."""
    state = str(env / "ctl.sqlite")
    code, out, err = cli("controller", "start", "--local", "1", "--state", state)
    assert code == 0, err
    try:
        assert cli("submit", "--state", state, "-J", "orphan", "--", "sleep", "3")[0] == 0
        pid = json.loads(cli("controller", "status", "--state", state, "--json")[1])["pid"]
        wait_for(lambda: _row(state)["state"] == "RUNNING", 30, "the job to run")
    except BaseException:
        cli("controller", "stop", "--state", state, "--cancel-jobs")
        raise
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not running(pid), 10, "the daemon to die")
    assert (env / "ctl.sqlite-wal").exists()
    code, out, _ = cli("history", "--state", state)
    assert re.fullmatch(r" JOBID .*\n     1 orphan         ann      rigid     RUNNING           -   00:00:0\d "
                        r"        1  \S+\n", out), out
    assert cli("queue", "--state", state, "--timeout", "1")[0] == 1       # the daemon is gone: only history works
    wait_for(lambda: (env / "ctl.sqlite.d" / "jobs" / "1.rc").exists(), 20, "the orphaned job to end by itself")


def _row(state: str) -> dict:
    code, out, err = cli("history", "--state", state, "--json")
    assert code == 0, err
    return json.loads(out)["jobs"][0]



def test_history_format_as_sacct(env):
    """-o/--format: sacct's field names in any case, %WIDTH, right-aligned under dashes, cut values end with +;
    --helpformat lists the fields; a bad field is one line."""
    state = str(env / "ctl.sqlite")
    with daemon_thread(env / "ctl.sqlite", HostPool.local(3)) as (d, c):
        two = c.submit(["true"], nodes=2, name="a-rather-long-job-name", cwd=str(env))
        bad = c.submit(["sh", "-c", "exit 3"], nodes=1, name="bad", cwd=str(env))
        wait_final(c, [two, bad], 60)
        hosts = {j["id"]: j["hosts"] for j in json.loads(cli("history", "--state", state, "--json")[1])["jobs"]}
    code, out, err = cli("history", "--state", state, "-o", "jobid,JobName%10,state,ExitCode,NNodes,NodeList%12")
    assert (code, err) == (0, "")
    from malleable.launch import compress_hostlist

    assert out.splitlines() == [
        "       JobID    JobName      State ExitCode   NNodes     NodeList",
        "------------ ---------- ---------- -------- -------- ------------",
        f"{bad:>12}        bad     FAILED      3:0        1 {compress_hostlist(hosts[bad]):>12}",
        f"{two:>12} a-rather-+  COMPLETED      0:0        2 {compress_hostlist(hosts[two]):>12}"]
    assert sorted(hosts[two]) == ["local1", "local2"] and compress_hostlist(hosts[two]) == "local[1-2]"
    code, out, _ = cli("history", "--state", state, "--helpformat")
    assert out.split() == ["JobID", "JobName", "User", "Kind", "State", "ExitCode", "Elapsed", "Timelimit", "Submit",
                           "Start", "End", "NNodes", "Size", "NodeList", "WorkDir", "Reason"]
    for fmt, msg in (("JobID,Partition", "invalid field requested: 'Partition' (fields: JobID JobName User Kind State "
                                         "ExitCode Elapsed Timelimit Submit Start End NNodes Size NodeList WorkDir "
                                         "Reason)"),
                     ("JobID%0", "bad width in 'JobID%0': want FIELD%N with N >= 1"),
                     (",", "-o/--format names no field")):
        assert cli("history", "--state", state, "-o", fmt) == (1, "", f"malleable history: error: {msg}\n")
