"""The storage policy (pure) and its wiring in the live core without processes: a job file system grows when its
achieved I/O rate stays below the requested one, shrinks when well above, keeps within the tolerance, respects
--fs-min/--fs-max, picks free storage hosts first, takes a host back from a malleable job only when nothing is
free, and makes room for a compute job given a host that an extra server runs on."""

from __future__ import annotations

from dataclasses import replace

import pytest

from malleable.controller.daemon import _protocol as P
from malleable.controller.daemon._cli_submit import resolve
from malleable.controller.daemon._events import FsReady, FsSample, FsScaled, ScaleFs, StartFs, StopFs
from malleable.controller.daemon._views import DaemonViews
from malleable.controller.sched import get_policy
from malleable.controller.sched._fspolicy import Donor, FsState, StorageRule, decide_storage
from malleable.errors import ConfigError, ProtocolError
from tests.controller._core_shell import Shell

MB = 1e6
RULE = StorageRule(tolerance=0.1, min_tolerance=1 * MB, k=3, cooldown=10.0)
STORAGE = ("n1", "n2", "n3", "n4")


def fs(samples, servers=((1, "n1"),), lo=1, hi=3, rio=100 * MB, **kw):
    return FsState(7, tuple(servers), lo, hi, rio, tuple(x * MB for x in samples), **kw)


def one(state, free=("n2", "n3"), taken=None, donors=(), now=100.0):
    (d,) = decide_storage(state, STORAGE, free, taken or {"n1": 7}, donors, now, RULE)
    return d


# -- the pure policy -------------------------------------------------------------------------------------------
def test_grows_when_the_achieved_rate_stays_below_the_requested_one_over_the_window():
    d = one(fs([40, 50, 45]))
    assert (d.kind, d.host) == ("add", "n2") and "avg_d < -T" in d.reason
    assert one(fs([40, 50])).kind == "keep"                          # window not full yet
    assert one(fs([200, 40, 50, 45], since_change=2)).kind == "keep"  # only 2 samples since the last change


def test_keeps_within_the_tolerance_and_during_the_cool_down():
    assert one(fs([95, 104, 99])).kind == "keep"                      # |avg_d| <= 10% of 100 MB/s
    assert one(fs([10, 10, 10], last_change=95.0)).kind == "keep"     # 5 s after a change, cool-down 10 s
    assert one(fs([10, 10, 10], last_change=80.0)).kind == "add"
    assert one(fs([10, 10, 10], rio=0.0)).kind == "keep"              # no --io-rate: nothing to chase


def test_shrinks_when_well_above_and_never_below_the_minimum():
    two = ((1, "n1"), (2, "n2"))
    d = one(fs([300, 310, 320], servers=two))
    assert (d.kind, d.sid, d.host) == ("remove", 2, "n2")             # the newest leaves
    assert one(fs([300, 310, 320], servers=two, lo=2)).kind == "keep"  # at --fs-min
    assert one(fs([300, 310, 320])).kind == "keep"                    # one server: never zero


def test_growth_stops_at_the_maximum():
    three = ((1, "n1"), (2, "n2"), (3, "n3"))
    d = one(fs([10, 10, 10], servers=three, hi=3), free=("n4",))
    assert d.kind == "keep" and "n_max=3" in d.reason


def test_host_choice_free_first_then_own_then_taken_back():
    # free storage hosts in pool order, not one that already serves this file system
    assert one(fs([10, 10, 10], servers=((1, "n2"),)), free=("n3", "n2")).host == "n3"
    # no free host: one of the job's own hosts (node-local)
    d = one(fs([10, 10, 10], own=("n1", "n4")), free=())
    assert (d.kind, d.host) == ("add", "n4")
    # nothing free, nothing of its own: a malleable job above its minimum gives its newest host
    donors = (Donor(3, "n3", 2, 2), Donor(4, "n4", 3, 1))
    d = one(fs([10, 10, 10]), free=(), donors=donors)
    assert (d.kind, d.host, d.donor) == ("reclaim", "n4", 4)
    # a job at its minimum is never shrunk; nor is the job whose file system grows
    d = one(fs([10, 10, 10]), free=(), donors=(Donor(3, "n3", 2, 2), Donor(7, "n4", 3, 1)))
    assert d.kind == "keep" and "no storage host" in d.reason


def test_a_host_is_taken_back_only_when_the_storage_gain_is_worth_the_compute_loss():
    from malleable.controller.sched._fspolicy import host_loss, storage_gain
    from malleable.controller.sched._model import Job, JobKind
    from malleable.controller.sched._speedup import amdahl

    # the gain in nodes' worth: one more server doubles a 1-node writer's rate (gain 1), adds half on two servers
    assert storage_gain(fs([10, 10, 10]), 3) == pytest.approx(1.0)
    assert storage_gain(fs([10, 10, 10], servers=((1, "n1"), (2, "n2"))), 3) == pytest.approx(0.5)
    assert storage_gain(fs([10, 10, 10], rio=12 * MB), 3) == pytest.approx(0.2)            # capped at RIO
    assert storage_gain(fs([10, 10, 10], intensity=0.5), 3) == pytest.approx(1 / 0.75 - 1)  # half its time in I/O
    assert storage_gain(fs([10, 10, 10], nodes=4), 3) == pytest.approx(4.0)                 # 4 nodes waiting on it
    # the loss from the speedup model: linear loses a whole node's worth, Amdahl's s = 0.3 at 2 nodes 0.7
    job = Job(1, 0.0, 2, 100.0, JobKind.MALLEABLE, 1, 2, 0.3)
    assert host_loss(amdahl, job, 2) == pytest.approx(0.7)
    assert host_loss(amdahl, replace(job, serial=0.0), 4) == pytest.approx(1.0)
    assert host_loss(amdahl, job, 1) == 0.0                                         # one node: nothing to give
    two = ((1, "n1"), (2, "n2"))
    # the cheapest donor gives the host, however many hosts the others have above their minimum
    d = one(fs([10, 10, 10]), free=(), donors=(Donor(3, "n3", 4, 1, 1.0), Donor(4, "n4", 2, 1, 0.4)))
    assert (d.kind, d.donor) == ("reclaim", 4) and "loses 0.40, gain 1.00" in d.reason
    # on two servers the gain (0.5) is below a linear job's loss: keep; above a badly scaling one's: take it back
    d = one(fs([10, 10, 10], servers=two), free=(), donors=(Donor(3, "n3", 2, 1, 1.0),))
    assert d.kind == "keep" and "would lose 1.00 nodes' worth for a gain of 0.50" in d.reason
    d = one(fs([10, 10, 10], servers=two), free=(), donors=(Donor(3, "n3", 2, 1, 0.4),))
    assert (d.kind, d.host) == ("reclaim", "n3")


def test_the_core_prices_a_host_with_the_job_s_measured_or_declared_intensity(tmp_path):
    core = Shell(str(tmp_path / "s.sqlite"), ("n1", "n2"), get_policy("fcfs-bb"), bb_capacity=1 << 30)
    jid = core.submit(P.Submit("w", ["prog"], 1, 1, 1, False, 100.0, "", "", "/work", {}, bb=float(1 << 28),
                               fs_min=1, fs_max=2, io_rate=500 * MB, io_intensity=0.25), 0.0)
    j = core.jobs[jid]
    assert core.core.parts.scaling.fs_state(j, 1.0).intensity == 0.25      # declared
    j.progress["io"] = {"io_seconds": 3.0, "seconds": 4.0, "bytes": 10}
    assert core.core.parts.scaling.fs_state(j, 1.0).intensity == 0.75      # measured replaces it
    j.progress.clear()
    j.io_intensity = 0.0
    assert core.core.parts.scaling.fs_state(j, 1.0).intensity == 1.0       # unknown: waits for its I/O


def test_a_host_being_taken_back_is_waited_for_then_used():
    assert one(fs([10, 10, 10], reclaiming="n4"), free=("n2",)).kind == "keep"     # not n2: one change at a time
    d = one(fs([10, 10, 10], reclaiming="n4"), free=("n4",))
    assert (d.kind, d.host) == ("add", "n4")


def test_an_extra_server_on_a_host_a_compute_job_was_given_leaves():
    two = ((1, "n1"), (2, "n3"))
    d = one(fs([100, 100, 100], servers=two), taken={"n1": 7, "n3": 9})
    assert (d.kind, d.sid, d.host) == ("remove", 2, "n3") and "job 9" in d.reason
    assert one(fs([100, 100, 100], servers=two, lo=2), taken={"n1": 7, "n3": 9}).kind == "keep"   # at --fs-min
    # shrinking removes a server on a host another job holds before the newest
    three = ((1, "n1"), (2, "n3"), (3, "n2"))
    d = one(fs([400, 400, 400], servers=three), taken={"n1": 7, "n3": 9}, free=("n2",))
    assert (d.kind, d.sid) == ("remove", 2)


# -- the options ------------------------------------------------------------------------------------------------
def opts(**kw):
    return resolve({"cmd": ["--", "true"], **kw}, lambda: 1)[0]


def test_submit_options_and_their_one_line_errors():
    o = opts(bb="1G", fs_min=1, fs_max=2, io_rate="200M")
    assert (o["fs_servers"], o["fs_min"], o["fs_max"], o["io_rate"]) == (1, 1, 2, 200 * 1024 * 1024)
    assert opts(bb="1G", fs_min=2)["fs_servers"] == 2
    o = opts(bb="1G", fs_servers=2)
    assert (o["fs_min"], o["fs_max"]) == (2, 2)
    for kw, msg in [({"fs_min": 3, "fs_max": 2}, "need --fs-min <= --fs-servers <= --fs-max"),
                    ({"fs_max": 65}, "--fs-max must be between 1 and 64"),
                    ({"fs_min": 0}, "at least 1"),
                    ({"io_rate": "fast"}, "--io-rate: expected a size"),
                    ({"io_rate": "0"}, "--io-rate must be more than 0")]:
        with pytest.raises(ConfigError, match=msg):
            opts(bb="1G", **kw)
    with pytest.raises(ConfigError, match="need a burst buffer"):
        opts(io_rate="1M")


def test_the_message_check_refuses_bad_bounds():
    key = b"k" * 32

    def roundtrip(**kw):
        m = P.Submit("j", ["p"], 1, 1, 1, False, 0.0, "", "", "/", {}, **kw)
        return P.decode(P.encode(m, key), key)[0]

    assert roundtrip(bb=1.0, fs_min=1, fs_max=2, io_rate=5.0).fs_max == 2
    with pytest.raises(ProtocolError, match="submit: need --fs-min <= --fs-servers <= --fs-max"):
        roundtrip(bb=1.0, fs_servers=3, fs_max=2)
    with pytest.raises(ProtocolError, match="need a burst buffer"):
        roundtrip(io_rate=5.0)


# -- the core --------------------------------------------------------------------------------------------------
def test_the_core_grows_a_running_job_file_system_and_records_it(tmp_path):
    core = Shell(str(tmp_path / "s.sqlite"), ("n1", "n2", "n3"), get_policy("fcfs-bb"), bb_capacity=1 << 30)
    m = P.Submit("j", ["prog"], 1, 1, 1, False, 100.0, "", "", "/work", {}, bb=float(1 << 28), fs_min=1, fs_max=2,
                 io_rate=500 * MB)
    jid = core.submit(m, 0.0)
    (start,) = [a for a in core.schedule(1.0) if isinstance(a, StartFs)]
    assert start.data == ("n1",)
    core.do(FsReady(2.0, jid, "tcp://n1:5000"))
    core.launched(jid, 100, 5.0, 2.1)
    acts = []
    for i, aio in enumerate([50 * MB, None, 60 * MB, 55 * MB]):
        acts += core.do(FsSample(10.0 + 2 * i, jid, aio, ((1, "n1"),)))
    grow = [a for a in acts if isinstance(a, ScaleFs)]
    assert grow == [ScaleFs(jid, "tcp://n1:5000", "add", "n2", 0, 1 << 28)]
    for t in (18.0, 19.0, 20.0):                                       # no second change while one is in flight
        assert not [a for a in core.do(FsSample(t, jid, 50 * MB, ((1, "n1"),))) if isinstance(a, ScaleFs)]
    core.do(FsScaled(21.0, jid, "add", "n2", 2))
    rec = core.store.load_job(jid)
    assert rec.fs.data == ["n1", "n2"] and rec.fs.servers == [(1, "n1"), (2, "n2")]
    assert [d.kind for d in rec.fs.decisions] == ["keep", "add"]          # window not full, then growth
    kinds = [e["kind"] for e in core.store.events(jid)]
    assert "fs-grow" in kinds and "fs-grown" in kinds
    # at --fs-max now: the rule keeps however slow it is
    acts = []
    for i in range(4):
        acts += core.do(FsSample(40.0 + 2 * i, jid, 50 * MB, ((1, "n1"), (2, "n2"))))
    assert not [a for a in acts if isinstance(a, ScaleFs)]
    assert "n_max=2" in core.jobs[jid].fs.decisions[-1].reason
    # the stop looks for leftovers on every host a server ran on
    (stop,) = [a for a in core.exited(jid, 0, 60.0) if isinstance(a, StopFs)]
    assert set(stop.hosts) == {"n1", "n2"}


def test_a_host_taken_back_from_a_malleable_job_is_lent_to_the_file_system_then_given_back(tmp_path):
    # malleable-fill grows a malleable job onto every free host: without the loan it would take the host back
    core = Shell(str(tmp_path / "s.sqlite"), ("n1", "n2", "n3"), get_policy("malleable-fill"), bb_capacity=1 << 30)
    mal = core.submit(P.Submit("m", ["prog"], 1, 1, 2, True, 100.0, "", "", "/work", {}), 0.0)
    core.schedule(0.5)
    core.launched(mal, 10, 1.0, 0.6)
    core.register(P.Register(mal, 10, "n1", 1, ["n1"]), 0.7)
    core.schedule(0.8)
    assert core.poll(P.Poll(mal, 1), 0.9).hosts == ["n2"]
    core.committed(P.Committed(mal, 1, "expand", 1, 2, 0.1, [], ["n1", "n2"], 0), 1.0)
    w = core.submit(P.Submit("w", ["prog"], 1, 1, 1, False, 100.0, "", "", "/work", {}, bb=float(1 << 28),
                             fs_min=1, fs_max=2, io_rate=500 * MB), 1.1)
    (start,) = [a for a in core.schedule(1.2) if isinstance(a, StartFs)]
    assert start.data == ("n3",)                                      # node-local on the writer's host
    core.do(FsReady(2.0, w, "tcp://n3:5000"))
    core.launched(w, 20, 5.0, 2.1)
    for i in range(3):                                                 # too slow: growth, nothing free
        core.do(FsSample(10.0 + 2 * i, w, 50 * MB, ((1, "n3"),)))
    assert core.jobs[w].fs.reclaiming == "n2" and core.jobs[mal].order is not None
    o = core.poll(P.Poll(mal, 2), 15.0)
    assert (o.procs, o.hosts) == (1, [])
    core.committed(P.Committed(mal, o.seq, "shrink", 2, 1, 0.1, ["n2"], ["n1"], 0), 15.5)
    (add,) = [a for a in core.host_clean("n2", 16.0) if isinstance(a, ScaleFs)]   # its server at once
    assert (add.kind, add.host) == ("add", "n2")
    assert core.jobs[w].fs.lent == ["n2"] and "n2" not in core.snapshot(16.1).free
    view = DaemonViews()
    view.core = core.core
    rows = {r["name"]: (r["state"], r["job"]) for r in view.nodes(P.Nodes()).rows}
    assert rows == {"n1": ("alloc", mal), "n2": ("storage", w), "n3": ("alloc", w)}
    core.schedule(16.2)                                                # the policy does not grow it back there
    assert core.jobs[mal].order is None and core.jobs[mal].hosts == ["n1"]
    assert not [a for a in core.do(FsSample(18.0, w, 50 * MB, ((1, "n3"),))) if isinstance(a, ScaleFs)]
    core.do(FsScaled(18.5, w, "add", "n2", 2))
    core.schedule(19.0)
    assert core.jobs[mal].order is None and "n2" not in core.snapshot(19.1).free
    # the rate is met with room to spare: the newest server leaves and the host goes back to compute
    acts = []
    for i in range(3):
        acts += core.do(FsSample(30.0 + 2 * i, w, 900 * MB, ((1, "n3"), (2, "n2"))))
    (rm,) = [a for a in acts if isinstance(a, ScaleFs)]
    assert (rm.kind, rm.host, rm.sid) == ("remove", "n2", 2)
    core.do(FsScaled(37.0, w, "remove", "n2", 2))
    assert core.jobs[w].fs.lent == [] and "n2" in core.snapshot(37.1).free
    core.schedule(37.2)
    assert core.poll(P.Poll(mal, 3), 37.3).hosts == ["n2"]             # and the malleable job grows back
    kinds = [e["kind"] for e in core.store.events(w)]
    assert kinds.count("fs-reclaim") == 2 and "fs-lent" in kinds
