"""Job file systems across controller restarts and data-server deaths, live on namespace hosts with the real daemon
in its own process: a controller killed (SIGKILL) while a job's file system starts leaves none of its servers once
restarted, and the job runs on a new one; killed during the stage-out, the restarted controller finishes it with
the same bytes; a file system taken over at a restart grows again; with ``--fs-replicas 2`` a data server killed
while the job writes and reads loses nothing. Bad ``--fs-replicas`` input is one line."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import sys
import tempfile

import psutil
import pytest

from malleable.controller.daemon import _protocol as P
from malleable.controller.daemon._client import Client
from malleable.controller.daemon._hostpool import HostPool, scan_tagged
from malleable.controller.daemon._paths import addr_file
from tests._procs import kill9, running
from tests.controller._daemon_util import TOKEN, cli, daemon_thread, isolate, kill_leftovers, wait_final, wait_for
from tests.controller.test_storage_live import fs_done

M = 1 << 20
G = 1 << 30
PY = sys.executable


@pytest.fixture
def env(monkeypatch, tmp_path):
    isolate(monkeypatch, tmp_path)
    monkeypatch.delenv("MALLEABLE_CONTROLLER", raising=False)
    monkeypatch.chdir(tmp_path)
    return dict(os.environ)


@pytest.fixture
def daemon_tmp(monkeypatch):
    """A temporary folder of the daemon's own (``TMPDIR``): what its file systems leave there is seen."""
    path = tempfile.mkdtemp(prefix="mt-")
    monkeypatch.setenv("TMPDIR", path)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def fs_dirs(root):
    """The file-system directories (metadata database, server logs) left in ``root``."""
    return sorted(n for n in os.listdir(root) if n.startswith("malleable-fs-"))


def start(state, cluster, hosts, cap="512M"):
    """``malleable controller start`` on namespace hosts (data servers on all but the first); returns its pid."""
    code, _, err = cli("controller", "start", "--hosts", ",".join(hosts), "--launcher-exec", cluster.launcher,
                       "--policy", "fcfs-bb", "--bb-capacity", cap, "--storage-hosts", ",".join(hosts[1:]),
                       "--state", state, "--tick", "0.2")
    assert code == 0, err
    return json.loads(addr_file(state).read_text())["pid"]


def servers_of(tag, kind="malleable.adhocfs._"):
    """Pids of the adhocfs server processes (``python -P -m malleable.adhocfs._meta|_data``, not their launchers)
    carrying ``tag`` (the namespaces share /proc)."""
    out = []
    for procs in scan_tagged(tag).values():
        for p in procs:
            with contextlib.suppress(psutil.Error):
                cmd = psutil.Process(p.pid).cmdline()
                if cmd[1:3] == ["-P", "-m"] and cmd[3].startswith(kind):
                    out.append(p.pid)
    return sorted(out)


@pytest.mark.netns
@pytest.mark.timeout(180)
def test_killed_while_the_file_system_starts_its_servers_are_stopped_and_the_job_gets_a_new_one(
        daemon_tmp, env, tmp_path, netns_cluster):
    hosts = netns_cluster.hosts[:3]
    state = str(tmp_path / "ctl.sqlite")
    src = tmp_path / "in.bin"
    src.write_bytes(os.urandom(M) * 768)                     # a stage-in of 768 MiB: seconds to copy in
    payload = tmp_path / "payload.bin"
    payload.write_bytes(os.urandom(3 * M + 7))
    script = (f"{PY} -m malleable fs get /in/in.bin {tmp_path}/got.bin && cmp {src} {tmp_path}/got.bin && "
              f"rm {tmp_path}/got.bin && {PY} -m malleable fs put {payload} /r.bin")
    pid, cid = start(state, netns_cluster, hosts, "1G"), None
    try:
        c = Client(state=state, token=TOKEN.encode())
        cid = c.status()["controller_id"]
        tag = f"{cid}.fs1"
        jid = c.submit(["sh", "-c", script], 1, out=str(tmp_path / "j.out"), env=env, bb=2 * G, fs_servers=2,
                       stage_in=[f"{src}:/in/in.bin"], stage_out=[f"/r.bin:{tmp_path}/r.bin"])
        assert jid == 1
        old = wait_for(lambda: len(servers_of(tag)) == 3 and servers_of(tag), 60, "the three servers to run")
        assert c.info(jid).job["fs"]["phase"] == "starting"           # the stage-in begins (or not yet)
        c.close()
        kill9(pid)
        assert all(running(p) for p in old)                           # the servers outlive the controller
        pid = start(state, netns_cluster, hosts, "1G")
        c = Client(state=state, token=TOKEN.encode())
        wait_for(lambda: not any(running(p) for p in old), 30, "the old servers to be stopped")
        assert wait_final(c, [jid], 120)[jid] == "COMPLETED", (tmp_path / "j.out").read_text()[-2000:]
        fs = wait_for(lambda: fs_done(c, jid), 60, "the new file system to be stopped")
        assert fs["phase"] == "stopped" and fs["left"] == [] and fs["error"] == "", fs
        assert (tmp_path / "r.bin").read_bytes() == payload.read_bytes()    # exactly what the job wrote
        assert fs["stage_in"] == [[str(src), "/in/in.bin", 768 * M, ""]]    # staged in again, whole
        kinds = [e["kind"] for e in c.info(jid).events]
        assert kinds.count("fs-start") == 2 and kinds.count("fs-stopped") == 2, kinds   # the old one, then the new
        assert not servers_of(tag) and not scan_tagged(tag)
        assert fs_dirs(daemon_tmp) == []             # the killed metadata server's directory too
        assert c.status()["bb_free"] == 2 * G
        c.close()
        assert cli("controller", "stop", "--state", state)[0] == 0
        pid = 0
    finally:
        kill_leftovers(pid, cid)


WRITER = '''
import os, sys, time
from malleable.adhocfs import connect
tmp = sys.argv[1]
deadline = time.time() + 120
with connect(os.environ["MALLEABLE_FS"]) as fs:
    i = 0
    while not os.path.exists(f"{tmp}/grown") and time.time() < deadline:   # I/O to measure, until it grew
        with fs.open(f"/f{i % 8}.bin", "wb") as f:
            f.write(os.urandom(1 << 20))
        open(f"{tmp}/written", "w").close()
        i += 1
        time.sleep(0.05)
    with open(f"{tmp}/big.bin", "rb") as src, fs.open("/big.bin", "wb") as f:
        while chunk := src.read(4 << 20):
            f.write(chunk)
sys.exit(0 if os.path.exists(f"{tmp}/grown") else 2)
'''


@pytest.mark.netns
@pytest.mark.timeout(240)
def test_a_taken_over_file_system_grows_and_a_stage_out_cut_by_a_kill_is_finished(
        daemon_tmp, env, tmp_path, netns_cluster):
    hosts = netns_cluster.hosts[:3]
    state = str(tmp_path / "ctl.sqlite")
    (tmp_path / "writer.py").write_text(WRITER)
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(M) * 512 + b"end")
    back = tmp_path / "back.bin"
    pid, cid = start(state, netns_cluster, hosts), None
    try:
        c = Client(state=state, token=TOKEN.encode())
        cid = c.status()["controller_id"]
        jid = c.submit([PY, str(tmp_path / "writer.py"), str(tmp_path)], 1, out=str(tmp_path / "j.out"), env=env,
                       bb=G, fs_min=1, fs_max=2, io_rate=float(10 * G), stage_out=[f"/big.bin:{back}"])
        wait_for(lambda: (tmp_path / "written").exists() or c.info(jid).job["state"] not in ("PENDING", "STARTING",
                 "RUNNING"), 60, "the job to write into its file system")
        assert (tmp_path / "written").exists(), (tmp_path / "j.out").read_text()[-2000:]
        c.close()
        kill9(pid)                                                    # while the job runs: taken over
        pid = start(state, netns_cluster, hosts)
        c = Client(state=state, token=TOKEN.encode())
        wait_for(lambda: len(c.info(jid).job["fs"].get("servers") or []) == 2
                 or c.info(jid).job["state"] != "RUNNING", 90, "a second data server after the restart")
        job = c.info(jid).job
        assert job["state"] == "RUNNING" and [h for _, h in job["fs"]["servers"]] == hosts[1:], job["fs"]
        kinds = [e["kind"] for e in c.info(jid).events]
        assert kinds.index("fs-grown") > kinds.index("fs-attach"), kinds
        (tmp_path / "grown").touch()
        # the job writes 512 MiB and ends; kill the controller while it copies them out
        wait_for(lambda: glob.glob(f"{tmp_path}/.back.bin.stage-out.*"), 90, "the stage-out to be under way")
        c.close()
        kill9(pid)
        assert not back.exists() and glob.glob(f"{tmp_path}/.back.bin.stage-out.*")  # cut in the middle
        pid = start(state, netns_cluster, hosts)
        c = Client(state=state, token=TOKEN.encode())
        fs = wait_for(lambda: fs_done(c, jid), 90, "the stage-out to be finished and the servers stopped")
        assert c.info(jid).job["state"] == "COMPLETED", (tmp_path / "j.out").read_text()[-2000:]
        assert fs["phase"] == "stopped" and fs["left"] == [] and fs["restarted"] == "staging-out", fs
        assert back.read_bytes() == big.read_bytes()                  # every byte, once
        assert fs["stage_out"] == [["/big.bin", str(back), 512 * M + 3, ""]], fs["stage_out"]
        assert not glob.glob(f"{tmp_path}/.back.bin.stage-out.*")     # the cut copy's temporary file is gone
        assert not scan_tagged(f"{cid}.fs{jid}")                      # no server left on any host
        assert fs_dirs(daemon_tmp) == []                              # nor a directory of its servers
        assert c.status()["bb_free"] == 1024 * M
        c.close()
        assert cli("controller", "stop", "--state", state)[0] == 0
        pid = 0
    finally:
        kill_leftovers(pid, cid)


REPLICATED = '''
import os, sys, time
from malleable.adhocfs import connect
tmp = sys.argv[1]
files, retries = {}, 0


def put(fs, path, data):
    global retries
    deadline = time.time() + 60
    while True:                      # a write waiting for the dead copy fails once (timeout); written again once
        try:                         # the controller declared that server lost, it succeeds
            with fs.open(path, "wb") as f:
                f.write(data)
            files[path] = data
            return
        except OSError as e:
            if time.time() > deadline:
                raise
            retries += 1
            print("retry:", path, e, flush=True)
            time.sleep(0.5)


with connect(os.environ["MALLEABLE_FS"]) as fs:
    put(fs, "/a.bin", os.urandom(4 << 20))
    open(f"{tmp}/written", "w").close()
    i, after = 0, None
    while after is None or i < after + 8:           # writing and reading while the server dies, and after
        put(fs, f"/c{i % 4}.bin", os.urandom((1 << 20) + i))
        for path, data in files.items():
            assert fs.open(path, "rb").read() == data, path       # the other copy answers
        i += 1
        if after is None and os.path.exists(f"{tmp}/killed"):
            after = i
for path, data in files.items():
    with open(f"{tmp}/{path[1:]}.want", "wb") as out:
        out.write(data)
print("writes", i + 1, "retries", retries)
'''


@pytest.mark.netns
@pytest.mark.timeout(180)
def test_with_two_replicas_a_killed_data_server_loses_nothing(env, tmp_path, netns_cluster):
    hosts = netns_cluster.hosts[:3]
    pool = HostPool.from_hosts([",".join(hosts)], netns_cluster.launcher)
    (tmp_path / "job.py").write_text(REPLICATED)
    with daemon_thread(tmp_path / "ctl.sqlite", pool, "fcfs-bb", bb_capacity=64 * M,
                       storage_hosts=tuple(hosts[1:])) as (d, c):
        jid = c.submit([PY, str(tmp_path / "job.py"), str(tmp_path)], 1, out=str(tmp_path / "j.out"), env=env,
                       bb=64 * M, fs_servers=2, fs_replicas=2,
                       stage_out=[f"/{n}.bin:{tmp_path}/{n}.out" for n in ("a", "c0", "c1", "c2", "c3")])
        wait_for(lambda: (tmp_path / "written").exists(), 60, "the job to write into its file system")
        job = c.info(jid).job
        assert job["fs_replicas"] == 2 and len(job["fs"]["data"]) == 2
        data = servers_of(d.fs.tag(jid), "malleable.adhocfs._data")
        assert len(data) == 2
        kill9(data[0])
        (tmp_path / "killed").touch()
        assert wait_final(c, [jid], 90)[jid] == "COMPLETED", (tmp_path / "j.out").read_text()[-2000:]
        fs = wait_for(lambda: fs_done(c, jid), 60, "the file system to be stopped")
        assert fs["phase"] == "stopped" and fs["left"] == [] and len(fs["lost"]) == 1, fs
        for name in ("a", "c0", "c1", "c2", "c3"):                     # nothing lost: every byte comes out
            assert (tmp_path / f"{name}.out").read_bytes() == (tmp_path / f"{name}.bin.want").read_bytes()
        fault = [e["text"] for e in c.info(jid).events if e["kind"] == "fs-fault"]
        assert fault and "declared lost" in fault[0], fault
        code, out, _ = cli("info", str(jid), "--state", str(tmp_path / "ctl.sqlite"))
        assert code == 0 and "FsReplicas=2" in out, out
        assert not scan_tagged(d.fs.tag(jid))


def test_bad_fs_replicas_is_one_line(env, tmp_path):
    state = str(tmp_path / "ctl.sqlite")
    (tmp_path / "job.sh").write_text("#!/bin/sh\n#MALLEABLE --bb 1G --fs-servers 2 --fs-replicas 3\ntrue\n")
    (tmp_path / "job.sh").chmod(0o755)
    with daemon_thread(tmp_path / "ctl.sqlite", HostPool.local(2), "fcfs-bb", bb_capacity=G) as (d, c):
        for args, text in (
                (["--bb", "1G", "--fs-replicas", "2", "--", "true"],
                 "--fs-replicas must be between 1 and the file system's most data servers (1), got 2"),
                (["--bb", "1G", "--fs-max", "3", "--fs-replicas", "0", "--", "true"], "(3), got 0"),
                (["--fs-replicas", "2", "--", "true"], "need a burst buffer: add --bb SIZE"),
                ([str(tmp_path / "job.sh")], "most data servers (2), got 3")):
            code, out, err = cli("submit", "--state", state, *args)
            assert code == 1 and out == "" and len(err.strip().splitlines()) == 1, (args, err)
            assert text in err and "Traceback" not in err, (args, err)
        assert c.rows(P.History(0)) == []                                  # nothing was queued
        code, out, err = cli("submit", "--state", state, "--parsable", "--bb", "1G", "--fs-servers", "2",
                             "--fs-replicas", "2", "--", "true")
        assert code == 0, err
        jid = int(out)
        assert c.info(jid).job["fs_replicas"] == 2
        assert wait_final(c, [jid], 60)[jid] == "COMPLETED"
        wait_for(lambda: fs_done(c, jid), 30, "the file system to be stopped")
