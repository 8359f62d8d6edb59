"""Staging that never loses data and never acts through a link, with a real daemon, real adhocfs servers and real
files on a local pool: a stage-out into a missing folder keeps the job's file system (``StageOutFailed`` beside the
job's own exit code, buffer held) until ``malleable fs stage-out --job`` completes it or ``fs release --job`` drops
it; a link planted at the temporary name or a symbolic link, FIFO or link inside a folder given as a stage-in
source is never followed; the time limit and a cancel stop a stage-in, free the buffer and stop the servers;
folders stage in and out whole; a job whose start is planned stages in while its hosts still run another job (the
reasons ``BurstBufferStageIn`` and ``BurstBufferResources`` in ``queue``), and a cancel during that early stage-in
leaves no server and no buffer held."""

from __future__ import annotations

import contextlib
import os
import signal
import sys

import psutil
import pytest

from malleable.controller.daemon import _protocol as P
from malleable.controller.daemon._hostpool import HostPool, scan_tagged
from tests._procs import cmdline
from tests.controller._daemon_util import TOKEN, cli, daemon_thread, isolate, kill_tagged, wait_final, wait_for

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
    """A daemon on a local pool of two hosts (both storage hosts: ``2 * capacity`` of buffer); a file system a
    failing test left held is killed after it."""
    with daemon_thread(tmp_path / "ctl.sqlite", HostPool.local(2), "fcfs-bb", bb_capacity=capacity) as (d, c):
        try:
            yield d, c
        finally:
            kill_tagged(d.fs.cid)


def fs_phase(c, jid, *phases):
    fs = c.info(jid).job.get("fs") or {}
    return fs if fs.get("phase") in phases else None


def history_row(c, jid):
    return next(r for r in c.rows(P.History(0)) if r["id"] == jid)


def put_and_exit(src, dst, code=0):
    return ["sh", "-c", f"{PY} -m malleable fs mkdir -p /out && {PY} -m malleable fs put {src} {dst} && exit {code}"]


@pytest.mark.timeout(180)
def test_failed_stage_out_keeps_the_data_until_a_retry_completes_it(env, tmp_path, monkeypatch):
    data = os.urandom(M + 7)
    (tmp_path / "data.bin").write_bytes(data)
    dst = tmp_path / "result" / "sub" / "out.bin"                 # its folder does not exist
    with daemon(tmp_path, 8 * M) as (d, c):
        jid = c.submit(put_and_exit(tmp_path / "data.bin", "/out/r.bin", 3), 1, env=env, bb=4 * M,
                       stage_out=[f"/out/r.bin:{dst}"])
        assert wait_final(c, [jid], 60)[jid] == "FAILED"
        fs = wait_for(lambda: fs_phase(c, jid, "held", "stopped"), 60, "the stage-out to end")
        assert fs["phase"] == "held" and "No such file or directory" in fs["error"], fs
        row = history_row(c, jid)
        assert row["reason"].startswith("StageOutFailed") and row["exit_code"] == 3      # its own exit code kept
        code, out, _ = cli("history", "-j", str(jid), "-o", "JobID,State,ExitCode,Reason%40")
        assert code == 0 and out.splitlines()[-1].split(None, 3)[1:] == ["FAILED", "3:0", row["reason"]], out
        assert "StageOutFailed" in cli("info", str(jid))[1]
        code, out, _ = cli("queue")                                 # listed in stage-out, as squeue's SO
        assert code == 0 and out.splitlines()[1].split()[4] == "SO", out
        assert out.splitlines()[1].endswith(f"({row['reason']})") and len(out.splitlines()) == 2, out
        assert d.core.status()["bb_free"] == 12 * M                 # its buffer is still held
        assert scan_tagged(d.fs.tag(jid)), "the servers (and the data) are kept"
        monkeypatch.setenv("MALLEABLE_TOKEN", TOKEN)
        code, _, err = cli("fs", "stage-out", "--job", str(jid))   # still no folder: fails again, still kept
        assert code == 1 and "No such file or directory" in err and "still kept" in err, err
        assert fs_phase(c, jid, "held") and d.core.status()["bb_free"] == 12 * M
        (tmp_path / "result" / "sub").mkdir(parents=True)
        monkeypatch.setenv("MALLEABLE_TOKEN", TOKEN)
        code, out, err = cli("fs", "stage-out", "--job", str(jid))
        assert code == 0, err
        assert out.splitlines()[-1] == f"job {jid}: staged out; file system stopped, burst buffer free"
        assert dst.read_bytes() == data
        assert os.listdir(dst.parent) == ["out.bin"]               # no temporary file left
        assert fs_phase(c, jid, "stopped")["left"] == []
        assert cli("queue")[1].count("\n") == 1                    # no longer listed
        assert history_row(c, jid)["reason"] == "exit code 3" and d.core.status()["bb_free"] == 16 * M
        assert not scan_tagged(d.fs.tag(jid))
        code, _, err = cli("fs", "release", "--job", str(jid))     # nothing held any more: one line
        assert code == 1 and err.count("\n") == 1 and "no failed stage-out" in err, err


@pytest.mark.timeout(180)
def test_release_drops_a_held_file_system_and_frees_its_buffer(env, tmp_path, monkeypatch):
    (tmp_path / "data.bin").write_bytes(b"x" * 1000)
    with daemon(tmp_path, 8 * M) as (d, c):
        jid = c.submit(put_and_exit(tmp_path / "data.bin", "/out/r.bin"), 1, env=env, bb=4 * M,
                       stage_out=[f"/out/r.bin:{tmp_path}/missing/r.bin"])
        assert wait_final(c, [jid], 60)[jid] == "COMPLETED"
        wait_for(lambda: fs_phase(c, jid, "held"), 60, "the failed stage-out")
        code, out, err = cli("fs", "release", "--job", str(jid))
        assert code == 0, err
        wait_for(lambda: fs_phase(c, jid, "stopped"), 30, "the released file system to stop")
        assert d.core.status()["bb_free"] == 16 * M and not scan_tagged(d.fs.tag(jid))
        assert history_row(c, jid)["reason"].startswith("StageOutFailed")      # the data was not staged out
        assert not (tmp_path / "missing").exists()


@pytest.mark.timeout(180)
def test_a_link_planted_at_the_temporary_name_is_not_written_through(env, tmp_path):
    data = os.urandom(M + 1)
    (tmp_path / "data.bin").write_bytes(data)
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    out = tmp_path / "out.bin"
    for name in (f"out.bin.stage-out.{os.getpid()}", f".out.bin.stage-out.{os.getpid()}"):
        os.symlink(victim, tmp_path / name)                        # the names a stage-out might use
    with daemon(tmp_path, 8 * M) as (d, c):
        jid = c.submit(put_and_exit(tmp_path / "data.bin", "/out/r.bin"), 1, env=env, bb=4 * M,
                       stage_out=[f"/out/r.bin:{out}"])
        assert wait_final(c, [jid], 60)[jid] == "COMPLETED"
        wait_for(lambda: fs_phase(c, jid, "stopped", "held"), 60, "the stage-out to end")
    assert victim.read_bytes() == b"precious"
    assert out.read_bytes() == data and not out.is_symlink()


def _stage_in_fails(env, tmp_path, source, why):
    with daemon(tmp_path, 8 * M) as (d, c):
        jid = c.submit(["true"], 1, env=env, bb=4 * M, stage_in=[f"{source}:/in/x"])
        assert wait_final(c, [jid], 60)[jid] == "FAILED"
        row = history_row(c, jid)
        assert why in row["reason"] and row["reason"].count("\n") == 0, row["reason"]
        wait_for(lambda: d.core.status()["bb_free"] == 16 * M, 30, "the buffer to be free")
        assert not scan_tagged(d.fs.tag(jid))


@pytest.mark.timeout(120)
def test_a_symbolic_link_as_stage_in_source_is_refused(env, tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("not yours")
    os.symlink(secret, tmp_path / "link")
    _stage_in_fails(env, tmp_path, tmp_path / "link", "is a symbolic link: not staged")


@pytest.mark.timeout(120)
def test_a_fifo_as_stage_in_source_is_refused_in_one_line(env, tmp_path):
    os.mkfifo(tmp_path / "fifo")
    _stage_in_fails(env, tmp_path, tmp_path / "fifo", "is a FIFO: only regular files and folders are staged")


@pytest.mark.timeout(120)
def test_a_link_inside_a_stage_in_folder_is_refused(env, tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "ok").write_text("fine")
    os.symlink("/etc/hostname", tmp_path / "d" / "zlink")
    _stage_in_fails(env, tmp_path, f"{tmp_path}/d/", "d/zlink is a symbolic link")


def _big_sparse(path, size=64 * G):
    with open(path, "wb") as f:
        f.truncate(size)                                           # read as zeros: a copy takes minutes


@pytest.mark.timeout(180)
def test_the_time_limit_covers_the_stage_in(env, tmp_path):
    _big_sparse(tmp_path / "big")
    with daemon(tmp_path, 64 * G) as (d, c):
        jid = c.submit(["true"], 1, env=env, bb=100 * G, stage_in=[f"{tmp_path}/big:/big"], time_limit=2)
        assert wait_final(c, [jid], 60)[jid] == "FAILED"
        assert "time limit of 2 s reached" in history_row(c, jid)["reason"]
        wait_for(lambda: d.core.status()["bb_free"] == 128 * G, 30, "the buffer to be free")
        wait_for(lambda: not scan_tagged(d.fs.tag(jid)), 30, "the servers to stop")


@pytest.mark.timeout(180)
def test_cancel_during_stage_in_stops_it_frees_the_buffer_and_the_servers(env, tmp_path):
    _big_sparse(tmp_path / "big")
    with daemon(tmp_path, 64 * G) as (d, c):
        jid = c.submit(["true"], 1, env=env, bb=100 * G, stage_in=[f"{tmp_path}/big:/big"])
        wait_for(stagers, 60, "the stage-in to be copying")
        c.call(P.Cancel(jid))
        assert wait_final(c, [jid], 30)[jid] == "CANCELLED"
        wait_for(lambda: d.core.status()["bb_free"] == 128 * G, 30, "the buffer to be free")
        wait_for(lambda: not scan_tagged(d.fs.tag(jid)), 30, "the servers to stop")
        assert not d.fs.aborts                                      # no staging child left waited for


@pytest.mark.timeout(180)
def test_folders_stage_in_and_out_whole(env, tmp_path):
    tree = tmp_path / "tree"
    files = {"a.bin": os.urandom(M + 3), "sub/b.txt": b"hello\n", "sub/deeper/c.bin": os.urandom(4097),
             "empty/": None}
    for name, body in files.items():
        p = tree / name
        if body is None:
            p.mkdir(parents=True)
        else:
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(body)
    script = ["sh", "-c", f"{PY} -m malleable fs mv /data /result"]     # the job renames what was staged in
    with daemon(tmp_path, 8 * M) as (d, c):
        jid = c.submit(script, 1, env=env, bb=4 * M, stage_in=[f"{tree}/:/data/"],
                       stage_out=[f"/result/:{tmp_path}/back/"])
        assert wait_final(c, [jid], 60)[jid] == "COMPLETED"
        fs = wait_for(lambda: fs_phase(c, jid, "stopped", "held"), 60, "the stage-out to end")
        assert fs["phase"] == "stopped", fs
        assert [x[2] for x in fs["stage_in"]] == [M + 3 + 6 + 4097] == [x[2] for x in fs["stage_out"]]
    for name, body in files.items():
        p = tmp_path / "back" / name
        assert p.is_dir() if body is None else p.read_bytes() == body, name
    got = sorted(str(p.relative_to(tmp_path / "back")) for p in (tmp_path / "back").rglob("*"))
    assert got == ["a.bin", "empty", "sub", "sub/b.txt", "sub/deeper", "sub/deeper/c.bin"]


@pytest.fixture
def two_users():
    """Two Unix users made for the test (removed after it), each with a private home folder."""
    if os.geteuid() != 0:
        pytest.fail("the privilege test runs as root (as .ci/run does)")
    import pwd
    import secrets
    import subprocess

    names = [f"mstg{secrets.token_hex(3)}" for _ in range(2)]
    try:
        for n in names:
            subprocess.run(["useradd", "--create-home", "--home-dir", f"/tmp/{n}", "--shell", "/bin/sh", n],
                           check=True, capture_output=True, timeout=30)
            os.chmod(f"/tmp/{n}", 0o700)
        yield [pwd.getpwnam(n) for n in names]
    finally:
        for n in names:
            subprocess.run(["userdel", "--remove", n], capture_output=True, timeout=30)


@pytest.mark.timeout(120)
def test_staging_as_a_user_reaches_only_what_that_user_may(two_users, tmp_path, monkeypatch):
    from malleable.adhocfs._deploy import start_fs, stop_fs
    from malleable.controller.daemon._stager import run

    alice, bob = two_users
    mine, theirs = f"{alice.pw_dir}/mine.bin", f"{bob.pw_dir}/theirs.bin"
    for path, u in ((mine, alice), (theirs, bob)):
        with open(path, "wb") as f:
            f.write(os.urandom(5000))
        os.chown(path, u.pw_uid, u.pw_gid)
        os.chmod(path, 0o600)
    root_only = tmp_path / "root-only"
    root_only.write_bytes(b"root")
    root_only.chmod(0o600)
    monkeypatch.setenv("MALLEABLE_TOKEN", "stage-test")
    dep = start_fs("127.0.0.1", ["127.0.0.1"], token=b"stage-test", state=str(tmp_path / "fs"))
    try:
        me = {"uid": alice.pw_uid, "gid": alice.pw_gid}
        got = run(dep.address, "stage-test", "in", [(mine, "/a/mine.bin"), (theirs, "/a/theirs.bin")], **me)
        assert [(s.size, s.error) for s in got] == [(5000, ""), (0, f"{theirs}: Permission denied")]
        got = run(dep.address, "stage-test", "in", [(str(root_only), "/a/shadow")], **me)
        assert got[0].error == f"{root_only}: Permission denied"
        got = run(dep.address, "stage-test", "out", [("/a/mine.bin", f"{bob.pw_dir}/x"),
                                                      ("/a/mine.bin", f"{alice.pw_dir}/back.bin"),
                                                      ("/a/mine.bin", f"{tmp_path}/planted")], **me)
        assert got[0].error == f"destination folder {bob.pw_dir}: Permission denied"
        assert got[1].error == "" and got[1].size == 5000
        assert got[2].error.endswith("Permission denied")            # root's tmp folder: not alice's to write
        st = os.stat(f"{alice.pw_dir}/back.bin")
        assert (st.st_uid, st.st_gid) == (alice.pw_uid, alice.pw_gid)  # written as alice, not as root
        with open(mine, "rb") as a, open(f"{alice.pw_dir}/back.bin", "rb") as b:
            assert a.read() == b.read()
        assert sorted(os.listdir(bob.pw_dir)) == sorted(["theirs.bin", *[
            n for n in os.listdir(bob.pw_dir) if n.startswith(".")]])  # nothing new in bob's folder
        assert root_only.read_bytes() == b"root" and not (tmp_path / "planted").exists()
    finally:
        stop_fs(dep.address, timeout=10.0, token=b"stage-test")
        dep.wait(10)


@pytest.mark.timeout(120)
def test_servers_beyond_the_storage_hosts_and_the_per_host_limit_are_refused(env, tmp_path):
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\ntrue\n")
    script.chmod(0o755)
    with daemon_thread(tmp_path / "ctl.sqlite", HostPool.local(3), "fcfs-bb", bb_capacity=M,
                       storage_hosts=("local2", "local3"), fs_per_host=3) as (d, c):
        for option in ("--fs-servers", "--fs-max"):
            code, out, err = cli("submit", "--bb", "1K", option, "7", str(script))
            assert (code, out) == (1, "") and err == (
                f"malleable submit: error: {option} 7 is more than this controller runs for one job: 2 storage "
                "host(s) x 3 data server(s) per host (controller start --fs-per-host) = 6\n"), err
        assert c.rows(P.Queue()) == [] and c.rows(P.History(0)) == []         # nothing queued
        code, out, err = cli("submit", "--bb", "1K", "--fs-servers", "6", str(script))
        assert code == 0 and out.startswith("Submitted batch job"), err
    code, _, err = cli("controller", "start", "--local", "2", "--fs-per-host", "0", "--state", str(tmp_path / "x"))
    assert (code, err) == (1, "malleable controller: error: --fs-per-host must be between 1 and 64, got 0\n")


@pytest.mark.timeout(240)
def test_a_held_file_system_survives_a_controller_kill_and_is_retried_after_the_restart(env, tmp_path, monkeypatch):
    import json

    from malleable.controller.daemon._client import Client
    from malleable.controller.daemon._paths import addr_file
    from tests._procs import kill9
    from tests.controller._daemon_util import kill_leftovers

    state = str(tmp_path / "ctl.sqlite")
    monkeypatch.setenv("MALLEABLE_CONTROLLER_STATE", state)

    def start() -> int:
        code, _, err = cli("controller", "start", "--local", "2", "--policy", "fcfs-bb", "--bb-capacity", "8M",
                           "--state", state, "--tick", "0.2")
        assert code == 0, err
        return json.loads(addr_file(state).read_text())["pid"]

    data = os.urandom(M + 5)
    (tmp_path / "data.bin").write_bytes(data)
    pid, cid = start(), ""
    try:
        with Client(state=state, token=TOKEN.encode()) as c:
            cid = c.status()["controller_id"]
            jid = c.submit(put_and_exit(tmp_path / "data.bin", "/out/r.bin"), 1, env=env, bb=4 * M,
                           stage_out=[f"/out/r.bin:{tmp_path}/later/r.bin"])
            wait_for(lambda: fs_phase(c, jid, "held"), 90, "the failed stage-out")
        kill9(pid)
        assert scan_tagged(f"{cid}.fs{jid}"), "the held file system's servers outlive the controller"
        pid = start()
        with Client(state=state, token=TOKEN.encode()) as c:
            assert fs_phase(c, jid, "held") and c.status()["bb_free"] == 12 * M     # still held after the restart
            (tmp_path / "later").mkdir()
            monkeypatch.setenv("MALLEABLE_TOKEN", TOKEN)
            code, _, err = cli("fs", "stage-out", "--job", str(jid))
            assert code == 0, err
            assert (tmp_path / "later" / "r.bin").read_bytes() == data
            assert c.status()["bb_free"] == 16 * M and not scan_tagged(f"{cid}.fs{jid}")
        assert cli("controller", "stop", "--state", state)[0] == 0
        pid = 0
    finally:
        kill_leftovers(pid, cid)


# ------------------------------------------------------------------------------ stage-in while the job waits
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
    _big_sparse(tmp_path / "big")
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
