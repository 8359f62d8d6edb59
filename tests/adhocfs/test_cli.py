"""The ``malleable fs`` commands as a user runs them (separate processes)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests._procs import running

MALLEABLE = [sys.executable, "-m", "malleable"]


def run(*args, check=True, env=None):
    p = subprocess.run([*MALLEABLE, *args], capture_output=True, text=True, timeout=60, env=env)
    if check and p.returncode:
        raise AssertionError(f"{args} exited {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p


def _pids_of(addr):
    out = run("fs", "status", "--meta", addr, "--json").stdout
    import json

    return [s["pid"] for s in json.loads(out)["servers"]]


def test_start_put_get_ls_status_stop(tmp_path):
    start = run(
        "fs", "start", "--meta", "127.0.0.1", "--data", "127.0.0.1,127.0.0.1", "--state", str(tmp_path / "st")
    )
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
    _assert_exited(pids)


def test_start_reports_failure_clearly(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    bad = run("fs", "start", "--meta", "127.0.0.1:99999", "--data", "127.0.0.1", check=False,
              env={**os.environ, "TMPDIR": str(tmp)})
    assert bad.returncode != 0 and "HOST[:PORT]" in bad.stderr
    assert os.listdir(tmp) == []                   # the state directory made for it is gone with it


def test_expand_shrink_status_commands(tmp_path):
    import json

    start = run("fs", "start", "--meta", "127.0.0.1", "--data", "127.0.0.1", "--state", str(tmp_path / "st"))
    addr = start.stdout.strip().splitlines()[-1]
    pids = []
    try:
        src = tmp_path / "in.bin"
        src.write_bytes(os.urandom(4_000_000))
        run("fs", "put", "--meta", addr, str(src), "/a.bin", "--block-size", "65536")
        out = run("fs", "expand", "--meta", addr, "--data", "127.0.0.1,127.0.0.1").stdout
        assert out.count("data server") == 2 and "done" in out
        # the new servers log into the file system's state directory (removed with it), not a folder of their own
        assert {p.name for p in (tmp_path / "st").glob("data*.log")} == {"data1.log", "data2.log", "data3.log"}
        st = json.loads(run("fs", "status", "--meta", addr, "--json").stdout)
        assert len([s for s in st["servers"] if s["state"] == "active"]) == 3
        assert [h["kind"] for h in st["history"]][-1] == "expand"
        pids = [s["pid"] for s in st["servers"]]
        leaving = next(s for s in st["servers"] if s["sid"] == 1)
        out = run(
            "fs",
            "shrink",
            "--meta",
            addr,
            "--data",
            leaving["addr"].removeprefix("tcp://"),
            "--mode",
            "total",
        ).stdout
        assert "done" in out and "blocks moved" in out
        status = run("fs", "status", "--meta", addr).stdout
        assert "shrink done" in status or "shrink" in status
        run("fs", "get", "--meta", addr, "/a.bin", str(tmp_path / "out.bin"))
        assert (tmp_path / "out.bin").read_bytes() == src.read_bytes()
        bad = run("fs", "shrink", "--meta", addr, "--data", "nohost", check=False)
        assert bad.returncode == 1 and "nohost" in bad.stderr
        watch = run(
            "fs",
            "watch",
            "--meta",
            addr,
            "--rio",
            "50",
            "--interval",
            "0.2",
            "--duration",
            "0.5",
            "--dry-run",
        ).stdout
        assert "keep" in watch and "RIO=50" in watch
    finally:
        run("fs", "stop", "--meta", addr)
    _assert_exited(pids)


def _assert_exited(pids, timeout=5.0):
    """The servers really exit (zombies left for init to reap count as exited)."""
    import time

    deadline = time.monotonic() + timeout
    for pid in pids:
        while running(pid):
            if time.monotonic() > deadline:
                pytest.fail(f"server pid {pid} still running after stop")
            time.sleep(0.1)


def _one_line_error(p, *needles):
    assert p.returncode == 1, (p.returncode, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def test_bad_input_gives_one_line_errors(tmp_path):
    """A missing local file, an address without its scheme, and a host the launcher cannot reach."""
    _one_line_error(run("fs", "put", "--meta", "tcp://127.0.0.1:9", str(tmp_path / "missing"), "/x", check=False),
                    "put", "missing")
    _one_line_error(run("fs", "ls", "--meta", "127.0.0.1", check=False), "ls", "tcp://HOST:PORT", "'127.0.0.1'")
    launcher = tmp_path / "launcher"
    launcher.write_text("#!/bin/sh\necho \"launcher: cannot reach host $1\" >&2\nexit 255\n")
    launcher.chmod(0o755)
    p = subprocess.run([*MALLEABLE, "fs", "start", "--meta", "127.0.0.1", "--data", "badhost",
                        "--state", str(tmp_path / "st")], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "MALLEABLE_LAUNCHER_EXEC": str(launcher)})
    _one_line_error(p, "launcher: cannot reach host badhost")


def test_start_with_replicas_and_capacity_then_lose_and_check(tmp_path):
    import json
    import signal

    start = run("fs", "start", "--meta", "127.0.0.1", "--data", "127.0.0.1,127.0.0.1,127.0.0.1",
                "--replicas", "2", "--capacity", "64M", "--state", str(tmp_path / "st"))
    addr = start.stdout.strip().splitlines()[-1]
    pids = []
    try:
        src = tmp_path / "in.bin"
        src.write_bytes(os.urandom(2_000_000))
        run("fs", "put", "--meta", addr, str(src), "/a.bin", "--block-size", "65536")
        st = json.loads(run("fs", "status", "--meta", addr, "--json").stdout)
        assert st["replicas"] == 2 and all(s["capacity"] == 64 << 20 for s in st["servers"])
        assert "free" in run("fs", "status", "--meta", addr).stdout
        pids = [s["pid"] for s in st["servers"]]
        os.kill(pids[0], signal.SIGKILL)
        out = run("fs", "lose", "--meta", addr, "1", "--wait").stdout
        assert "declared lost" in out
        assert "0 damaged" in run("fs", "check", "--meta", addr).stdout
        run("fs", "get", "--meta", addr, "/a.bin", str(tmp_path / "out.bin"))
        assert (tmp_path / "out.bin").read_bytes() == src.read_bytes()
        _one_line_error(run("fs", "lose", "--meta", addr, "2", check=False), "answering")
    finally:
        run("fs", "stop", "--meta", addr)
    _assert_exited(pids[1:])
