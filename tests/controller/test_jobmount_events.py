"""Job mounts in a job's events, live on a local pool: the mount before the launch and the unmount after the
stage-out are events naming host, path and outcome, shown by ``malleable info``; a mount that fails says why in the
job's events and reason, and a link planted where a job's mount point is made is refused, not followed."""

from __future__ import annotations

import os

import pytest

from malleable.controller.daemon._hostpool import HostPool
from tests.controller._daemon_util import cli, daemon_thread, isolate, wait_final, wait_for
from tests.controller._mounts import fs_phase, mount_daemons, mounts_anywhere, root  # noqa: F401 - a fixture

M = 1 << 20


@pytest.fixture
def env(monkeypatch, tmp_path):
    isolate(monkeypatch, tmp_path)
    return dict(os.environ)


def mount_events(c, jid):
    return [(e["kind"], e["text"]) for e in c.info(jid).events if e["kind"] in ("mount", "umount")]


@pytest.mark.timeout(120)
def test_the_mount_and_the_unmount_are_job_events_that_info_shows(env, tmp_path, root, monkeypatch):
    from malleable.controller.daemon._jobmount import check_root

    with daemon_thread(tmp_path / "ctl.sqlite", HostPool.local(1), "fcfs-bb", bb_capacity=64 * M,
                       mount_root=check_root(root)) as (d, c):
        jid = c.submit(["sh", "-c", 'echo hello > "$MALLEABLE_FS_MOUNT/o.txt"'], 1, env=env, bb=16 * M,
                       stage_out=[f"/o.txt:{tmp_path}/o.txt"])
        assert wait_final(c, [jid], 60)[jid] == "COMPLETED"
        wait_for(lambda: fs_phase(c, jid) == "stopped", 60, "the stage-out and stop")
        where = f"{root}/{jid}/fs"
        assert mount_events(c, jid) == [("mount", f"{where} on local1: done"), ("umount", f"{where} on local1: done")]
        kinds = [e["kind"] for e in c.info(jid).events]
        assert kinds.index("mount") < kinds.index("start") and kinds.index("stage-out") < kinds.index("umount")
        monkeypatch.setenv("MALLEABLE_CONTROLLER", c.address)
        code, out, err = cli("info", str(jid), "--events", "20")
        assert code == 0, err
        shown = [ln.split(None, 2)[1:] for ln in out.splitlines() if ln.strip()[8:].lstrip().startswith(("mount ",
                                                                                                          "umount "))]
        assert [k for k, _ in shown] == ["mount", "umount"] and all(t.startswith(where[:60]) for _, t in shown), out
    assert (tmp_path / "o.txt").read_text() == "hello\n"


@pytest.mark.timeout(120)
def test_a_failed_mount_says_why_and_a_planted_link_is_not_followed(env, tmp_path, root):
    from malleable.controller.daemon._jobmount import check_root

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with daemon_thread(tmp_path / "ctl.sqlite", HostPool.local(1), "fcfs-bb", bb_capacity=64 * M,
                       mount_root=check_root(root)) as (d, c):
        os.symlink(elsewhere, f"{root}/1")                # where job 1's mount point would be made
        jid = c.submit(["sh", "-c", "true"], 1, env=env, bb=16 * M)
        assert jid == 1
        assert wait_final(c, [jid], 60)[jid] == "FAILED"
        (kind, text), = mount_events(c, jid)
        assert kind == "mount" and text.startswith(f"{root}/1/fs on local1: failed: ") and "Not a directory" in text
        assert "Not a directory" in c.info(jid).job["reason"]           # the job's reason says it too
        wait_for(lambda: fs_phase(c, jid) == "failed", 30, "its file system to be given up")
    assert os.listdir(elsewhere) == [] and os.stat(elsewhere).st_uid == os.geteuid()   # nothing made through it
    assert os.path.islink(f"{root}/1") and mounts_anywhere(root) == set() and not mount_daemons(root)
    os.unlink(f"{root}/1")
