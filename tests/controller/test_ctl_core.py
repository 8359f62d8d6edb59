"""The controller core without processes or sockets: events in, actions and stored state out."""

from __future__ import annotations

import pytest

from malleable.controller import ResizeJob, StartJob
from malleable.controller.daemon import _protocol as P
from malleable.controller.daemon._events import HostDown, Kill, Launch, Stop
from malleable.controller.sched._fill import malleable_fill
from malleable.controller.sched._rigid import easy
from malleable.errors import Refusal, UnknownJob
from tests.controller._core_shell import Shell

HOSTS = ("n1", "n2", "n3", "n4")


def submit(core, nodes=1, lo=0, hi=0, malleable=False, t=0.0, limit=100.0):
    m = P.Submit("j", ["prog"], nodes, lo or nodes, hi or nodes, malleable, limit, "", "", "/work", {})
    return core.submit(m, t)


def make(tmp_path, policy=easy, **cfg):
    return Shell(str(tmp_path / "s.sqlite"), HOSTS, policy, **cfg)


def launch_ids(actions):
    return [a.job.id for a in actions if isinstance(a, Launch)]


def test_submit_refusals(tmp_path):
    core = make(tmp_path)
    with pytest.raises(Refusal, match="only 4"):
        submit(core, nodes=5)
    with pytest.raises(Refusal, match="min <= preferred"):
        submit(core, nodes=3, lo=1, hi=2, malleable=True)
    with pytest.raises(UnknownJob):
        core.cancel(99, 0.0)
    assert submit(core, nodes=2, lo=1, hi=9, malleable=True) == 1
    assert core.jobs[1].max_nodes == 4  # capped to the pool


def test_easy_starts_in_order_and_hosts_drain_before_reuse(tmp_path):
    core = make(tmp_path)
    a, b = submit(core, 3), submit(core, 2)
    assert launch_ids(core.schedule(1.0)) == [a]
    assert core.jobs[a].hosts == ["n1", "n2", "n3"] and core.jobs[b].state == "PENDING"
    core.launched(a, 100, 5.0, 1.0)
    assert core.exited(a, 0, 2.0) == []
    assert core.store.load_job(a).state == "COMPLETED"
    assert [h.name for h in core.draining()] == ["n1", "n2", "n3"]
    assert core.schedule(2.1) == []            # n4 alone is not enough, the rest is still draining
    for h in ("n1", "n2"):
        core.host_clean(h, 2.2)
    assert launch_ids(core.schedule(2.3)) == [b]


def test_state_survives_a_new_core(tmp_path):
    core = make(tmp_path)
    a, b, c = submit(core, 4), submit(core, 1), submit(core, 2)
    core.schedule(1.0)
    core.launched(a, 4242, 9.0, 1.0)
    again = make(tmp_path)
    assert [j.id for j in again.queue()] == [b, c]
    assert again.jobs[a].state == "RUNNING" and again.jobs[a].pid == 4242
    assert all(again.hosts[h].owner == a for h in HOSTS)


def scripted(decisions):
    """A policy returning the given decisions once."""
    left = [list(decisions)]

    def pol(snapshot, now):
        return left.pop() if left else []
    return pol


def running_malleable(core, hosts, now=1.0):
    jid = submit(core, len(hosts), 1, 4, True)
    core.policy = scripted([StartJob(jid, tuple(hosts))])
    core.schedule(now)
    core.launched(jid, 1, 1.0, now)
    core.register(P.Register(jid, 1, hosts[0], len(hosts), list(hosts)), now)
    return jid


def ended_on(core, host, now=1.0):
    """A rigid job that ran on ``host`` and ended: the host drains until it is checked."""
    jid = submit(core, 1)
    core.policy = scripted([StartJob(jid, (host,))])
    core.schedule(now)
    core.launched(jid, 2, 1.0, now)
    core.exited(jid, 0, now)
    return jid


def test_expand_order_waits_for_clean_hosts_then_commits(tmp_path):
    core = make(tmp_path)
    j = running_malleable(core, ["n1"])
    other = ended_on(core, "n3")                                      # an ended job's host, not checked yet
    assert core.hosts["n3"].drain == other and core.hosts["n2"].drain is None
    core.policy = scripted([ResizeJob(j, ("n1", "n2", "n3"))])
    # n3 is draining: the policy may not take it
    core.schedule(2.0)
    assert core.jobs[j].order is None
    core.host_clean("n3", 2.1)
    core.policy = scripted([ResizeJob(j, ("n1", "n2", "n3"))])
    core.schedule(2.2)
    o = core.poll(P.Poll(j, 1), 2.3)
    assert (o.seq, o.procs, o.hosts) == (1, 3, ["n2", "n3"])
    assert core.snapshot(2.3).free == ("n4",)
    core.committed(P.Committed(j, 1, "expand", 1, 3, 0.4, [], ["n1", "n2", "n3"], 0), 2.5)
    assert core.jobs[j].hosts == ["n1", "n2", "n3"] and core.jobs[j].order is None
    assert core.committed(P.Committed(j, 1, "expand", 1, 3, 0.4, [], [], 0), 2.6) == []  # duplicate: ignored
    with pytest.raises(Refusal):
        core.committed(P.Committed(j, 5, "expand", 1, 3, 0.4, [], [], 0), 2.6)
    steps = core.store.steps(j)
    assert [(s["kind"], s["size"]) for s in steps] == [("start", 1), ("expand", 3)]
    assert steps[1]["seconds"] == 0.4 and steps[1]["decided"] == 2.2


def test_shrink_swaps_to_newest_hosts_and_admits_after_check(tmp_path):
    core = make(tmp_path)
    j = running_malleable(core, ["n1", "n2", "n3", "n4"])
    r = submit(core, 2)
    # the policy frees n2 and n3, but the runtime frees the newest hosts: n3 and n4 (n2 is swapped for n4)
    core.policy = scripted([StartJob(r, ("n2", "n3")), ResizeJob(j, ("n1", "n4"))])
    assert core.schedule(2.0) == []                 # shrink first; the rigid job waits for its hosts
    assert list(core.jobs[j].order.removed) == ["n3", "n4"]
    assert core.jobs[r].hosts == ["n4", "n3"] and core.jobs[r].state == "STARTING"
    assert core.poll(P.Poll(j, 1), 2.1).procs == 2
    assert core.draining() == []                    # not checked before the job says it has shrunk
    core.committed(P.Committed(j, 1, "shrink", 4, 2, 0.2, ["n3", "n4"], ["n1", "n2"], 0), 2.5)
    assert sorted(h.name for h in core.draining()) == ["n3", "n4"]
    assert core.host_clean("n3", 2.6) == []
    assert launch_ids(core.host_clean("n4", 2.7)) == [r]


def test_refused_shrink_gives_hosts_back_and_requeues_the_waiting_job(tmp_path):
    core = make(tmp_path, refuse_backoff=10.0)
    j = running_malleable(core, ["n1", "n2", "n3", "n4"])
    r = submit(core, 2)
    core.policy = scripted([ResizeJob(j, ("n1", "n2")), StartJob(r, ("n3", "n4"))])
    core.schedule(2.0)
    core.poll(P.Poll(j, 1), 2.1)
    core.refused(P.Refused(j, 1, "below base"), 2.2)
    assert core.jobs[j].hosts == ["n1", "n2", "n3", "n4"] and core.jobs[j].order is None
    assert core.jobs[r].state == "PENDING" and all(core.hosts[h].owner == j for h in HOSTS)
    core.policy = scripted([ResizeJob(j, ("n1", "n2"))])
    core.schedule(3.0)
    assert core.jobs[j].order is None               # backing off after the refusal


def test_time_limit_ack_timeout_and_leftover_kill(tmp_path):
    core = make(tmp_path, ack_timeout=5.0, drain_grace=1.0)
    j = running_malleable(core, ["n1"])
    core.policy = scripted([ResizeJob(j, ("n1", "n2"))])
    core.schedule(2.0)
    core.poll(P.Poll(j, 1), 2.0)
    assert core.tick(3.0) == [] and not core.jobs[j].unresponsive
    core.tick(8.0)
    assert core.jobs[j].unresponsive and core.hosts["n2"].owner == j   # still reserved
    stops = core.tick(200.0)
    assert stops == [Stop(j, 1, "time limit")]
    core.exited(j, None, 201.0)
    assert core.store.load_job(j).state == "TIMEOUT"
    assert sorted(h.name for h in core.draining()) == ["n1", "n2"]
    assert sorted(a.host for a in core.tick(203.0) if isinstance(a, Kill)) == ["n1", "n2"]


def test_leftovers_of_a_run_cut_by_a_host_failure_are_killed_so_the_job_can_restart(tmp_path):
    """A host of a running job fails; the job is stopped and put back in the queue; processes its run left on its
    other host (a launcher's daemon orphaned while starting) are killed after the grace period, not kept until the
    job ends, which would hold the host, and the job that needs it, for ever."""
    core = make(tmp_path, drain_grace=1.0)
    j = submit(core, 2)
    assert launch_ids(core.schedule(1.0)) == [j]
    core.launched(j, 100, 1.0, 1.0)
    assert core.jobs[j].hosts == ["n1", "n2"]
    assert [type(a) for a in core.do(HostDown(2.0, "n2", "link down"))] == [Stop]
    core.exited(j, 255, 2.5)
    assert core.jobs[j].state == "PENDING" and j in core.core.held                      # n1 not checked yet
    assert [h.name for h in core.draining()] == ["n1"]
    assert [a for a in core.tick(3.0) if isinstance(a, Kill)] == []                     # within the grace
    assert [a for a in core.tick(3.6) if isinstance(a, Kill)] == [Kill(j, "n1")]
    core.host_clean("n1", 3.7)
    assert j not in core.core.held
    assert launch_ids(core.schedule(3.8)) == [j] and sorted(core.jobs[j].hosts) == ["n1", "n3"]


def test_cancel_pending_and_running(tmp_path):
    core = make(tmp_path)
    a, b = submit(core, 4), submit(core, 1)
    core.schedule(1.0)
    core.launched(a, 55, 1.0, 1.0)
    assert core.cancel(b, 2.0) == []
    assert core.store.load_job(b).state == "CANCELLED"
    assert core.cancel(a, 2.0) == [Stop(a, 55, "cancelled")]
    core.exited(a, 143, 3.0)
    assert core.store.load_job(a).state == "CANCELLED"
    with pytest.raises(Refusal, match="already ended"):
        core.cancel(a, 4.0)


def test_fill_policy_through_the_core(tmp_path):
    core = make(tmp_path, policy=malleable_fill)
    j = submit(core, 1, 1, 4, True)
    assert launch_ids(core.schedule(1.0)) == [j]
    core.launched(j, 9, 1.0, 1.0)
    core.register(P.Register(j, 9, "n1", 1, ["n1"]), 1.1)
    core.schedule(1.2)
    assert core.poll(P.Poll(j, 1), 1.3) == P.Order(1, 4, ["n2", "n3", "n4"])
