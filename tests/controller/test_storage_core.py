"""Job file systems in the live core, without processes: the burst buffer as a resource, the StartFs/StopFs
actions it returns and how it reacts to FsReady, FsProgress, FsFailed and FsStopped."""

from __future__ import annotations

import pytest

from malleable.controller.daemon import _protocol as P
from malleable.controller.daemon._events import (
    AbortFs,
    AttachFs,
    FsAttached,
    FsFailed,
    FsFault,
    FsProgress,
    FsReady,
    FsStopped,
    HostDown,
    Launch,
    StartFs,
    StopFs,
)
from malleable.controller.daemon._fsrecord import FsPhase, JobFs
from malleable.controller.sched import get_policy
from malleable.errors import ProtocolError, Refusal
from tests.controller._core_shell import Shell

HOSTS = ("n1", "n2", "n3")
G = 1 << 30

L = 100.0   # the jobs' time limit here: it bounds their staging


def make(tmp_path, storage=(), cap=4 * G):
    return Shell(str(tmp_path / "s.sqlite"), HOSTS, get_policy("fcfs-bb"), bb_capacity=cap, storage_hosts=storage)


def submit(core, bb=0.0, nodes=1, servers=0, stage_in=(), stage_out=(), t=0.0):
    m = P.Submit("j", ["prog"], nodes, nodes, nodes, False, 100.0, "", "", "/work", {}, bb=bb, fs_servers=servers,
                 stage_in=list(stage_in), stage_out=list(stage_out))
    return core.submit(m, t)


def of(actions, kind):
    return [a for a in actions if isinstance(a, kind)]


def only_old(fs):
    """The job's file-system record holds only the earlier one, being stopped."""
    return fs.old is not None and fs == JobFs(old=fs.old)


def test_capacity_is_the_sum_over_storage_hosts_and_too_much_is_refused(tmp_path):
    core = make(tmp_path, storage=("n1", "n2"))
    assert core.snapshot(0.0).bb_total == 8 * G
    assert core.core.status()["bb_total"] == 8 * G and core.core.status()["storage_hosts"] == ["n1", "n2"]
    with pytest.raises(Refusal, match=r"more than the controller's whole burst buffer \(8G on 2"):
        submit(core, bb=9 * G)
    assert core.jobs == {} and core.store.load_job(1) is None           # nothing stored
    assert submit(core, bb=8 * G) == 1
    none = Shell(str(tmp_path / "t.sqlite"), HOSTS, get_policy("fcfs-bb"))
    with pytest.raises(Refusal, match="no burst buffer"):
        submit(none, bb=1)


def test_a_job_with_a_buffer_runs_after_its_file_system_is_ready_and_stops_it_after(tmp_path):
    core = make(tmp_path, storage=("n2",))
    jid = submit(core, bb=3 * G, servers=2, stage_in=["/d/in.bin:/in.bin"], stage_out=["/out.bin:/d/out.bin"])
    acts = core.schedule(1.0)
    assert of(acts, Launch) == []                                       # not before its file system
    (start,) = of(acts, StartFs)
    # the metadata server on its host, the data servers on the storage host (it holds none itself)
    assert start == StartFs(jid, "n1", ("n2", "n2"), int(1.5 * G), (("/d/in.bin", "/in.bin"),), limit=L)
    assert core.jobs[jid].fs.phase == "starting" and core.jobs[jid].reason == "BurstBufferStageIn"
    assert of(core.schedule(1.5), StartFs) == []                        # asked once
    core.do(FsProgress(2.0, jid, "in", "/d/in.bin", "/in.bin", 1234))
    (launch,) = of(core.do(FsReady(2.5, jid, "tcp://n1:5000")), Launch)
    assert launch.job.fs.address == "tcp://n1:5000" and launch.job.start == 2.5
    rec = core.store.load_job(jid)
    assert rec.state == "RUNNING" and rec.fs.stage_in == [("/d/in.bin", "/in.bin", 1234, "")]
    core.launched(jid, 100, 5.0, 2.6)
    acts = core.exited(jid, 1, 9.0)                                    # failed: its files still come out
    assert of(acts, StopFs) == [StopFs(jid, "tcp://n1:5000", ("n1", "n2"), (("/out.bin", "/d/out.bin"),), limit=L)]
    rec = core.store.load_job(jid)
    assert rec.state == "FAILED" and rec.fs.phase == "staging-out"
    assert core.snapshot(9.1).bb_free == 1 * G                          # held until the servers are gone
    core.do(FsProgress(9.5, jid, "out", "/out.bin", "/d/out.bin", 77))
    core.do(FsStopped(10.0, jid, ()))
    rec = core.store.load_job(jid)
    assert rec.fs.phase == "stopped" and rec.fs.stage_out == [("/out.bin", "/d/out.bin", 77, "")]
    assert core.snapshot(10.1).bb_free == 4 * G
    kinds = [e["kind"] for e in core.store.events(jid)]
    assert kinds.count("fs-start") == 1 and "fs-ready" in kinds and "fs-stopped" in kinds


def test_buffers_that_do_not_fit_together_wait_with_the_reason(tmp_path):
    core = make(tmp_path, cap=2 * G)                                   # 6G over three hosts
    a, b = submit(core, bb=4 * G), submit(core, bb=4 * G)
    starts = of(core.schedule(1.0), StartFs)
    assert [s.job_id for s in starts] == [a]
    assert core.jobs[b].state == "PENDING" and core.jobs[b].reason == "BurstBufferResources"
    core.do(FsReady(1.5, a, "tcp://n1:1"))
    core.launched(a, 100, 5.0, 1.6)
    assert of(core.exited(a, 0, 3.0), StopFs)
    core.host_clean("n1", 3.1)
    assert of(core.schedule(3.2), StartFs) == []                       # a's servers still hold the buffer
    assert core.jobs[b].reason == "BurstBufferResources"
    core.do(FsStopped(4.0, a, ()))
    assert [s.job_id for s in of(core.schedule(4.1), StartFs)] == [b]
    assert core.jobs[b].reason == ""


def test_a_failed_stage_in_fails_the_job_with_the_reason_and_frees_everything(tmp_path):
    core = make(tmp_path)
    jid = submit(core, bb=G, stage_in=["/nope:/x"])
    assert of(core.schedule(1.0), StartFs)
    core.do(FsFailed(2.0, jid, "stage-in: /nope is not a readable file"))
    rec = core.store.load_job(jid)
    assert rec.state == "FAILED" and rec.reason == "file system: stage-in: /nope is not a readable file"
    assert rec.fs.phase == "failed" and not rec.launched
    assert core.snapshot(2.1).bb_free == 12 * G


def test_cancel_while_the_file_system_starts_stops_it_when_it_answers(tmp_path):
    core = make(tmp_path)
    jid = submit(core, bb=G)
    assert of(core.schedule(1.0), StartFs)
    core.cancel(jid, 1.5)
    assert core.store.load_job(jid).state == "CANCELLED"
    assert core.snapshot(1.6).bb_free == 11 * G                        # the servers starting still hold it
    assert of(core.do(FsReady(2.0, jid, "tcp://n1:9")), StopFs) == [StopFs(jid, "tcp://n1:9", ("n1",), ())]
    core.do(FsStopped(3.0, jid, ("n1",), "stop: timeout"))
    assert core.snapshot(3.1).bb_free == 12 * G
    assert "processes left on n1 were killed" in core.store.events(jid)[-1]["text"]


def test_stage_specs_are_checked_by_the_protocol(tmp_path):
    def check(**kw):
        m = P.Submit("j", ["prog"], 1, 1, 1, False, 0.0, "", "", "/w", {}, **kw)
        P._check_submit(m)

    check(bb=1.0, stage_in=["/a:/b"], stage_out=["/b:/c"])
    for kw, match in (({"stage_in": ["/a:/b"]}, "need a burst buffer"),
                      ({"bb": 1.0, "stage_in": ["/a"]}, "LOCAL:/FS/PATH"),
                      ({"bb": 1.0, "stage_in": ["/a:b"]}, "LOCAL:/FS/PATH"),
                      ({"bb": 1.0, "stage_out": ["b:/a"]}, "/FS/PATH:LOCAL"),
                      ({"bb": 1.0, "stage_in": ["a:/b"]}, "local path must be absolute"),
                      ({"bb": 1.0, "fs_servers": 65}, "between 1 and 64")):
        with pytest.raises(ProtocolError, match=match):
            check(**kw)


def test_a_restart_while_the_file_system_starts_stops_it_and_starts_a_new_one_after(tmp_path):
    core = make(tmp_path, storage=("n2",))
    jid = submit(core, bb=G, stage_in=["/d/in.bin:/in.bin"])
    assert of(core.schedule(1.0), StartFs)
    again = make(tmp_path, storage=("n2",))                            # the shell that was starting it is gone
    # its servers are stopped by their tag on the hosts recorded (no address yet), its buffer held meanwhile
    assert again.first == [StopFs(jid, "", ("n1", "n2"), (), limit=L)]
    assert again.jobs[jid].state == "STARTING" and only_old(again.jobs[jid].fs)
    assert again.core.state.stopping[jid].fs is again.jobs[jid].fs.old
    assert again.core.state.stopping[jid].fs.phase == "abandoned"
    assert again.snapshot(2.0).bb_free == 2 * G                        # the job's buffer and the old file system's
    assert of(again.schedule(2.0), StartFs) == []                      # not before the old one is gone
    (start,) = of(again.do(FsStopped(3.0, jid, ("n2",))), StartFs)    # then a new one, staged in again
    assert again.snapshot(3.1).bb_free == 3 * G
    assert start == StartFs(jid, "n1", ("n2",), G, (("/d/in.bin", "/in.bin"),), limit=L)
    (launch,) = of(again.do(FsReady(4.0, jid, "tcp://n1:8")), Launch)
    assert launch.job.fs.address == "tcp://n1:8"


def test_a_file_system_being_stopped_for_a_cancelled_or_requeued_job_is_stopped_again_after_a_restart(tmp_path):
    core = make(tmp_path)
    a, b = submit(core, bb=G), submit(core, bb=G)
    assert len(of(core.schedule(1.0), StartFs)) == 2
    core.cancel(a, 1.5)                                                # cancelled while its file system starts
    core.do(FsReady(2.0, b, "tcp://n2:7"))
    core.launched(b, 100, 5.0, 2.1)
    host = core.jobs[b].hosts[0]
    core.do(HostDown(3.0, host, "failure", 3.5))                       # b interrupted: back in the queue
    (stop,) = of(core.exited(b, None, 3.2), StopFs)                     # its processes gone: its servers stop
    assert core.jobs[b].state == "PENDING" and core.store.load_job(b).fs.old.phase == "stopping"
    again = make(tmp_path)                                             # the controller dies before either stop ends
    stops = {s.job_id: s for s in again.first}
    assert stops[a] == StopFs(a, "", ("n1",), (), limit=L) and stops[b] == StopFs(b, "tcp://n2:7", (host,), (), limit=L)
    assert again.snapshot(4.0).bb_free == 12 * G - 2 * G               # both old file systems' buffers held
    again.do(FsStopped(5.0, b, ()))
    assert again.store.load_job(b).fs.empty                            # stopped: b gets a new one when it starts
    again.do(FsStopped(5.1, a, ()))
    assert again.store.load_job(a).fs.phase == "stopped" and again.snapshot(5.2).bb_free == 12 * G


def test_a_restart_between_ready_and_launch_stops_that_file_system_at_its_address(tmp_path):
    core = make(tmp_path)
    jid = submit(core, bb=G)
    assert of(core.schedule(1.0), StartFs)
    rec = core.jobs[jid]
    rec.fs.phase, rec.fs.address = FsPhase.READY, "tcp://n1:5"     # FsReady handled, launch not yet saved
    core.store.save_job(rec)
    again = make(tmp_path)
    assert again.first == [StopFs(jid, "tcp://n1:5", ("n1",), (), limit=L)]
    assert only_old(again.jobs[jid].fs) and of(again.schedule(2.0), StartFs) == []


def test_a_restart_during_the_stage_out_does_the_rest_of_it_and_holds_the_buffer(tmp_path):
    core = make(tmp_path, storage=("n2",))
    outs = ["/a.bin:/d/a.bin", "/b.bin:/d/b.bin", "/c.bin:/d/c.bin"]
    jid = submit(core, bb=G, stage_out=outs)
    core.schedule(1.0)
    core.do(FsReady(2.0, jid, "tcp://n1:7"))
    core.launched(jid, 100, 5.0, 2.1)
    assert of(core.exited(jid, 0, 9.0), StopFs)
    core.do(FsProgress(9.5, jid, "out", "/a.bin", "/d/a.bin", 10))               # done
    core.do(FsProgress(9.6, jid, "out", "/b.bin", "/d/b.bin", 0, "timeout"))     # failed: tried again
    again = make(tmp_path, storage=("n2",))                            # killed before c and the stop
    assert again.first == [StopFs(jid, "tcp://n1:7", ("n1", "n2"), (("/b.bin", "/d/b.bin"), ("/c.bin", "/d/c.bin")), limit=L)]
    assert jid not in again.jobs and again.core.ended[jid] == "COMPLETED"
    assert again.snapshot(10.0).bb_free == 3 * G                       # held until the servers are gone
    again.do(FsProgress(10.5, jid, "out", "/b.bin", "/d/b.bin", 20))
    again.do(FsProgress(10.6, jid, "out", "/c.bin", "/d/c.bin", 30))
    again.do(FsStopped(11.0, jid, ()))
    rec = again.store.load_job(jid)
    assert rec.state == "COMPLETED" and rec.fs.phase == "stopped" and rec.fs.restarted == "staging-out"
    assert rec.fs.stage_out == [("/a.bin", "/d/a.bin", 10, ""), ("/b.bin", "/d/b.bin", 20, ""),
                                ("/c.bin", "/d/c.bin", 30, "")]
    assert again.snapshot(11.1).bb_free == 4 * G
    third = make(tmp_path, storage=("n2",))                            # stopped: nothing to do any more
    assert third.first == [] and third.snapshot(12.0).bb_free == 4 * G


def test_a_restart_while_stopping_stops_it_again(tmp_path):
    core = make(tmp_path)
    jid = submit(core, bb=G)
    core.schedule(1.0)
    core.do(FsReady(2.0, jid, "tcp://n1:7"))
    core.launched(jid, 100, 5.0, 2.1)
    assert of(core.exited(jid, 3, 9.0), StopFs)                       # nothing to stage out: "stopping"
    assert core.store.load_job(jid).fs.phase == "stopping"
    again = make(tmp_path)
    assert again.first == [StopFs(jid, "tcp://n1:7", ("n1",), (), limit=L)]
    assert again.snapshot(10.0).bb_free == 11 * G and again.jobs == {}
    again.do(FsStopped(11.0, jid, ()))
    assert again.snapshot(11.1).bb_free == 12 * G
    rec = again.store.load_job(jid)
    assert rec.fs.phase == "stopped" and rec.fs.restarted == "stopping" and rec.state == "FAILED"


def test_a_file_system_taken_over_is_resized_again_once_it_answers(tmp_path):
    core = make(tmp_path)
    jid = submit(core, bb=G)
    core.schedule(1.0)
    core.do(FsReady(2.0, jid, "tcp://n1:7"))
    core.launched(jid, 100, 5.0, 2.1)
    again = make(tmp_path)
    assert again.jobs[jid].fs.taken_over
    again.do(FsAttached(3.0, jid, "ServerUnavailable: no answer"))   # not answering: not resized
    assert again.jobs[jid].fs.taken_over
    again.do(FsAttached(3.5, jid))
    assert not again.jobs[jid].fs.taken_over and not again.store.load_job(jid).fs.taken_over


def test_replicas_go_from_the_submit_to_the_start_and_are_checked(tmp_path):
    core = make(tmp_path)
    m = P.Submit("j", ["prog"], 1, 1, 1, False, 100.0, "", "", "/work", {}, bb=G, fs_servers=2, fs_max=3,
                 fs_replicas=2)
    jid = core.submit(m, 0.0)
    assert core.store.load_job(jid).fs_replicas == 2
    (start,) = of(core.schedule(1.0), StartFs)
    assert start.replicas == 2 and len(start.data) == 2

    def check(**kw):
        P._check_submit(P.Submit("j", ["prog"], 1, 1, 1, False, 0.0, "", "", "/w", {}, **kw))

    check(bb=1.0, fs_servers=2, fs_replicas=2)
    for kw, match in (({"fs_replicas": 2}, "need a burst buffer"),
                      ({"bb": 1.0, "fs_replicas": 2}, r"between 1 and the file system's most data servers \(1\)"),
                      ({"bb": 1.0, "fs_servers": 2, "fs_max": 3, "fs_replicas": 4}, r"\(3\), got 4"),
                      ({"bb": 1.0, "fs_replicas": -1}, "got -1")):
        with pytest.raises(ProtocolError, match=match):
            check(**kw)


def test_a_restart_while_the_job_runs_takes_its_file_system_over_and_stops_it_after(tmp_path):
    core = make(tmp_path, storage=("n2",))
    jid = submit(core, bb=G, stage_out=["/o.bin:/d/o.bin"])
    assert of(core.schedule(1.0), StartFs)
    core.do(FsReady(2.0, jid, "tcp://n1:7"))
    core.launched(jid, 100, 5.0, 2.1)
    again = make(tmp_path, storage=("n2",))                            # the controller restarted on its state
    assert again.first == [AttachFs(jid, "tcp://n1:7", ())]
    assert again.jobs[jid].fs.phase == "ready" and again.snapshot(3.0).bb_free == 3 * G
    again.do(FsAttached(3.0, jid))
    assert again.store.events(jid)[-1]["kind"] == "fs-attach"
    acts = again.exited(jid, 0, 9.0)                                   # staged out and stopped as usual
    assert of(acts, StopFs) == [StopFs(jid, "tcp://n1:7", ("n1", "n2"), (("/o.bin", "/d/o.bin"),), limit=L)]
    again.do(FsStopped(10.0, jid, ()))
    assert again.store.load_job(jid).fs.phase == "stopped" and again.snapshot(10.1).bb_free == 4 * G


def test_a_file_system_that_does_not_answer_after_a_restart_or_loses_a_server_is_a_fault(tmp_path):
    core = make(tmp_path)
    jid = submit(core, bb=G)
    assert of(core.schedule(1.0), StartFs)
    core.do(FsReady(2.0, jid, "tcp://n1:7"))
    core.launched(jid, 100, 5.0, 2.1)
    again = make(tmp_path)
    again.do(FsAttached(3.0, jid, "ServerUnavailable: no answer"))
    ev = again.store.events(jid)[-1]
    assert ev["kind"] == "fs-fault" and "tcp://n1:7 does not answer after the restart" in ev["text"]
    again.do(FsFault(4.0, jid, (1,), "file system at tcp://n1:7: data server(s) 1 on n1 do not answer", ("n3",)))
    rec = again.store.load_job(jid)
    assert rec.fs.lost == [1] and "data server(s) 1 on n1" in rec.fs.error and rec.state == "RUNNING"
    assert again.store.events(jid)[-1]["kind"] == "fs-fault"
    (stop,) = of(again.exited(jid, 3, 9.0), StopFs)                   # still stopped after the job, the lost
    assert "n3" in stop.hosts                                          # server's host searched for leftovers too


def test_stage_in_runs_while_the_job_waits_and_its_buffer_is_counted_once(tmp_path):
    core = make(tmp_path, storage=("n3",))                             # 4G of buffer on n3
    a = submit(core, nodes=3)                                          # every host busy
    b = submit(core, bb=3 * G, servers=1, stage_in=["/d/in.bin:/in.bin"])
    acts = core.schedule(1.0)
    (start,) = of(acts, StartFs)                                       # b's file system, on the storage host
    assert start == StartFs(b, "n3", ("n3",), 3 * G, (("/d/in.bin", "/in.bin"),), limit=L)
    assert core.jobs[a].state == "RUNNING" and core.jobs[b].state == "PENDING"
    assert core.jobs[b].reason == "BurstBufferStageIn"
    assert core.core.status()["bb_free"] == 1 * G                        # held early, before its start
    assert core.snapshot(1.1).bb_free == 4 * G                          # (policies plan as without it)
    assert of(core.schedule(1.2), StartFs) == []                        # asked once
    core.do(FsProgress(2.0, b, "in", "/d/in.bin", "/in.bin", 99))
    assert of(core.do(FsReady(2.5, b, "tcp://n3:7")), Launch) == []     # staged in: it still waits for hosts
    core.schedule(2.6)
    assert core.jobs[b].state == "PENDING" and core.jobs[b].reason == "Resources"
    assert core.jobs[b].fs.phase == "ready"
    core.launched(a, 100, 5.0, 3.0)
    core.exited(a, 0, 4.0)
    for h in HOSTS:
        core.host_clean(h, 4.1)
    acts = core.schedule(4.2)
    (launch,) = of(acts, Launch)                                       # at once: its data is in place
    assert launch.job.id == b and launch.job.fs.address == "tcp://n3:7" and of(acts, StartFs) == []
    assert core.snapshot(4.3).bb_free == 1 * G                          # once, not twice
    core.launched(b, 101, 5.0, 4.4)
    assert of(core.exited(b, 0, 6.0), StopFs)
    core.do(FsStopped(7.0, b, ()))
    assert core.snapshot(7.1).bb_free == 4 * G
    kinds = [e["kind"] for e in core.store.events(b)]
    assert kinds.index("fs-ready") < kinds.index("start")


def test_a_planned_job_waits_for_buffer_with_slurms_reason_then_stages_in_before_its_hosts_are_free(tmp_path):
    core = make(tmp_path, storage=("n3",))
    a = submit(core, bb=3 * G, nodes=3)                                # every host, and 3G of the 4G
    b = submit(core, bb=2 * G, stage_in=["/d/in.bin:/in.bin"])
    assert [s.job_id for s in of(core.schedule(1.0), StartFs)] == [a]
    assert core.jobs[b].reason == "BurstBufferResources"               # planned (the head), buffer short
    core.do(FsReady(1.5, a, "tcp://n1:1"))
    core.launched(a, 100, 5.0, 1.6)
    assert of(core.exited(a, 0, 3.0), StopFs)
    assert of(core.schedule(3.1), StartFs) == []                        # a's servers still hold the buffer
    assert core.jobs[b].reason == "BurstBufferResources"
    core.do(FsStopped(4.0, a, ()))
    (start,) = of(core.schedule(4.1), StartFs)                         # a's hosts not checked yet: staged early
    assert start.job_id == b and core.jobs[b].state == "PENDING" and core.jobs[b].reason == "BurstBufferStageIn"
    assert [j.reason for j in core.core.queue()] == ["BurstBufferStageIn"]


def test_cancel_during_an_early_stage_in_releases_the_buffer_and_stops_the_servers(tmp_path):
    core = make(tmp_path, storage=("n3",))
    submit(core, nodes=3)
    b = submit(core, bb=3 * G, stage_in=["/d/big:/big"])
    assert of(core.schedule(1.0), StartFs)
    acts = core.cancel(b, 1.5)
    assert [x.job_id for x in of(acts, AbortFs)] == [b]                 # its stage-in is stopped
    assert core.store.load_job(b).state == "CANCELLED"
    assert core.snapshot(1.6).bb_free == 1 * G                          # held by the servers until they are gone
    core.do(FsFailed(2.0, b, "stage-in cancelled"))                    # the shell's answer to the abort
    assert core.snapshot(2.1).bb_free == 4 * G and core.core.ledger.bb_used == 0
    assert b not in core.core.ledger.queued and not core.core.state.stopping
