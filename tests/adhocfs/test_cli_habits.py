"""Everyday ``malleable fs`` habits: the address from MALLEABLE_FS, mkdir / rm / mv, ``ls -l`` with a header and
times, and ``stop`` removing the state directory that ``start`` made (unless ``--keep``)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

MALLEABLE = [sys.executable, "-m", "malleable"]


def run(*args, env=None, check=True):
    p = subprocess.run([*MALLEABLE, *args], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, **(env or {})))
    if check and p.returncode:
        raise AssertionError(f"{args} exited {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p


def start() -> tuple[str, Path]:
    out = run("fs", "start", "--meta", "127.0.0.1", "--data", "127.0.0.1").stdout.splitlines()
    state = Path(next(x for x in out if x.startswith("state and logs: ")).split(": ", 1)[1])
    return out[-1], state


def wait_gone(path: Path, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while path.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    return not path.exists()


def test_address_from_the_environment_and_namespace_commands(tmp_path):
    addr, state = start()
    env = {"MALLEABLE_FS": addr}
    try:
        run("fs", "mkdir", "-p", "/a/b", env=env)
        run("fs", "mkdir", "/c", env=env)
        src = tmp_path / "x.bin"
        src.write_bytes(os.urandom(1_000_000))
        before = time.time()
        run("fs", "put", str(src), "/a/b/x.bin", env=env)
        run("fs", "mv", "/a/b/x.bin", "/c/y.bin", env=env)
        assert run("fs", "ls", "/c", env=env).stdout.split() == ["y.bin"]
        assert run("fs", "ls", "/a/b", env=env).stdout.split() == []
        lines = run("fs", "ls", "-l", "/", env=env).stdout.splitlines()
        assert lines[0].split() == ["T", "SIZE", "BLOCK", "STATE", "MODIFIED", "NAME"]
        assert [ln.split()[-1] for ln in lines[1:]] == ["a/", "c/"] and all(ln.startswith("d ") for ln in lines[1:])
        row = run("fs", "ls", "-l", "/c", env=env).stdout.splitlines()[1].split()
        assert row[0] == "-" and row[1] == "1000000" and row[-1] == "y.bin"
        when = time.mktime(time.strptime(f"{row[4]} {row[5]}", "%Y-%m-%d %H:%M:%S"))
        assert before - 2 <= when <= time.time() + 1                         # the write's time
        no_r = run("fs", "rm", "/a", env=env, check=False)
        assert no_r.returncode == 1 and no_r.stderr.strip().count("\n") == 0 and "use -r" in no_r.stderr
        run("fs", "rm", "-r", "/a", "/c/y.bin", env=env)
        assert run("fs", "ls", "/", env=env).stdout.split() == ["c"]
        gone = run("fs", "ls", "/nope", env=env, check=False)
        assert gone.returncode == 1 and "nope" in gone.stderr and "Traceback" not in gone.stderr
    finally:
        run("fs", "stop", env=env)
    assert wait_gone(state), f"stop left the state directory {state}"


def test_no_address_is_one_line():
    env = {k: v for k, v in os.environ.items() if k != "MALLEABLE_FS"}
    p = subprocess.run([*MALLEABLE, "fs", "ls"], capture_output=True, text=True, timeout=60, env=env)
    assert p.returncode == 1
    assert p.stderr.strip() == "malleable fs: error: ls: give --meta tcp://HOST:PORT or set MALLEABLE_FS"


def test_stop_keeps_what_it_was_asked_to_keep(tmp_path):
    addr, state = start()
    run("fs", "stop", "--meta", addr, "--keep")
    time.sleep(1.0)
    assert (state / "meta.sqlite").exists()
    shutil.rmtree(state)
    mine = tmp_path / "mine"
    out = run("fs", "start", "--meta", "127.0.0.1", "--data", "127.0.0.1", "--state", str(mine)).stdout
    run("fs", "stop", "--meta", out.splitlines()[-1])
    time.sleep(1.0)
    assert (mine / "meta.sqlite").exists()                 # a directory given with --state is never removed
    assert re.match(r"tcp://127\.0\.0\.1:\d+$", out.splitlines()[-1])
