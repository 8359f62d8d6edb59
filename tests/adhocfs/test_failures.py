"""Servers that die or restart: a clear error naming server and file, never a hang or wrong data; a data
server restarted with --dir serves everything again."""

from __future__ import annotations

import os
import random
import signal
import time

import pytest
from conftest import close_checked


@pytest.fixture
def dep(tmp_path):
    from malleable.adhocfs import start_fs

    d = start_fs(
        "127.0.0.1", ["127.0.0.1", "127.0.0.1"], dir=str(tmp_path / "data"), state=str(tmp_path / "st")
    )
    yield d
    d.stop()


def _kill_server(fs, sid):
    pid = next(s["pid"] for s in fs.status().servers if s["sid"] == sid)
    os.kill(pid, signal.SIGKILL)
    time.sleep(0.2)


def test_down_server_gives_clear_error_then_restart_restores_everything(dep):
    from malleable.adhocfs import connect, start_data_servers
    from malleable.errors import ServerUnavailable

    fs = connect(dep.address, timeout=2.0)
    try:
        files = {
            f"/f{i}": random.Random(i).randbytes(random.Random(i).randrange(1, 3 << 20)) for i in range(6)
        }
        for path, data in files.items():
            with fs.open(path, "wb", block_size=64 * 1024) as f:
                f.write(data)
        victim = 1
        _kill_server(fs, victim)
        t0 = time.monotonic()
        with pytest.raises(ServerUnavailable) as err:
            with fs.open("/f0", "rb") as f:
                f.read()
        assert time.monotonic() - t0 < 6
        assert f"data server {victim}" in str(err.value) and "/f0" in str(err.value)
        with pytest.raises(ServerUnavailable, match="writing /new"):
            with fs.open("/new", "wb", block_size=64 * 1024) as f:
                f.write(b"x" * (1 << 20))
        row = next(s for s in fs.status().servers if s["sid"] == victim)
        assert not row["reachable"]
        held_open = fs.open("/f1", "rb")  # a file kept open across the restart (new port)
        # restart the same server id on its backing directory
        servers, procs = start_data_servers(dep.address, ["127.0.0.1"], dep.state, dep.dir, sids=[victim])
        dep.procs.update({f"restarted {k}": p for k, p in procs.items()})
        assert held_open.read() == files["/f1"]
        held_open.close()
        for path, data in files.items():
            with fs.open(path, "rb") as f:
                assert f.read() == data, path
    finally:
        close_checked(fs)


def test_down_metadata_server_gives_clear_error(tmp_path):
    from malleable.adhocfs import connect, start_fs
    from malleable.errors import ServerUnavailable

    d = start_fs("127.0.0.1", ["127.0.0.1"], state=str(tmp_path / "st"))
    fs = connect(d.address, timeout=1.0)
    try:
        d.procs["metadata server"].kill()
        d.procs["metadata server"].wait()
        with pytest.raises(ServerUnavailable, match="metadata server"):
            fs.open("/x", "wb")
    finally:
        close_checked(fs)
        for p in d.procs.values():
            p.kill()
        d.wait()


def test_metadata_restart_keeps_namespace(tmp_path):
    """The metadata server keeps the namespace in SQLite: restarted on its state dir, every file is there."""
    import subprocess
    import sys

    from malleable.adhocfs import connect, start_fs
    from malleable.adhocfs._deploy import _spawn, _wait_ready

    d = start_fs("127.0.0.1", ["127.0.0.1"], state=str(tmp_path / "st"))
    with connect(d.address) as fs:
        with fs.open("/persist", "wb") as f:
            f.write(b"still here")
    meta = d.procs.pop("metadata server")
    meta.terminate()
    meta.wait()
    port = d.address.rsplit(":", 1)[1]
    p = _spawn(
        "127.0.0.1",
        [
            sys.executable,
            "-m",
            "malleable.adhocfs._meta",
            "--host",
            "127.0.0.1",
            "--port",
            port,
            "--state",
            d.state,
        ],
        None,
    )
    d.procs["metadata server 2"] = p
    try:
        assert _wait_ready({"m": p}, {}, 20)["m"] == d.address
        with connect(d.address) as fs, fs.open("/persist", "rb") as f:
            assert f.read() == b"still here"
    finally:
        d.stop()
    assert isinstance(p, subprocess.Popen)
