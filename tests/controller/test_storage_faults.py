"""Faults of job file systems, live on a local pool: the controller killed (SIGKILL) and restarted while a job with
a file system runs takes the file system over and still stages out and stops it; a data server killed while its
job runs makes the job's next I/O fail with an error (not a hang), shows as an ``fs-fault`` event, and no server
process is left after the job."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time

import psutil
import pytest

from malleable.controller.daemon._client import Client
from malleable.controller.daemon._hostpool import HostPool, scan_tagged
from malleable.controller.daemon._paths import addr_file
from tests._procs import kill9
from tests.controller._daemon_util import TOKEN, cli, daemon_thread, isolate, kill_leftovers, wait_final, wait_for

M = 1 << 20
PY = sys.executable


def fs_done(c, jid):
    """The job's file system once it is stopped (or failed), else None."""
    fs = c.info(jid).job.get("fs") or {}
    return fs if fs.get("phase") in ("stopped", "failed") else None


def _start(state: str) -> int:
    code, out, err = cli("controller", "start", "--local", "2", "--policy", "fcfs-bb", "--bb-capacity", "64M",
                         "--state", state, "--tick", "0.2")
    assert code == 0, err
    return json.loads(addr_file(state).read_text())["pid"]


@pytest.mark.timeout(240)
def test_controller_killed_mid_job_reattaches_the_file_system_and_stages_out(monkeypatch, tmp_path):
    isolate(monkeypatch, tmp_path)
    monkeypatch.delenv("MALLEABLE_CONTROLLER", raising=False)
    monkeypatch.chdir(tmp_path)
    state = str(tmp_path / "ctl.sqlite")
    data = os.urandom(M + 11)
    (tmp_path / "data.bin").write_bytes(data)
    script = (f"{PY} -m malleable fs put {tmp_path}/data.bin /data.bin && touch {tmp_path}/written && "
              "sleep 8")
    pid = _start(state)
    cid = None
    try:
        c = Client(state=state, token=TOKEN.encode())
        cid = c.status()["controller_id"]
        jid = c.submit(["sh", "-c", script], 1, out=str(tmp_path / "j.out"), env=dict(os.environ), bb=8 * M,
                       stage_out=[f"/data.bin:{tmp_path}/back.bin"])
        wait_for(lambda: (tmp_path / "written").exists(), 90, "the job to write into its file system")
        address = c.info(jid).job["fs"]["address"]
        c.close()
        kill9(pid)
        assert scan_tagged(f"{cid}.fs{jid}"), "the file system's servers outlive the controller"
        pid = _start(state)                                     # same state: take the job and its fs over
        c = Client(state=state, token=TOKEN.encode())
        assert wait_final(c, [jid], 90)[jid] == "COMPLETED", (tmp_path / "j.out").read_text()[-2000:]
        fs = wait_for(lambda: fs_done(c, jid), 60, "the file system to be stopped")
        assert fs["phase"] == "stopped" and fs["left"] == [] and fs["error"] == "", fs
        assert fs["address"] == address
        assert (tmp_path / "back.bin").read_bytes() == data     # exactly the bytes written before the kill
        kinds = [e["kind"] for e in c.info(jid).events]
        assert "fs-attach" in kinds and "reattach" in kinds and kinds.index("fs-stopped") > kinds.index("fs-attach")
        assert not scan_tagged(f"{cid}.fs{jid}")                # no server process left
        c.close()
        assert cli("controller", "stop", "--state", state)[0] == 0
        pid = 0
    finally:
        kill_leftovers(pid, cid)
    assert cid and not scan_tagged(cid + "."), "processes left behind"


JOB = '''
import os, sys, time
from malleable.adhocfs import connect
tmp = sys.argv[1]
with connect(os.environ["MALLEABLE_FS"]) as fs:
    with fs.open("/a.bin", "wb") as f:
        f.write(b"x" * (1 << 20))
    open(f"{tmp}/written", "w").close()
    while not os.path.exists(f"{tmp}/killed"):
        time.sleep(0.1)
    t = time.time()
    try:
        with fs.open("/b.bin", "wb") as f:
            f.write(b"y" * (1 << 20))
        assert fs.open("/a.bin", "rb").read() == b"x" * (1 << 20)
        msg = "no error"
    except Exception as e:
        msg = f"{type(e).__name__}: {e}"
with open(f"{tmp}/error.txt", "w") as out:
    out.write(f"{time.time() - t:.1f} {msg}")
sys.exit(0 if msg == "no error" else 3)
'''


def _data_servers(tag):
    out = []
    for procs in scan_tagged(tag).values():
        for p in procs:
            with contextlib.suppress(psutil.Error):
                if "adhocfs._data" in " ".join(psutil.Process(p.pid).cmdline()):
                    out.append(p.pid)
    return out


@pytest.mark.timeout(180)
def test_a_killed_data_server_fails_the_jobs_io_with_an_error_and_shows_as_a_fault(monkeypatch, tmp_path):
    isolate(monkeypatch, tmp_path)
    env = dict(os.environ)
    (tmp_path / "job.py").write_text(JOB)
    with daemon_thread(tmp_path / "ctl.sqlite", HostPool.local(2), "fcfs-bb", bb_capacity=64 * M) as (d, c):
        jid = c.submit([PY, str(tmp_path / "job.py"), str(tmp_path)], 1, out=str(tmp_path / "j.out"), env=env,
                       bb=16 * M)
        wait_for(lambda: (tmp_path / "written").exists(), 90, "the job to write into its file system")
        address = c.info(jid).job["fs"]["address"]
        (pid,) = wait_for(lambda: _data_servers(d.fs.tag(jid)), 10, "the data server's process")
        kill9(pid)
        t0 = time.time()
        (tmp_path / "killed").touch()
        assert wait_final(c, [jid], 60)[jid] == "FAILED", (tmp_path / "j.out").read_text()[-2000:]
        took, msg = (tmp_path / "error.txt").read_text().split(" ", 1)
        assert float(took) < 30 and time.time() - t0 < 60           # an error, not a hang
        # adhocfs's client names the server and the file: "ServerUnavailable: data server 1 (tcp://...) did not
        # answer within 5 s (writing /b.bin)"
        assert msg.startswith("ServerUnavailable: data server 1 (tcp://") and "did not answer" in msg, msg
        fault = wait_for(lambda: [e for e in c.info(jid).events if e["kind"] == "fs-fault"], 30, "an fs-fault event")
        assert address in fault[0]["text"] and "do not answer" in fault[0]["text"], fault
        fs = wait_for(lambda: fs_done(c, jid), 60, "the file system to be stopped")
        assert fs["phase"] == "stopped" and fs["lost"] == [1], fs
        code, out, _ = cli("info", str(jid), "--state", str(tmp_path / "ctl.sqlite"), "--events", "20")
        assert code == 0 and "fs-fault" in out, out
        assert not scan_tagged(d.fs.tag(jid))                       # no server process left
