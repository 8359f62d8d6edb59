"""A mount in use while data servers join and leave, and mounts whose daemon or servers die (never a hang)."""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import signal
import subprocess
import time

import pytest
from mount_util import mounted, need_fuse, no_leaked_mounts  # noqa: F401 - fixture

from tests._procs import wait_for

pytestmark = pytest.mark.usefixtures("no_leaked_mounts")


def test_fio_while_servers_join_and_leave(tmp_path):
    """fio writes and verifies through the mount while a data server joins and another leaves: no error, and
    the bytes read through the mount are the bytes the Python client reads."""
    from malleable.adhocfs import connect, expand_fs, shrink_fs, start_fs

    need_fuse()
    if not shutil.which("fio"):
        pytest.skip("fio is not installed (Debian: apt-get install fio)")
    with start_fs("127.0.0.1", ["127.0.0.1"] * 2, state=str(tmp_path / "st")) as dep, \
            mounted(dep.address, tmp_path / "m") as rec:
        target = os.path.join(rec.dir, "el.dat")
        fio = subprocess.Popen(
            ["fio", "--name=el", f"--filename={target}", "--size=160M", "--bs=1M", "--rw=write",
             "--verify=crc32c", "--do_verify=1", "--verify_fatal=1", "--ioengine=psync", "--rate=40M",
             "--verify_state_save=0", "--output-format=terse"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            wait_for(lambda: os.path.exists(target) and os.stat(target).st_size > 24 << 20, 60, "fio to start")
            expand_fs(dep.address, ["127.0.0.1"])
            grown = os.stat(target).st_size
            wait_for(lambda: os.stat(target).st_size > grown + (24 << 20), 60, "writes after the expansion")
            with connect(dep.address) as fs:
                first = min(s["sid"] for s in fs.status().servers)
            shrink_fs(dep.address, [first], mode="partial")
            out, err = fio.communicate(timeout=240)
        finally:
            if fio.poll() is None:
                fio.kill()
                fio.wait()
        assert fio.returncode == 0, err
        assert out.strip().splitlines()[-1].split(";")[4] == "0", out  # fio's error field
        with connect(dep.address) as fs:
            states = {s["sid"]: s["state"] for s in fs.status().servers}
            assert states.get(first, "gone") == "gone" and list(states.values()).count("active") == 2, states
            with fs.open("/el.dat", "rb") as f:
                via_client = hashlib.sha256(f.read()).hexdigest()
        with open(target, "rb") as f:
            assert hashlib.sha256(f.read()).hexdigest() == via_client
        assert os.stat(target).st_size == 160 << 20


def test_dead_servers_and_dead_daemon_answer_errors(tmp_path):
    """Servers gone: operations fail with EIO within the client's timeout. Daemon killed: ENOTCONN at once,
    and umount removes the dead mount."""
    from malleable.adhocfs import start_fs
    from malleable.adhocfs._fuse_mount import FSTYPE, mount_point

    need_fuse()
    dep = start_fs("127.0.0.1", ["127.0.0.1"], state=str(tmp_path / "st"))
    stopped = False
    try:
        with mounted(dep.address, tmp_path / "m", timeout=1.0) as rec:
            (tmp_path / "m" / "f").write_bytes(b"x" * 1000)
            dep.stop()
            stopped = True
            for call in (lambda: os.stat(tmp_path / "m" / "f"), lambda: os.listdir(tmp_path / "m"),
                         lambda: (tmp_path / "m" / "g").write_bytes(b"y")):
                t0 = time.monotonic()
                with pytest.raises(OSError) as e:
                    call()
                assert e.value.errno == errno.EIO
                assert time.monotonic() - t0 < 15
            os.kill(rec.pid, signal.SIGKILL)
            wait_for(lambda: not os.path.exists(f"/proc/{rec.pid}/cmdline") or
                      open(f"/proc/{rec.pid}/stat").read().split()[2] == "Z", 10, "the daemon to die")
            with pytest.raises(OSError) as e:
                os.listdir(tmp_path / "m")  # a call the kernel had in flight as the daemon died: ECONNABORTED
            assert e.value.errno in (errno.ENOTCONN, errno.ECONNABORTED)
            with pytest.raises(OSError) as e:
                os.listdir(tmp_path / "m")
            assert e.value.errno == errno.ENOTCONN
            assert mount_point(str(tmp_path / "m")) == FSTYPE  # the dead mount stays until umount
    finally:
        if not stopped:
            dep.stop()
    assert mount_point(str(tmp_path / "m")) != FSTYPE
