"""What ran live, exported with ``malleable history --export``, replays in the simulator under the same policy:
the same jobs start in the same order, and each starts and ends within the latencies measured live (host checks,
start-up of the runtime, reconfigurations) of the live times."""

from __future__ import annotations

import json
import os
import sys

import pytest

from malleable.controller.daemon._hostpool import HostPool
from malleable.controller.sched import declared, get_policy
from malleable.controller.sim import Simulator
from malleable.controller.sim._jobfile import read_jobs
from malleable.errors import TraceError
from tests.controller._daemon_util import HEAT, TOKEN, cli, daemon_thread, wait_final, wait_for

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def env(monkeypatch, tmp_path):
    monkeypatch.setenv("MALLEABLE_TOKEN", TOKEN)
    monkeypatch.delenv("MALLEABLE_CONTROLLER", raising=False)
    monkeypatch.chdir(tmp_path)
    return dict(os.environ, MALLEABLE_ADAPT_TIMEOUT="40")


def test_live_run_replays_in_the_simulator(env, tmp_path):
    state = tmp_path / "ctl.sqlite"
    with daemon_thread(state, HostPool.local(3), "malleable-fill") as (d, c):
        ids = [c.submit([sys.executable, HEAT], 1, 1, 3, True, 300, name="m", out=str(tmp_path / "m.out"),
                        env=dict(env, PROG_ITERS="120", PROG_SLEEP="0.0", PROG_WORK="0.12"), speedup="amdahl:0.02")]
        wait_for(lambda: len(c.info(ids[0]).steps) >= 2, 60, "the malleable job to grow")
        ids.append(c.submit(["sleep", "3"], 2, time_limit=60, name="r1", env=env))
        ids.append(c.submit(["sleep", "2"], 1, time_limit=60, name="r2", env=env))
        ids.append(c.submit(["sleep", "2"], 3, time_limit=60, name="r3", env=env))
        assert set(wait_final(c, ids, 180).values()) == {"COMPLETED"}
        wait_for(lambda: not d.core.draining(), 20, "hosts checked")
        events = {j: c.info(j).events for j in ids}
        steps = {j: c.info(j).steps for j in ids}
    out = tmp_path / "w.jsonl"
    code, text, err = cli("history", "--state", str(state), "--export", str(out))
    assert code == 0 and text.strip() == f"wrote {len(ids)} job(s) to {out}", err
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert lines[0]["format"] == "malleable-jobs" and lines[0]["machine"] == 3
    jobs = {x["id"]: x for x in lines[1:]}
    assert sorted(jobs) == sorted(ids) and jobs[ids[0]]["kind"] == "malleable"
    assert jobs[ids[0]]["speedup"] == "amdahl:0.02" and len(jobs[ids[0]]["measured"]["segments"]) >= 2

    w = read_jobs(out)
    res = Simulator(w, get_policy("malleable-fill"), speedup=declared, node_ids=("local1", "local2", "local3"),
                    order="pool", tick=0.2).run()
    sim_start = dict(zip(w.ids.tolist(), res.start.tolist(), strict=True))
    sim_end = dict(zip(w.ids.tolist(), res.end.tolist(), strict=True))
    live_start = {j: jobs[j]["measured"]["start"] for j in ids}
    live_end = {j: jobs[j]["measured"]["end"] for j in ids}
    assert sorted(ids, key=live_start.get) == sorted(ids, key=sim_start.get)      # same start order

    # latencies measured live: host checks after an end, the runtime's start-up, each reconfiguration
    def t(j, kind):
        return [e["t"] for e in events[j] if e["kind"] == kind]
    check = max(min(t(j, "host-free")) - max(t(j, "end")) for j in ids)
    startup = max(t(ids[0], "register")) - min(t(ids[0], "start"))
    reconf = max((s["t"] - s["decided"]) for s in steps[ids[0]] if s["decided"] is not None)
    tol = len(ids) * (check + startup + reconf) + 0.5
    for j in ids:
        assert abs(live_start[j] - sim_start[j]) <= tol, (j, live_start, sim_start, tol)
        assert abs(live_end[j] - sim_end[j]) <= tol, (j, live_end, sim_end, tol)
    assert res.resizes[list(w.ids).index(ids[0])] >= 1            # the replay resizes the malleable job too


def test_workload_file_errors(tmp_path):
    bad = tmp_path / "bad.jsonl"
    for text, match in [
        ('{"id": 1, "submit": 0, "run": 5}\n', "missing 'procs'"),
        ('{"id": 1, "submit": 0, "run": 5, "procs": 2, "kind": "malleable", "min": 3, "max": 4}\n', "min <= procs"),
        ('{"id": 1, "submit": -1, "run": 5, "procs": 1}\n', "'submit' must be a finite number >= 0"),
        ('{"id": 1, "submit": 0, "run": 5, "procs": 1, "speedup": "fast"}\n', "bad speedup 'fast'"),
        ("[1, 2]\n", "not a JSON object"),
        ("{oops\n", "not JSON"),
        ("\n", "no job"),
    ]:
        bad.write_text(text)
        with pytest.raises(TraceError, match=match):
            read_jobs(bad)
    code, _, err = cli("simulate", "--workload", str(bad), "--no-progress")
    assert code == 1 and err.count("\n") == 1 and "no job" in err
