"""One daemon per state: a second ``controller start`` on a state a living daemon holds (answering or not) is
refused in one line naming its pid and changes nothing; two starts racing end with one daemon; a state file that
is empty, truncated, not a state or not a regular file is refused in one line and left as it was."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from malleable.controller.daemon._paths import addr_file, lock_file
from tests.controller._daemon_util import cli, isolate, kill_leftovers, wait_for

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def env(monkeypatch, tmp_path):
    return isolate(monkeypatch, tmp_path)


def run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "malleable", *argv], capture_output=True, text=True, timeout=60)


def one_line(p: subprocess.CompletedProcess | tuple, text: str) -> str:
    code, err = (p.returncode, p.stderr) if isinstance(p, subprocess.CompletedProcess) else (p[0], p[2])
    assert code == 1, (code, err)
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert text in err, err
    return err


@contextlib.contextmanager
def daemons(state: str):
    """Kill, at the end, every daemon started on ``state`` (whatever the test left)."""
    pids: set[int] = set()
    try:
        yield pids
    finally:
        with contextlib.suppress(OSError, ValueError):
            pids.add(json.loads(addr_file(state).read_text())["pid"])
        for p in psutil.process_iter(["cmdline"]):
            with contextlib.suppress(psutil.Error):
                if state in " ".join(p.info["cmdline"] or []) and "--foreground" in (p.info["cmdline"] or []):
                    pids.add(p.pid)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
            kill_leftovers(pid, "")
            with contextlib.suppress(psutil.Error):
                psutil.Process(pid).wait(10)


def test_a_second_start_never_takes_over_a_stopped_daemon(env):
    state = str(env / "ctl.sqlite")
    with daemons(state) as pids:
        first = run("controller", "start", "--local", "1", "--state", state)
        assert first.returncode == 0, first.stderr
        info = json.loads(addr_file(state).read_text())
        pids.add(info["pid"])
        assert int(lock_file(state).read_text()) == info["pid"]
        os.kill(info["pid"], signal.SIGSTOP)           # alive but not answering (a debugger, a busy machine)
        try:
            second = run("controller", "start", "--local", "1", "--state", state, "--port", "0")
            err = one_line(second, f"pid {info['pid']} holds the lock")
            assert err.startswith("malleable controller: error: a controller already runs for")
        finally:
            os.kill(info["pid"], signal.SIGCONT)
        assert json.loads(addr_file(state).read_text()) == info          # its address file is still there
        code, out, _ = cli("controller", "status", "--state", state, "--json")
        assert code == 0 and json.loads(out)["pid"] == info["pid"]
        assert cli("controller", "stop", "--state", state)[0] == 0
        wait_for(lambda: not psutil.pid_exists(info["pid"]), 10, "the first daemon to exit")
        again = run("controller", "start", "--local", "1", "--state", state)    # the lock died with it
        assert again.returncode == 0, again.stderr
        pids.add(json.loads(addr_file(state).read_text())["pid"])


def test_racing_starts_leave_one_daemon(env):
    state = str(env / "ctl.sqlite")
    with daemons(state) as pids:
        argv = [sys.executable, "-m", "malleable", "controller", "start", "--local", "2", "--state", state]
        procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(3)]
        results = [(p.wait(60), *p.communicate()) for p in procs]
        won = [r for r in results if r[0] == 0]
        lost = [r for r in results if r[0] != 0]
        assert len(won) == 1, results
        holder = json.loads(addr_file(state).read_text())["pid"]
        pids.add(holder)
        for r in lost:
            one_line(r, f"pid {holder} holds the lock")
        alive = [p for p in psutil.process_iter(["cmdline"])
                 if state in " ".join(p.info["cmdline"] or []) and "--foreground" in p.info["cmdline"]]
        assert [p.pid for p in alive] == [holder]
        code, out, _ = cli("submit", "--state", state, "--parsable", "--", "true")
        assert code == 0 and int(out) == 1


@pytest.mark.parametrize("kind", ["empty", "truncated", "not-a-state", "device", "fifo", "symlink"])
def test_a_state_that_is_not_one_is_refused_and_left_alone(env, kind):
    state = env / "ctl.sqlite"
    if kind in ("truncated", "symlink"):
        good = env / "good.sqlite"
        with daemons(str(good)):
            assert run("controller", "start", "--local", "1", "--state", str(good)).returncode == 0
            for i in range(40):
                assert cli("submit", "--state", str(good), "-J", "x" * 2000, "--", "true")[0] == 0, i
            assert cli("controller", "stop", "--state", str(good))[0] == 0
            wait_for(lambda: not addr_file(str(good)).exists(), 10, "the daemon to stop")
        if kind == "truncated":
            data = good.read_bytes()
            assert len(data) > 3 * 4096
            state.write_bytes(data[: len(data) // 2])
        else:
            state.symlink_to(good)
    elif kind == "empty":
        state.write_bytes(b"")
    elif kind == "not-a-state":
        db = sqlite3.connect(state)
        db.execute("CREATE TABLE t (x)")
        db.commit()
        db.close()
    elif kind == "device":
        os.mknod(state, 0o666 | stat.S_IFCHR, os.makedev(1, 3))     # a /dev/null of its own
    else:
        os.mkfifo(state, 0o644)
    os.chmod(state, 0o644, follow_symlinks=False) if kind not in ("symlink",) else None
    before = os.lstat(state)
    content = state.read_bytes() if kind in ("empty", "truncated", "not-a-state") else None
    with daemons(str(state)):
        p = run("controller", "start", "--local", "1", "--state", str(state))
        want = {"empty": "is empty (0 bytes)", "truncated": "is truncated", "not-a-state":
                "is not a controller state file", "device": "is not a regular file", "fifo":
                "is not a regular file", "symlink": "is a symbolic link"}[kind]
        one_line(p, want)
        fg = run("controller", "start", "--local", "1", "--state", str(state), "--foreground")
        one_line(fg, want)
    after = os.lstat(state)
    assert (after.st_mode, after.st_size, after.st_mtime_ns) == (before.st_mode, before.st_size, before.st_mtime_ns)
    if content is not None:
        assert state.read_bytes() == content
    assert not addr_file(str(state)).exists()
    assert not Path(str(state) + "-wal").exists()


def test_a_planted_lock_link_is_refused(env):
    state = env / "ctl.sqlite"
    victim = env / "victim"
    victim.write_text("precious\n")
    lock_file(str(state)).symlink_to(victim)
    with daemons(str(state)):
        one_line(run("controller", "start", "--local", "1", "--state", str(state), "--foreground"),
                 "is a symbolic link")
    assert victim.read_text() == "precious\n"
    assert not state.exists()
