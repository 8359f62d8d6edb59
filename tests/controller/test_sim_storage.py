"""Elastic storage in the I/O-aware simulator: a job's own file system grown, shrunk and given hosts taken back by
the live storage policy (``decide_storage``), against times computed by hand from the model (docs/io.md)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from malleable.controller.sched._fspolicy import decide_storage
from malleable.controller.sim._ioengine import simulate_io
from malleable.controller.sim._iofs import StorageModel
from malleable.controller.sim._jobfile import read_jobs
from malleable.errors import ConfigError, TraceError

MB = 1e6
SERVER = 100 * MB          # one data server's bandwidth in every test


def load(tmp_path, machine, *jobs, name="w.jsonl"):
    path = tmp_path / name
    head = {"format": "malleable-jobs", "version": 1, "machine": machine}
    path.write_text("\n".join(json.dumps(x) for x in (head, *jobs)) + "\n")
    return read_jobs(path)


def run(w, policy, **kw):
    return simulate_io(w, "fcfs", pfs_bw=1e9, link_bw=1e9, storage=StorageModel(SERVER, policy, **kw))


def writer(fs, jid=1, procs=1, nbytes=1e10):
    return {"id": jid, "submit": 0, "run": 100, "procs": procs, "phases": [["write", nbytes]], **fs}


def servers(res, jid=1):
    return [(pytest.approx(t), n) for t, n in res.storage.jobs[jid].servers]


def test_a_job_asking_more_than_one_server_grows_to_fs_max_and_its_io_ends_earlier(tmp_path):
    w = load(tmp_path, 4, writer({"fs_min": 1, "fs_max": 4, "io_rate": 400 * MB}))
    static, elastic = run(w, "static"), run(w, "elastic")
    assert static.result.end[0] == pytest.approx(100.0)                 # 10 GB at one server's 100 MB/s
    assert servers(static) == [(0.0, 1), (100.0, 0)]
    # samples every 2 s; the window (3) is full at t=6: grow (stalled 0.29 s); then the 10 s cool-down and a
    # full window again: t=18 and t=30. Bytes: 6 s x 100 + 11.71 x 200 + 11.71 x 300 MB, the rest at 400 MB/s
    assert servers(elastic) == [(0.0, 1), (6.29, 2), (18.29, 3), (30.29, 4), (39.1525, 0)]
    assert elastic.result.end[0] == pytest.approx(39.1525)
    assert elastic.io_time[0] == pytest.approx(39.1525)
    rep = elastic.storage
    assert rep.server_seconds == pytest.approx(6.29 + 2 * 12 + 3 * 12 + 4 * 8.8625)
    assert rep.decisions == 3 and rep.jobs[1].decisions == {"add": 3} and rep.taken_back == 0
    assert rep.summary()["jobs"]["1"]["servers"][-2] == [pytest.approx(30.29), 4]


def test_a_job_with_more_servers_than_it_needs_shrinks_back_to_fs_min_and_no_further(tmp_path):
    w = load(tmp_path, 4, writer({"fs_servers": 4, "fs_min": 1, "fs_max": 4, "io_rate": 100 * MB}))
    res = run(w, "elastic")
    # 400 MB/s against 100 requested: one server leaves at t=6, 18 and 30 (0.09 s each); then AIO = RIO
    assert servers(res) == [(0.0, 4), (6.09, 3), (18.09, 2), (30.09, 1), (46.54, 0)]
    assert res.result.end[0] == pytest.approx(46.54)
    assert res.storage.jobs[1].decisions == {"remove": 3}
    assert run(w, "static").result.end[0] == pytest.approx(25.0)


def test_with_no_free_host_a_malleable_job_gives_one_and_the_server_holds_it_until_it_leaves(tmp_path):
    w = load(tmp_path, 3, writer({"fs_min": 1, "fs_max": 2, "io_rate": 200 * MB}),
             {"id": 2, "submit": 0, "run": 1000, "procs": 2, "kind": "malleable", "min": 1, "max": 2},
             {"id": 3, "submit": 10, "run": 10, "procs": 1})
    res = run(w, "elastic")
    h = res.result.history
    sizes = [(float(t), int(n)) for r, t, n in zip(h.row, h.time, h.size, strict=True) if r == 1]
    assert sizes == [(0.0, 2), (6.0, 1)]                                 # job 2 gave its newest host at t=6
    assert res.result.end[1] == pytest.approx(6 + 994 * 2)               # the rest of its work on one node
    assert servers(res) == [(0.0, 1), (6.29, 2), (53.29, 0)]             # 600 MB, then 9.4 GB at 200 MB/s
    assert res.storage.taken_back == 1 and res.storage.jobs[1].decisions == {"reclaim": 1, "add": 1}
    # the host serves job 1's file system, not compute jobs: job 3 starts when the server leaves with job 1
    assert res.result.start[2] == pytest.approx(53.29)
    static = run(w, "static")
    assert static.result.start[2] == pytest.approx(100.0) and static.storage.taken_back == 0
    h = static.result.history
    assert [int(n) for r, n in zip(h.row, h.size, strict=True) if r == 1] == [2]


def test_a_malleable_job_at_its_minimum_is_never_shrunk_for_storage(tmp_path):
    w = load(tmp_path, 2, writer({"fs_min": 1, "fs_max": 2, "io_rate": 200 * MB}),
             {"id": 2, "submit": 0, "run": 1000, "procs": 1, "kind": "malleable", "min": 1, "max": 2})
    res = run(w, "elastic", trace=True)
    assert servers(res) == [(0.0, 1), (100.0, 0)] and res.storage.taken_back == 0
    assert res.result.resizes.tolist() == [0, 0]
    last = res.storage.calls[-1].decisions[0]
    assert last.kind == "keep" and "no storage host is free or can be taken back" in last.reason


def test_the_simulator_decides_what_decide_storage_returns_for_its_samples(tmp_path):
    w = load(tmp_path, 3, writer({"fs_min": 1, "fs_max": 2, "io_rate": 200 * MB}),
             {"id": 2, "submit": 0, "run": 1000, "procs": 2, "kind": "malleable", "min": 1, "max": 2})
    calls = run(w, "elastic", trace=True).storage.calls
    assert [c.now for c in calls[:4]] == [2.0, 4.0, 6.0, 6.0]
    assert calls[2].fs.samples == pytest.approx((100 * MB,) * 3)
    for c in calls:
        again = decide_storage(c.fs, c.storage, c.free, c.taken, c.donors, c.now, StorageModel(SERVER).rule)
        assert tuple(again) == c.decisions
    assert [c.decisions[0].kind for c in calls if c.decisions[0].kind != "keep"] == ["reclaim", "add"]
    for c in calls:                                                       # within fs_min..fs_max throughout
        assert 1 <= len(c.fs.servers) <= 2


@pytest.mark.parametrize(("fields", "why"), [
    ({"fs_min": 0}, "'fs_min' must be an integer >= 1"),
    ({"fs_max": 2.5}, "'fs_max' must be an integer >= 1"),
    ({"fs_servers": True}, "'fs_servers' must be an integer >= 1"),
    ({"io_rate": -1}, "'io_rate' must be a finite number >= 0"),
    ({"io_rate": "fast"}, "'io_rate' must be a finite number >= 0"),
    ({"fs_min": 3, "fs_max": 2}, "fs_min <= fs_servers <= fs_max, got 3 <= 3 <= 2"),
    ({"fs_servers": 5, "fs_max": 4}, "got 5 <= 5 <= 4"),
])
def test_bad_storage_fields_are_one_line_errors(tmp_path, fields, why):
    with pytest.raises(TraceError, match=f"w.jsonl:2: .*{why}".replace("(", r"\(").replace(")", r"\)")) as e:
        load(tmp_path, 2, writer(fields))
    assert "\n" not in str(e.value)


def test_storage_defaults_and_the_model_are_checked(tmp_path):
    w = load(tmp_path, 2, writer({"io_rate": 5}), writer({"fs_max": 3}, jid=2), writer({}, jid=3))
    assert w.fs == [(1, 1, 1, 5.0), (1, 1, 3, 0.0), None]
    with pytest.raises(ConfigError, match="storage model"):
        simulate_io(w, "fcfs", pfs_bw=1e9, link_bw=1e9)
    with pytest.raises(ConfigError, match="storage policy must be one of static, elastic"):
        StorageModel(SERVER, "greedy")


def test_the_command_line_runs_both_policies_and_refuses_bad_input_in_one_line(tmp_path):
    load(tmp_path, 4, writer({"fs_min": 1, "fs_max": 4, "io_rate": 400 * MB}))
    base = [sys.executable, "-m", "malleable", "simulate", "--workload", str(tmp_path / "w.jsonl"), "--policy",
            "fcfs", "--pfs-bw", "1e9", "--link-bw", "1e9"]
    out = {}
    for pol in ("static", "elastic"):
        p = subprocess.run([*base, "--fs-server-bw", "1e8", "--storage-policy", pol, "--json",
                            str(tmp_path / f"{pol}.json")], capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        out[pol] = json.loads((tmp_path / f"{pol}.json").read_text())
    assert out["static"]["makespan"] == pytest.approx(100.0) and out["elastic"]["makespan"] == pytest.approx(39.1525)
    assert out["elastic"]["storage"]["decisions"] == 3
    assert out["elastic"]["storage"]["jobs"]["1"]["servers"][1] == [pytest.approx(6.29), 2]
    assert "storage      elastic: 101.7 server-s over 1 file systems, 3 changes decided, 0 hosts taken back" in p.stdout
    p = subprocess.run([*base, "--storage-policy", "elastic"], capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and p.stderr.count("\n") == 1 and "--fs-server-bw" in p.stderr
    (tmp_path / "bad.jsonl").write_text(json.dumps(writer({"fs_min": 2, "fs_max": 1})) + "\n")
    p = subprocess.run([*base[:5], str(tmp_path / "bad.jsonl"), *base[6:], "--fs-server-bw", "1e8"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and p.stderr.count("\n") == 1 and "bad.jsonl:1:" in p.stderr
    assert "Traceback" not in p.stderr


def test_random_workloads_keep_the_bounds_every_byte_and_give_every_host_back(tmp_path):
    from malleable.controller.sched import get_policy
    from malleable.controller.sim._ioengine import IOSimulator

    rng = np.random.default_rng(7)
    jobs = []
    for i in range(1, 31):
        if i % 3:
            jobs.append({"id": i, "submit": float(rng.uniform(0, 300)), "run": 1, "procs": int(rng.integers(1, 3)),
                         "phases": [["compute", 20], ["write", float(rng.uniform(1, 5)) * 1e9], ["compute", 10],
                                    ["read", float(rng.uniform(1, 5)) * 1e9]],
                         "fs_min": 1, "fs_max": int(rng.integers(1, 5)), "io_rate": float(rng.uniform(0, 5e8))})
        else:
            jobs.append({"id": i, "submit": float(rng.uniform(0, 300)), "run": float(rng.uniform(50, 200)),
                         "procs": 3, "kind": "malleable", "min": 1, "max": 5})
    w = load(tmp_path, 8, *jobs)
    for policy in ("malleable-fill", "easy"):
        sim = IOSimulator(w, get_policy(policy), pfs_bw=1e9, link_bw=1e9, name=policy,
                          storage=StorageModel(SERVER, "elastic", trace=True))
        res = sim.run()
        assert not np.isnan(res.result.end).any()
        want = sum(p.amount for ph in w.phases for p in ph if p.kind.value in ("read", "write"))
        assert res.moved["read"] + res.moved["write"] == pytest.approx(want)
        for k, spec in enumerate(w.fs):
            if spec is not None:
                counts = [n for _, n in res.storage.jobs[int(w.ids[k])].servers]
                assert counts[-1] == 0 and all(spec[1] <= n <= spec[2] for n in counts[:-1])
        for c in res.storage.calls:
            assert not {h for _, h in c.fs.servers} & set(c.free)
            assert tuple(decide_storage(c.fs, c.storage, c.free, c.taken, c.donors, c.now)) == c.decisions
        assert res.storage.decisions > 0 and res.storage.taken_back > 0
        assert sim.ledger.n_free == 8 and not sim.ledger.down and not sim.fs.held
