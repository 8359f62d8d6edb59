"""Job mounts of a malleable job whose hosts change, live on two namespace hosts: the job starts on one host with
its file system mounted there, grows onto the second, whose new process finds the mount at ``$MALLEABLE_FS_MOUNT``
and writes and reads through it (bytes checked, and staged out at the end); after a shrink, the second host's mount
is taken down once the job's process there ended, while the first host's goes on serving; every mount and unmount
is a job event naming host, path and outcome; nothing is left mounted after the job."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from malleable.controller.daemon._hostpool import HostPool, netns_of
from tests._procs import running
from tests.controller._daemon_util import daemon_thread, isolate, wait_final, wait_for
from tests.controller._mounts import checked_root, mount_daemons, mounts_anywhere, root  # noqa: F401 - a fixture
from tests.controller._users import unix_users
from tests.controller.test_identity import workdir  # noqa: F401 - a fixture: a folder test users can enter

pytestmark = pytest.mark.netns

M = 1 << 20
PY = sys.executable
PROG = str(Path(__file__).parent / "progs" / "mount_grow_prog.py")
WHERE = str(Path(__file__).parent / "progs" / "where_prog.py")


@pytest.fixture
def env(monkeypatch, tmp_path):
    isolate(monkeypatch, tmp_path)
    return dict(os.environ, MALLEABLE_ADAPT_TIMEOUT="40")


def body(host: str) -> bytes:
    return random.Random(host).randbytes(3 * 2**20 + 12345)


def events(c, jid, *kinds):
    return [(e["kind"], e["text"], e["t"]) for e in c.info(jid).events if e["kind"] in kinds]


@pytest.mark.timeout(300)
def test_a_job_grown_onto_a_host_has_its_mount_there_and_loses_it_after_leaving(env, tmp_path, root,
                                                                                netns_cluster):
    from malleable.controller.daemon._jobmount import check_root

    first, second = netns_cluster.hosts[:2]
    pool = HostPool.from_hosts([f"{first},{second}"], netns_cluster.launcher)
    with daemon_thread(tmp_path / "ctl.sqlite", pool, "malleable-fill", bb_capacity=256 * M,
                       mount_root=check_root(root)) as (d, c):
        jid = c.submit([PY, PROG, str(tmp_path)], 1, 1, 2, True, out=str(tmp_path / "m.out"), env=env, bb=64 * M,
                       stage_out=[f"/from-{second}.bin:{tmp_path}/back.bin"])
        where = f"{root}/{jid}/fs"
        joined = tmp_path / f"joiner-{second}.json"
        wait_for(lambda: joined.exists() or c.info(jid).job["state"] not in ("PENDING", "STARTING", "RUNNING"),
                 120, "the job to grow onto the second host")
        assert joined.exists(), (c.info(jid).events[-12:], (tmp_path / "m.out").read_text()[-3000:])
        got = json.loads(joined.read_text())
        assert got["mine"] is True and got["others"] == {f"from-{first}.bin": True, f"from-{second}.bin": True}
        assert under(root, got["mounts"]) == [where]        # its own host's mount, at the job's path
        mounted = events(c, jid, "mount")
        assert [t for _, t, _ in mounted] == [f"{where} on {first}: done", f"{where} on {second}: done"]
        grown = [s for s in c.info(jid).steps if s["kind"] == "expand"]
        assert grown and grown[0]["hosts"] == [first, second] and mounted[1][2] < grown[0]["t"]   # mount, then grow
        daemons = mount_daemons(root)
        assert sorted(netns_of(p) for p in daemons) == sorted(pool.ns_inode(h) for h in (first, second))

        # a rigid job takes the second host: the malleable job shrinks, its process there ends, then the mount goes
        r = c.submit([PY, WHERE, f"{d.cid}.{jid}", "120", str(tmp_path / "stop-rigid")], 1, out=str(tmp_path / "r.out"),
                     env=env)
        wait_for(lambda: any(t == f"{where} on {second}: done" for _, t, _ in events(c, jid, "umount")), 120,
                 "the second host's mount to be taken down")
        left = [t for k, t, t0 in events(c, jid, "host-free") if t.startswith(f"{second}:")]
        freed = min(t0 for k, t, t0 in events(c, jid, "host-free") if t.startswith(f"{second}:"))
        gone = [t0 for _, t, t0 in events(c, jid, "umount") if t == f"{where} on {second}: done"][0]
        assert left and freed <= gone                      # checked free of the job's processes first
        assert not running(got["pid"])
        wait_for(lambda: [netns_of(p) for p in mount_daemons(root)] == [pool.ns_inode(first)], 30,
                 "only the first host's mount daemon to be left")
        assert {m for pid, m in mounts_anywhere(root) if netns_of(pid) == pool.ns_inode(second)} == set()
        assert c.info(r).job["hosts"] == [second]

        (tmp_path / "stop").touch()                        # the malleable job ends first (it would grow back)
        assert wait_final(c, [jid], 90)[jid] == "COMPLETED", (tmp_path / "m.out").read_text()[-3000:]
        (tmp_path / "stop-rigid").touch()
        assert wait_final(c, [r], 60)[r] == "COMPLETED"
        end = json.loads((tmp_path / "end.json").read_text())
        assert end["size"] == 1 and under(root, end["mounts"]) == [where]
        assert end["seen"] == {f"from-{first}.bin": True, f"from-{second}.bin": True}   # the first host's mount
        wait_for(lambda: (c.info(jid).job.get("fs") or {}).get("phase") == "stopped", 60, "the stage-out")
        assert (tmp_path / "back.bin").read_bytes() == body(second)      # what the grown host wrote, byte for byte
        wait_for(lambda: not mounts_anywhere(root) and not mount_daemons(root), 30, "every mount to go")
        assert [(k, t) for k, t, _ in events(c, jid, "mount", "umount")] == [
            ("mount", f"{where} on {first}: done"), ("mount", f"{where} on {second}: done"),
            ("umount", f"{where} on {second}: done"), ("umount", f"{where} on {first}: done")]
        assert sorted(os.listdir(root)) == [".netns-launch", ".ns"] and os.listdir(f"{root}/.ns") == []


def under(root: str, mounts: list[str]) -> list[str]:
    """The mount points under ``root`` (a login's namespace also shows the machine's other adhocfs mounts)."""
    return [m for m in mounts if m.startswith(root + "/")]


@pytest.mark.timeout(240)
def test_a_users_mount_on_a_host_joined_later_keeps_the_folder_the_users_and_refuses_a_planted_link(env, workdir,
                                                                                                   netns_cluster):
    """The namespace hosts share one file tree: a host a user's job grows onto finds the mount point's folder the
    user's already (the first host gave it). It is not taken back (the job's processes elsewhere use it); the mount
    point in it is checked by descriptor, and a link the user put there is refused, not followed."""
    from malleable.adhocfs._deploy import start_fs, stop_fs
    from malleable.controller.daemon._fsshell import fs_secret
    from malleable.controller.daemon._hostpool import TAG_VAR
    from malleable.controller.daemon._jobmount import JobMounts, check_root

    first, second = netns_cluster.hosts[:2]
    pool = HostPool.from_hosts([f"{first},{second}"], netns_cluster.launcher)
    secret = fs_secret(b"t" * 32, "tst", 7)
    top, dep = workdir, None
    with unix_users(1) as (ann,), checked_root(str(top / "mnt")) as path:
        try:
            mounts = JobMounts(pool, check_root(path), "tst")
            dep = start_fs(first, [first], launcher=pool.launcher_exec, token=secret.encode(), capacity=64 * M,
                           env=dict(os.environ, MALLEABLE_TOKEN=secret, **{TAG_VAR: "tst.fs7"}))
            assert mounts.mount(7, dep.address, secret, [first], ann.uid, ann.gid) == {first: ""}
            folder = f"{path}/7"
            assert os.stat(folder).st_uid == ann.uid
            seen = []                                      # the folder's owner, watched while the second host mounts
            done = {}

            def join():
                done.update(mounts.mount(7, dep.address, secret, [second], ann.uid, ann.gid, more=True))

            t = threading.Thread(target=join)
            t.start()
            while t.is_alive():
                seen.append(os.stat(folder).st_uid)
            t.join()
            assert done == {second: ""} and set(seen) == {ann.uid}   # never taken back from the user meanwhile
            pid = int(Path(f"{path}/.ns/7/{second}").read_text())
            assert netns_of(pid) == pool.ns_inode(second)
            as_ann = subprocess.run(["nsenter", f"--mount=/proc/{pid}/ns/mnt", "--", "setpriv", f"--reuid={ann.uid}",
                                     f"--regid={ann.gid}", "--clear-groups", "sh", "-c",
                                     f'head -c 1000000 /dev/urandom > {folder}/fs/x && cat {folder}/fs/x'],
                                    capture_output=True, timeout=60)
            assert as_ann.returncode == 0, as_ann.stderr
            assert len(as_ann.stdout) == 1000000 and os.stat(folder).st_uid == ann.uid
            assert mounts.unmount_hosts(7, [second]) == {second: ""}
            assert [netns_of(p) for p in mount_daemons(path)] == [pool.ns_inode(first)]

            # a link planted by the user where the mount point is: refused, nothing mounted through it
            target = top / "target"
            target.mkdir()
            os.mkdir(f"{path}/8", 0o700)
            os.symlink(target, f"{path}/8/fs")
            os.lchown(f"{path}/8/fs", ann.uid, ann.gid)
            os.chown(f"{path}/8", ann.uid, ann.gid)
            got = mounts.mount(8, dep.address, secret, [second], ann.uid, ann.gid, more=True)
            assert "Not a directory" in got[second], got
            assert not [m for _, m in mounts_anywhere(str(top)) if m.startswith(str(target))]
            assert os.listdir(target) == [] and os.stat(target).st_uid == 0
            mounts.unmount(7, [first, second])
            assert not mounts_anywhere(path) and not mount_daemons(path)
        finally:
            if dep is not None:
                stop_fs(dep.address, token=secret.encode())
            shutil.rmtree(f"{path}/8", ignore_errors=True)
