"""State files written by the previous version, whose job records held each file system as a plain object: one
with a job file system in every phase restarts into the typed records, with the same restart actions, buffer and
later records as that version had (recorded from it), and every key of an old record reads back."""

from __future__ import annotations

import json

from malleable.controller.daemon._events import AttachFs, FsStopped, SaveHost, SaveJob, StartFs, StopFs
from malleable.controller.daemon._fsrecord import FsNote, FsPhase, JobFs, StagedFile
from malleable.controller.daemon._store import Store
from malleable.controller.sched import get_policy
from tests.controller._core_shell import Shell

G = 1 << 30
HOSTS = tuple(f"n{k}" for k in range(1, 10))

# what the previous version stored, field for field (written by it: one job per phase, then the daemon killed)
BASE = {"cmd": ["prog"], "nodes": 1, "min_nodes": 1, "max_nodes": 1, "malleable": False, "time_limit": 100.0,
        "out": "", "err": "", "cwd": "/work", "env": {}, "submit": 0.0, "priority": 0, "order": None, "seq": 0,
        "registered": False, "link_pid": 0, "unresponsive": False, "progress": {}, "cancel": False, "stop_at": 0.0,
        "killed_at": 0.0, "speedup": "", "constraint": "", "user": "", "paused": "", "bb": G, "fs_servers": 0,
        "fs_min": 1, "fs_max": 1, "fs_replicas": 0, "io_intensity": 0.0, "io_rate": 0.0, "stage_in": [],
        "stage_out": [], "hosts": [], "launched": False, "pid": 0, "pid_ctime": 0.0, "start": 0.0, "since": 0.0,
        "end": 0.0, "exit_code": None, "reason": "", "view": [1.0, 1.0, 0.0, 101.0, 0]}
RAN = {"launched": True, "pid_ctime": 5.0, "start": 2.0, "since": 2.0}
KEEP = ("growth wanted but no storage host is free or can be taken back; expand by 1: avg_d < -T (window [50.0, "
        "50.0, 50.0], RIO 500, T 100, avg_d -450.0)")

L = 100.0   # the jobs' time limit here: it bounds their staging


def fs(host, address="", **kw):
    return {"meta": host, "data": [host], "address": address, "stage_in": [], "stage_out": [], "error": "", **kw}


OLD = [  # id, state, fields, file system
    (1, "STARTING", {"hosts": ["n1"], "reason": "BurstBufferStageIn", "stage_in": [["/d/in.bin", "/in.bin"]]},
     {"phase": "starting", **fs("n1", stage_in=[["/d/in.bin", "/in.bin", 1234, ""]])}),
    (2, "STARTING", {"hosts": ["n2"]}, {"phase": "ready", **fs("n2", "tcp://n2:7002")}),
    (3, "RUNNING", {**RAN, "hosts": ["n3"], "pid": 103, "stage_out": [["/o", "/d/o"]], "fs_max": 2, "io_rate": 5e8},
     {"phase": "ready", **fs("n3", "tcp://n3:7003", data=["n3", "n8"]), "servers": [[1, "n3"], [2, "n8"]],
      "aio": 5e7, "samples": [5e7, 5e7, 5e7], "since": 0,
      "decisions": [{"t": 14.0, "kind": "keep", "host": "", "sid": 0, "reason": KEEP}], "scaling": "",
      "used": ["n8"], "last_change": 17.0}),
    (4, "COMPLETED", {**RAN, "hosts": ["n4"], "pid": 104, "end": 9.0, "exit_code": 0, "reason": "exit code 0",
                      "stage_out": [["/a", "/d/a"], ["/b", "/d/b"], ["/c", "/d/c"]]},
     {"phase": "staging-out", **fs("n4", "tcp://n4:7004", stage_out=[["/a", "/d/a", 10, ""],
                                                                      ["/b", "/d/b", 0, "timeout"]])}),
    (5, "FAILED", {**RAN, "hosts": ["n5"], "pid": 105, "end": 9.0, "exit_code": 3, "reason": "exit code 3"},
     {"phase": "stopping", **fs("n5", "tcp://n5:7005")}),
    (6, "CANCELLED", {"end": 1.5, "reason": "cancelled before it started"},
     {"old": {"phase": "abandoned", **fs("n6")}}),
    (7, "PENDING", {"priority": 2, "pid_ctime": 5.0, "reason": "Requeued", "view": None},
     {"old": {"phase": "stopping", **fs("n7", "tcp://n7:7007")}}),
    (8, "COMPLETED", {**RAN, "hosts": ["n8"], "pid": 108, "end": 9.0, "exit_code": 0, "reason": "exit code 0"},
     {"phase": "stopped", **fs("n8", "tcp://n8:7008"), "left": []}),
    (9, "FAILED", {"hosts": ["n9"], "end": 2.0, "reason": "file system: stage-in: /nope is not a readable file",
                   "stage_in": [["/nope", "/x"]]},
     {"phase": "failed", **fs("n9", error="stage-in: /nope is not a readable file")}),
]
HOST_ROWS = [("n1", 0, 1, None, 0.0, ""), ("n2", 1, 2, None, 0.0, ""), ("n3", 2, 3, None, 0.0, ""),
             ("n4", 3, None, 4, 9.0, ""), ("n5", 4, None, 5, 9.0, ""), ("n6", 5, None, None, 0.0, ""),
             ("n7", 6, None, 7, 3.2, "failure"), ("n8", 7, None, 8, 9.0, ""), ("n9", 8, None, 9, 2.0, "")]


def old_state(path: str) -> None:
    store = Store(path)
    jobs = [SaveJob(jid, state, json.dumps({**BASE, "id": jid, "name": f"j{jid}", "state": state, **fields,
                                            "fs": f})) for jid, state, fields, f in OLD]
    store.apply([*jobs, *(SaveHost(*row) for row in HOST_ROWS)])
    store.close()


def stored_fs(shell: Shell, jid: int) -> dict:
    return json.loads(shell.store.db.execute("SELECT rec FROM jobs WHERE id=?", (jid,)).fetchone()[0])["fs"]


def test_a_state_of_the_previous_version_restarts_into_typed_records(tmp_path):
    path = str(tmp_path / "old.sqlite")
    old_state(path)
    sh = Shell(path, HOSTS, get_policy("fcfs-bb"), bb_capacity=4 * G)
    # what the previous version did at this restart: each file system being started or stopped is stopped again
    # (the rest of a stage-out first), the running job's is taken over
    assert sh.first == [StopFs(1, "", ("n1",), (), limit=L), StopFs(2, "tcp://n2:7002", ("n2",), (), limit=L),
                        AttachFs(3, "tcp://n3:7003", ((1, "n3"), (2, "n8"))),
                        StopFs(4, "tcp://n4:7004", ("n4",), (("/b", "/d/b"), ("/c", "/d/c")), limit=L),
                        StopFs(5, "tcp://n5:7005", ("n5",), (), limit=L), StopFs(6, "", ("n6",), (), limit=L),
                        StopFs(7, "tcp://n7:7007", ("n7",), (), limit=L)]
    assert sh.snapshot(20.0).bb_free == 27 * G and sh.snapshot(20.0).free == ("n6",)
    assert sorted(sh.jobs) == [1, 2, 3, 7]
    for jid, was in ((1, FsPhase.STARTING), (2, FsPhase.READY), (7, FsPhase.STOPPING)):
        f = sh.jobs[jid].fs
        assert f.phase is FsPhase.NONE and f.old is sh.core.state.stopping[jid].fs
        assert f.old.phase is FsPhase.ABANDONED and f.old.restarted is was
    run = sh.jobs[3].fs
    assert run.phase is FsPhase.READY and run.taken_over and run.servers == [(1, "n3"), (2, "n8")]
    assert run.samples == [5e7] * 3 and run.since == 0 and run.last_change == 17.0 and run.used == ["n8"]
    assert run.decisions == [FsNote(14.0, "keep", "", 0, KEEP)] and run.aio == 5e7
    out = sh.core.state.stopping[4].fs
    assert out.phase is FsPhase.STAGING_OUT and out.restarted is FsPhase.STAGING_OUT
    assert out.stage_out == [StagedFile("/a", "/d/a", 10, "")]             # the failed copy is done again
    stopping = sh.core.state.stopping
    assert stopping[6].fs.phase is FsPhase.ABANDONED and stopping[5].fs.phase is FsPhase.STOPPING
    # each stop ends as it did: the jobs still waiting get a new file system, the buffer comes back
    starts = {jid: [type(a) for a in sh.do(FsStopped(30.0 + jid, jid, ()))] for jid in range(1, 10)}
    assert starts[1] == starts[2] == [StartFs] and all(not starts[j] for j in range(3, 10))
    assert sh.snapshot(40.0).bb_free == 33 * G
    for jid, phase in ((1, "starting"), (2, "starting"), (3, "ready"), (4, "stopped"), (5, "stopped"),
                       (6, "stopped"), (8, "stopped"), (9, "failed")):
        assert stored_fs(sh, jid)["phase"] == phase
    assert stored_fs(sh, 7) == {} and stored_fs(sh, 4)["stage_out"] == [["/a", "/d/a", 10, ""]]
    assert [stored_fs(sh, j)["restarted"] for j in (4, 5, 6)] == ["staging-out", "stopping", "abandoned"]
    for j in sh.jobs.values():                                       # the new form reads back the same
        assert JobFs.from_dict(json.loads(json.dumps(j.fs.to_dict()))) == j.fs
    again = Shell(path, HOSTS, get_policy("fcfs-bb"), bb_capacity=4 * G)
    assert again.first == [StopFs(1, "", ("n1",), (), limit=L), StopFs(2, "", ("n2",), (), limit=L),
                           AttachFs(3, "tcp://n3:7003", ((1, "n3"), (2, "n8")))]
    assert again.jobs[3].fs == sh.jobs[3].fs


def test_every_key_an_old_record_held_reads_back_with_its_value():
    old = {"phase": "ready", **fs("n1", "tcp://n1:5", data=["n1", "n2"]), "servers": [[1, "n1"], [4, "n2"]],
           "aio": None, "samples": [1.5e6], "since": 3, "last_change": 2.5, "scaling": "add",
           "decisions": [{"t": 1.0, "kind": "reclaim", "host": "n2", "sid": 0, "reason": "r"}], "used": ["n2"],
           "lent": ["n2"], "reclaiming": "n3", "reclaim_since": 2.0, "taken_over": True, "lost": [4],
           "left": ["n2"], "restarted": "stopping"}
    rec = JobFs.from_dict(old)
    assert rec.phase is FsPhase.READY and rec.restarted is FsPhase.STOPPING and rec.lent == ["n2"]
    assert {k: v for k, v in rec.to_dict().items() if k in old} == old
    assert JobFs.from_dict({"old": old}) == JobFs(old=rec) and JobFs.from_dict({}).empty
    assert JobFs.from_dict(JobFs(old=rec).to_dict()) == JobFs(old=rec)
    assert json.loads(json.dumps(JobFs().to_dict())) == {}                 # a job without one stores {}
