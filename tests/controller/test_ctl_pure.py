"""Pure parts of the controller daemon: Slurm host lists and time limits, the wire protocol, the fill policy."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from malleable.controller import Job, JobKind, Simulator, Workload
from malleable.controller.daemon import _protocol as P
from malleable.controller.daemon._timefmt import format_duration, parse_time
from malleable.controller.sched._fill import malleable_fill
from malleable.errors import AuthError, ConfigError, ProtocolError
from malleable.launch import compress_hostlist, expand_hostlist

TOKEN = b"secret"


@pytest.mark.parametrize("text, hosts", [
    ("node[1-4,7]", ["node1", "node2", "node3", "node4", "node7"]),
    ("n[08-10],x", ["n08", "n09", "n10", "x"]),
    ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
    ("a,b[3],c", ["a", "b3", "c"]),
    ("host", ["host"]),
])
def test_expand_hostlist(text, hosts):
    assert expand_hostlist(text) == hosts


@pytest.mark.parametrize("bad", ["node[1-", "node]1[", "n[4-2]", "n[a-b]", "", ",", "n[1-9999999]"])
def test_expand_hostlist_rejects(bad):
    with pytest.raises(ConfigError):
        expand_hostlist(bad)


def sort_key(host: str) -> tuple[str, int, int, int]:
    """Slurm's host order: by prefix, then by number (``n9`` before ``n10``, ``n1`` before ``n01``), names without a
    number first."""
    prefix = host.rstrip("0123456789")
    num = host[len(prefix):]
    return (prefix, 1, int(num), len(num)) if num else (prefix, 0, 0, 0)


def test_compress_round_trip():
    for hosts in (["node1", "node2", "node3", "node7"], ["a", "b2", "node1"], ["n08", "n09", "n10"]):
        assert expand_hostlist(compress_hostlist(hosts)) == hosts
    assert compress_hostlist(["node1", "node2", "node3", "node7"]) == "node[1-3,7]"


@pytest.mark.parametrize("hosts, text", [
    (["n9", "n10"], "n[9-10]"),                         # unpadded numbers run across a digit count, as Slurm's
    (["local2", "local1"], "local[1-2]"),               # sorted like Slurm prints them
    (["node10", "a", "node9", "b2", "node1"], "a,b2,node[1,9-10]"),
    (["n08", "n10", "n09"], "n[08-10]"),                # zero padding kept
    (["n9", "n010", "n08"], "n[08,9,010]"),             # by number; each keeps its width
    (["x", "x", "n2", "n2"], "n2,x"),                 # each name once
    (["r1n2", "r1n1", "r2n1"], "r1n[1-2],r2n1"),
    ([], ""),
])
def test_compress_sorted_like_slurm(hosts, text):
    assert compress_hostlist(hosts) == text
    if hosts:
        assert expand_hostlist(text) == sorted(set(hosts), key=sort_key)


_HOST = st.builds(lambda p, n, pad: p + (str(n).zfill(pad) if n is not None else ""),
                  st.sampled_from(["n", "node", "gpu", "r1n", "a-b", "x"]),
                  st.none() | st.integers(0, 130), st.integers(0, 4))


@settings(max_examples=500, deadline=None)
@given(st.lists(_HOST, min_size=1, max_size=40))
def test_compress_round_trips_on_random_lists(hosts):
    back = expand_hostlist(compress_hostlist(hosts))
    assert len(back) == len(set(hosts)) and set(back) == set(hosts)      # each name once, none lost
    # in host order, unless one number is written with two paddings (node1 and node01: no real cluster names
    # hosts so, and python-hostlist then keeps them apart in an order of its own)
    if len({sort_key(h)[:3] for h in set(hosts)}) == len(set(hosts)):
        assert back == sorted(set(hosts), key=sort_key)
    numbered = {h.rstrip("0123456789") for h in hosts if h[-1].isdigit()}
    assert compress_hostlist(hosts).count("[") <= len(numbered)      # sorted: one bracket per prefix at most


@pytest.mark.parametrize("text, seconds", [
    ("5", 300), ("5:30", 330), ("1:02:03", 3723), ("2-3", 2 * 86400 + 3 * 3600), ("1-0:30", 86400 + 1800),
    ("1-2:3:4", 86400 + 7200 + 184),
])
def test_parse_time(text, seconds):
    assert parse_time(text) == seconds


@pytest.mark.parametrize("bad", ["", "abc", "1:2:3:4", "-5", "0", "1.5", "5m", "1-"])
def test_parse_time_rejects(bad):
    with pytest.raises(ConfigError, match="bad time limit"):
        parse_time(bad)


def test_format_duration():
    assert format_duration(5) == "0:05"
    assert format_duration(3723) == "1:02:03"
    assert format_duration(90000) == "1-01:00:00"


def _all_messages():
    return [
        P.Ok(), P.Error("Refused", "no"), P.Submitted(3), P.Table([{"a": 1}]), P.JobInfo({}, [], []),
        P.StatusReply({"x": 1}), P.Order(2, 4, ["node2"]),
        P.Submit("n", ["python", "x.py"], 2, 1, 4, True, 60.0, "o", "", "/work", {"A": "1"}), P.Queue(),
        P.Submit("n", ["x"], 2, 2, 8, True, 0.0, "", "", "/", {}, "amdahl:0.05", "pof2", "ann"),
        P.History(0), P.History(5, [1, 7], ["ann"], ["FAILED", "TIMEOUT"], 100.5, 200.0),
        P.Cancel(5), P.Nodes(), P.Info(1), P.Status(), P.Shutdown(False),
        P.Register(1, 2, "node1", 1, ["node1"]), P.Poll(1, 3),
        P.Committed(1, 1, "expand", 1, 4, 0.5, [], ["node1"] * 4, 0), P.Refused(1, 1, "why"),
        P.Progress(1, "elastic", {"mtct": 0.2}),
    ]


def test_round_trip_every_message():
    for m in _all_messages():
        back, rid = P.decode(P.encode(m, TOKEN, 7), TOKEN)
        assert back == m and rid == 7


def _frames(header: dict) -> list[bytes]:
    from malleable._wire import pack
    return pack(header, TOKEN)


_NEW = {"speedup": "", "constraint": "", "user": ""}
_SUBMIT = {"v": 2, "type": "submit", "name": "", "cmd": ["x"], "nodes": 1, "min_nodes": 1, "max_nodes": 1,
           "malleable": False, "time_limit": 0, "out": "", "err": "", "cwd": "/", "env": {}, **_NEW}
_HISTORY = {"v": 2, "type": "history", "limit": 0, "jobs": [], "users": [], "states": [], "since": 0.0,
            "until": 0.0}


@pytest.mark.parametrize("header, match", [
    ({"v": 3, "type": "queue"}, "version"),
    ({"v": 2, "type": "nope"}, "unknown message type"),
    ({"v": 2, "type": "cancel"}, "missing field"),
    ({"v": 2, "type": "cancel", "job_id": "3"}, "must be int"),
    ({"v": 2, "type": "cancel", "job_id": True}, "boolean"),
    ({"v": 2, "type": "cancel", "job_id": -1}, "must be in"),
    ({"v": 2, "type": "cancel", "job_id": 1, "x": 2}, "unknown field"),
    ({"v": 2, "type": "poll", "job_id": 1, "probe": 1.5}, "must be int"),
    ({"v": 2, "type": "order", "seq": 1, "procs": 2, "hosts": [1]}, "only strs"),
    ({"v": 2, "type": "submit", "name": "", "cmd": [], "nodes": 1, "min_nodes": 1, "max_nodes": 1,
      "malleable": False, "time_limit": 0, "out": "", "err": "", "cwd": "/", "env": {}, **_NEW}, "empty command"),
    ({"v": 2, "type": "submit", "name": "", "cmd": ["x"], "nodes": 1, "min_nodes": 1, "max_nodes": 1,
      "malleable": False, "time_limit": 0, "out": "", "err": "", "cwd": "/", "env": {"A": 1}, **_NEW}, "env"),
    ({**_SUBMIT, "speedup": "amdahl:2"}, "between 0 and 1"),
    ({**_SUBMIT, "speedup": "quadratic"}, "bad speedup"),
    ({**_SUBMIT, "constraint": "prime"}, "bad constraint"),
    ({**_SUBMIT, "user": 5}, "must be str"),
    ({**_HISTORY, "states": ["DONE"]}, "unknown state"),
    ({**_HISTORY, "jobs": [True]}, "only ints"),
    ({**_HISTORY, "jobs": [-3]}, "ints in 0.."),
    ({**_HISTORY, "since": -1.0}, ">= 0"),
    ({"v": 2, "type": "history", "limit": 0}, "missing field 'jobs'"),
    ({"v": 2, "type": "committed", "job_id": 1, "seq": 1, "kind": "x", "old_size": 1, "new_size": 1,
      "seconds": -1.0, "freed": [], "hosts": [], "idle": 0}, ">= 0"),
    ({"v": 2, "type": "info", "job_id": 1, "id": "x"}, "request id"),
])
def test_decode_rejects(header, match):
    with pytest.raises(ProtocolError, match=match):
        P.decode(_frames(header), TOKEN)


def test_the_well_formed_new_fields_pass():
    m, _ = P.decode(_frames({**_SUBMIT, "speedup": "rho:0.25", "constraint": "odd", "user": "bo"}), TOKEN)
    assert (m.speedup, m.constraint, m.user) == ("rho:0.25", "odd", "bo")
    h, _ = P.decode(_frames({**_HISTORY, "jobs": [3], "states": ["RUNNING"], "since": 5}), TOKEN)
    assert (h.jobs, h.states, h.since) == ([3], ["RUNNING"], 5.0)


@pytest.mark.parametrize("text, canon", [
    ("linear", "linear"), ("amdahl:0.1", "amdahl:0.1"), ("amdahl:0", "amdahl:0.0"), ("rho:1", "rho:1.0"),
    ("rho:.25", "rho:0.25"),
])
def test_parse_speedup(text, canon):
    assert P.parse_speedup(text) == canon


@pytest.mark.parametrize("bad", ["", "amdahl", "linear:1", "rho:x", "rho:nan", "amdahl:-0.1", "amdahl:inf",
                                 "Amdahl:0.1"])
def test_parse_speedup_rejects(bad):
    with pytest.raises(ValueError, match="bad speedup"):
        P.parse_speedup(bad)


def test_decode_rejects_wrong_secret_and_truncation():
    frames = P.encode(P.Queue(), TOKEN)
    with pytest.raises(AuthError):
        P.decode(frames, b"other")
    with pytest.raises(ProtocolError):
        P.decode(frames[:2], TOKEN)
    with pytest.raises(ProtocolError):
        P.decode([*frames, b"payload"], TOKEN)


def _mjob(i, submit, procs, est, lo, hi):
    return Job(i, submit, procs, est, JobKind.MALLEABLE, lo, hi, 0.0)


def test_fill_grows_into_idle_and_shrinks_to_admit():
    from malleable.controller import RunningJob, Snapshot

    mj = _mjob(1, 0.0, 1, 100.0, 1, 4)
    r = RunningJob(mj, ("a",), 1, 0.0, 0.0, 0.0, 100.0)
    grow = malleable_fill(Snapshot(1.0, ("a", "b", "c", "d"), ("b", "c", "d"), (r,), ()), 1.0)
    assert [(type(d).__name__, d.job_id, d.nodes) for d in grow] == [("ResizeJob", 1, ("a", "b", "c", "d"))]
    big = RunningJob(mj, ("a", "b", "c", "d"), 4, 0.0, 0.0, 0.0, 100.0)
    rigid = Job.rigid(2, 1.0, 2, 10.0)
    out = malleable_fill(Snapshot(2.0, ("a", "b", "c", "d"), (), (big,), (rigid,)), 2.0)
    assert [(type(d).__name__, d.job_id, d.nodes) for d in out] == [
        ("ResizeJob", 1, ("a", "b")), ("StartJob", 2, ("d", "c"))]
    # never below the minimum: a rigid job that cannot fit waits
    small = RunningJob(_mjob(3, 0.0, 2, 100.0, 2, 4), ("a", "b"), 2, 0.0, 0.0, 0.0, 100.0)
    assert malleable_fill(Snapshot(2.0, ("a", "b", "c"), ("c",), (small,), (Job.rigid(4, 1.0, 3, 5.0),)), 2.0) == []


def test_fill_in_the_simulator_keeps_invariants():
    import numpy as np

    n = 60
    rng = np.random.default_rng(3)
    mall = rng.random(n) < 0.5
    procs = rng.integers(1, 9, n)
    lo = np.where(mall, np.maximum(1, procs // 2), procs)
    hi = np.where(mall, np.minimum(16, procs * 2), procs)
    w = Workload(np.arange(1, n + 1), np.sort(rng.uniform(0, 500, n)), rng.uniform(5, 60, n), np.full(n, 120.0),
                 procs, 16, np.where(mall, 2, 0), lo, hi, np.zeros(n))
    res = Simulator(w, malleable_fill, name="malleable-fill").run()
    assert np.all(np.isfinite(res.end)) and np.all(res.start >= w.submit)
    assert res.decisions["ResizeJob"] > 0
