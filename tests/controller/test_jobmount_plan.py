"""Job mounts as a running job's hosts change, in the core (events in, actions and stored state out): an
expansion's order reaches the job only once its added host has the mount; a host the job left is unmounted only
after it was checked free of the job's processes; a failed mount gives the expansion up as a refused order and says
why; every outcome is a job event naming host, path and result; where the job is mounted survives a restart."""

from __future__ import annotations

from malleable.controller import ResizeJob, StartJob
from malleable.controller.daemon import _protocol as P
from malleable.controller.daemon._events import FsMounted, FsReady, Launch, MountFs, StartFs, StopFs, UnmountFs
from tests.controller._core_shell import Shell

M = 1 << 20
HOSTS = ("n1", "n2", "n3")
WHERE = "/mnt/bb/1/fs"


def scripted(decisions):
    left = [list(decisions)]

    def pol(snapshot, now):
        return left.pop() if left else []
    return pol


def make(tmp_path):
    return Shell(str(tmp_path / "s.sqlite"), HOSTS, scripted([]), bb_capacity=64 * M, mounts=True)


def mount_events(core, jid):
    return [(e["kind"], e["text"]) for e in core.store.events(jid) if e["kind"] in ("mount", "umount")]


def running_on_n1(core):
    m = P.Submit("j", ["prog"], 1, 1, 2, True, 100.0, "", "", "/work", {}, bb=16 * M)
    jid = core.submit(m, 0.0)
    core.policy = scripted([StartJob(jid, ("n1",))])
    (start,) = [a for a in core.schedule(1.0) if isinstance(a, StartFs)]
    assert start.mount_hosts == ("n1",)
    assert core.do(FsMounted(1.5, jid, "mount", WHERE, (("n1", ""),))) == []
    assert [a.job.id for a in core.do(FsReady(2.0, jid, "tcp://n1:5")) if isinstance(a, Launch)] == [jid]
    core.launched(jid, 100, 5.0, 2.1)
    core.register(P.Register(jid, 100, "n1", 1, ["n1"]), 2.2)
    return jid


def grow_to_n2(core, jid, now):
    core.policy = scripted([ResizeJob(jid, ("n1", "n2"))])
    core.schedule(now)
    assert core.jobs[jid].order.added == ("n2",)
    reply, acts = core.request(P.Poll(jid, 1), now + 0.1)
    assert type(reply) is P.Ok                                   # no order before the mount
    (mount,) = [a for a in acts if isinstance(a, MountFs)]
    assert (mount.hosts, mount.address) == (("n2",), "tcp://n1:5")
    reply, acts = core.request(P.Poll(jid, 1), now + 0.2)
    assert type(reply) is P.Ok and not acts                      # asked once, the order still waits
    assert core.store.load_job(jid).fs.mounting == ["n2"]


def test_an_expansion_waits_for_its_mount_and_a_host_left_is_unmounted_after_its_check(tmp_path):
    core = make(tmp_path)
    jid = running_on_n1(core)
    grow_to_n2(core, jid, 3.0)
    assert core.do(FsMounted(3.5, jid, "mount", WHERE, (("n2", ""),))) == []
    order = core.poll(P.Poll(jid, 1), 3.6)
    assert (order.procs, order.hosts) == (2, ["n2"])             # now the job may spawn there
    core.committed(P.Committed(jid, order.seq, "expand", 1, 2, 0.3, [], ["n1", "n2"], 0), 3.8)
    assert core.store.load_job(jid).fs.mounted == ["n1", "n2"]

    core.policy = scripted([ResizeJob(jid, ("n1",))])
    core.schedule(4.0)
    order = core.poll(P.Poll(jid, 1), 4.1)
    acts = core.committed(P.Committed(jid, order.seq, "shrink", 2, 1, 0.2, ["n2"], ["n1"], 0), 4.2)
    assert not [a for a in acts if isinstance(a, UnmountFs)]      # its processes there may still run
    assert [h.name for h in core.draining()] == ["n2"]
    acts = core.host_clean("n2", 4.5)                              # checked: none of them is left
    assert [a for a in acts if isinstance(a, UnmountFs)] == [UnmountFs(jid, ("n2",))]
    assert core.store.load_job(jid).fs.mounted == ["n1"]
    core.do(FsMounted(4.7, jid, "umount", WHERE, (("n2", ""),)))
    assert mount_events(core, jid) == [("mount", f"{WHERE} on n1: done"), ("mount", f"{WHERE} on n2: done"),
                                       ("umount", f"{WHERE} on n2: done")]
    again = make(tmp_path)                                         # where it is mounted is stored with the job
    assert again.jobs[jid].fs.mounted == ["n1"]
    (stop,) = [a for a in again.exited(jid, 0, 9.0) if isinstance(a, StopFs)]
    assert stop.mount_hosts == ("n1",)                             # unmounted at the end, after the stage-out


def test_a_failed_mount_gives_the_expansion_up_and_says_why(tmp_path):
    core = make(tmp_path)
    jid = running_on_n1(core)
    grow_to_n2(core, jid, 3.0)
    core.do(FsMounted(3.5, jid, "mount", WHERE, (("n2", "fuse: device not found"),)))
    j = core.jobs[jid]
    assert j.order is None and j.hosts == ["n1"] and j.fs.mounted == ["n1"] and j.fs.mounting == []
    assert core.hosts["n2"].drain == jid                           # checked before anyone uses it again
    assert core.poll(P.Poll(jid, 1), 3.6) is None                  # the job never hears of the order
    assert mount_events(core, jid)[-1] == ("mount", f"{WHERE} on n2: failed: fuse: device not found")
    refused = [e["text"] for e in core.store.events(jid) if e["kind"] == "refused"]
    assert refused == ["order 1 (expand to 2): mounting the job's file system on n2: fuse: device not found"]
    assert not [a for a in core.host_clean("n2", 4.0) if isinstance(a, UnmountFs)]   # nothing mounted there
