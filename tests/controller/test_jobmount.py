"""Job mounts on a local pool, live: a job of a Unix user sees its file system at ``$MALLEABLE_FS_MOUNT`` as its
own (another user is kept out), what it writes there is staged out, and the mount is gone after; a controller
killed (SIGKILL) while a job runs leaves the mount to the job, which goes on through it after the restart, and
no mount is left anywhere once the job ended; a bad ``--bb-mount-root`` is one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from malleable.controller.daemon._client import Client
from malleable.controller.daemon._hostpool import HostPool, scan_tagged
from malleable.controller.daemon._jobmount import check_root
from malleable.controller.daemon._paths import addr_file
from tests._procs import kill9
from tests.controller._daemon_util import TOKEN, cli, daemon_thread, isolate, kill_leftovers, wait_final, wait_for
from tests.controller._mounts import checked_root, fs_phase, mount_daemons, mounts_anywhere
from tests.controller._users import unix_users
from tests.controller.test_identity import workdir  # noqa: F401 - a fixture: a folder test users can enter

M = 1 << 20
PY = sys.executable


@pytest.fixture
def env(monkeypatch, tmp_path):
    isolate(monkeypatch, tmp_path)
    tmp_path.chmod(0o755)
    return dict(os.environ)


@pytest.fixture
def root(workdir):
    """The mount root of the test, in a folder the test users can enter."""
    with checked_root(str(workdir / "mnt")) as path:
        yield path


def start(state: str, root: str) -> int:
    """``malleable controller start`` on one local slot with job mounts under ``root``; returns its pid."""
    code, _, err = cli("controller", "start", "--local", "1", "--policy", "fcfs-bb", "--bb-capacity", "64M",
                       "--state", state, "--tick", "0.2", "--bb-mount-root", root)
    assert code == 0, err
    return json.loads(addr_file(state).read_text())["pid"]


@pytest.mark.parametrize("bad, why", [
    ("rel/dir", "--bb-mount-root must be an absolute path, got 'rel/dir'"),
    ("{tmp}/file", "--bb-mount-root {tmp}/file: not a folder (Not a directory)"),
    ("{tmp}/open", "--bb-mount-root {tmp}/open may be written by other users (mode 777): chmod go-w {tmp}/open"),
])
def test_a_bad_mount_root_is_refused_in_one_line(env, tmp_path, bad, why):
    (tmp_path / "file").write_text("x")
    (tmp_path / "open").mkdir()
    (tmp_path / "open").chmod(0o777)
    state = tmp_path / "ctl.sqlite"
    code, out, err = cli("controller", "start", "--local", "1", "--bb-capacity", "8M", "--state", str(state),
                         "--bb-mount-root", bad.format(tmp=tmp_path))
    assert code != 0 and err.strip() == f"malleable controller: error: {why.format(tmp=tmp_path)}", err
    assert len(err.strip().splitlines()) == 1 and not state.exists()


@pytest.mark.timeout(120)
def test_a_users_job_has_its_mount_other_users_do_not_and_it_is_gone_after(env, tmp_path, workdir, root):
    with unix_users(2) as (ann, bob), daemon_thread(tmp_path / "ctl.sqlite", HostPool.local(2), "fcfs-bb",
                                                    bb_capacity=64 * M, mount_root=check_root(root)) as (d, c):
        home = workdir / "home"
        home.mkdir()
        os.chown(home, ann.uid, ann.gid)
        script = ('m=$MALLEABLE_FS_MOUNT; mkdir "$m/out" && yes abcdefg | head -c 1052000 > "$m/out/data.bin" && '
                  'echo "$m" $(stat -c "%u %s" "$m/out/data.bin") && touch go && '
                  'for i in $(seq 600); do [ -e stop ] && break; sleep 0.1; done')
        key = c.add_user(ann.name)
        with Client(c.address, key=key) as a:
            jid = a.submit(["sh", "-c", script], 1, out="j.out",
                           cwd=str(home), env={"PATH": os.environ["PATH"]}, bb=16 * M,
                           stage_out=[f"/out/data.bin:{home}/data.bin"])
        wait_for(lambda: (home / "go").exists() or fs_phase(c, jid) == "failed", 60, "the job to write")
        where = f"{root}/{jid}/fs"
        assert (home / "j.out").read_text().split() == [where, str(ann.uid), "1052000"]
        assert {m for _, m in mounts_anywhere(root)} == {where}
        as_bob = subprocess.run(["setpriv", f"--reuid={bob.uid}", f"--regid={bob.gid}", "--clear-groups", "ls",
                                 where], capture_output=True, text=True, timeout=30)
        assert as_bob.returncode != 0 and "Permission denied" in as_bob.stderr      # ann's folder: bob is kept out
        assert os.stat(f"{root}/{jid}").st_uid == ann.uid and os.stat(root).st_uid == 0
        (home / "stop").touch()
        assert wait_final(c, [jid], 60)[jid] == "COMPLETED", (home / "j.out").read_text()
        wait_for(lambda: fs_phase(c, jid) == "stopped", 60, "the file system to stop")
        assert (home / "data.bin").read_bytes() == (b"abcdefg\n" * 131500)[:1052000]
        assert mounts_anywhere(root) == set() and not mount_daemons(root)
        assert os.listdir(root) == []                                  # the mount point is removed too



@pytest.mark.timeout(180)
def test_a_job_staged_in_while_it_waited_gets_its_mount_at_its_launch(env, tmp_path, root):
    """An early stage-in makes the file system before the job has hosts; the mount comes at its launch."""
    data = os.urandom(3 * M + 11)
    (tmp_path / "in.bin").write_bytes(data)
    flag = tmp_path / "go"
    hold = ["sh", "-c", f"while [ ! -e {flag} ]; do sleep 0.05; done"]
    reader = ["sh", "-c", f'echo "$MALLEABLE_FS_MOUNT" > {tmp_path}/where && cat "$MALLEABLE_FS_MOUNT/in/in.bin" '
                          f"> {tmp_path}/got.bin"]
    with daemon_thread(tmp_path / "ctl.sqlite", HostPool.local(1), "fcfs-bb", bb_capacity=64 * M,
                       mount_root=check_root(root)) as (d, c):
        a = c.submit(hold, 1, out=str(tmp_path / "a.out"), env=env)
        wait_for(lambda: c.info(a).job["state"] == "RUNNING", 60, "job a to run")
        b = c.submit(reader, 1, out=str(tmp_path / "b.out"), env=env, bb=16 * M,
                     stage_in=[f"{tmp_path}/in.bin:/in/in.bin"])
        wait_for(lambda: fs_phase(c, b) == "ready", 60, "b's early stage-in")
        assert c.info(b).job["state"] == "PENDING" and mounts_anywhere(root) == set()   # no hosts yet: no mount
        flag.touch()
        states = wait_final(c, [a, b], 90)
        assert states == {a: "COMPLETED", b: "COMPLETED"}, (states, (tmp_path / "b.out").read_text())
        wait_for(lambda: fs_phase(c, b) == "stopped", 60, "b's file system to stop")
    assert (tmp_path / "where").read_text().strip() == f"{root}/{b}/fs"
    assert (tmp_path / "got.bin").read_bytes() == data                  # read through the mount made at launch
    assert mounts_anywhere(root) == set() and not mount_daemons(root) and os.listdir(root) == []

@pytest.mark.timeout(180)
def test_a_killed_controller_leaves_the_mount_to_its_job_and_none_after_it_ended(env, tmp_path, root):
    state = str(tmp_path / "ctl.sqlite")

    script = ("import os, time\n"
              "m = os.environ['MALLEABLE_FS_MOUNT']\n"
              "for i in range(400):\n"
              "    with open(f'{m}/part-{i % 4}', 'ab') as f:\n"
              "        f.write(i.to_bytes(4, 'little'))\n"
              "    open('tick', 'w').close()\n"
              "    if i == 200:\n"
              "        while not os.path.exists('restarted'):\n"
              "            time.sleep(0.05)\n")
    (tmp_path / "job.py").write_text(script)
    pid, cid = start(state, root), ""
    try:
        with Client(state=state, token=TOKEN.encode()) as c:
            cid = c.status()["controller_id"]
            jid = c.submit([PY, str(tmp_path / "job.py")], 1, out=str(tmp_path / "j.out"), env=env, bb=16 * M,
                           stage_out=[f"/part-{i}:{tmp_path}/part-{i}" for i in range(4)])
            wait_for(lambda: (tmp_path / "tick").exists(), 60, "the job to write through its mount")
        kill9(pid)
        assert mounts_anywhere(root) and mount_daemons(root)          # the mount outlives the controller
        pid = start(state, root)
        with Client(state=state, token=TOKEN.encode()) as c:
            assert {m for _, m in mounts_anywhere(root)} == {f"{root}/{jid}/fs"}   # kept: its job still runs
            (tmp_path / "restarted").touch()
            assert wait_final(c, [jid], 90)[jid] == "COMPLETED", (tmp_path / "j.out").read_text()[-2000:]
            wait_for(lambda: fs_phase(c, jid) == "stopped", 60, "the stage-out and stop")
        for k in range(4):
            want = b"".join(i.to_bytes(4, "little") for i in range(k, 400, 4))
            assert (tmp_path / f"part-{k}").read_bytes() == want
        assert mounts_anywhere(root) == set() and not mount_daemons(root) and os.listdir(root) == []
        assert not scan_tagged(f"{cid}.mnt")
        assert cli("controller", "stop", "--state", state)[0] == 0
        pid = 0
    finally:
        kill_leftovers(pid, cid)


@pytest.mark.timeout(180)
def test_a_mount_whose_job_died_with_the_controller_is_swept_at_the_restart(env, tmp_path, root):
    state = str(tmp_path / "ctl.sqlite")

    pid, cid = start(state, root), ""
    try:
        with Client(state=state, token=TOKEN.encode()) as c:
            cid = c.status()["controller_id"]
            jid = c.submit(["sh", "-c", 'echo x > "$MALLEABLE_FS_MOUNT/x" && touch ran && sleep 120'], 1,
                           out=str(tmp_path / "j.out"), env=env, bb=16 * M)
            wait_for(lambda: (tmp_path / "ran").exists(), 60, "the job to write through its mount")
        kill9(pid)
        for procs in scan_tagged(f"{cid}.{jid}").values():            # the job dies with it (not its mount)
            for p in procs:
                kill9(p.pid)
        assert {m for _, m in mounts_anywhere(root)} == {f"{root}/{jid}/fs"}
        pid = start(state, root)
        wait_for(lambda: not mounts_anywhere(root) and not mount_daemons(root) and os.listdir(root) == [], 60,
                 "the stale mount and its mount point to go")
        assert cli("controller", "stop", "--state", state)[0] == 0
        pid = 0
    finally:
        kill_leftovers(pid, cid)


def test_the_core_names_the_jobs_hosts_for_its_mount_only_when_the_controller_mounts(tmp_path):
    from malleable.controller.daemon import _protocol as P
    from malleable.controller.daemon._events import FsReady, StartFs, StopFs
    from malleable.controller.sched import get_policy
    from tests.controller._core_shell import Shell

    for mounts, want in ((True, ("n1", "n2")), (False, ())):
        core = Shell(str(tmp_path / f"{mounts}.sqlite"), ("n1", "n2", "n3"), get_policy("fcfs-bb"),
                     bb_capacity=M * 64, mounts=mounts)
        jid = core.submit(P.Submit("j", ["prog"], 2, 2, 2, False, 100.0, "", "", "/work", {}, bb=16 * M,
                                   stage_out=["/o:/d/o"]), 0.0)
        (start,) = [a for a in core.schedule(1.0) if isinstance(a, StartFs)]
        assert start.mount_hosts == want                      # mounted on both hosts of the job, before its launch
        core.do(FsReady(2.0, jid, "tcp://n1:5"))
        core.launched(jid, 100, 5.0, 2.1)
        (stop,) = [a for a in core.exited(jid, 0, 9.0) if isinstance(a, StopFs)]
        assert stop.mount_hosts == want and stop.stage_out == (("/o", "/d/o"),)   # taken down after the stage-out


@pytest.mark.timeout(120)
def test_a_failed_stage_out_keeps_the_data_but_not_the_mount(env, tmp_path, root, monkeypatch):
    body = bytes(range(256)) * 1000
    (tmp_path / "src.bin").write_bytes(body)
    with daemon_thread(tmp_path / "ctl.sqlite", HostPool.local(1), "fcfs-bb", bb_capacity=64 * M,
                       mount_root=check_root(root)) as (d, c):
        jid = c.submit(["sh", "-c", f'cp {tmp_path}/src.bin "$MALLEABLE_FS_MOUNT/r.bin"'], 1, env=env, bb=16 * M,
                       stage_out=[f"/r.bin:{tmp_path}/later/r.bin"])        # no such folder yet: the copy fails
        assert wait_final(c, [jid], 60)[jid] == "COMPLETED"
        wait_for(lambda: fs_phase(c, jid) == "held", 60, "the failed stage-out")
        wait_for(lambda: not mounts_anywhere(root) and not mount_daemons(root), 30, "the mount to go")
        assert os.listdir(root) == [] and c.info(jid).job["reason"].startswith("StageOutFailed")
        (tmp_path / "later").mkdir()
        monkeypatch.setenv("MALLEABLE_CONTROLLER", c.address)
        code, _, err = cli("fs", "stage-out", "--job", str(jid))           # the data was kept: the retry has it
        assert code == 0, err
        assert (tmp_path / "later" / "r.bin").read_bytes() == body
        wait_for(lambda: fs_phase(c, jid) == "stopped", 30, "the file system to stop")
