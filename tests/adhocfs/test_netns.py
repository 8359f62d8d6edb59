"""The same file system across namespace hosts: metadata on node1, data servers on node2..node4 (two on
node2), started through the ssh-like launcher; the client runs on the head (root namespace)."""

from __future__ import annotations

import os
import random
import signal
import time

import pytest
from conftest import close_checked
from elastic_util import blocks_on_servers

pytestmark = pytest.mark.netns


@pytest.fixture
def cluster_fs(netns_cluster, tmp_path, monkeypatch):
    from malleable.adhocfs import start_fs

    for k, v in netns_cluster.env().items():
        monkeypatch.setenv(k, v)
    hosts = netns_cluster.hosts
    dep = start_fs(
        hosts[0], [hosts[1], hosts[1], *hosts[2:4]], dir=str(tmp_path / "data"), state=str(tmp_path / "st")
    )
    yield dep, netns_cluster
    dep.stop()


def test_servers_run_on_their_hosts(cluster_fs):
    from malleable.adhocfs import connect

    dep, cluster = cluster_fs
    assert dep.address.startswith("tcp://node1:")
    with connect(dep.address) as fs:
        rows = fs.status().servers
    assert sorted(r["host"] for r in rows) == ["node2", "node2", "node3", "node4"]
    for r in rows:
        assert r["pid"] in cluster.pids_on(r["host"])  # really inside that host's namespace


def test_roundtrip_h5py_and_down_server(cluster_fs):
    import h5py
    import numpy as np

    from malleable.adhocfs import connect
    from malleable.errors import ServerUnavailable

    dep, cluster = cluster_fs
    fs = connect(dep.address, timeout=2.0)
    try:
        datas = {
            size: random.Random(size).randbytes(size)
            for size in (0, 1, 512 * 1024 - 1, 512 * 1024 + 1, 5 << 20)
        }
        for size, data in datas.items():
            with fs.open(f"/r{size}", "wb") as f:
                f.write(data)
        for size, data in datas.items():
            with fs.open(f"/r{size}", "rb") as f:
                assert f.read() == data
        arr = np.arange(200_000, dtype=np.float64)
        with fs.open("/x.h5", "w+b") as f, h5py.File(f, "w") as h:
            h.create_dataset("g/arr", data=arr)
        with fs.open("/x.h5", "rb") as f, h5py.File(f, "r") as h:
            assert np.array_equal(h["g/arr"][...], arr)
        victim = next(r for r in fs.status().servers if r["host"] == "node3")
        os.kill(victim["pid"], signal.SIGKILL)
        time.sleep(0.2)
        with pytest.raises(ServerUnavailable, match=f"data server {victim['sid']}.*r5242880"):
            with fs.open("/r5242880", "rb") as f:
                f.read()
    finally:
        close_checked(fs)


def test_expand_and_shrink_across_hosts(netns_cluster, tmp_path, monkeypatch):
    """Grow onto node4 through the launcher, then decommission node2: its server exits, nothing is lost."""
    import h5py
    import numpy as np

    from malleable.adhocfs import connect, start_fs
    from malleable.adhocfs._admin import expand_fs, resolve_servers, shrink_fs

    for k, v in netns_cluster.env().items():
        monkeypatch.setenv(k, v)
    dep = start_fs("node1", ["node2", "node3"], state=str(tmp_path / "st"))
    try:
        fs = connect(dep.address, timeout=3.0)
        try:
            files = {f"/n{i}": random.Random(i).randbytes(3 << 20) for i in range(3)}
            for p, d in files.items():
                with fs.open(p, "wb", block_size=128 * 1024) as f:
                    f.write(d)
            arr = np.arange(50_000.0)
            with fs.open("/h.h5", "w+b") as f, h5py.File(f, "w") as h:
                h["a"] = arr
            servers, procs, info = expand_fs(dep.address, ["node4"], state=dep.state)
            dep.procs.update({f"x{k}": p for k, p in procs.items()})
            assert info["state"] == "done" and [h for h, _ in servers.values()] == ["node4"]
            with fs.open("/after", "wb", block_size=128 * 1024) as f:
                f.write(b"z" * (2 << 20))
            node2 = resolve_servers(dep.address, ["node2"])
            pid2 = next(s["pid"] for s in fs.status().servers if s["sid"] in node2)
            assert pid2 in netns_cluster.pids_on("node2")
            done = shrink_fs(dep.address, node2, "partial")
            assert done["state"] == "done"
            for _ in range(50):
                if pid2 not in netns_cluster.pids_on("node2"):
                    break
                time.sleep(0.1)
            assert pid2 not in netns_cluster.pids_on("node2")  # the host is really freed
            assert sorted(s["host"] for s in fs.status().servers) == ["node3", "node4"]
            for p, d in files.items():
                with fs.open(p, "rb") as f:
                    assert f.read() == d
            with fs.open("/after", "rb") as f:
                assert f.read() == b"z" * (2 << 20)
            with fs.open("/h.h5", "rb") as f, h5py.File(f, "r") as h:
                assert np.array_equal(h["a"][...], arr)
        finally:
            close_checked(fs)
    finally:
        dep.stop()


def test_encrypted_replicated_file_system_across_hosts_survives_a_host(netns_cluster, tmp_path, monkeypatch):
    """CURVE between hosts, two copies of every block: a data host killed (its processes gone) loses nothing,
    `lose` restores two copies on the others; a client without encryption cannot talk to the servers."""
    from malleable.adhocfs import connect, start_fs
    from malleable.adhocfs._admin import check_fs, lose_fs
    from malleable.errors import ServerUnavailable

    for k, v in netns_cluster.env().items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("MALLEABLE_ENCRYPT", "1")  # the launcher passes it to every server
    hosts = netns_cluster.hosts
    dep = start_fs(hosts[0], hosts[1:4], state=str(tmp_path / "st"), replicas=2)
    try:
        files = {f"/e{i}": random.Random(i).randbytes(random.Random(i).randrange(1 << 20, 3 << 20)) for i in range(4)}
        with connect(dep.address, timeout=2.0) as fs:
            for path, data in files.items():
                with fs.open(path, "wb", block_size=128 * 1024) as f:
                    f.write(data)
            victim = next(s for s in fs.status().servers if s["host"] == hosts[2])
            os.kill(victim["pid"], signal.SIGKILL)
            for path, data in files.items():
                with fs.open(path, "rb") as f:
                    assert f.read() == data, path
            lose_fs(dep.address, [victim["sid"]], wait=True)
            assert check_fs(dep.address).files == []
        monkeypatch.setenv("MALLEABLE_ENCRYPT", "0")
        with pytest.raises(ServerUnavailable):
            with connect(dep.address, timeout=1.0) as plain:
                plain.listdir("/")
        monkeypatch.setenv("MALLEABLE_ENCRYPT", "1")
    finally:
        monkeypatch.setenv("MALLEABLE_ENCRYPT", "1")
        dep.stop()


SHARED_WORKER = r"""
import random, sys
from malleable.adhocfs import connect
role, addr, path, idx, nw, ch = sys.argv[1], sys.argv[2], sys.argv[3], *map(int, sys.argv[4:7])


def chunk(i, k):
    return random.Random(i * 1_000_003 + k).randbytes(ch)


fs = connect(addr, timeout=5.0)
f = fs.open(path, "r+b" if role == "writer" else "rb")  # kept open to the end
k = 0
print("ready", flush=True)
for line in sys.stdin:
    cmd, *arg = line.split()
    if cmd == "write":  # writer idx owns chunks idx, idx + nw, idx + 2 nw, ... of the shared file
        for _ in range(int(arg[0])):
            f.seek((k * nw + idx) * ch)
            f.write(chunk(idx, k))
            k += 1
        print("wrote", k, flush=True)
    elif cmd == "flush":
        f.flush()
        print("flushed", k, flush=True)
    elif cmd == "check":  # reader: the first n chunks of every writer
        bad = []
        for kk in range(int(arg[0])):
            for i in range(nw):
                f.seek((kk * nw + i) * ch)
                if f.read(ch) != chunk(i, kk):
                    bad.append((i, kk))
        print("checked", len(bad), bad[:4], flush=True)
    elif cmd == "close":
        f.close()
        fs.close()
        print("closed", k, flush=True)
        break
"""


class _Worker:
    """A client process on a namespace host, driven one command (and one answer line) at a time."""

    def __init__(self, launcher, host, script, *args):
        import queue
        import subprocess
        import sys
        import threading

        cmd = " ".join([sys.executable, str(script), *map(str, args)])
        self.name = f"{args[0]} {args[3]} on {host}"
        self.err = script.parent / f"{args[0]}{args[3]}.err"
        with open(self.err, "w") as err:
            self.proc = subprocess.Popen([launcher, host, cmd], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=err, text=True)
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        for line in self.proc.stdout:
            self.lines.put(line.split())
        self.lines.put(None)

    def expect(self, word, timeout=120.0):
        import queue

        try:
            got = self.lines.get(timeout=timeout)
        except queue.Empty:
            got = ["(no answer within", f"{timeout:g} s)"]
        if got is None or got[0] != word:
            self.kill()
            raise AssertionError(f"{self.name}: expected {word!r}, got {got}\n{self.err.read_text()}")
        return got[1:]

    def ask(self, line, word, timeout=120.0):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self.expect(word, timeout)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


def test_writers_on_two_hosts_and_a_reader_keep_a_shared_file_open_across_expand_and_shrink(
    netns_cluster, tmp_path, monkeypatch
):
    """Three writers on two hosts share one file (interleaved chunks, not block-aligned) and a reader on a third
    host checks it; all keep it open while a data server joins and the one holding most of it leaves, with
    writes still buffered: every byte reads back equal, in the reader and from the head."""
    from malleable.adhocfs import connect, start_fs
    from malleable.adhocfs._admin import expand_fs, shrink_fs

    for k, v in netns_cluster.env().items():
        monkeypatch.setenv(k, v)
    script = tmp_path / "worker.py"
    script.write_text(SHARED_WORKER)
    nw, ch, path = 3, 192 * 1024, "/shared.bin"
    dep = start_fs("node1", ["node2", "node3"], state=str(tmp_path / "st"))
    workers = []
    try:
        with connect(dep.address, timeout=5.0) as fs:
            fs.open(path, "wb", block_size=128 * 1024).close()
            launcher = netns_cluster.launcher
            writers = [_Worker(launcher, host, script, "writer", dep.address, path, i, nw, ch)
                       for i, host in enumerate(["node1", "node1", "node4"])]
            reader = _Worker(launcher, "node3", script, "reader", dep.address, path, 0, nw, ch)
            workers = [*writers, reader]
            for w in workers:
                w.expect("ready")

            def all_write(n, flush):
                for w in writers:
                    w.ask(f"write {n}", "wrote")
                if flush:
                    for w in writers:
                        w.ask("flush", "flushed")

            all_write(6, flush=True)
            assert reader.ask("check 6", "checked")[0] == "0"
            servers, procs, info = expand_fs(dep.address, ["node4"], state=dep.state)
            dep.procs.update({f"x{k}": p for k, p in procs.items()})
            assert info["state"] == "done"
            all_write(6, flush=False)  # buffered when the shrink comes
            held = blocks_on_servers(fs, path)
            victim = max((s for s in held if s not in servers), key=lambda s: (len(held[s]), -s))
            vrow = next(s for s in fs.status().servers if s["sid"] == victim)
            assert shrink_fs(dep.address, [victim], "partial")["state"] == "done"
            all_write(6, flush=True)
            assert reader.ask("check 18", "checked")[0] == "0"  # its layout is from before both changes
            for w in workers:
                w.ask("close", "closed")
                assert w.proc.wait(30) == 0
            assert vrow["pid"] not in netns_cluster.pids_on(vrow["host"])  # the victim really left its host
            with fs.open(path, "rb") as f:
                data = f.read()
        expected = bytearray(18 * nw * ch)
        for k in range(18):
            for i in range(nw):
                expected[(k * nw + i) * ch : (k * nw + i + 1) * ch] = random.Random(i * 1_000_003 + k).randbytes(ch)
        assert data == expected
    finally:
        for w in workers:
            w.kill()
        dep.stop()
