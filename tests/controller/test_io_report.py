"""Measured I/O intensity: a job declares one at submission (``--io-intensity``), its runtime measures one
(``malleable.runtime.io_phase``) and reports it as the ``"io"`` progress phase; the controller shows both and the
io-aware policy reads the measured one for a running job.

Pure: the meter's sums and rate limit; ``to_job`` and the ledger's view take the declared, then the measured
intensity; bad reports are refused with nothing changed; the submit option on the command line, in ``#MALLEABLE``
lines and on the wire. Through the core with the io-aware policy (alpha 0.6): two queued one-node jobs, one
declared I/O-heavy (0.9) and one compute-only, wait for a free host beside a running job; the running job's
measured intensity, not its declaration, decides which one starts. Live on namespace hosts through the real
daemon: a job writing a file reports the intensity it printed itself; the same choice with a real running job
measuring 0.9 or about 0; a checkpointing Jacobi run reports its checkpoint bytes.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from pathlib import Path

import pytest

from malleable.controller.daemon import _protocol as P
from malleable.controller.daemon._cli_submit import resolve
from malleable.controller.daemon._events import Launch
from malleable.controller.daemon._hostpool import HostPool
from malleable.controller.sched import get_policy
from malleable.controller.sched._ledger import Ledger
from malleable.controller.sched._model import Job, JobKind, StartJob
from malleable.controller.sched._speedup import declared
from malleable.errors import ConfigError, ProtocolError, Refusal
from malleable.runtime import _iometer
from malleable.runtime._iometer import IOMeter, io_phase, io_stats, meter, report_io
from tests.controller._core_shell import Shell
from tests.controller._daemon_util import cli, daemon_thread, isolate, wait_final, wait_for

PY = sys.executable
HEAVY, POLICY = 0.9, "io-aware-0.6"   # alpha > 0.5: the balance outweighs the queue order of two jobs


def submit_msg(nodes=1, malleable=False, io=0.0, cmd=("prog",)):
    return P.Submit("j", list(cmd), nodes, nodes, nodes, malleable, 100.0, "", "", "/work", {}, io_intensity=io)


def io_data(io_seconds, seconds, nbytes=0):
    return {"io_seconds": io_seconds, "seconds": seconds, "bytes": nbytes}


# ------------------------------------------------------------------------------------------------ the meter
class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_meter_sums_io_and_limits_reports_to_one_per_second():
    clock = Clock()
    m = IOMeter(clock, every=1.0)
    assert m.due() is None                                   # nothing measured: nothing to say
    m.add(0.5, 1000)
    clock.t += 1.0
    first = m.due()
    assert first is not None and first.data() == {"io_seconds": 0.5, "seconds": 1.0, "bytes": 1000,
                                                  "intensity": 0.5}
    m.add(0.25, 24)
    clock.t += 0.5
    assert m.due() is None                                   # half a second after the last report
    clock.t += 0.5
    second = m.due()
    assert second is not None and (second.io_seconds, second.seconds, second.bytes) == (0.75, 2.0, 1024)
    clock.t += 5.0
    assert m.due() is None and m.due(force=True) is None     # nothing new since
    m.add(0.0)
    assert m.due(force=True).intensity == pytest.approx(0.75 / 7.0)
    for bad in (-1.0, math.inf, math.nan, "1", True):
        with pytest.raises(ValueError):
            m.add(bad)
    with pytest.raises(ValueError):
        m.add(1.0, -5)
    assert m.stats().bytes == 1024                           # refused calls changed nothing


def test_io_phase_without_a_controller_link_only_counts(monkeypatch):
    monkeypatch.setattr(_iometer, "_METER", IOMeter())  # this process's meter stays as it was for later tests
    before = io_stats()
    with io_phase(nbytes=4096):
        Path(os.devnull).write_bytes(b"x" * 4096)
    report_io(0.125, 10)
    after = io_stats()
    assert after.bytes - before.bytes == 4106 and after.io_seconds - before.io_seconds >= 0.125
    assert meter().calls >= 2 and after.seconds >= before.seconds


# ------------------------------------------------------------------------------------------------ the core
def start(sh, jid, now):
    """Run a pass and launch what it starts; returns the launched job ids."""
    out = [a.job.id for a in sh.schedule(now) if isinstance(a, Launch)]
    for i in out:
        sh.launched(i, 1000 + i, 0.0, now)
    return out


def test_to_job_takes_the_declared_then_the_measured_intensity(tmp_path):
    sh = Shell(str(tmp_path / "s.sqlite"), ("n1", "n2"), get_policy("io-aware"))
    jid = sh.submit(submit_msg(io=0.4), 0.0)
    assert sh.core.to_job(sh.jobs[jid]).intensity == ((1, 0.4),)
    assert sh.core.ledger.queued[jid].io_intensity(1) == 0.4
    assert start(sh, jid, 1.0) == [jid]
    assert sh.core.ledger.view(jid).job.io_intensity(1) == 0.4
    reply, _ = sh.request(P.Progress(jid, "io", io_data(3.0, 4.0, 123)), 2.0)
    assert type(reply) is P.Ok
    assert sh.core.to_job(sh.jobs[jid]).intensity == ((1, 0.75),)
    assert sh.core.ledger.view(jid).job.io_intensity(1) == 0.75      # the running job's view follows
    sh.request(P.Progress(jid, "io", io_data(5.0, 4.0)), 3.0)       # clock skew: capped at 1
    assert sh.core.ledger.view(jid).job.io_intensity(3) == 1.0
    sh.request(P.Progress(jid, "io", io_data(0.0, 4.0)), 4.0)       # measured 0 replaces a declared 0.4
    assert sh.core.to_job(sh.jobs[jid]).intensity == () and sh.core.ledger.view(jid).job.io_intensity(1) == 0.0
    sh.request(P.Progress(jid, "io", io_data(1.0, 5.0)), 5.0)
    again = Shell(str(tmp_path / "s.sqlite"), ("n1", "n2"), get_policy("io-aware"))   # a restarted controller
    assert again.core.ledger.view(jid).job.io_intensity(1) == pytest.approx(0.2)
    assert again.jobs[jid].io_intensity == 0.4


def test_annotate_sets_the_view_and_keeps_its_older_callers():
    led = Ledger(("a", "b"), speedup=declared, progress=lambda v, now: 0.0)
    job = Job(7, 0.0, 2, 100.0, JobKind.MALLEABLE, 1, 2, intensity=((2, 0.1),))
    led.submit(job)
    led.apply([StartJob(7, ("a", "b"))], 0.0)
    led.annotate(7, 0.5)                                     # MTCT only, as before
    v = led.view(7)
    assert v.mtct == 0.5 and v.job.intensity == ((2, 0.1),)
    led.annotate(7, 0.5, None, 0.6)
    assert led.view(7).job.intensity == ((2, 0.6),) and led.view(7).job.io_intensity(1) == 0.6
    led.annotate(7, 0.5, None, 1.5)                          # out of range: ignored
    assert led.view(7).job.io_intensity(2) == 0.6
    led.annotate(99, 0.1, None, 0.3)                         # not running: nothing
    assert 99 not in led.running


@pytest.mark.parametrize("data, why", [
    (io_data(-1.0, 2.0), "io_seconds must be a number >= 0"),
    (io_data(1.0, "2"), "seconds must be a number >= 0"),
    (io_data(True, 2.0), "io_seconds must be a number >= 0"),
    (io_data(1.0, math.nan), "seconds must be a number >= 0"),
    ({"seconds": 2.0}, "io_seconds must be a number >= 0"),
    (io_data(1.0, 2.0, 1.5), "bytes must be a count >= 0"),
    (io_data(1.0, 2.0, -3), "bytes must be a count >= 0"),
])
def test_bad_io_reports_are_refused_and_change_nothing(tmp_path, data, why):
    sh = Shell(str(tmp_path / "s.sqlite"), ("n1",), get_policy("io-aware"))
    jid = sh.submit(submit_msg(io=0.3), 0.0)
    start(sh, jid, 1.0)
    sh.request(P.Progress(jid, "io", io_data(1.0, 4.0)), 2.0)
    with pytest.raises(Refusal, match=why):
        sh.request(P.Progress(jid, "io", data), 3.0)
    assert sh.jobs[jid].progress["io"] == io_data(1.0, 4.0)
    assert sh.core.ledger.view(jid).job.io_intensity(1) == 0.25


def queued_choice(tmp_path, declared_r, measured_r):
    """Hosts n1, n2: X (compute-only) on n1, the reporting job R on n2; A (declared I/O-heavy) and B
    (compute-only) queued in that order; R reports ``measured_r``, X ends. Returns the job the freed host gets."""
    tmp_path.mkdir()
    sh = Shell(str(tmp_path / "s.sqlite"), ("n1", "n2"), get_policy(POLICY))
    x = sh.submit(submit_msg(), 0.0)
    assert start(sh, x, 0.0) == [x]
    r = sh.submit(submit_msg(malleable=True, io=declared_r), 1.0)
    assert start(sh, r, 1.0) == [r]
    a, b = sh.submit(submit_msg(io=HEAVY), 2.0), sh.submit(submit_msg(), 2.0)
    assert start(sh, a, 2.0) == []
    if measured_r is not None:
        sh.request(P.Progress(r, "io", io_data(measured_r * 10.0, 10.0)), 3.0)
    sh.cancel(x, 4.0)
    sh.exited(x, 143, 4.5)
    sh.host_clean("n1", 5.0)
    picked = start(sh, a, 5.0)
    assert len(picked) == 1 and sh.jobs[picked[0]].hosts == ["n1"]
    return {a: "A", b: "B"}[picked[0]]


def test_io_aware_reads_the_running_jobs_measured_intensity(tmp_path):
    # R declared compute-only: with its declaration the heavy job A balances it; measured 0.9, B does
    assert queued_choice(tmp_path / "1", 0.0, None) == "A"
    assert queued_choice(tmp_path / "2", 0.0, HEAVY) == "B"
    # R declared I/O-heavy: B balances it; measured about 0, A does
    assert queued_choice(tmp_path / "3", HEAVY, None) == "B"
    assert queued_choice(tmp_path / "4", HEAVY, 0.01) == "A"


# ------------------------------------------------------------------------------------------------ submission
def test_submit_option_command_line_directive_and_wire(tmp_path):
    slots = lambda: 1  # noqa: E731
    req, _ = resolve({"cmd": ["true"], "io_intensity": 0.7}, slots)
    assert req["io_intensity"] == 0.7
    assert "io_intensity" not in resolve({"cmd": ["true"]}, slots)[0]          # not given: the default
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n#MALLEABLE --io-intensity 0.35 -N 1\nwork\n")
    script.chmod(0o755)
    assert resolve({"cmd": [str(script)]}, slots)[0]["io_intensity"] == 0.35
    assert resolve({"cmd": [str(script)], "io_intensity": 0.5}, slots)[0]["io_intensity"] == 0.5   # line wins
    for bad in (1.5, -0.1, math.nan):
        with pytest.raises(ConfigError, match="--io-intensity must be between 0 and 1"):
            resolve({"cmd": ["true"], "io_intensity": bad}, slots)
    code, out, err = cli("submit", "--io-intensity", "2", "--state", str(tmp_path / "none.sqlite"), "--", "true")
    assert code != 0 and out == "" and err.strip().count("\n") == 0 and "--io-intensity must be between 0 and 1" \
        in err and "Traceback" not in err
    key = b"k" * 32
    m, _ = P.decode(P.encode(submit_msg(io=0.25), key), key)
    assert m.io_intensity == 0.25
    header_default, _ = P.decode(P.encode(submit_msg(), key), key)
    assert header_default.io_intensity == 0.0
    with pytest.raises(ProtocolError, match="io_intensity must be between 0 and 1"):
        P.decode(P.encode(submit_msg(io=1.5), key), key)
    with pytest.raises(ProtocolError, match="io_intensity"):
        P.decode(P.encode(submit_msg(io=-0.5), key), key)
    sh = Shell(str(tmp_path / "s.sqlite"), ("n1",), get_policy("io-aware"))
    with pytest.raises(Refusal, match="--io-intensity must be between 0 and 1"):
        sh.submit(submit_msg(io=1.5), 0.0)
    assert sh.jobs == {}


# ------------------------------------------------------------------------------------------------ live
IO_PROG = '''"""Writes a file FRAC of the time (real writes, fsync) in cycles of 0.1 s for at most SECONDS, or until STOP
exists, counting the writes with malleable.runtime.io_phase; prints what it measured itself."""
import json, os, sys, time

T0 = time.monotonic()
from malleable import runtime as mr

io_phase = mr.io_phase            # loads the meter: its clock starts about now, as ours did
frac, seconds, path, stop = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3], sys.argv[4]
mr.init_adapt()
own, nbytes, chunk = 0.0, 0, os.urandom(1 << 20)
with open(path, "wb") as f:
    while time.monotonic() - T0 < seconds and not os.path.exists(stop):
        cycle = time.monotonic()
        f.seek(0)
        while True:
            t = time.monotonic()
            with io_phase(len(chunk)):
                f.write(chunk)
                f.flush()
                os.fsync(f.fileno())
            own += time.monotonic() - t
            nbytes += len(chunk)
            if time.monotonic() - cycle >= frac * 0.1:
                break
        mr.probe_adapt()
        time.sleep(max(0.0, 0.1 - (time.monotonic() - cycle)))
print(json.dumps({"io": own, "total": time.monotonic() - T0, "bytes": nbytes}), flush=True)
'''


@pytest.fixture
def env(monkeypatch, tmp_path):
    isolate(monkeypatch, tmp_path)
    (tmp_path / "io_prog.py").write_text(IO_PROG)
    return dict(os.environ, MALLEABLE_ADAPT_TIMEOUT="40")


def io_job(c, tmp_path, env, name, frac, seconds, declared_io=0.0):
    return c.submit([PY, str(tmp_path / "io_prog.py"), str(frac), str(seconds), str(tmp_path / f"{name}.dat"),
                     str(tmp_path / "stop")], 1, 1, 1, True, name=name, out=str(tmp_path / f"{name}.out"), env=env,
                    io_intensity=declared_io)


def measured(c, jid):
    return (c.info(jid).job.get("progress") or {}).get("io")


@pytest.mark.netns
@pytest.mark.timeout(120)
def test_live_job_reports_the_intensity_it_measured(env, tmp_path, netns_cluster):
    pool = HostPool.from_hosts([netns_cluster.hosts[0]], netns_cluster.launcher)
    state = str(tmp_path / "ctl.sqlite")
    with daemon_thread(tmp_path / "ctl.sqlite", pool, "io-aware") as (_, c):
        jid = io_job(c, tmp_path, env, "w", 0.5, 4.0, declared_io=0.2)
        wait_for(lambda: measured(c, jid), 30, "a first I/O report while the job runs")
        assert c.info(jid).job["state"] == "RUNNING"
        assert wait_final(c, [jid], 60)[jid] == "COMPLETED", (tmp_path / "w.out").read_text()[-2000:]
        own = json.loads((tmp_path / "w.out").read_text().strip().splitlines()[-1])
        io = measured(c, jid)
        assert io["bytes"] == own["bytes"] > 0                    # the last report is the final count
        # the program's own timer also holds the meter's bookkeeping and any preemption around each write
        assert io["io_seconds"] == pytest.approx(own["io"], rel=0.08)
        assert io["seconds"] == pytest.approx(own["total"], abs=0.25)
        ratio = own["io"] / own["total"]
        assert 0.3 < ratio < 0.6
        code, out, _ = cli("info", str(jid), "--state", state)
        line = [x for x in out.splitlines() if x.strip().startswith("IoIntensity=")]
        assert code == 0 and line and line[0].strip().startswith("IoIntensity=0.2 (declared) Measured="), out
        shown = float(line[0].split("Measured=")[1].split()[0])
        assert shown == pytest.approx(ratio, abs=0.04)
        code, out, _ = cli("info", str(jid), "--state", state, "--json")
        doc = json.loads(out)["job"]
        assert doc["io_intensity"] == 0.2 and doc["io_measured"] == pytest.approx(ratio, abs=0.04)


@pytest.mark.netns
@pytest.mark.timeout(180)
@pytest.mark.parametrize("declared_r, frac, picked", [(0.0, HEAVY, "B"), (HEAVY, 0.0, "A")])
def test_live_io_aware_picks_by_the_running_jobs_measured_intensity(env, tmp_path, netns_cluster, declared_r, frac,
                                                                    picked):
    hosts = netns_cluster.hosts[:2]
    pool = HostPool.from_hosts([",".join(hosts)], netns_cluster.launcher)
    with daemon_thread(tmp_path / "ctl.sqlite", pool, POLICY) as (_, c):
        x = c.submit(["sleep", "60"], 1, name="x", env=env)
        wait_for(lambda: c.info(x).job["state"] == "RUNNING", 30, "x to run")
        r = io_job(c, tmp_path, env, "r", frac, 60.0, declared_io=declared_r)
        wait_for(lambda: c.info(r).job["state"] == "RUNNING", 30, "r to run")
        want = HEAVY if frac else 0.0
        wait_for(lambda: (io := measured(c, r)) and io["seconds"] > 1.5 and
                 abs(io["io_seconds"] / io["seconds"] - want) < 0.1, 30, f"r to measure about {want}")
        with pytest.raises(Refusal, match="io_seconds must be a number >= 0"):      # a bad report over the wire
            c.call(P.Progress(r, "io", io_data(-1.0, 5.0)))
        a = c.submit(["sleep", "30"], 1, name="a", env=env, io_intensity=HEAVY)
        b = c.submit(["sleep", "30"], 1, name="b", env=env)
        assert {c.info(a).job["state"], c.info(b).job["state"]} == {"PENDING"}
        c.call(P.Cancel(x))
        wait_for(lambda: "RUNNING" in (c.info(a).job["state"], c.info(b).job["state"]), 40, "a or b to start")
        got = {a: "A", b: "B"}
        st = {got[j]: c.info(j).job for j in (a, b)}
        other = "A" if picked == "B" else "B"
        assert st[picked]["state"] == "RUNNING" and st[picked]["hosts"] == [hosts[0]], st
        assert st[other]["state"] == "PENDING"
        assert c.info(r).job["io_intensity"] == declared_r
        (tmp_path / "stop").touch()
        assert wait_final(c, [r], 30)[r] == "COMPLETED", (tmp_path / "r.out").read_text()[-2000:]


@pytest.mark.netns
@pytest.mark.timeout(120)
def test_live_checkpointing_jacobi_reports_its_checkpoint_io(env, tmp_path, netns_cluster):
    pool = HostPool.from_hosts([netns_cluster.hosts[0]], netns_cluster.launcher)
    stats = tmp_path / "stats.json"
    with daemon_thread(tmp_path / "ctl.sqlite", pool, "io-aware") as (_, c):
        jid = c.submit([PY, "-m", "malleable.apps.jacobi", "--n", "256", "--iters", "400", "--probe-every", "10",
                        "--checkpoint-every", "50", "--checkpoint-dir", str(tmp_path / "ck"), "--checkpoint-pad",
                        "8M", "--stats", str(stats)], 1, 1, 1, True, name="jacobi", out=str(tmp_path / "j.out"),
                       env=env)
        assert wait_final(c, [jid], 90)[jid] == "COMPLETED", (tmp_path / "j.out").read_text()[-2000:]
        ck = json.loads(stats.read_text())["checkpoints"]
        io = measured(c, jid)
        assert len(ck) == 8 and io["bytes"] == sum(x["bytes"] for x in ck) > 8 * 8 * (1 << 20)
        assert 0 < io["io_seconds"] <= sum(x["seconds"] for x in ck) + 1e-3     # write time, without the pruning
        assert 0 < io["io_seconds"] / io["seconds"] < 1
        assert c.info(jid).job["io_intensity"] == 0.0                             # nothing declared


@pytest.mark.netns
@pytest.mark.timeout(120)
def test_live_the_documented_example_runs(env, tmp_path, netns_cluster):
    doc = Path(__file__).resolve().parents[2] / "docs" / "runtime.md"
    text = doc.read_text()
    section = text[text.index("## Measured I/O intensity"):]
    (tmp_path / "io_example.py").write_text(re.search(r"```python\n(.*?)```", section, re.S).group(1))
    pool = HostPool.from_hosts([netns_cluster.hosts[0]], netns_cluster.launcher)
    with daemon_thread(tmp_path / "ctl.sqlite", pool, "io-aware") as (_, c):
        jid = c.submit([PY, "io_example.py"], 1, 1, 1, True, out=str(tmp_path / "io.out"), env=env,
                       io_intensity=0.3)
        assert wait_final(c, [jid], 60)[jid] == "COMPLETED", (tmp_path / "io.out").read_text()[-2000:]
        printed = re.search(r"I/O ([0-9.]+) s of ([0-9.]+) s: intensity ([0-9.]+)",
                            (tmp_path / "io.out").read_text())
        assert printed, (tmp_path / "io.out").read_text()[-2000:]
        io = measured(c, jid)
        assert io["bytes"] == 20 * (4 << 20)
        assert io["io_seconds"] == pytest.approx(float(printed.group(1)), abs=0.006)   # the same meter
        code, out, _ = cli("info", str(jid), "--state", str(tmp_path / "ctl.sqlite"))
        shown = re.search(r"IoIntensity=0.3 \(declared\) Measured=([0-9.]+) \(I/O", out)
        assert code == 0 and shown and float(shown.group(1)) == pytest.approx(float(printed.group(3)), abs=0.02)
