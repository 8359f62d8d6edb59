"""The ``malleable fs`` commands as a user runs them (separate processes)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

MALLEABLE = [sys.executable, "-m", "malleable"]


def run(*args, check=True):
    p = subprocess.run([*MALLEABLE, *args], capture_output=True, text=True, timeout=60)
    if check and p.returncode:
        raise AssertionError(f"{args} exited {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p


def _pids_of(addr):
    out = run("fs", "status", "--meta", addr, "--json").stdout
    import json

    return [s["pid"] for s in json.loads(out)["servers"]]


def test_start_put_get_ls_status_stop(tmp_path):
    start = run("fs", "start", "--meta", "127.0.0.1", "--data", "127.0.0.1,127.0.0.1",
                "--state", str(tmp_path / "st"))
    addr = start.stdout.strip().splitlines()[-1]
    assert addr.startswith("tcp://127.0.0.1:")
    pids = []
    try:
        pids = _pids_of(addr)
        assert len(pids) == 2
        src = tmp_path / "in.bin"
        src.write_bytes(os.urandom(3_000_000))
        assert "3000000 bytes" in run("fs", "put", "--meta", addr, str(src), "/dir-less.bin").stdout
        run("fs", "get", "--meta", addr, "/dir-less.bin", str(tmp_path / "out.bin"))
        assert (tmp_path / "out.bin").read_bytes() == src.read_bytes()
        assert run("fs", "ls", "--meta", addr).stdout.split() == ["dir-less.bin"]
        assert "3000000" in run("fs", "ls", "-l", "--meta", addr, "/").stdout
        status = run("fs", "status", "--meta", addr).stdout
        assert "active" in status and "AIO" in status and status.count("tcp://127.0.0.1") >= 2
        missing = run("fs", "get", "--meta", addr, "/nope", "-", check=False)
        assert missing.returncode != 0 and "nope" in missing.stderr
    finally:
        run("fs", "stop", "--meta", addr)
    for pid in pids:  # the servers really exit
        for _ in range(50):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            import time

            time.sleep(0.1)
        else:
            pytest.fail(f"server pid {pid} still running after stop")


def test_start_reports_failure_clearly(tmp_path):
    bad = run("fs", "start", "--meta", "127.0.0.1:99999", "--data", "127.0.0.1", check=False)
    assert bad.returncode != 0 and "HOST[:PORT]" in bad.stderr
