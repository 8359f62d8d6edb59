"""Job file systems with a real daemon, real adhocfs servers and real files: on namespace hosts a job gets a file
system on the storage hosts, writes into it, and the stage-out brings back exactly its bytes with no server left on
any host; two jobs whose buffers do not fit together run one after the other; a failing stage-in fails the job
with the reason. Bad submit input is one line (a local pool is enough there)."""

from __future__ import annotations

import os
import sys

import pytest

from malleable.controller.daemon import _protocol as P
from malleable.controller.daemon._hostpool import HostPool, scan_tagged
from tests._procs import cmdline
from tests.controller._daemon_util import TOKEN, cli, daemon_thread, isolate, wait_final, wait_for

M = 1 << 20
G = 1 << 30
PY = sys.executable


@pytest.fixture
def env(monkeypatch, tmp_path):
    isolate(monkeypatch, tmp_path)
    return dict(os.environ)


def fs_done(c, jid):
    """The job's file system once it is stopped (or failed), else None."""
    fs = c.info(jid).job.get("fs") or {}
    return fs if fs.get("phase") in ("stopped", "failed") else None


def no_servers_left(d, jid):
    """Every process tagged as the job's file-system server is gone (the namespaces share /proc)."""
    return not scan_tagged(d.fs.tag(jid))


@pytest.mark.netns
@pytest.mark.timeout(180)
def test_job_file_system_stage_in_write_stage_out_and_clean_hosts(env, tmp_path, netns_cluster):
    hosts = netns_cluster.hosts[:3]
    pool = HostPool.from_hosts([",".join(hosts)], netns_cluster.launcher)
    src = tmp_path / "in.bin"
    src.write_bytes(os.urandom(3 * M + 17))
    payload = tmp_path / "payload.bin"
    payload.write_bytes(os.urandom(2 * M + 5))
    script = (f"{PY} -m malleable fs get /in/in.bin {tmp_path}/got.bin && {PY} -m malleable fs mkdir -p /out && "
              f"{PY} -m malleable fs put {payload} /out/result.bin && echo $MALLEABLE_FS > {tmp_path}/addr.txt")
    with daemon_thread(tmp_path / "ctl.sqlite", pool, "fcfs-bb", bb_capacity=64 * M,
                       storage_hosts=tuple(hosts[1:])) as (d, c):
        jid = c.submit(["sh", "-c", script], 1, out=str(tmp_path / "j.out"), env=env, bb=48 * M, fs_servers=2,
                       stage_in=[f"{src}:/in/in.bin"], stage_out=[f"/out/result.bin:{tmp_path}/result.bin"])
        assert wait_final(c, [jid], 90)[jid] == "COMPLETED", (tmp_path / "j.out").read_text()[-2000:]
        fs = wait_for(lambda: fs_done(c, jid), 60, "the file system to be stopped")
        assert fs["phase"] == "stopped" and fs["left"] == [] and fs["error"] == ""
        assert fs["meta"] == hosts[0] and fs["data"] == hosts[1:]          # data servers on the storage hosts
        assert (tmp_path / "got.bin").read_bytes() == src.read_bytes()     # stage-in, read by the job
        assert (tmp_path / "result.bin").read_bytes() == payload.read_bytes()   # stage-out: exactly its bytes
        addr = (tmp_path / "addr.txt").read_text().strip()
        assert addr == fs["address"] and addr.startswith(f"tcp://{hosts[0]}:")
        assert fs["stage_in"] == [[str(src), "/in/in.bin", 3 * M + 17, ""]]
        assert fs["stage_out"] == [["/out/result.bin", f"{tmp_path}/result.bin", 2 * M + 5, ""]]
        assert no_servers_left(d, jid)
        for h in hosts:                                  # nothing of this checkout's adhocfs in any namespace
            cmds = [" ".join(cmdline(p)) for p in netns_cluster.pids_on(h)]
            assert not [x for x in cmds if "malleable.adhocfs" in x and PY in x], (h, cmds)
        code, out, _ = cli("info", str(jid), "--state", str(tmp_path / "ctl.sqlite"))
        assert code == 0 and f"Fs={addr} FsState=stopped" in out and "stage-out: 1/1 file(s) done" in out


@pytest.mark.netns
@pytest.mark.timeout(180)
def test_buffers_that_do_not_fit_together_run_one_after_the_other(env, tmp_path, netns_cluster):
    hosts = netns_cluster.hosts[:2]
    pool = HostPool.from_hosts([",".join(hosts)], netns_cluster.launcher)
    state = str(tmp_path / "ctl.sqlite")
    with daemon_thread(tmp_path / "ctl.sqlite", pool, "fcfs-bb", bb_capacity=16 * M) as (d, c):
        a = c.submit(["sleep", "3"], 1, env=env, bb=20 * M)
        b = c.submit(["true"], 1, env=env, bb=20 * M)
        wait_for(lambda: c.info(a).job["state"] == "RUNNING", 60, "a to run")
        code, out, _ = cli("queue", "--state", state)
        line = [x for x in out.splitlines() if x.split()[:1] == [str(b)]]
        assert code == 0 and line and line[0].endswith("(BurstBufferResources)"), out
        assert wait_final(c, [a, b], 90) == {a: "COMPLETED", b: "COMPLETED"}
        wait_for(lambda: fs_done(c, a) and fs_done(c, b), 60, "both file systems to be stopped")
        stopped_a = [e["t"] for e in c.info(a).events if e["kind"] == "fs-stopped"]
        started_b = [e["t"] for e in c.info(b).events if e["kind"] == "fs-start"]
        assert stopped_a and started_b and started_b[0] >= stopped_a[0]    # one after the other
        assert c.info(b).job["start"] >= c.info(a).job["end"]
        assert no_servers_left(d, a) and no_servers_left(d, b)


@pytest.mark.netns
@pytest.mark.timeout(180)
def test_failing_stage_in_fails_the_job_with_the_reason(env, tmp_path, netns_cluster):
    hosts = netns_cluster.hosts[:2]
    pool = HostPool.from_hosts([",".join(hosts)], netns_cluster.launcher)
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(3 * M))
    before = (big.read_bytes(), big.stat().st_mtime_ns)
    with daemon_thread(tmp_path / "ctl.sqlite", pool, "fcfs-bb", bb_capacity=64 * M) as (d, c):
        missing = c.submit(["touch", str(tmp_path / "ran")], 1, env=env, bb=M,
                           stage_in=[f"{tmp_path}/nope.bin:/nope.bin"])
        full = c.submit(["touch", str(tmp_path / "ran")], 1, env=env, bb=M, stage_in=[f"{big}:/big.bin"])
        assert wait_final(c, [missing, full], 90) == {missing: "FAILED", full: "FAILED"}
        r1, r2 = c.info(missing).job, c.info(full).job
        assert r1["reason"] == (f"file system: stage-in {tmp_path}/nope.bin -> /nope.bin: {tmp_path}/nope.bin: "
                                "No such file or directory")
        assert r2["reason"].startswith(f"file system: stage-in {big} -> /big.bin:") and "space" in r2["reason"], r2
        assert not (tmp_path / "ran").exists()                            # neither job ran
        assert not (tmp_path / "nope.bin").exists()
        assert (big.read_bytes(), big.stat().st_mtime_ns) == before       # the source is untouched
        wait_for(lambda: no_servers_left(d, full), 30, "the servers of the failed stage-in to be gone")
        assert r2["fs"]["phase"] == "failed" and r2["fs"]["stage_in"][0][3]


def test_bad_submit_input_is_one_line(env, tmp_path):
    state = str(tmp_path / "ctl.sqlite")
    with daemon_thread(tmp_path / "ctl.sqlite", HostPool.local(2), "fcfs-bb", bb_capacity=G) as (d, c):
        for args, text in ((["--bb", "10X"], "--bb: expected a size such as 512M or 2G, got '10X'"),
                           (["--bb", "1G", "--stage-in", "nocolon"], "--stage-in wants LOCAL:/FS/PATH"),
                           (["--bb", "1G", "--stage-out", "rel:/x"], "--stage-out wants /FS/PATH:LOCAL"),
                           (["--stage-in", "a:/b"], "need a burst buffer: add --bb SIZE"),
                           (["--bb", "1G", "--fs-servers", "0"], "--fs-servers must be between 1 and 64"),
                           (["--bb", "3G"], "more than the controller's whole burst buffer (2G on 2 storage host")):
            code, out, err = cli("submit", "--state", state, *args, "--", "true")
            assert code == 1 and out == "" and len(err.strip().splitlines()) == 1, (args, err)
            assert text in err and "Traceback" not in err, (args, err)
        assert c.rows(P.History(0)) == []                                  # nothing was queued
        assert d.core.status()["bb_free"] == 2 * G


@pytest.mark.timeout(120)
def test_cancelled_job_still_stages_out_and_fs_job_reaches_its_file_system(env, tmp_path, monkeypatch):
    data = os.urandom(M + 3)
    (tmp_path / "data.bin").write_bytes(data)
    script = (f"{PY} -m malleable fs put {tmp_path}/data.bin /keep.bin && touch {tmp_path}/written && "
              "exec sleep 60")
    with daemon_thread(tmp_path / "ctl.sqlite", HostPool.local(2), "sjf-bb", bb_capacity=8 * M,
                       kill_wait=2.0) as (d, c):
        jid = c.submit(["sh", "-c", script], 1, env=env, bb=4 * M, stage_out=[f"/keep.bin:{tmp_path}/back.bin"])
        wait_for(lambda: (tmp_path / "written").exists(), 60, "the job to write into its file system")
        assert c.info(jid).job["fs"]["meta"] == "local1"
        state = d.fs.deps[jid].state                                  # its servers' database and logs
        assert os.path.exists(os.path.join(state, "meta.sqlite"))
        monkeypatch.setenv("MALLEABLE_CONTROLLER_STATE", str(tmp_path / "ctl.sqlite"))
        code, out, err = cli("fs", "ls", "-l", "--job", str(jid))     # the operator reaches the job's file system
        assert code == 0 and out.splitlines()[-1].split()[1] == str(M + 3), err
        monkeypatch.setenv("MALLEABLE_TOKEN", TOKEN)                  # --job set this process's secret to the fs's
        code, out, err = cli("fs", "ls", "--job", str(jid + 1))
        assert (code, err) == (1, f"malleable fs: error: no job {jid + 1}\n")
        c.call(P.Cancel(jid))
        assert wait_final(c, [jid], 30)[jid] == "CANCELLED"
        fs = wait_for(lambda: fs_done(c, jid), 30, "the file system to be stopped")
        assert fs["phase"] == "stopped" and fs["left"] == []
        assert (tmp_path / "back.bin").read_bytes() == data
        assert no_servers_left(d, jid)
        assert not os.path.exists(state)                              # removed with the file system
        assert d.core.status()["bb_free"] == 16 * M


WRITER = '''
import hashlib, os, sys, time
from malleable.adhocfs import connect
tmp, deadline = sys.argv[1], time.time() + float(sys.argv[2])
written = {}
with connect(os.environ["MALLEABLE_FS"]) as fs:
    fs.makedirs("/w", exist_ok=True)
    i, after = 0, None
    while time.time() < deadline and (after is None or i < after + 6):
        data = hashlib.sha256(str(i).encode()).digest() * (32768 + 97 * i)     # about 1 MiB, each file different
        with fs.open(f"/w/f{i % 24}.bin", "wb") as f:                            # 24 files rewritten in turn
            f.write(data)
        written[f"/w/f{i % 24}.bin"] = data
        i += 1
        time.sleep(0.05)
        if after is None and os.path.exists(f"{tmp}/grown"):
            after = i                                                            # a few more files once grown
    bad = [p for p, data in written.items() if fs.open(p, "rb").read() != data]
    with open(f"{tmp}/result.txt", "w") as out:
        out.write(f"{i} {sum(map(len, written.values()))} {after} {len(bad)}\\n")
sys.exit(1 if bad or after is None else 0)
'''


@pytest.mark.netns
@pytest.mark.timeout(300)
def test_a_job_file_system_grows_onto_another_host_while_the_job_writes(env, tmp_path, netns_cluster):
    hosts = netns_cluster.hosts[:3]
    pool = HostPool.from_hosts([",".join(hosts)], netns_cluster.launcher)
    (tmp_path / "writer.py").write_text(WRITER)
    with daemon_thread(tmp_path / "ctl.sqlite", pool, "fcfs-bb", bb_capacity=512 * M,
                       storage_hosts=tuple(hosts[1:])) as (d, c):
        jid = c.submit([PY, str(tmp_path / "writer.py"), str(tmp_path), "150"], 1, out=str(tmp_path / "j.out"),
                       env=env, bb=400 * M, fs_min=1, fs_max=2, io_rate=float(10 * G))
        wait_for(lambda: c.info(jid).job["state"] in ("RUNNING", "FAILED"), 60, "the job to run")
        grown = wait_for(lambda: len((c.info(jid).job["fs"] or {}).get("servers") or []) == 2
                         or c.info(jid).job["state"] != "RUNNING", 120, "a second data server")
        job = c.info(jid).job
        assert job["state"] == "RUNNING", (tmp_path / "j.out").read_text()[-2000:] + str(c.info(jid).events)
        assert grown and [h for _, h in job["fs"]["servers"]] == [hosts[1], hosts[2]]   # on the other host
        code, out, _ = cli("info", str(jid), "--state", str(tmp_path / "ctl.sqlite"))
        assert code == 0 and "FsBounds=1..2" in out and f"add on {hosts[2]}" in out, out
        (tmp_path / "info.txt").write_text(out)

        def blocks_on_new_server():
            from malleable.adhocfs._deploy import MetaClient

            with MetaClient(job["fs"]["address"], d.fs.secret(jid).encode()) as mc:
                return sum(s.get("blocks", 0) for s in mc.status().servers if s["host"] == hosts[2])

        assert wait_for(blocks_on_new_server, 60, "blocks written on the new server")    # the job's writes use it
        (tmp_path / "grown").touch()
        assert wait_final(c, [jid], 120)[jid] == "COMPLETED", (tmp_path / "j.out").read_text()[-2000:]
        files, size, after, bad = map(int, (tmp_path / "result.txt").read_text().split())
        assert bad == 0 and files >= after + 6 and size > 24 * M // 2       # every byte read back equal
        fs = wait_for(lambda: fs_done(c, jid), 60, "the file system to be stopped")
        assert fs["phase"] == "stopped" and fs["left"] == [] and fs["error"] == ""
        kinds = [e["kind"] for e in c.info(jid).events]
        assert "fs-grow" in kinds and "fs-grown" in kinds
        assert no_servers_left(d, jid)
        for h in hosts:                                  # nothing of this test's adhocfs in any namespace
            cmds = [" ".join(cmdline(p)) for p in netns_cluster.pids_on(h)]
            assert not [x for x in cmds if "malleable.adhocfs" in x and PY in x and fs["address"].rsplit(":", 1)[1]
                        in x], (h, cmds)
            assert not [x for x in cmds if "malleable.adhocfs._data" in x and fs["address"] in x], (h, cmds)
