"""Job mounts across two namespace hosts, live: each host gets its own mount daemon (in its network namespace, its
mount in a mount namespace of that host's) at the same path, the job's processes on both hosts write files with
plain ``open()`` under ``$MALLEABLE_FS_MOUNT`` and read each other's; the Jacobi app checkpoints there with plain
h5py and the stage-out brings the checkpoints back byte for byte; after the job no mount is left in any mount
namespace of the machine. A controller killed (SIGKILL) with its job leaves no mount after the restart."""

from __future__ import annotations

import filecmp
import json
import os
import sys

import h5py
import pytest

from malleable.controller.daemon._client import Client
from malleable.controller.daemon._hostpool import HostPool, netns_of, scan_tagged
from malleable.controller.daemon._paths import addr_file
from tests._procs import kill9
from tests.controller._daemon_util import TOKEN, cli, daemon_thread, isolate, kill_leftovers, wait_final, wait_for
from tests.controller._mounts import fs_phase, mount_daemons, mounts_anywhere, root  # noqa: F401 - a fixture

pytestmark = pytest.mark.netns

M = 1 << 20
PY = sys.executable

WRITER = '''
import os, socket, sys, time
m, out, hosts = os.environ["MALLEABLE_FS_MOUNT"], sys.argv[1], sys.argv[2].split(",")
me = socket.gethostname()
body = lambda h: "".join(f"line {i} written on {h}\\n" for i in range(2000))
with open(f"{m}/from-{me}.txt", "w") as f:
    f.write(body(me))
seen, deadline = {}, time.time() + 60
for h in hosts:
    while time.time() < deadline:
        try:
            with open(f"{m}/from-{h}.txt") as f:
                if f.read() == body(h):
                    seen[h] = True
                    break
        except FileNotFoundError:
            pass
        time.sleep(0.1)
mine = [ln.split()[4] for ln in open("/proc/self/mountinfo") if " fuse.adhocfs " in ln]
with open(f"{out}/seen-{me}.json", "w") as f:
    f.write(repr([sorted(seen), mine]))
while not os.path.exists(f"{out}/stop") and time.time() < deadline:
    time.sleep(0.05)
'''


@pytest.fixture
def env(monkeypatch, tmp_path):
    isolate(monkeypatch, tmp_path)
    return dict(os.environ)


@pytest.mark.timeout(240)
def test_two_hosts_share_files_through_their_mounts_and_jacobi_checkpoints_there(env, tmp_path, root,
                                                                                 netns_cluster):
    from malleable.controller.daemon._jobmount import check_root

    hosts = netns_cluster.hosts[:2]
    pool = HostPool.from_hosts([",".join(hosts)], netns_cluster.launcher)
    (tmp_path / "writer.py").write_text(WRITER)
    with daemon_thread(tmp_path / "ctl.sqlite", pool, "fcfs-bb", bb_capacity=256 * M,
                       mount_root=check_root(root)) as (d, c):
        jid = c.submit([PY, str(tmp_path / "writer.py"), str(tmp_path), ",".join(hosts)], 2, env=env, bb=64 * M,
                       out=str(tmp_path / "w.out"), stage_out=[f"/from-{hosts[0]}.txt:{tmp_path}/back.txt"])
        where = f"{root}/{jid}/fs"
        wait_for(lambda: all((tmp_path / f"seen-{h}.json").exists() for h in hosts) or fs_phase(c, jid) == "failed",
                 90, "both hosts to read each other's file")
        for h in hosts:
            seen, mine = eval((tmp_path / f"seen-{h}.json").read_text())     # noqa: S307 - our own repr
            mine = [m for m in mine if m.startswith(root + "/")]   # a login also sees the machine's other mounts
            assert seen == sorted(hosts) and mine == [where], (h, seen, mine)
        daemons = mount_daemons(root)                                  # one per host, in that host's network
        assert sorted(netns_of(p) for p in daemons) == sorted(pool.ns_inode(h) for h in hosts)
        assert not [m for pid, m in mounts_anywhere(root) if pid == os.getpid()]   # not in the head's namespace
        (tmp_path / "stop").touch()
        assert wait_final(c, [jid], 60)[jid] == "COMPLETED", (tmp_path / "w.out").read_text()[-2000:]
        wait_for(lambda: fs_phase(c, jid) == "stopped", 60, "the stage-out and stop")
        assert (tmp_path / "back.txt").read_text() == "".join(f"line {i} written on {hosts[0]}\n" for i in range(2000))
        wait_for(lambda: not mounts_anywhere(root) and not mount_daemons(root), 30, "every host's mount to go")

        ck = tmp_path / "ckpt-back"
        script = (f'{PY} -m malleable.apps.jacobi --n 96 --iters 200 --probe-every 10 --checkpoint-every 50 '
                  f'--checkpoint-keep 0 --checkpoint-dir "$MALLEABLE_FS_MOUNT/ckpt" --stats {tmp_path}/stats.json '
                  f'&& cp -r "$MALLEABLE_FS_MOUNT/ckpt" {tmp_path}/via-mount')
        jid = c.submit(["sh", "-c", script], 2, 2, 2, True, out=str(tmp_path / "j.out"), env=env, bb=64 * M,
                       stage_out=[f"/ckpt/:{ck}/"])
        assert wait_final(c, [jid], 150)[jid] == "COMPLETED", (tmp_path / "j.out").read_text()[-3000:]
        wait_for(lambda: fs_phase(c, jid) == "stopped", 60, "the checkpoints' stage-out")
        names = sorted(os.listdir(ck))
        assert names == [f"jacobi-{i:08d}.h5" for i in (50, 100, 150, 200)], names
        same, diff, errors = filecmp.cmpfiles(ck, tmp_path / "via-mount", names, shallow=False)
        assert same == names and not diff and not errors               # byte for byte what the job wrote
        stats = json.loads((tmp_path / "stats.json").read_text())
        assert [x["bytes"] for x in stats["checkpoints"]] == [os.path.getsize(ck / n) for n in names]
        with h5py.File(ck / names[-1], "r") as f:                      # a checkpoint h5py reads back
            assert f.attrs["format"] == "malleable-jacobi-checkpoint-1"
        wait_for(lambda: not mounts_anywhere(root) and not mount_daemons(root), 30, "every host's mount to go")
        assert sorted(os.listdir(root)) == [".netns-launch", ".ns"] and os.listdir(f"{root}/.ns") == []


@pytest.mark.timeout(240)
def test_a_controller_killed_with_its_job_leaves_no_mount_on_any_host(env, tmp_path, root, netns_cluster):
    hosts = netns_cluster.hosts[:2]
    state = str(tmp_path / "ctl.sqlite")

    def start() -> int:
        code, _, err = cli("controller", "start", "--hosts", ",".join(hosts), "--launcher-exec",
                           netns_cluster.launcher, "--policy", "fcfs-bb", "--bb-capacity", "64M", "--state", state,
                           "--tick", "0.2", "--bb-mount-root", root)
        assert code == 0, err
        return json.loads(addr_file(state).read_text())["pid"]

    (tmp_path / "writer.py").write_text(WRITER)
    pid, cid = start(), ""
    try:
        with Client(state=state, token=TOKEN.encode()) as c:
            cid = c.status()["controller_id"]
            jid = c.submit([PY, str(tmp_path / "writer.py"), str(tmp_path), ",".join(hosts)], 2, env=env,
                           bb=16 * M, out=str(tmp_path / "w.out"))
            wait_for(lambda: all((tmp_path / f"seen-{h}.json").exists() for h in hosts), 90, "the job to run")
        kill9(pid)
        for procs in scan_tagged(f"{cid}.{jid}").values():            # the job dies with it, its mounts do not
            for p in procs:
                kill9(p.pid)
        assert len(mount_daemons(root)) == 2 and mounts_anywhere(root)
        pid = start()
        wait_for(lambda: not mounts_anywhere(root) and not mount_daemons(root), 60, "the stale mounts to go")
        wait_for(lambda: sorted(os.listdir(root)) == [".netns-launch", ".ns"] and not os.listdir(f"{root}/.ns"), 30,
                 "the mount point to be removed")
        for h in hosts:                                   # and a login on each host sees none either
            out = login_mounts(netns_cluster, h)
            assert not [ln for ln in out.splitlines() if " fuse.adhocfs " in ln and f" {root}/" in ln], (h, out)
        assert cli("controller", "stop", "--state", state)[0] == 0
        pid = 0
    finally:
        kill_leftovers(pid, cid)


def login_mounts(cluster, host: str) -> str:
    """``/proc/self/mounts`` as a new login on ``host`` sees it."""
    import subprocess

    done = subprocess.run([cluster.launcher, host, "cat /proc/self/mounts"], capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout

